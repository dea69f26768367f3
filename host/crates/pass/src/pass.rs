//! What every step of a pass takes and gives back: one CR as the pass sees it ([`Pass`]),
//! the reconcile block that serves it ([`route`]), and how the pass ended ([`Done`]), with
//! when the next one runs.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::package::Infrastructure;
use inrun_blueprint::RuntimeSpec;
use inrun_reconcilers::plan::{CrdPlan, ReconcilePlan};

/// How often a gated CR is checked again when nothing else changes.
pub const GATE_RECHECK: Duration = Duration::from_secs(10);
/// How often a deletion blocked by foreign instances of a managed type is checked again.
pub const SAFEGUARD_RECHECK: Duration = Duration::from_secs(3);
/// How soon a pass waiting for a wave (a CRD to be Established, the objects of a delete
/// wave to be gone) looks again when no watch event wakes it first.
pub const WAVE_RECHECK: Duration = Duration::from_secs(1);
/// When a pass whose status write found the CR changed under it runs again.
pub(crate) const STALE_RETRY: Duration = Duration::from_millis(200);

/// One CR, as the pass sees it.
#[derive(Clone, Copy)]
pub struct Pass<'a> {
    /// The CRD's plan.
    pub crd: &'a CrdPlan,
    /// Host settings.
    pub runtime: &'a RuntimeSpec,
    /// The CR as read, with its metadata (managed fields too) and status.
    pub object: &'a Value,
    /// A serve target chosen from outside (`inrun render --target`), over the CR's own.
    pub target: Option<&'a str>,
    /// The time the pass runs at.
    pub now: Timestamp,
    /// What a package CR's calls go to instead of its reconcile block's package (`inrun
    /// render`'s dry run); `None`: the package.
    pub infrastructure: Option<&'a dyn Infrastructure>,
    /// Under sharding by label, the CR's bucket, kept on it as the label
    /// [`meta::BUCKET`](crate::meta::BUCKET) by the maintain step's apply (the one that puts
    /// the finalizers on), so that replicas watch their buckets' CRs by label; `None`: no
    /// such label.
    pub bucket_label: Option<&'a str>,
}

/// How a pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Done {
    /// Run again after this long; `None`: on the next change.
    pub after: Option<Duration>,
    /// Whether that requeue was asked for (holds a deleting CR).
    pub holds: bool,
    /// A pending cleanup, counted from when it was first asked for.
    pub cleanup: Option<Duration>,
    /// Run again after the CR's retry delay (doubling per retry, reset by an edit of its
    /// spec): a package's infrastructure that is not there yet.
    pub retry: bool,
}

impl Done {
    /// Run again after `after`.
    pub(crate) fn after(after: Duration) -> Self {
        Done {
            after: Some(after),
            ..Done::default()
        }
    }
}

/// The serve target a CR selects and the reconcile block that serves it (the CRD's own
/// when the target is unknown: routing errors are reported by the pass).
pub fn route<'p>(
    crd: &'p CrdPlan,
    object: &Value,
    explicit: Option<&str>,
) -> (Option<String>, &'p ReconcilePlan) {
    let target = crd.target_of(object, explicit);
    let plan = crd.plan_for(target.as_deref()).unwrap_or(&crd.default);
    (target, plan)
}

/// Whether the CR has a deletion timestamp.
pub(crate) fn deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}
