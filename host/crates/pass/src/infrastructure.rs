//! The pass for an infrastructure package (a `reconcile.package` block): the CR stands
//! for something outside Kubernetes, and the host observes it and converges it only when
//! what it observes calls for it.
//!
//! Order, as the pass runs it:
//! 1. the common spec fields (`state`, `suspend`, `reconcileInterval`, `deletionPolicy`,
//!    `config`) are read with their defaults; a bad one is `ValidationFailed`;
//! 2. `validate`, then `identity`: an identity that hashes differently from the one stored
//!    in status is refused (`IdentityChanged`): an edit never silently abandons what was
//!    created;
//! 3. `observe`: existing, matching and ready is `Ready=True`, checked again after
//!    `reconcileInterval`; matching but not ready is observed again with the retry delay,
//!    never converged again; a suspended CR stops here;
//! 4. before the first infrastructure effect, the profile and identity are stored in
//!    status, the finalizer added and `Reconciling` published; then `converge`, and
//!    `observe` again.
//!
//! Every metadata and status write carries the resourceVersion the pass read (or its own
//! last write returned): a CR edited meanwhile answers
//! [`Written::Stale`](crate::Written::Stale), and the result is dropped for the pass that
//! edit starts; a stale converge never marks a newer generation ready. Status holds
//! generic reasons only: a package's error text and its validation details go to the
//! host's log.
//!
//! Deletion: `Retain` removes the finalizer and calls nothing; `Delete` refuses while the
//! `inrun.dev/prevent-destroy` annotation is `"true"`, else calls `delete` (suspended or
//! not) and removes the finalizer only once `observe` sees the thing gone.
//!
//! [`run`] is the entry (the crate's [`crate::run`](fn@crate::run) calls it for a CR a
//! package serves); the steps are in `reconcile.rs` (2–4) and `delete.rs`, what they share
//! in `shared.rs` (`Run`); the spec in `spec.rs`, the identity in `identity.rs`, the status
//! in `conditions.rs`. The package's calls ([`Infrastructure`]) are in the crate's
//! `package.rs`, beside [`Pass`], which may carry a stand-in for them.

mod conditions;
mod delete;
mod identity;
mod reconcile;
mod shared;
mod spec;

use std::time::Duration;

use inrun_blueprint::{CrdSpec, RuntimeSpec};

use std::sync::atomic::{AtomicBool, Ordering};

use crate::effects::{Effects, Watched};
use crate::failure::Failure;
pub use crate::package::{CallFailed, Infrastructure};
use crate::pass::{Done, Pass, deleting};
use crate::reason::{ConditionReason, Reason};
use crate::reconcile::held_back;
use conditions::Conditions;
use identity::Stored;
pub use identity::identity_hash;
use shared::Run;
pub use spec::{Common, DeletionPolicy};

/// The finalizer a package CR carries while its infrastructure may exist.
pub const FINALIZER: &str = "inrun.dev/infrastructure";
/// An annotation whose changed value asks for an early check.
pub const RECONCILE_REQUEST: &str = "inrun.dev/reconcile-request";
/// An annotation that, set to `"true"`, refuses `deletionPolicy: Delete`.
pub const PREVENT_DESTROY: &str = "inrun.dev/prevent-destroy";
/// How often a CR is checked when `spec.reconcileInterval` is left out.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// The first retry delay; each further retry doubles it up to [`RETRY_MAX`].
pub const RETRY_BASE: Duration = Duration::from_secs(1);
/// The longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// The retry delays (first, longest) of `crd`'s CRs under `runtime`, no shorter than the
/// requeue floor: a package's (its failures, and re-observing infrastructure not there or
/// not ready yet) go from [`RETRY_BASE`] to [`RETRY_MAX`] unless the Blueprint sets its
/// own `runtime.backoff`; anything else's follow `runtime.backoff`.
pub fn retry_bounds(crd: &CrdSpec, runtime: &RuntimeSpec) -> (Duration, Duration) {
    let (base, max) = if crd.serves_a_package() && runtime.backoff == Default::default() {
        (RETRY_BASE, RETRY_MAX)
    } else {
        (runtime.backoff.base, runtime.backoff.max)
    };
    (base.max(runtime.min_requeue), max.max(runtime.min_requeue))
}

/// Runs the package pass for one CR, calling `pkg` (step 1 of the order: the common spec
/// fields, after the gate and validation any CR gets).
///
/// # Errors
/// [`Failure::Package`] when a package call failed (retried with backoff), or a write
/// failed.
pub async fn run(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    pkg: &dyn Infrastructure,
) -> Result<Done, Failure> {
    let deleting = deleting(p.object);
    let warned = AtomicBool::new(false);
    let mut fx = Watched::new(fx, &warned);
    let mut run = Run {
        p,
        fx: &mut fx,
        pkg,
        view: p.object.clone(),
        stored: Stored::of(p.object),
    };
    let result = if deleting {
        // An invalid spec does not hold a deletion: the finalizer settings and the
        // deletion policy still apply (see `Common::for_deletion`).
        run.delete(Common::for_deletion(p.object)).await
    } else {
        steps(&mut run).await
    };
    match result {
        // A step that failed without saying so (a write refused, a lock that could not be
        // claimed): said now. A package's own failure is on the CR already, in the host's
        // words: its text is never shown.
        Err(failure)
            if !warned.load(Ordering::Relaxed) && !matches!(failure, Failure::Package { .. }) =>
        {
            Err(run.report(failure).await)
        }
        other => other,
    }
}

/// The steps of a CR not being deleted: its common fields read, then reconciled.
async fn steps(run: &mut Run<'_, '_>) -> Result<Done, Failure> {
    let p = run.p;
    // The gate, namespace rules and validation, as for any CR: a package CR they hold back
    // makes no call at all.
    if let Some(done) = held_back(p, &mut *run.fx).await? {
        return Ok(done);
    }
    let common = match Common::of(p.object) {
        Ok(c) => c,
        Err(why) => {
            tracing::warn!(problem = %why, "invalid package CR");
            let c = Conditions::new(
                false,
                false,
                ConditionReason::ValidationFailed,
                "spec is invalid",
            );
            let note = format!("ValidationFailed: {why}");
            return run
                .end(&c, Some((Reason::Invalid, &note)), Done::default())
                .await;
        }
    };
    run.reconcile(&common).await
}

#[cfg(test)]
mod tests;
