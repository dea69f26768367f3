//! Where a pass starts ([`run`]): a CR goes to the package steps, the deletion steps or
//! the reconcile steps.

use crate::effects::Effects;
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
        let package = p.infrastructure.unwrap_or(package);
        infrastructure::run(p, fx, package).await
    } else if deleting(p.object) {
        finalize::finalize(p, fx).await
    } else {
        reconcile::reconcile(p, fx).await
    }
}
