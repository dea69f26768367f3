//! The deletion steps for a CR with a deletion timestamp ([`finalize`]): the reconciler's
//! say, the children deleted in waves, the finalizer removed.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};

use inrun_contract::{Outcome, Request};
use inrun_reconcilers::plan::{DEFAULT_REQUEUE, ReconcilePlan};
use inrun_template::Context;

use crate::effects::{EffectError, Effects, Teardown};
use crate::failure::Failure;
use crate::meta;
use crate::pass::{Done, Pass, SAFEGUARD_RECHECK, WAVE_RECHECK, route};
use crate::reason::{ConditionReason, Reason};
use crate::reconcile::{StatusWrite, kept_verdict, namespace, prepare, write_status};
use crate::status::Ready;

/// The deletion steps: the reconciler runs with `finalizing: true` (a reconcile block with
/// `onDelete` templates applies what they return, unowned); a requested requeue holds the
/// CR until `runtime.finalizers.timeout`; then the safeguard, the children, the finalizer.
pub(crate) async fn finalize(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Done, Failure> {
    if !meta::has_finalizer(p.object, meta::FINALIZER) {
        return Ok(Done::default());
    }
    if p.runtime.finalizers.remove {
        fx.release().await?;
        return Ok(Done::default());
    }
    let (target, rplan) = route(p.crd, p.object, p.target);
    let left = time_left(p.object, p.runtime.finalizers.timeout, p.now);
    if left != Some(Duration::ZERO)
        && let Some(done) = held_by_reconciler(p, fx, rplan, target.as_deref(), left).await?
    {
        return Ok(done);
    }
    let forced = left == Some(Duration::ZERO);
    let teardown = match fx.tear_down(&rplan.spec, forced).await {
        Ok(teardown) => teardown,
        Err(error) => return teardown_failed(p, fx, error, left).await,
    };
    let left = left.unwrap_or(Duration::MAX);
    match teardown {
        Teardown::Blocked(message) => {
            let reason = ConditionReason::DeletionBlocked;
            blocked(p, fx, reason, Reason::DeletionBlocked, message).await?;
            Ok(Done::after(SAFEGUARD_RECHECK.min(left)))
        }
        Teardown::Waiting(on) => {
            progress(p, fx, format!("deleting children in waves: {on}")).await?;
            Ok(Done::after(WAVE_RECHECK.min(left)))
        }
        Teardown::Done {
            deleted,
            orphaned,
            spared,
        } => {
            if forced {
                timed_out(p, fx, spared).await;
            }
            fx.release().await?;
            let mut note = format!("deleted {} child object(s)", deleted.len());
            if !orphaned.is_empty() {
                note.push_str(&format!(", left {} in place", orphaned.len()));
            }
            note.push_str("; finalizer removed");
            fx.record(Reason::Finalized, note).await;
            Ok(Done::default())
        }
    }
}

/// The reconciler's say on a deletion, while the finalizer timeout has not passed: its
/// events recorded, and `Some` when it asked to requeue (the deletion is held until then,
/// or until the time `left`).
async fn held_by_reconciler(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    rplan: &ReconcilePlan,
    target: Option<&str>,
    left: Option<Duration>,
) -> Result<Option<Done>, Failure> {
    let (req, outcome) = match finalizing(p, fx, rplan, target).await {
        Ok(done) => done,
        Err(failure) => {
            let message = inrun_contract::errors::chain(&failure);
            fx.record(Reason::ReconcileError, message).await;
            return Err(failure);
        }
    };
    for event in &outcome.events {
        fx.emit(event).await;
    }
    // A deleting CR's status is not rewritten, so the rule sees the CR as it is.
    let next = rplan.next(
        &outcome,
        &Context::new(p.object).with_args(req.args.clone()),
    )?;
    if !next.holds {
        return Ok(None);
    }
    let wait = next.after.unwrap_or(DEFAULT_REQUEUE);
    let wait = left.map_or(wait, |l| wait.min(l));
    let message = "deletion held: the reconciler asked to requeue".to_string();
    let reason = ConditionReason::Finalizing;
    blocked(p, fx, reason, Reason::DeletionBlocked, message).await?;
    Ok(Some(Done {
        after: Some(wait),
        holds: true,
        ..Done::default()
    }))
}

/// Deleting the children failed: said on the CR, once per cause, in the error's own words
/// (the step, then why); retried with backoff, and never past the timeout, which releases
/// the CR whatever fails.
async fn teardown_failed(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    error: EffectError,
    left: Option<Duration>,
) -> Result<Done, Failure> {
    let reason = error.condition.unwrap_or(ConditionReason::DeletionFailed);
    let message = inrun_contract::errors::chain(&error);
    tracing::warn!(error = %message, "the CR's children could not be deleted");
    blocked(p, fx, reason, Reason::DeletionFailed, message).await?;
    Ok(Done {
        after: left,
        retry: true,
        ..Done::default()
    })
}

/// The `FinalizeTimeout` event of a forced teardown, naming what was `spared`.
async fn timed_out(p: Pass<'_>, fx: &mut dyn Effects, spared: Option<String>) {
    let timeout = p
        .runtime
        .finalizers
        .timeout
        .map(inrun_contract::duration::format)
        .unwrap_or_default();
    let mut note = format!("finalizer timeout of {timeout} passed; releasing the CR");
    if let Some(spared) = spared {
        note.push_str("; left in place instead of deleted: ");
        note.push_str(&spared);
    }
    fx.record(Reason::FinalizeTimeout, note).await;
}

/// The reconciler's answer for a deleting CR, with the writes a reconcile block's
/// `onDelete` templates exist for applied (they pass the same fence as any other write;
/// not owned, they outlive the CR). Other writes in a finalizing Result are ignored.
async fn finalizing(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    rplan: &ReconcilePlan,
    target: Option<&str>,
) -> Result<(Request, Outcome), Failure> {
    let req = prepare(fx, rplan, p.object, target, true).await?;
    let outcome = rplan.reconciler.reconcile(&req).await?;
    if rplan.applies_on_delete() && !outcome.resources.is_empty() {
        rplan.fence(&outcome, namespace(p.object))?;
        fx.apply(&rplan.spec, &outcome.resources, false).await?;
    }
    Ok((req, outcome))
}

/// Says why the deletion waits: `Ready` and `Reconciled` false with `reason` in status
/// (the rest of the status the last pass wrote is kept), and an `event` when that is news
/// (once per distinct cause).
async fn blocked(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    reason: ConditionReason,
    event: Reason,
    message: String,
) -> Result<(), Failure> {
    let verdict = kept_verdict(p.object, Ready::not(reason, message.clone()));
    if write_status(p, fx, kept_status(p.object), &verdict).await? != StatusWrite::Unchanged {
        fx.record(event, message).await;
    }
    Ok(())
}

/// Says what a deletion in waves waits for, in status (`Ready` false, reason
/// `Finalizing`); no event: the waves are progress, not a problem.
async fn progress(p: Pass<'_>, fx: &mut dyn Effects, message: String) -> Result<(), Failure> {
    let verdict = kept_verdict(p.object, Ready::not(ConditionReason::Finalizing, message));
    write_status(p, fx, kept_status(p.object), &verdict).await?;
    Ok(())
}

/// A deleting CR's status as the last pass wrote it, but the fields the host sets anew.
fn kept_status(object: &Value) -> Map<String, Value> {
    let mut fields = object
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    fields.remove("conditions");
    fields.remove("observedGeneration");
    fields.remove("resources");
    fields
}

/// Time left before `timeout` (counted from the deletion timestamp) runs out; `None` when
/// there is no timeout.
pub(crate) fn time_left(
    object: &Value,
    timeout: Option<Duration>,
    now: Timestamp,
) -> Option<Duration> {
    let timeout = timeout?;
    let since: Timestamp = object
        .pointer("/metadata/deletionTimestamp")?
        .as_str()?
        .parse()
        .ok()?;
    let elapsed = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    Some(timeout.saturating_sub(elapsed))
}
