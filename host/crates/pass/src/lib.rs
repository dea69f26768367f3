//! The reconcile pass: every step in seed order (gate, prepare, maintain, reconcile,
//! apply, status and events, next) and every decision, over plain values. The writes go
//! through [`Effects`]: `inrun run` carries them out against the API server
//! (the `inrun` crate's runtime), `inrun render` prints them ([`render`]). Both call
//! [`run`], so they cannot disagree; nothing here asks which kind of reconciler it calls.

pub mod fields;
pub mod fixtures;
pub mod meta;
pub mod package;
pub mod readiness;
pub mod record;
pub mod render;
pub mod status;
pub mod waves;

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};

use inrun_blueprint::{ReconcileSpec, RuntimeSpec};
use inrun_contract::{Outcome, Request};
use inrun_reconcilers::ReconcileError;
use inrun_reconcilers::assemble::{CrdPlan, ReconcilePlan};
pub use inrun_reconcilers::assemble::{DEFAULT_REQUEUE, Next, PassError};
use inrun_template::Context;
use meta::Metadata;
use status::Ready;

/// How often a gated CR is checked again when nothing else changes.
pub const GATE_RECHECK: Duration = Duration::from_secs(10);
/// How often a deletion blocked by foreign instances of a managed type is checked again.
pub const SAFEGUARD_RECHECK: Duration = Duration::from_secs(3);
/// How soon a pass waiting for a wave (a CRD to be Established, the objects of a delete
/// wave to be gone) looks again when no watch event wakes it first.
pub const WAVE_RECHECK: Duration = Duration::from_secs(1);
/// When a pass whose status write found the CR changed under it runs again.
const STALE_RETRY: Duration = Duration::from_millis(200);

impl Reason {
    /// Every reason, for what must know them all (the reasons a reconciler's event may not
    /// take: [`inrun_contract::HOST_EVENT_REASONS`]).
    pub const ALL: [Reason; 14] = [
        Reason::Reconciled,
        Reason::ReconcileError,
        Reason::Pruned,
        Reason::Finalized,
        Reason::FinalizeTimeout,
        Reason::Invalid,
        Reason::Gated,
        Reason::CleanedUp,
        Reason::DeletionBlocked,
        Reason::DeletionFailed,
        Reason::Ready,
        Reason::Progressing,
        Reason::ResourceFailed,
        Reason::Released,
    ];
}

/// Why an event is recorded; the reason strings are part of Inrun's interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A pass changed something (applied, pruned, or moved the `Ready` condition).
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
    /// Deleting the CR's children failed (the API server refused a list or a delete, a
    /// conflict, an outage); retried with backoff until `runtime.finalizers.timeout`.
    DeletionFailed,
    /// Every child became ready (nothing else changed).
    Ready,
    /// A child is no longer ready, or not yet (nothing else changed).
    Progressing,
    /// A child failed and will not become ready without a change.
    ResourceFailed,
    /// No tenant serves the CR's CRD any more: the host's finalizers were removed
    /// without its cleanup.
    Released,
}

impl Reason {
    /// The event's `reason` text.
    pub fn as_str(self) -> &'static str {
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
            Reason::DeletionFailed => "DeletionFailed",
            Reason::Ready => "Ready",
            Reason::Progressing => "Progressing",
            Reason::ResourceFailed => "ResourceFailed",
            Reason::Released => "Released",
        }
    }

    /// `Warning` for what needs a person's attention, else `Normal`.
    pub fn event_type(self) -> &'static str {
        match self {
            Reason::ReconcileError
            | Reason::FinalizeTimeout
            | Reason::Invalid
            | Reason::DeletionBlocked
            | Reason::DeletionFailed
            | Reason::ResourceFailed
            | Reason::Released => "Warning",
            _ => "Normal",
        }
    }
}

/// A child, by what identifies it on the server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChildKey {
    /// API group (`""` for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ChildKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The children one apply covered, and how many of them it actually wrote (the rest were
