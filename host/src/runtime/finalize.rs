//! Deletion: the finalizer holds the CR while the reconciler gets `finalizing: true`; a
//! requeue holds it longer (until `runtime.finalizers.timeout`); once released, the CR's
//! children are deleted everywhere (unless foreign instances of a managed CRD would be
//! stranded: see [`super::safeguard`]) and the finalizer removed.

use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;

use super::children;
use super::context::Ctx;
use super::events::Reason;
use super::meta;
use super::pass::{Failure, to_value, write_status};
use super::safeguard;
use super::status::Ready;
use crate::reconcilers::ReconcilerKind;
use crate::template::Context;

/// Runs the deletion steps for a CR with a deletion timestamp.
///
/// # Errors
/// [`Failure`] when the reconciler fails (the finalizer stays and the pass is retried) or
/// a child cannot be deleted.
pub async fn finalize(obj: &DynamicObject, ctx: &Ctx) -> Result<Action, Failure> {
    if !meta::has_finalizer(obj) {
        return Ok(Action::await_change());
    }
    let on = ctx.reference(obj);
    if ctx.runtime.finalizers.remove {
        meta::release(ctx, obj)
            .await
            .map_err(super::pass::api("removing finalizers"))?;
        return Ok(Action::await_change());
    }
    let plan = ctx.plan();
    let object = to_value(obj)?;
    let target = plan.target_of(&object, None);
    let rplan = plan.plan_for(target.as_deref()).unwrap_or(&plan.default);
    let left = time_left(obj, ctx.runtime.finalizers.timeout);

    if left != Some(Duration::ZERO) {
        let prepared =
            super::pass::prepare(ctx, obj, rplan, &object, target.as_deref(), true).await;
        let reconciled = match prepared {
            Ok(req) => match rplan.reconciler.reconcile(&req).await {
                Ok(outcome) => Ok((req, outcome)),
                Err(e) => Err(Failure::from(e)),
            },
            Err(failure) => Err(failure),
        };
        let (req, outcome) = match reconciled {
            Ok(done) => done,
            Err(failure) => {
                ctx.events
                    .record(&on, Reason::ReconcileError, crate::errors::chain(&failure))
                    .await;
                return Err(failure);
            }
        };
        // Writes in a finalizing Result are ignored, except that declarative `onDelete`
        // templates exist to be applied; those objects are not owned, so they outlive the CR.
        // They pass the same `managedResources` fence as any other write.
        if rplan.reconciler.kind() == ReconcilerKind::Declarative && !outcome.resources.is_empty() {
            let namespace = obj.metadata.namespace.as_deref().unwrap_or_default();
            let written = match rplan.fence(&outcome, namespace) {
                Ok(()) => children::apply(ctx, obj, &outcome, false)
                    .await
                    .map_err(Failure::from),
                Err(e) => Err(Failure::from(e)),
            };
            if let Err(failure) = written {
                ctx.events
                    .record(&on, Reason::ReconcileError, crate::errors::chain(&failure))
                    .await;
                return Err(failure);
            }
        }
        // A deleting CR's status is not rewritten, so the rule sees the CR as it is.
        let next = rplan.next(&outcome, &Context::new(&object).with_args(req.args.clone()))?;
        if next.holds {
            let wait = next.after.unwrap_or(crate::assemble::DEFAULT_REQUEUE);
            let wait = left.map_or(wait, |l| wait.min(l));
            let message = "deletion held: the reconciler asked to requeue".to_string();
            blocked(ctx, obj, "Finalizing", message).await?;
            return Ok(Action::requeue(wait));
        }
    } else {
        let timeout = ctx
            .runtime
            .finalizers
            .timeout
            .map(crate::duration::format)
            .unwrap_or_default();
        ctx.events
            .record(
                &on,
                Reason::FinalizeTimeout,
                format!("finalizer timeout of {timeout} passed; releasing the CR"),
            )
            .await;
    }

    // The safeguard outlasts the finalizer timeout: releasing would strand the foreign
    // instances, which is what it exists to prevent.
    if let Some(message) = safeguard::foreign_instances(ctx, obj, &rplan.spec).await? {
        blocked(ctx, obj, "DeletionBlocked", message).await?;
        return Ok(Action::requeue(safeguard::RECHECK));
    }
    let deleted = children::delete_all(ctx, obj, &rplan.spec).await?;
    meta::release(ctx, obj)
        .await
        .map_err(super::pass::api("removing finalizers"))?;
    ctx.events
        .record(
            &on,
            Reason::Finalized,
            format!(
                "deleted {} child object(s); finalizer removed",
                deleted.len()
            ),
        )
        .await;
    Ok(Action::await_change())
}

/// Says why the deletion waits: `Ready` false with `reason` in status, and a
/// `DeletionBlocked` event. The status the last pass wrote is kept.
async fn blocked(
    ctx: &Ctx,
    obj: &DynamicObject,
    reason: &'static str,
    message: String,
) -> Result<(), Failure> {
    let mut fields = obj
        .data
        .get("status")
        .and_then(serde_json::Value::as_object)
        .cloned()
        .unwrap_or_default();
    // `status::write` sets these itself.
    fields.remove("conditions");
    fields.remove("observedGeneration");
    let ready = Ready {
        ok: false,
        reason,
        message: message.clone(),
    };
    write_status(ctx, obj, fields, ready).await?;
    ctx.events
        .record(&ctx.reference(obj), Reason::DeletionBlocked, message)
        .await;
    Ok(())
}

/// Time left before `timeout` (counted from the deletion timestamp) runs out; `None` when
/// there is no timeout.
fn time_left(obj: &DynamicObject, timeout: Option<Duration>) -> Option<Duration> {
    let timeout = timeout?;
    let since = obj.metadata.deletion_timestamp.as_ref()?.0;
    let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(since);
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    Some(timeout.saturating_sub(elapsed))
}
