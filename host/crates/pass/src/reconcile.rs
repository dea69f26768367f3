//! The steps of a pass for a CR that is not being deleted, numbered as
//! [`reconcile`] runs them: 1 gate, 2 prepare, 3 maintain, 4 reconcile, 5 apply,
//! 6 status and events, 7 next. Also the holds that stop a CR before its reconciler
//! ([`held_back`], [`refuse`]) and the status writes every step shares.

use serde_json::{Map, Value};
use tracing::Instrument;

use inrun_contract::{Outcome, Request};
use inrun_reconcilers::plan::{Next, ReconcilePlan};
use inrun_template::Context;

use crate::effects::{AppliedChild, Effects, Observed, Written};
use crate::failure::Failure;
use crate::pass::{Done, GATE_RECHECK, Pass, SAFEGUARD_RECHECK, STALE_RETRY, WAVE_RECHECK};
use crate::reason::{ConditionReason, Reason};
use crate::status::{self, Ready};
use crate::{meta, readiness};

/// The CR's namespace (`""` for a cluster-scoped CR).
pub(crate) fn namespace(object: &Value) -> &str {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A CR the host will not reconcile as it is (too large to keep, say): `Ready=False`,
/// reason `Invalid`, and an event saying why, once; nothing else is written.
///
/// # Errors
/// [`Failure`] when the status cannot be written.
pub async fn refuse(p: Pass<'_>, fx: &mut dyn Effects, message: String) -> Result<Done, Failure> {
    let tctx = Context::new(p.object);
    hold(p, fx, &tctx, Held::Invalid, message).await?;
    Ok(Done::default())
}

/// Step 1, the gate: `Some` when a `preReconcile` condition holds the CR back (held, to be
/// checked again) and nothing else is to run.
async fn gate(p: Pass<'_>, fx: &mut dyn Effects, tctx: &Context) -> Result<Option<Done>, Failure> {
    match p.crd.gate(tctx) {
        Ok(None) => Ok(None),
        Ok(Some(message)) => {
            hold(p, fx, tctx, Held::Gated, message).await?;
            Ok(Some(Done::after(GATE_RECHECK)))
        }
        Err(e) => Err(failed(p, fx, tctx, e.into()).await),
    }
}

/// The gate, then the namespace and validation rules, for a CR whose next steps are not
/// the Request/Result ones (a package's): `Some` when the CR is held and nothing else is
/// to run. Whatever the reconciler, these happen on every reconcile.
///
/// # Errors
/// [`Failure`] when the gate cannot be evaluated or the status cannot be written.
pub async fn held_back(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Option<Done>, Failure> {
    let tctx = Context::new(p.object);
    if let Some(done) = gate(p, fx, &tctx).await? {
        return Ok(Some(done));
    }
    if let Err(e) = p.crd.validate(p.object, &tctx) {
        let message = inrun_contract::errors::chain(&e);
        hold(p, fx, &tctx, Held::Invalid, message).await?;
        return Ok(Some(Done::default()));
    }
    Ok(None)
}

/// The steps for a CR that is not being deleted, numbered as they run.
pub(crate) async fn reconcile(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Done, Failure> {
    let target = p.crd.target_of(p.object, p.target);
    let tctx = Context::new(p.object).with_target(target.as_deref());

    // 1. Gate.
    if let Some(done) = gate(p, fx, &tctx)
        .instrument(tracing::debug_span!("gate"))
        .await?
    {
        return Ok(done);
    }

    // 2. Prepare: the serve target, namespace and validation rules, then the Request.
    let Some(rplan) = routed(p, fx, &tctx, target.as_deref()).await? else {
        return Ok(Done::default());
    };
    // The Request, with what `reconcile.external` fetches.
    let req = match prepare(fx, rplan, p.object, target.as_deref(), false)
        .instrument(tracing::debug_span!("prepare"))
        .await
    {
        Ok(req) => req,
        Err(f) => return Err(failed(p, fx, &tctx, f).await),
    };
    let mut args_ctx = tctx.clone().with_args(req.args.clone());
    if let Some(external) = &req.external {
        args_ctx = args_ctx.with_external(external.clone());
    }

    // 3. Maintain: finalizers and managed labels before anything is written for the CR;
    // a cleanup that is due deletes it.
    if let Some(done) = maintain(p, fx)
        .instrument(tracing::debug_span!("maintain"))
        .await?
    {
        return Ok(done);
    }

    // 4. Reconcile, 5. apply.
    let settled = match reconcile_and_apply(p, fx, rplan, &req).await {
        Ok(settled) => settled,
        Err(f) => return Err(failed(p, fx, &args_ctx, f).await),
    };

    // 6. Status and events.
    let (fields, next) = match status_and_next(p, rplan, &req, &args_ctx, &settled.outcome) {
        Ok(both) => both,
        Err(f) => return Err(failed(p, fx, &args_ctx, f).await),
    };
    if let Some(on) = settled.waiting {
        return waiting(p, fx, fields, on).await;
    }
    // 6a. Readiness: every child's state, by the kind's rules or its `readyWhen`.
    let states = match assess(fx, rplan, &settled.outcome.resources, settled.children)
        .instrument(tracing::debug_span!("readiness"))
        .await
    {
        Ok(states) => states,
        Err(f) => return Err(failed(p, fx, &args_ctx, f).await),
    };
    let summary = format!("applied {} resource(s)", settled.outcome.resources.len());
    let verdict = readiness::verdict(&states, summary.clone(), namespace(p.object));
    let status = write_status(p, fx, fields, &verdict)
        .instrument(tracing::debug_span!("status"))
        .await?;
    if status == StatusWrite::Stale {
        return Ok(Done::after(STALE_RETRY));
    }
    announce(fx, status, settled.written, summary, &verdict).await;
    for event in &settled.outcome.events {
        fx.emit(event).await;
    }

    // 7. Next.
    Ok(next_pass(p, &settled.outcome, &next, settled.prune_blocked))
}

/// Step 2's routing: the reconcile block of the CR's serve target, once the CR passes the
/// namespace and validation rules; `None` when it does not (held as `Invalid`).
async fn routed<'p>(
    p: Pass<'p>,
    fx: &mut dyn Effects,
    tctx: &Context,
    target: Option<&str>,
) -> Result<Option<&'p ReconcilePlan>, Failure> {
    let routed = p
        .crd
        .plan_for(target)
        .and_then(|r| p.crd.validate(p.object, tctx).map(|()| r));
    match routed {
        Ok(rplan) => Ok(Some(rplan)),
        Err(e) => {
            let message = inrun_contract::errors::chain(&e);
            hold(p, fx, tctx, Held::Invalid, message).await?;
            Ok(None)
        }
    }
}

/// Step 3: the host's finalizers and managed labels on the CR; `Some` when a cleanup is
/// due and the CR was deleted.
async fn maintain(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Option<Done>, Failure> {
    let maintained = meta::maintained(p.runtime, p.bucket_label);
    if meta::differs(p.object, meta::FINALIZER_MANAGER, &maintained) {
        fx.metadata(meta::FINALIZER_MANAGER, &maintained).await?;
    }
    let due = meta::cleanup_at(p.object).is_some_and(|at| at <= p.now);
    if !due {
        return Ok(None);
    }
    fx.delete().await?;
    fx.record(
        Reason::CleanedUp,
        "cleanup grace period passed; CR deleted".into(),
    )
    .await;
    Ok(Some(Done::default()))
}

/// Step 6's values: the status fields `emit.status` and the Result render, and when to
/// run again by the rules, read against the CR with that status.
fn status_and_next(
    p: Pass<'_>,
    rplan: &ReconcilePlan,
    req: &Request,
    args_ctx: &Context,
    outcome: &Outcome,
) -> Result<(Map<String, Value>, Next), Failure> {
    let fields = p.crd.status(args_ctx, Some(outcome))?;
    let mut updated = p.object.clone();
    updated["status"] = Value::Object(fields.clone());
    let next = rplan.next(outcome, &Context::new(&updated).with_args(req.args.clone()))?;
    Ok((fields, next))
}

/// A later wave waits (a CRD to be Established): the CR is not ready yet, and the pass
/// runs again when the CRD changes, or soon.
async fn waiting(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    fields: Map<String, Value>,
    on: String,
) -> Result<Done, Failure> {
    let verdict = kept_verdict(p.object, Ready::not(ConditionReason::Progressing, on));
    if write_status(p, fx, fields, &verdict).await? == StatusWrite::Stale {
        return Ok(Done::after(STALE_RETRY));
    }
    Ok(Done::after(WAVE_RECHECK))
}

/// Step 6's event: `Reconciled` when the pass wrote something or moved `Reconciled`; else
/// the `Ready` condition's move (`Ready`, `ResourceFailed`, `Progressing`), if it moved.
async fn announce(
    fx: &mut dyn Effects,
    status: StatusWrite,
    written: usize,
    summary: String,
    verdict: &status::Verdict,
) {
    match status {
        StatusWrite::Written { reconciled, .. } if written > 0 || reconciled => {
            fx.record(Reason::Reconciled, summary).await;
        }
        StatusWrite::Unchanged if written > 0 => {
            fx.record(Reason::Reconciled, summary).await;
        }
        StatusWrite::Written { ready: true, .. } => {
            let reason = match verdict.ready.reason {
                ConditionReason::Ready => Reason::Ready,
                ConditionReason::ResourceFailed => Reason::ResourceFailed,
                _ => Reason::Progressing,
            };
            fx.record(reason, verdict.ready.message.clone()).await;
        }
        _ => {}
    }
}

/// Step 7: the soonest of the rules' requeue, a pending cleanup, the resync, and a
/// recheck of a CRD kept from pruning for its foreign instances.
fn next_pass(p: Pass<'_>, outcome: &Outcome, next: &Next, prune_blocked: bool) -> Done {
    let cleanup = outcome
        .cleanup
        .map(|c| meta::cleanup_wait(p.object, c.after, p.now));
    let recheck = prune_blocked.then_some(SAFEGUARD_RECHECK);
    let after = [next.after, cleanup, p.runtime.resync, recheck]
        .into_iter()
        .flatten()
        .min();
    Done {
        after,
        holds: next.holds,
        cleanup: outcome.cleanup.map(|c| c.after),
        retry: false,
    }
}

/// Each applied child with its state: current at once for a kind whose readiness reads
/// nothing the server writes; otherwise judged on the object the apply returned, or, when
/// nothing was written, on the object read back. A `readyWhen` of the child's
/// `managedResources` entry replaces the kind's rules.
async fn assess(
    fx: &mut dyn Effects,
    rplan: &ReconcilePlan,
    resources: &[Value],
    children: Vec<AppliedChild>,
) -> Result<Vec<(AppliedChild, readiness::State)>, Failure> {
    use readiness::State;
    let mut states = Vec::with_capacity(children.len());
    for mut child in children {
        let desired = resources.get(child.index).unwrap_or(&Value::Null);
        if !readiness::judged_on_object(&rplan.spec, desired) {
            child.object = None;
            states.push((child, State::Current));
            continue;
        }
        let rule = rplan.ready_when(&child.api_version, &child.key.kind);
        let observed = match child.object.take() {
            Some(object) => Observed::Object(object),
            None => fx.observe(&child.api_version, &child.key).await?,
        };
        let state = match observed {
            Observed::Object(object) => match rule {
                Some((when, text)) => match when.eval(&Context::new(&object)) {
                    Ok(true) => State::Current,
                    Ok(false) => State::InProgress(format!("readyWhen {text} is not true yet")),
                    Err(e) => {
                        State::Failed(format!("readyWhen: {}", inrun_contract::errors::chain(&e)))
                    }
                },
                None => readiness::state(&object),
            },
            Observed::Missing => State::InProgress("not found on the server".into()),
            Observed::Unknown => State::Unknown("not observed".into()),
        };
        states.push((child, state));
    }
    Ok(states)
}

/// `Reconciled` and `Ready` both saying `condition` (a failed, held or waiting pass), the
/// children's states as the last pass that judged them wrote them.
pub(crate) fn kept_verdict(object: &Value, condition: Ready) -> status::Verdict {
    status::Verdict {
        resources: object.pointer("/status/resources").cloned(),
        ..status::Verdict::both(condition)
    }
}

/// The Request: `reconcile.external` calls run, args rendered, and the CR's children
/// attached when `request.children` asks for them.
pub(crate) async fn prepare(
    fx: &mut dyn Effects,
    rplan: &ReconcilePlan,
    object: &Value,
    target: Option<&str>,
    finalizing: bool,
) -> Result<Request, Failure> {
    let mut req = rplan.prepare(object, target, finalizing).await?;
    if rplan.spec.request.children {
        req.children = Some(fx.children(&rplan.spec).await?);
    }
    Ok(req)
}

/// What the reconcile and apply steps came to.
struct Settled {
    /// The Result.
    outcome: Outcome,
    /// How many writes it took.
    written: usize,
    /// What a later wave waits for (then nothing was pruned: the children of later waves
    /// are not applied yet).
    waiting: Option<String>,
    /// A CRD or APIService no longer returned was kept for its foreign instances.
    prune_blocked: bool,
    /// The children applied, in order.
    children: Vec<AppliedChild>,
}

/// The steps that must all succeed for a pass to count: the reconciler, the fence, the
/// children, pruning, and the CR's own labels and annotations.
async fn reconcile_and_apply(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    rplan: &ReconcilePlan,
    req: &Request,
) -> Result<Settled, Failure> {
    let outcome = rplan
        .reconciler
        .reconcile(req)
        .instrument(tracing::debug_span!(
            "reconciler",
            reconciler.kind = %rplan.reconciler.kind()
        ))
        .await?;
    rplan.fence(&outcome, namespace(p.object))?;
    let applied = fx
        .apply(&rplan.spec, &outcome.resources, true)
        .instrument(tracing::debug_span!(
            "apply",
            resources = outcome.resources.len()
        ))
        .await?;
    let mut written = applied.written;
    let mut prune_blocked = false;
    let prune = &rplan.spec.prune;
    if applied.waiting.is_none()
        && prune.enabled
        && (!outcome.resources.is_empty() || prune.allow_empty)
    {
        let pruned = fx
            .prune(&rplan.spec, &applied.keys)
            .instrument(tracing::debug_span!("prune"))
            .await?;
        for child in &pruned.deleted {
            fx.record(
                Reason::Pruned,
                format!("deleted {child}: no longer returned"),
            )
            .await;
        }
        for child in &pruned.orphaned {
            fx.record(
                Reason::Pruned,
                format!("left {child} in place (delete policy orphan): no longer returned"),
            )
            .await;
        }
        if let Some(message) = pruned.blocked {
            fx.record(Reason::DeletionBlocked, message).await;
            prune_blocked = true;
        }
        written += pruned.deleted.len() + pruned.orphaned.len();
    }
    let decorations = meta::decorations(p.object, &outcome, p.now);
    if meta::differs(p.object, meta::RECONCILER_MANAGER, &decorations) {
        fx.metadata(meta::RECONCILER_MANAGER, &decorations).await?;
        written += 1;
    }
    Ok(Settled {
        outcome,
        written,
        waiting: applied.waiting,
        prune_blocked,
        children: applied.children,
    })
}

/// What a status step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusWrite {
    /// The CR already showed it.
    Unchanged,
    /// Written; whether the `Reconciled` and the `Ready` condition changed.
    Written {
        /// `Reconciled` says something new.
        reconciled: bool,
        /// `Ready` has a new status or reason (a new message alone is progress).
        ready: bool,
    },
    /// The CR changed under the pass; nothing written.
    Stale,
}

/// Writes `fields` and `verdict` to the CR's status if that changes it.
pub(crate) async fn write_status(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    fields: Map<String, Value>,
    verdict: &status::Verdict,
) -> Result<StatusWrite, Failure> {
    let now = meta::format_time(p.now);
    let mut fields = fields;
    let (_, plan) = crate::pass::route(p.crd, p.object, p.target);
    fields.insert(
        "reconciledBy".into(),
        Value::String(status::reconciled_by(plan)),
    );
    let desired = status::desired(p.object, fields, verdict, &now);
    if !status::differs(p.object, &desired) {
        return Ok(StatusWrite::Unchanged);
    }
    let reconciled = status::changes(p.object, &desired, "Reconciled");
    let ready = status::turns(p.object, &desired, "Ready");
    Ok(match fx.status(&desired).await? {
        Written::Stale => StatusWrite::Stale,
        Written::Done => StatusWrite::Written { reconciled, ready },
    })
}

/// A failed pass: `emit.status` (as far as it renders) with `Ready=False`, and a
/// `ReconcileError` event. Returns the failure for the retry.
pub(crate) async fn failed(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    ctx: &Context,
    failure: Failure,
) -> Failure {
    let message = inrun_contract::errors::chain(&failure);
    let fields = p.crd.status(ctx, None).unwrap_or_default();
    let verdict = kept_verdict(p.object, Ready::not(failure.condition(), message.clone()));
    if let Err(e) = write_status(p, fx, fields, &verdict).await {
        tracing::warn!(error = %inrun_contract::errors::chain(&e), "could not write the failure to status");
    }
    fx.record(Reason::ReconcileError, message).await;
    failure
}

/// Why a CR is not reconciled now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// It breaks the Blueprint's rules (or the host refuses it as it is).
    Invalid,
    /// A `preReconcile` condition holds it back.
    Gated,
}

/// A CR that is not reconciled now (invalid, or gated): `emit.status`, `Ready=False` with
/// the reason, and an event saying why — once, when that changes the status.
async fn hold(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    ctx: &Context,
    why: Held,
    message: String,
) -> Result<(), Failure> {
    let fields = p.crd.status(ctx, None).unwrap_or_default();
    let (condition, event) = match why {
        Held::Invalid => (ConditionReason::Invalid, Reason::Invalid),
        Held::Gated => (ConditionReason::Gated, Reason::Gated),
    };
    let verdict = kept_verdict(p.object, Ready::not(condition, message.clone()));
    if matches!(
        write_status(p, fx, fields, &verdict).await?,
        StatusWrite::Written { .. }
    ) {
        fx.record(event, message).await;
    }
    Ok(())
}