/// already as desired).
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// Every child of the Result (when `waiting`, those applied so far).
    pub keys: HashSet<ChildKey>,
    /// The same children in the order they were applied, with what the apply returned.
    pub children: Vec<AppliedChild>,
    /// How many writes that took.
    pub written: usize,
    /// The apply stopped before a later wave: what it waits for (a CRD not `Established`
    /// yet, a type not served yet). The rest is applied by a later pass.
    pub waiting: Option<String>,
}

/// One child an apply covered.
#[derive(Debug, Clone)]
pub struct AppliedChild {
    /// Its position in the Result's resources.
    pub index: usize,
    /// Its `apiVersion`.
    pub api_version: String,
    /// Which object it is.
    pub key: ChildKey,
    /// The whole object as the write returned it (status too); `None` when nothing was
    /// written (it was already as desired).
    pub object: Option<Value>,
}

/// A child as the server has it, for its readiness.
#[derive(Debug, Clone)]
pub enum Observed {
    /// The whole object.
    Object(Value),
    /// It does not exist (deleted since it was applied).
    Missing,
    /// Not known: nothing observes the server (`inrun render` without `--observed`).
    Unknown,
}

/// What a prune did.
#[derive(Debug, Clone, Default)]
pub struct Pruned {
    /// Children deleted.
    pub deleted: Vec<ChildKey>,
    /// Children left in place (`inrun.dev/delete-policy: orphan`), no longer owned.
    pub orphaned: Vec<ChildKey>,
    /// Why a CRD or APIService no longer returned was kept: foreign instances of its type.
    pub blocked: Option<String>,
}

/// How far deleting a released CR's children got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Teardown {
    /// Foreign instances of managed types exist; nothing was deleted.
    Blocked(String),
    /// A delete wave is not gone yet; a later pass goes on. Says what it waits for.
    Waiting(String),
    /// No child is left (deleted or orphaned).
    Done {
        /// What this pass deleted.
        deleted: Vec<ChildKey>,
        /// Children left in place: their delete policy, or (forced) managed types with
        /// foreign instances.
        orphaned: Vec<ChildKey>,
        /// Forced only: the CRDs and APIServices orphaned because foreign instances of
        /// their types exist, and which.
        spared: Option<String>,
    },
}

/// How a status write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The status is on the CR.
    Done,
    /// The CR changed since the pass read it; a newer pass will write instead.
    Stale,
}

/// A read or write the pass asked for failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct EffectError {
    /// What was being done, e.g. `writing status`.
    pub what: String,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
    /// The `Ready` condition's reason when it is more telling than `ReconcileError`:
    /// `Conflict` (an object the CR does not own is in the way), `Forbidden` (the API
    /// server refused the write).
    pub condition: Option<&'static str>,
}

impl EffectError {
    /// An error while doing `what`.
    pub fn new(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        EffectError {
            what: what.into(),
            source: Box::new(source),
            condition: None,
        }
    }

    /// The same error, reported with `condition` as the `Ready` reason.
    #[must_use]
    pub fn with_condition(mut self, condition: &'static str) -> Self {
        self.condition = Some(condition);
        self
    }
}

impl Failure {
    /// The `Ready` condition's reason for this failure.
    pub fn condition(&self) -> &'static str {
        match self {
            Failure::Effect(EffectError {
                condition: Some(c), ..
            }) => c,
            Failure::Package { reason, .. } => reason,
            _ => "ReconcileError",
        }
    }
}

