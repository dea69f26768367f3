//! Why the pass records an event ([`Reason`]) and why a condition it writes says what it
//! says ([`ConditionReason`]).

/// Why an event is recorded; the reason strings are part of Inrun's interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A pass changed something (applied, pruned, or moved the `Ready` condition).
    Reconciled,
    /// A pass failed; it will be retried with backoff.
    ReconcileError,
    /// A child the Result no longer returns was deleted.
    Pruned,
    /// The CR's children were deleted and its finalizer removed.
    Finalized,
    /// The finalizer wait ran out; the CR was released anyway.
    FinalizeTimeout,
    /// The CR breaks the Blueprint's validation or namespace rules.
    Invalid,
    /// A `preReconcile` condition holds the CR back.
    Gated,
    /// The Result asked for the CR to be deleted and its grace period passed.
    CleanedUp,
    /// Deletion is held: the reconciler asked to requeue, or foreign instances of a managed
    /// type exist.
    DeletionBlocked,
    /// Deleting the CR's children failed (the API server refused a list or a delete, a
    /// conflict, an outage); retried with backoff until `runtime.finalizers.timeout`.
    DeletionFailed,
    /// Every child became ready (nothing else changed).
    Ready,
    /// A child is no longer ready, or not yet (nothing else changed).
    Progressing,
    /// A child failed and will not become ready without a change.
    ResourceFailed,
    /// No tenant serves the CR's CRD any more: the host's finalizers were removed
    /// without its cleanup.
    Released,
    /// A CRD's new schema would strand live CRs and the Blueprint does not allow it: the
    /// CRD was left as it is (recorded on the CRD).
    BreakingSchemaChange,
    /// A rollout moved to its next step (recorded on the CRD).
    RolloutStep,
    /// A rollout reached every CR and its last step held (recorded on the CRD).
    RolloutComplete,
    /// A rollout's new version did worse than its thresholds and the old one: its CRs went
    /// back to the old version (recorded on the CRD and on each CR moved back).
    RolledBack,
    /// A rollout's new version did worse than its thresholds and the old one: the rollout
    /// stopped where it was (`onFailure: pause`; recorded on the CRD).
    RolloutPaused,
}

impl Reason {
    /// Every reason, for what must know them all (the reasons a reconciler's event may not
    /// take: [`inrun_contract::HOST_EVENT_REASONS`]).
    pub const ALL: [Reason; 19] = [
        Reason::Reconciled,
        Reason::ReconcileError,
        Reason::Pruned,
        Reason::Finalized,
        Reason::FinalizeTimeout,
        Reason::Invalid,
        Reason::Gated,
        Reason::CleanedUp,
        Reason::DeletionBlocked,
        Reason::DeletionFailed,
        Reason::Ready,
        Reason::Progressing,
        Reason::ResourceFailed,
        Reason::Released,
        Reason::BreakingSchemaChange,
        Reason::RolloutStep,
        Reason::RolloutComplete,
        Reason::RolledBack,
        Reason::RolloutPaused,
    ];

    /// The event's `reason` text.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Reconciled => "Reconciled",
            Reason::ReconcileError => "ReconcileError",
            Reason::Pruned => "Pruned",
            Reason::Finalized => "Finalized",
            Reason::FinalizeTimeout => "FinalizeTimeout",
            Reason::Invalid => "Invalid",
            Reason::Gated => "Gated",
            Reason::CleanedUp => "CleanedUp",
            Reason::DeletionBlocked => "DeletionBlocked",
            Reason::DeletionFailed => "DeletionFailed",
            Reason::Ready => "Ready",
            Reason::Progressing => "Progressing",
            Reason::ResourceFailed => "ResourceFailed",
            Reason::Released => "Released",
            Reason::BreakingSchemaChange => "BreakingSchemaChange",
            Reason::RolloutStep => "RolloutStep",
            Reason::RolloutComplete => "RolloutComplete",
            Reason::RolledBack => "RolledBack",
            Reason::RolloutPaused => "RolloutPaused",
        }
    }

    /// `Warning` for what needs a person's attention, else `Normal`.
    pub fn event_type(self) -> &'static str {
        match self {
            Reason::ReconcileError
            | Reason::FinalizeTimeout
            | Reason::Invalid
            | Reason::DeletionBlocked
            | Reason::DeletionFailed
            | Reason::ResourceFailed
            | Reason::Released
            | Reason::BreakingSchemaChange
            | Reason::RolledBack
            | Reason::RolloutPaused => "Warning",
            _ => "Normal",
        }
    }
}

