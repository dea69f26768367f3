//! A CRD's compiled plan and the decisions over it that need no cluster: which reconcile
//! block a CR goes to, whether it may pass, its Request, its status and when it runs again.
//! The pass (`inrun-pass`) and `inrun render` call these steps; [`crate::assemble`] builds
//! the plans.

mod checks;
mod request;
mod route;
mod status;

use std::sync::Arc;
use std::time::Duration;

use crate::Reconciler;
use crate::external::ExternalCalls;
use crate::infrastructure::Package;
use crate::plugins::PluginSlot;
use inrun_blueprint::{CrdSpec, ReconcileSpec};
use inrun_template::{CompiledCondition, CompiledValue, TemplateError};
use inrun_wasm::PluginInfo;

/// The delay for a Result that asks to requeue without saying when.
pub const DEFAULT_REQUEUE: Duration = Duration::from_secs(5);

/// Everything needed to reconcile one CRD's CRs.
pub struct CrdPlan {
    /// The CRD's Blueprint entry.
    pub spec: CrdSpec,
    /// The CRD's own reconcile block.
    pub default: ReconcilePlan,
    /// Serve targets, each with its own reconcile block.
    pub targets: Vec<(String, ReconcilePlan)>,
    pub(crate) gates: Vec<Gate>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) emit_status: CompiledValue,
    pub(crate) emit_conditions: CompiledValue,
}

/// One reconcile block made ready: its reconciler, args and requeue rule.
pub struct ReconcilePlan {
    /// The reconcile block as written.
    pub spec: ReconcileSpec,
    /// A short digest of `spec` (16 hex digits): what reconciles a CR through a block no
    /// plugin serves, as `status.reconciledBy` records it.
    pub block: String,
    /// The reconciler.
    pub reconciler: Arc<dyn Reconciler>,
    /// Slots of the plugins it calls, in Blueprint order.
    pub slots: Vec<Arc<PluginSlot>>,
    /// The infrastructure package, for a `package` block: the pass drives it instead of
    /// asking `reconciler` for a Result.
    pub package: Option<Arc<Package>>,
    pub(crate) args: CompiledValue,
    pub(crate) requeue: Option<RequeuePlan>,
    pub(crate) external: ExternalCalls,
    pub(crate) ready_when: Vec<ReadyWhen>,
}

/// A `managedResources[].readyWhen`: when a child of that kind counts as ready.
pub(crate) struct ReadyWhen {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) when: CompiledCondition,
    pub(crate) text: String,
}

/// A `preReconcile` condition: the CR waits until it holds.
pub(crate) struct Gate {
    pub(crate) name: String,
    pub(crate) when: CompiledCondition,
    pub(crate) message: Option<String>,
}

/// A `validation` rule: a CR that breaks it is invalid.
pub(crate) struct Rule {
    pub(crate) rule: CompiledCondition,
    pub(crate) text: String,
    pub(crate) message: Option<String>,
}

/// A `reconcile.requeue` rule: after how long, and under which conditions.
pub(crate) struct RequeuePlan {
    pub(crate) after: Option<Duration>,
    pub(crate) conditions: Vec<CompiledCondition>,
}

/// A CR that a step cannot take further as it is. Each becomes a status condition and an
/// event on the CR, never a crash.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The CR names a serve target the CRD does not have.
    #[error("unknown serve target {target:?}; this CRD serves: {known}")]
    UnknownTarget {
        /// What the CR asked for.
        target: String,
        /// The targets there are, comma separated.
        known: String,
    },
    /// The CR breaks the Blueprint's validation rules.
    #[error("validation failed: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// A CRD or APIService child would define a type whose instances the host may not
    /// list (its deletion safeguard needs to): neither `managedTypes` nor
    /// `managedResources` names it.
    #[error(
        "resources[{index}] ({kind} {name}) defines {defines}, which neither managedTypes nor managedResources names: the host could not check for its instances before deleting it"
    )]
    UndeclaredType {
        /// Position in the Result's resources.
        index: usize,
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The type it defines (`kind.group`, or `group` for an APIService).
        defines: String,
    },
    /// The Result asks to write an object the Blueprint's `managedResources` do not allow.
    #[error("resources[{index}]: {kind} {name:?} ({api_version}{}) is not allowed by reconcile.managedResources", namespace.as_ref().map(|n| format!(" in namespace {n}")).unwrap_or_default())]
    Forbidden {
        /// Position in the Result's resources.
        index: usize,
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The object's namespace, if it names one.
        namespace: Option<String>,
    },
    /// A `reconcile.external` call failed (and its `onError` is `fail`). Boxed: the
    /// clients' errors are large and this path is rare.
    #[error(transparent)]
    External(Box<crate::external::ExternalError>),
    /// A template failed while rendering.
    #[error("rendering {what}")]
    Template {
        /// Which one, e.g. `reconcile.args`.
        what: &'static str,
        /// Why.
        #[source]
        source: TemplateError,
    },
}

/// When to reconcile again after a successful pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    /// Reconcile again after this long (`None`: only on the next change).
    pub after: Option<Duration>,
    /// Whether the requeue was asked for (by the Result or a conditional rule), which holds
    /// a deleting CR; a plain periodic refresh does not.
    pub holds: bool,
}

/// Maps a render failure of the template at `what` to a [`StepError::Template`].
fn template(what: &'static str) -> impl FnOnce(TemplateError) -> StepError {
    move |source| StepError::Template { what, source }
}

impl ReconcilePlan {
    /// The `readyWhen` condition (and its text) of the `managedResources` entry for
    /// `api_version` / `kind`, if it has one: it decides whether such a child is ready,
    /// rendered against the child.
    pub fn ready_when(&self, api_version: &str, kind: &str) -> Option<(&CompiledCondition, &str)> {
        self.ready_when
            .iter()
            .find(|r| r.api_version == api_version && r.kind == kind)
            .map(|r| (&r.when, r.text.as_str()))
    }

    /// The plugins it calls, as they serve now (for `/blueprint` and `validate`).
    pub fn plugins(&self) -> Vec<PluginInfo> {
        self.slots
            .iter()
            .map(|s| s.current().info().clone())
            .collect()
    }

    /// Whether a finalizing Result's resources are applied: the block has `onDelete`
    /// templates, which exist to write something while the CR goes away. Other kinds'
    /// finalizing writes are ignored.
    pub fn applies_on_delete(&self) -> bool {
        !self.spec.on_delete.is_empty()
    }
}
