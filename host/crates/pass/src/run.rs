//! Where a pass starts ([`run`]): a CR goes to the package steps, the deletion steps or
//! the reconcile steps.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::effects::{Effects, Watched};
use crate::failure::Failure;
use crate::pass::{Done, Pass, deleting, route};
use crate::{finalize, infrastructure, reconcile};

/// Runs the pass for one CR. A CR served by a package ([`route`]) gets the package steps
/// ([`infrastructure::run`]); any other gets the deletion steps (`finalize.rs`) when it has
/// a deletion timestamp, else the reconcile steps (`reconcile.rs`).
///
/// # Errors
/// [`Failure`] when a step failed; the CR's status and events already say why.
pub async fn run(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Done, Failure> {
    let (_, plan) = route(p.crd, p.object, p.target);
    if let Some(package) = plan.package.as_deref() {
        // The package steps say their own failures (see `infrastructure::run`).
        let package = p.infrastructure.unwrap_or(package);
        return infrastructure::run(p, fx, package).await;
    }
    let warned = AtomicBool::new(false);
    let mut fx = Watched::new(fx, &warned);
    let result = if deleting(p.object) {
        finalize::finalize(p, &mut fx).await
    } else {
        reconcile::reconcile(p, &mut fx).await
    };
    match result {
        // A step that failed without saying so (a write the API server refused, a fence
        // that closed, a lock that could not be read): said now, on the CR and as an
        // event, so no failure is left to the log alone.
        Err(failure) if !warned.load(Ordering::Relaxed) => {
            let ctx = inrun_template::Context::new(p.object);
            Err(reconcile::failed(p, &mut fx, &ctx, failure).await)
        }
        other => other,
    }
}