/// The `reason` of a condition the host writes (`Reconciled`, `Ready`, a package's
/// `Reconciling`); the texts are part of Inrun's interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionReason {
    /// The pass succeeded (`Reconciled`).
    Reconciled,
    /// Every child is ready; a package's infrastructure matches the spec and is ready.
    Ready,
    /// A child (or the infrastructure) is not ready yet, or a later wave waits.
    Progressing,
    /// A child failed and will not become ready without a change.
    ResourceFailed,
    /// The pass failed.
    ReconcileError,
    /// The pass failed on a budget its tenant shares with others (plugin calls, guest
    /// memory, the cores guests run on, the host memory replies take); the message names
    /// it. Retried with backoff like any failure.
    BudgetExceeded,
    /// The CR breaks the Blueprint's validation or namespace rules.
    Invalid,
    /// A `preReconcile` condition holds the CR back.
    Gated,
    /// The CR's children are being deleted in waves.
    Finalizing,
    /// Deletion is held (a requested requeue, foreign instances of a managed type).
    DeletionBlocked,
    /// Deleting the CR's children failed.
    DeletionFailed,
    /// An object the CR does not own is in the way.
    Conflict,
    /// The API server refused a write.
    Forbidden,
    /// A package CR's spec is invalid (the host's checks or the package's `validate`).
    ValidationFailed,
    /// A package CR's spec now identifies other infrastructure than it was created for.
    IdentityChanged,
    /// Another CR manages the infrastructure a package CR's spec identifies.
    IdentityConflict,
    /// A package's `identity` call failed.
    IdentityFailed,
    /// A package's `observe` call failed.
    ObserveFailed,
    /// A package's converge failed.
    ConvergeFailed,
    /// A package's delete failed.
    DeleteFailed,
    /// `inrun.dev/prevent-destroy` refuses a package CR's deletion.
    DestroyPrevented,
    /// A package's infrastructure is being deleted.
    Deleting,
    /// A suspended package CR's infrastructure differs from its spec.
    Suspended,
}

impl ConditionReason {
    /// The condition's `reason` text.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionReason::Reconciled => "Reconciled",
            ConditionReason::Ready => "Ready",
            ConditionReason::Progressing => "Progressing",
            ConditionReason::ResourceFailed => "ResourceFailed",
            ConditionReason::ReconcileError => "ReconcileError",
            ConditionReason::BudgetExceeded => "BudgetExceeded",
            ConditionReason::Invalid => "Invalid",
            ConditionReason::Gated => "Gated",
            ConditionReason::Finalizing => "Finalizing",
            ConditionReason::DeletionBlocked => "DeletionBlocked",
            ConditionReason::DeletionFailed => "DeletionFailed",
            ConditionReason::Conflict => "Conflict",
            ConditionReason::Forbidden => "Forbidden",
            ConditionReason::ValidationFailed => "ValidationFailed",
            ConditionReason::IdentityChanged => "IdentityChanged",
            ConditionReason::IdentityConflict => "IdentityConflict",
            ConditionReason::IdentityFailed => "IdentityFailed",
            ConditionReason::ObserveFailed => "ObserveFailed",
            ConditionReason::ConvergeFailed => "ConvergeFailed",
            ConditionReason::DeleteFailed => "DeleteFailed",
            ConditionReason::DestroyPrevented => "DestroyPrevented",
            ConditionReason::Deleting => "Deleting",
            ConditionReason::Suspended => "Suspended",
        }
    }
}

impl std::fmt::Display for ConditionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