/// A pass that failed; it is retried with per-key backoff.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The reconciler failed.
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    /// A step around the reconciler failed (template, fence, external call).
    #[error(transparent)]
    Pass(#[from] PassError),
    /// A read or write failed.
    #[error(transparent)]
    Effect(#[from] EffectError),
    /// An infrastructure package's call failed or reported failure. `detail` is the
    /// package's text: for the log, never for status or events.
    #[error("{reason}: {detail}")]
    Package {
        /// The generic reason on the CR (`ConvergeFailed`, `ObserveFailed`, ...).
        reason: &'static str,
        /// What the package said.
        detail: String,
    },
}

/// What the pass reads from and writes to the world, for one CR. The pass calls a write
/// only when it would change something; an implementation may skip more (a child already
/// as desired) and says so in what it returns.
#[async_trait]
pub trait Effects: Send {
    /// The CR's children of `spec`'s managed kinds, for `request.children`:
    /// `{Kind: {name: object}}`.
    async fn children(&mut self, spec: &ReconcileSpec) -> Result<Value, EffectError>;
    /// The child `key` of `api_version`, whole (status too), as the server has it now.
    async fn observe(&mut self, api_version: &str, key: &ChildKey)
    -> Result<Observed, EffectError>;
    /// Applies `resources`; `owned` ties them to the CR (owner label and reference).
    async fn apply(
        &mut self,
        spec: &ReconcileSpec,
        resources: &[Value],
        owned: bool,
    ) -> Result<Applied, EffectError>;
    /// Deletes the CR's children of `spec`'s kinds (not `prune.keep`) that are not in
    /// `keep` and that the host applied (orphans those whose delete policy says so, keeps a
    /// CRD or APIService with foreign instances); returns what it did.
    async fn prune(
        &mut self,
        spec: &ReconcileSpec,
        keep: &HashSet<ChildKey>,
    ) -> Result<Pruned, EffectError>;
    /// Writes `metadata` on the CR under `manager`.
    async fn metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<(), EffectError>;
    /// Writes `metadata` on the CR under `manager`, like [`Effects::metadata`], but only on
    /// the CR as the pass read it (or its own last write left it): its resourceVersion
    /// goes with the write, and a CR changed since answers [`Written::Stale`].
    async fn versioned_metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<Written, EffectError>;
    /// Writes the CR's status.
    async fn status(&mut self, status: &Map<String, Value>) -> Result<Written, EffectError>;
    /// Records an event on the CR. Never fails the pass.
    async fn record(&mut self, reason: Reason, note: String);
    /// Records an event the reconciler asked for on the CR (rate-limited per CR; one
    /// identical to a recent one is not recorded again). Never fails the pass.
    async fn emit(&mut self, event: &inrun_contract::Event);
    /// Deletes the CR (its cleanup grace period passed).
    async fn delete(&mut self) -> Result<(), EffectError>;
    /// Deletes the children of the deleting CR — every child of any of its CRD's reconcile
    /// blocks, in any namespace (not `prune.keep`) — in delete waves ([`waves`]), unless
    /// foreign instances of managed types exist. `forced` (the finalizer timeout passed):
    /// all at once, without waiting, and CRDs and APIServices whose types have foreign
    /// instances are orphaned instead.
    async fn tear_down(
        &mut self,
        spec: &ReconcileSpec,
        forced: bool,
    ) -> Result<Teardown, EffectError>;
    /// Removes the host's finalizers from the CR.
    async fn release(&mut self) -> Result<(), EffectError>;
    /// Claims for the CR the infrastructure a package's identity names (`boundary` and
    /// the state identity's hash), host-wide and across restarts, so one thing has one
    /// owner. Where nothing keeps such locks (offline), every claim holds.
    async fn claim(&mut self, boundary: &str, identity: &str) -> Result<Claimed, EffectError> {
        let _ = (boundary, identity);
        Ok(Claimed::Held)
    }
    /// Lets go of what [`Effects::claim`] claimed, if the CR holds it. Never fails the
    /// pass.
    async fn unclaim(&mut self, boundary: &str, identity: &str) {
        let _ = (boundary, identity);
    }
}

/// What a claim of a package's identity found ([`Effects::claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The CR holds it (now, or already).
    Held,
    /// Another CR holds it: which (`Kind namespace/name`, when it is of the same kind).
    Conflict(String),
}

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
    fn after(after: Duration) -> Self {
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

/// Runs the pass for one CR: [`reconcile`] steps, or the deletion steps when the CR has a
/// deletion timestamp.
///
/// # Errors
/// [`Failure`] when a step failed; the CR's status and events already say why.
pub async fn run(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Done, Failure> {
    if p.object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        finalize(p, fx).await
    } else {
        reconcile(p, fx).await
    }
}

fn namespace(object: &Value) -> &str {
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
    hold(p, fx, &tctx, Reason::Invalid, message).await?;
    Ok(Done::default())
}

/// Step 1, the gate: `Some` when a `preReconcile` condition holds the CR back (held, to be
/// checked again) and nothing else is to run.
async fn gate(p: Pass<'_>, fx: &mut dyn Effects, tctx: &Context) -> Result<Option<Done>, Failure> {
    match p.crd.gate(tctx) {
        Ok(None) => Ok(None),
        Ok(Some(message)) => {
            hold(p, fx, tctx, Reason::Gated, message).await?;
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
        hold(p, fx, &tctx, Reason::Invalid, message).await?;
        return Ok(Some(Done::default()));
    }
    Ok(None)
}

/// The steps for a CR that is not being deleted.
async fn reconcile(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Done, Failure> {
    let (crd, object) = (p.crd, p.object);
    let target = crd.target_of(object, p.target);
    let tctx = Context::new(object).with_target(target.as_deref());

    // 1. Gate.
    if let Some(done) = gate(p, fx, &tctx).await? {
        return Ok(done);
    }

    // 2. Prepare: the serve target, namespace and validation rules, then the Request.
    let routed = crd
        .plan_for(target.as_deref())
        .and_then(|r| crd.validate(object, &tctx).map(|()| r));
    let rplan = match routed {
        Ok(r) => r,
        Err(e) => {
            hold(
                p,
                fx,
                &tctx,
                Reason::Invalid,
                inrun_contract::errors::chain(&e),
            )
            .await?;
            return Ok(Done::default());
        }
    };
    let req = match prepare(fx, rplan, object, target.as_deref(), false).await {
        Ok(req) => req,
        Err(f) => return Err(failed(p, fx, &tctx, f).await),
    };
    let mut args_ctx = tctx.clone().with_args(req.args.clone());
    if let Some(external) = &req.external {
        args_ctx = args_ctx.with_external(external.clone());
    }

    // 3. Maintain: finalizers and managed labels before anything is written for the CR;
    // a cleanup that is due deletes it.
    let maintained = meta::maintained(p.runtime);
    if meta::differs(object, meta::FINALIZER_MANAGER, &maintained) {
        fx.metadata(meta::FINALIZER_MANAGER, &maintained).await?;
    }
    if meta::cleanup_at(object).is_some_and(|at| at <= p.now) {
        fx.delete().await?;
        fx.record(
            Reason::CleanedUp,
            "cleanup grace period passed; CR deleted".into(),
        )
        .await;
        return Ok(Done::default());
    }

    // 4. Reconcile, 5. apply.
    let outcome = match reconcile_and_apply(p, fx, rplan, &req).await {
        Ok(done) => done,
        Err(f) => return Err(failed(p, fx, &args_ctx, f).await),
    };
    let Settled {
        outcome,
        written,
        waiting,
        prune_blocked,
        children,
    } = outcome;

    // 6. Status and events.
    let fields = match crd.status(&args_ctx, Some(&outcome)) {
        Ok(f) => f,
        Err(e) => return Err(failed(p, fx, &args_ctx, e.into()).await),
    };
    let mut updated = object.clone();
    updated["status"] = Value::Object(fields.clone());
    let next = match rplan.next(
        &outcome,
        &Context::new(&updated).with_args(req.args.clone()),
    ) {
        Ok(n) => n,
        Err(e) => return Err(failed(p, fx, &args_ctx, e.into()).await),
    };
    if let Some(on) = waiting {
        // A later wave waits (a CRD to be Established): the CR is not ready yet, and the
        // pass runs again when the CRD changes, or soon.
        let verdict = held(object, Ready::not("Progressing", on));
        if write_status(p, fx, fields, &verdict).await? == StatusWrite::Stale {
            return Ok(Done::after(STALE_RETRY));
        }
        return Ok(Done::after(WAVE_RECHECK));
    }
    // 6a. Readiness: every child's state, by the kind's rules or its `readyWhen`.
    let states = match assess(fx, rplan, &outcome.resources, children).await {
        Ok(states) => states,
        Err(f) => return Err(failed(p, fx, &args_ctx, f).await),
    };
    let summary = format!("applied {} resource(s)", outcome.resources.len());
    let verdict = readiness::verdict(&states, summary.clone(), namespace(object));
    let status = write_status(p, fx, fields, &verdict).await?;
    match status {
        StatusWrite::Stale => return Ok(Done::after(STALE_RETRY)),
        StatusWrite::Written { reconciled, .. } if written > 0 || reconciled => {
            fx.record(Reason::Reconciled, summary).await;
        }
        StatusWrite::Unchanged if written > 0 => {
            fx.record(Reason::Reconciled, summary).await;
        }
        StatusWrite::Written { ready: true, .. } => {
            let reason = match verdict.ready.reason {
                "Ready" => Reason::Ready,
                "ResourceFailed" => Reason::ResourceFailed,
                _ => Reason::Progressing,
            };
            fx.record(reason, verdict.ready.message.clone()).await;
        }
        _ => {}
    }
    for event in &outcome.events {
        fx.emit(event).await;
    }

    // 7. Next.
    let cleanup = outcome
        .cleanup
        .map(|c| meta::cleanup_wait(object, c.after, p.now));
    // A CRD kept from pruning for its foreign instances is looked at again.
    let recheck = prune_blocked.then_some(SAFEGUARD_RECHECK);
    let after = [next.after, cleanup, p.runtime.resync, recheck]
        .into_iter()
        .flatten()
        .min();
    Ok(Done {
        after,
        holds: next.holds,
        cleanup: outcome.cleanup.map(|c| c.after),
        retry: false,
    })
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
fn held(object: &Value, condition: Ready) -> status::Verdict {
    status::Verdict {
        resources: object.pointer("/status/resources").cloned(),
        ..status::Verdict::both(condition)
    }
}

/// The Request: `reconcile.external` calls run, args rendered, and the CR's children
/// attached when `request.children` asks for them.
async fn prepare(
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
    let outcome = rplan.reconciler.reconcile(req).await?;
    rplan.fence(&outcome, namespace(p.object))?;
    let applied = fx.apply(&rplan.spec, &outcome.resources, true).await?;
    let mut written = applied.written;
    let mut prune_blocked = false;
    let prune = &rplan.spec.prune;
    if applied.waiting.is_none()
        && prune.enabled
        && (!outcome.resources.is_empty() || prune.allow_empty)
    {
        let pruned = fx.prune(&rplan.spec, &applied.keys).await?;
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
enum StatusWrite {
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
async fn write_status(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    fields: Map<String, Value>,
    verdict: &status::Verdict,
) -> Result<StatusWrite, Failure> {
    let now = meta::format_time(p.now);
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
async fn failed(p: Pass<'_>, fx: &mut dyn Effects, ctx: &Context, failure: Failure) -> Failure {
    let message = inrun_contract::errors::chain(&failure);
    let fields = p.crd.status(ctx, None).unwrap_or_default();
    let verdict = held(p.object, Ready::not(failure.condition(), message.clone()));
    if let Err(e) = write_status(p, fx, fields, &verdict).await {
        tracing::warn!(error = %inrun_contract::errors::chain(&e), "could not write the failure to status");
    }
    fx.record(Reason::ReconcileError, message).await;
    failure
}

/// A CR that is not reconciled now (invalid, or gated): `emit.status`, `Ready=False` with
/// the reason, and an event saying why — once, when that changes the status.
async fn hold(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    ctx: &Context,
    reason: Reason,
    message: String,
) -> Result<(), Failure> {
    let fields = p.crd.status(ctx, None).unwrap_or_default();
    let condition = match reason {
        Reason::Gated => "Gated",
        _ => "Invalid",
    };
    let verdict = held(p.object, Ready::not(condition, message.clone()));
    if matches!(
        write_status(p, fx, fields, &verdict).await?,
        StatusWrite::Written { .. }
    ) {
        fx.record(reason, message).await;
    }
    Ok(())
}

/// The deletion steps: the reconciler runs with `finalizing: true` (a reconcile block with
/// `onDelete` templates applies what they return, unowned); a requested requeue holds the
/// CR until `runtime.finalizers.timeout`; then the safeguard, the children, the finalizer.
async fn finalize(p: Pass<'_>, fx: &mut dyn Effects) -> Result<Done, Failure> {
    let object = p.object;
    if !meta::has_finalizer(object, meta::FINALIZER) {
        return Ok(Done::default());
    }
    if p.runtime.finalizers.remove {
        fx.release().await?;
        return Ok(Done::default());
    }
    let (target, rplan) = route(p.crd, object, p.target);
    let left = time_left(object, p.runtime.finalizers.timeout, p.now);

    if left != Some(Duration::ZERO) {
        let result = finalizing(p, fx, rplan, target.as_deref()).await;
        let (req, outcome) = match result {
            Ok(done) => done,
            Err(failure) => {
                fx.record(
                    Reason::ReconcileError,
                    inrun_contract::errors::chain(&failure),
                )
                .await;
                return Err(failure);
            }
        };
        for event in &outcome.events {
            fx.emit(event).await;
        }
        // A deleting CR's status is not rewritten, so the rule sees the CR as it is.
        let next = rplan.next(&outcome, &Context::new(object).with_args(req.args.clone()))?;
        if next.holds {
            let wait = next.after.unwrap_or(DEFAULT_REQUEUE);
            let wait = left.map_or(wait, |l| wait.min(l));
            let message = "deletion held: the reconciler asked to requeue".to_string();
            blocked(p, fx, "Finalizing", Reason::DeletionBlocked, message).await?;
            return Ok(Done {
                after: Some(wait),
                holds: true,
                ..Done::default()
            });
        }
    }

    let forced = left == Some(Duration::ZERO);
    let teardown = match fx.tear_down(&rplan.spec, forced).await {
        Ok(teardown) => teardown,
        Err(error) => {
            // Said on the CR, once per cause, in the error's own words (the step, then
            // why); retried with backoff, and never past the timeout, which releases the
            // CR whatever fails.
            let reason = error.condition.unwrap_or("DeletionFailed");
            let message = inrun_contract::errors::chain(&error);
            tracing::warn!(error = %message, "the CR's children could not be deleted");
            blocked(p, fx, reason, Reason::DeletionFailed, message).await?;
            return Ok(Done {
                after: left,
                retry: true,
                ..Done::default()
            });
        }
    };
    match teardown {
        Teardown::Blocked(message) => {
            blocked(p, fx, "DeletionBlocked", Reason::DeletionBlocked, message).await?;
            Ok(Done::after(
                SAFEGUARD_RECHECK.min(left.unwrap_or(Duration::MAX)),
            ))
        }
        Teardown::Waiting(on) => {
            progress(p, fx, format!("deleting children in waves: {on}")).await?;
            Ok(Done::after(WAVE_RECHECK.min(left.unwrap_or(Duration::MAX))))
        }
        Teardown::Done {
            deleted,
            orphaned,
            spared,
        } => {
            if forced {
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
    reason: &'static str,
    event: Reason,
    message: String,
) -> Result<(), Failure> {
    let verdict = held(p.object, Ready::not(reason, message.clone()));
    if write_status(p, fx, kept_status(p.object), &verdict).await? != StatusWrite::Unchanged {
        fx.record(event, message).await;
    }
    Ok(())
}

/// Says what a deletion in waves waits for, in status (`Ready` false, reason
/// `Finalizing`); no event: the waves are progress, not a problem.
async fn progress(p: Pass<'_>, fx: &mut dyn Effects, message: String) -> Result<(), Failure> {
    let verdict = held(p.object, Ready::not("Finalizing", message));
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
fn time_left(object: &Value, timeout: Option<Duration>, now: Timestamp) -> Option<Duration> {
    let timeout = timeout?;
    let since: Timestamp = object
        .pointer("/metadata/deletionTimestamp")?
        .as_str()?
        .parse()
        .ok()?;
    let elapsed = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    Some(timeout.saturating_sub(elapsed))
}

#[cfg(test)]
mod tests;
