//! One pass for one CR: gate, prepare, maintain, reconcile, apply, status and events, next.
//! Deletion goes to [`super::finalize`].

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject};
use kube::runtime::controller::Action;
use serde_json::{Map, Value};
use tracing::Instrument;

use super::children::{self, ChildError};
use super::context::Ctx;
use super::events::Reason;
use super::finalize;
use super::meta;
use super::status::{self, Ready, Written};
use crate::assemble::{PassError, ReconcilePlan};
use crate::contract::Outcome;
use crate::reconcilers::ReconcileError;
use crate::template::Context;

/// How often a gated CR is checked again when nothing else changes.
pub const GATE_RECHECK: Duration = Duration::from_secs(10);

/// A pass that failed; the controller retries it with per-key backoff.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The reconciler failed.
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    /// A step around the reconciler failed (template, fence).
    #[error(transparent)]
    Pass(#[from] PassError),
    /// Writing or deleting children failed.
    #[error(transparent)]
    Children(#[from] ChildError),
    /// Writing the CR failed.
    #[error("{what}")]
    Api {
        /// What was being written.
        what: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The CR could not be read as JSON.
    #[error("reading the CR")]
    Object(#[source] serde_json::Error),
}

pub(super) fn api(what: &'static str) -> impl FnOnce(kube::Error) -> Failure {
    move |source| Failure::Api { what, source }
}

/// Entry point for the controller.
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Failure> {
    let plan = ctx.plan();
    let key = Ctx::key(&obj);
    // One read of each slot per reconcile: the versions serving as it starts.
    let serving: Vec<_> = plan.default.slots.iter().map(|s| s.current()).collect();
    let span = tracing::info_span!(
        "reconcile",
        object.ref = %format!("{}/{}", ctx.cr_resource.kind, key),
        reconciler.kind = %plan.default.reconciler.kind(),
        plugin.digest = %serving.first().map_or("-", |p| p.id().digest.as_str()),
    );
    let metrics = crate::metrics::global();
    if let Some(waited) = ctx.queued.take(&key) {
        metrics.queue_wait(&plan.spec.crd_name(), waited);
    }
    let started = metrics.reconcile_started(&plan.spec.crd_name());
    let plugins: Vec<String> = serving.iter().map(|p| p.id().name.clone()).collect();
    async move {
        let result = if obj.metadata.deletion_timestamp.is_some() {
            finalize::finalize(&obj, &ctx).await
        } else {
            pass(&obj, &ctx).await
        };
        let error = result
            .as_ref()
            .err()
            .map(|e| e as &(dyn std::error::Error + 'static));
        metrics.reconcile_finished(started, &key, &plugins, error);
        match &result {
            Ok(action) => {
                ctx.backoff.succeeded(&key);
                tracing::debug!(?action, "reconciled");
            }
            Err(e) => tracing::warn!(error = %crate::errors::chain(e), "reconcile failed"),
        }
        result
    }
    .instrument(span)
    .await
}

/// What the controller does with a failure: back off per key.
pub fn error_policy(obj: Arc<DynamicObject>, _err: &Failure, ctx: Arc<Ctx>) -> Action {
    let delay = ctx
        .backoff
        .failed(&Ctx::key(&obj), obj.metadata.generation.unwrap_or_default());
    Action::requeue(delay)
}

pub(super) fn to_value(obj: &DynamicObject) -> Result<Value, Failure> {
    serde_json::to_value(obj).map_err(Failure::Object)
}

async fn pass(original: &DynamicObject, ctx: &Ctx) -> Result<Action, Failure> {
    let plan = ctx.plan();
    let on = ctx.reference(original);
    // Maintain: finalizers and managed labels first, so nothing is written for a CR the
    // host could not later clean up.
    let obj = meta::maintain(ctx, original)
        .await
        .map_err(api("putting finalizers on the CR"))?;
    if let Some(at) = cleanup_at(&obj)
        && at <= k8s_openapi::jiff::Timestamp::now()
    {
        ctx.cr_api(&obj)
            .delete(
                obj.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await
            .map_err(api("deleting the CR after its cleanup grace period"))?;
        ctx.events
            .record(
                &on,
                Reason::CleanedUp,
                "cleanup grace period passed; CR deleted",
            )
            .await;
        return Ok(Action::await_change());
    }

    // Prepare.
    let object = to_value(&obj)?;
    let target = plan.target_of(&object, None);
    let tctx = Context::new(&object).with_target(target.as_deref());
    let rplan = match plan
        .plan_for(target.as_deref())
        .and_then(|p| plan.validate(&object, &tctx).map(|()| p))
    {
        Ok(p) => p,
        Err(e) => {
            let message = crate::errors::chain(&e);
            hold(ctx, &obj, &tctx, Reason::Invalid, message).await?;
            return Ok(Action::await_change());
        }
    };

    // Gate.
    if let Some(message) = plan.gate(&tctx)? {
        hold(ctx, &obj, &tctx, Reason::Gated, message).await?;
        return Ok(Action::requeue(GATE_RECHECK));
    }

    // Reconcile, apply, status.
    // Prepare: external calls, args, children. A failure here is a failed reconcile.
    let req = match prepare(ctx, &obj, rplan, &object, target.as_deref(), false).await {
        Ok(req) => req,
        Err(failure) => {
            let message = crate::errors::chain(&failure);
            let emitted = plan.status(&tctx, None).unwrap_or_default();
            let ready = Ready {
                ok: false,
                reason: "ReconcileError",
                message: message.clone(),
            };
            write_status(ctx, &obj, emitted, ready).await?;
            ctx.events
                .record(&on, Reason::ReconcileError, message)
                .await;
            return Err(failure);
        }
    };
    let mut args_ctx = tctx.clone().with_args(req.args.clone());
    if let Some(external) = &req.external {
        args_ctx = args_ctx.with_external(external.clone());
    }
    match reconcile_and_apply(ctx, &obj, rplan, &req).await {
        Ok((outcome, latest)) => {
            // The spec changed while this pass ran: its status would acknowledge a
            // generation it never saw. Leave the status to the pass that change starts.
            if latest.metadata.generation != obj.metadata.generation {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            let obj = latest;
            let status_fields = plan.status(&args_ctx, Some(&outcome))?;
            let mut updated = object.clone();
            updated["status"] = Value::Object(status_fields.clone());
            let next = rplan.next(
                &outcome,
                &Context::new(&updated).with_args(req.args.clone()),
            )?;
            let ready = Ready {
                ok: true,
                reason: "Reconciled",
                message: summary(&outcome),
            };
            if write_status(ctx, &obj, status_fields, ready).await? == Written::Stale {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            ctx.events
                .record(&on, Reason::Reconciled, summary(&outcome))
                .await;
            let cleanup_wait = outcome.cleanup.map(|c| remaining(&obj, c.after));
            let after = [next.after, cleanup_wait].into_iter().flatten().min();
            Ok(after.map_or_else(Action::await_change, Action::requeue))
        }
        Err(failure) => {
            let message = crate::errors::chain(&failure);
            let emitted = plan.status(&args_ctx, None).unwrap_or_default();
            write_status(
                ctx,
                &obj,
                emitted,
                Ready {
                    ok: false,
                    reason: "ReconcileError",
                    message: message.clone(),
                },
            )
            .await?;
            ctx.events
                .record(&on, Reason::ReconcileError, message)
                .await;
            Err(failure)
        }
    }
}

/// The Request for a CR: `reconcile.external` calls run, args rendered, and the CR's
/// children attached when `request.children` asks for them.
pub(super) async fn prepare(
    ctx: &Ctx,
    obj: &DynamicObject,
    rplan: &ReconcilePlan,
    object: &Value,
    target: Option<&str>,
    finalizing: bool,
) -> Result<crate::contract::Request, Failure> {
    let mut req = rplan.prepare(object, target, finalizing).await?;
    if rplan.spec.request.children {
        req.children = Some(children::observed(ctx, obj, &rplan.spec).await?);
    }
    Ok(req)
}

/// The steps that must all succeed for a pass to count: the reconciler, the fence, the
/// children, pruning, and the CR's own labels and annotations.
async fn reconcile_and_apply(
    ctx: &Ctx,
    obj: &DynamicObject,
    rplan: &ReconcilePlan,
    req: &crate::contract::Request,
) -> Result<(Outcome, DynamicObject), Failure> {
    let outcome = rplan.reconciler.reconcile(req).await?;
    rplan.fence(
        &outcome,
        obj.metadata.namespace.as_deref().unwrap_or_default(),
    )?;
    let applied = children::apply(ctx, obj, &outcome, true).await?;
    let prune = &rplan.spec.prune;
    if prune.enabled && (!outcome.resources.is_empty() || prune.allow_empty) {
        let on = ctx.reference(obj);
        for child in children::prune(ctx, obj, &rplan.spec, &applied).await? {
            ctx.events
                .record(
                    &on,
                    Reason::Pruned,
                    format!("deleted {child}: no longer returned"),
                )
                .await;
        }
    }
    let cleanup_at = outcome.cleanup.map(|c| {
        obj.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(meta::CLEANUP_AT))
            .cloned()
            .unwrap_or_else(|| at_after(c.after))
    });
    let obj =
        meta::set_result_metadata(ctx, obj, &outcome.labels, &outcome.annotations, cleanup_at)
            .await
            .map_err(api("setting the Result's labels and annotations on the CR"))?;
    Ok((outcome, obj))
}

/// A CR that is not reconciled now (invalid, or gated): `emit.status`, `Ready=False` with
/// the reason, and an event saying why.
async fn hold(
    ctx: &Ctx,
    obj: &DynamicObject,
    tctx: &Context,
    reason: Reason,
    message: String,
) -> Result<(), Failure> {
    let emitted = ctx.plan().status(tctx, None).unwrap_or_default();
    let condition = match reason {
        Reason::Gated => "Gated",
        _ => "Invalid",
    };
    let ready = Ready {
        ok: false,
        reason: condition,
        message: message.clone(),
    };
    write_status(ctx, obj, emitted, ready).await?;
    ctx.events
        .record(&ctx.reference(obj), reason, message)
        .await;
    Ok(())
}

pub(super) async fn write_status(
    ctx: &Ctx,
    obj: &DynamicObject,
    fields: Map<String, Value>,
    ready: Ready,
) -> Result<Written, Failure> {
    status::write(ctx, obj, fields, ready)
        .await
        .map_err(api("writing status"))
}

fn summary(outcome: &Outcome) -> String {
    format!("applied {} resource(s)", outcome.resources.len())
}

fn cleanup_at(obj: &DynamicObject) -> Option<k8s_openapi::jiff::Timestamp> {
    obj.metadata
        .annotations
        .as_ref()?
        .get(meta::CLEANUP_AT)?
        .parse()
        .ok()
}

fn at_after(after: Duration) -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let at = now
        .checked_add(k8s_openapi::jiff::SignedDuration::try_from(after).unwrap_or_default())
        .unwrap_or(now);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Time left until the pending cleanup (or `after` from now, if none is recorded yet).
fn remaining(obj: &DynamicObject, after: Duration) -> Duration {
    match cleanup_at(obj) {
        Some(at) => {
            let left = at.duration_since(k8s_openapi::jiff::Timestamp::now());
            Duration::try_from(left).unwrap_or(Duration::ZERO) + Duration::from_millis(100)
        }
        None => after,
    }
}
