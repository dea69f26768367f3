//! Events on CRs (events.k8s.io, shown by `kubectl describe`). Repeated identical events
//! are aggregated into a series by the recorder rather than written once per retry.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Longest event note, in characters; Kubernetes caps notes at 1 kB.
const NOTE_MAX: usize = 1000;

/// Why an event is recorded; the reason strings are part of Inrun's interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A pass succeeded.
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
}

impl Reason {
    fn as_str(self) -> &'static str {
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
        }
    }

    fn warning(self) -> bool {
        matches!(
            self,
            Reason::ReconcileError
                | Reason::FinalizeTimeout
                | Reason::Invalid
                | Reason::DeletionBlocked
        )
    }
}

/// Records events for one controller.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// A recorder reporting as `inrun` from `instance`.
    pub fn new(client: Client, instance: String) -> Self {
        let reporter = Reporter {
            controller: "inrun".into(),
            instance: Some(instance),
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Records `reason` with `note` on the object. A failure to record is logged, never
    /// fatal: events are for people, and the pass must go on.
    pub async fn record(&self, on: &ObjectReference, reason: Reason, note: impl Into<String>) {
        let mut note: String = note.into();
        if note.chars().count() > NOTE_MAX {
            note = note.chars().take(NOTE_MAX - 1).collect::<String>() + "…";
        }
        let event = Event {
            type_: if reason.warning() {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.as_str().into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, on).await {
            tracing::warn!(error = %e, reason = reason.as_str(), "could not record event");
        }
    }
}
