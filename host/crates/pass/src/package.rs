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
//! last write returned): a CR edited meanwhile answers [`Written::Stale`], and the result
//! is dropped for the pass that edit starts; a stale converge never marks a newer
//! generation ready. Status holds generic reasons only: a package's error text and its
//! validation details go to the host's log.
//!
//! Deletion: `Retain` removes the finalizer and calls nothing; `Delete` refuses while the
//! `inrun.dev/prevent-destroy` annotation is `"true"`, else calls `delete` (suspended or
//! not) and removes the finalizer only once `observe` sees the thing gone.

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::meta::{self, Metadata};
use super::status;
use super::{Claimed, Done, Effects, Failure, Pass, Reason, Written};
use inrun_contract::package::{
    Change, Descriptor, Event, Identity, Observation, Options, Progress, Workflow,
};
use inrun_template::Context;

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

/// A package call that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailed {
    /// Why, in the host's own words, when the host stopped the call or could not run it (a
    /// deadline, a memory cap, a budget): shown on the CR. `None` when the package failed
    /// in its own words, which may hold anything and go to the log only.
    pub cause: Option<String>,
    /// The whole account, the package's words included: for the log only.
    pub detail: String,
}

impl From<String> for CallFailed {
    /// A failure in the package's own words.
    fn from(detail: String) -> Self {
        CallFailed {
            cause: None,
            detail,
        }
    }
}

impl From<&str> for CallFailed {
    /// A failure in the package's own words.
    fn from(detail: &str) -> Self {
        CallFailed::from(detail.to_string())
    }
}

impl std::fmt::Display for CallFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl From<inrun_wasm::CallError> for CallFailed {
    fn from(e: inrun_wasm::CallError) -> Self {
        use inrun_wasm::CallFailure as F;
        let cause = match &e.failure {
            F::Deadline(d) => Some(format!(
                "the call ran past its deadline of {} (package.limits.deadline)",
                inrun_contract::duration::format(*d)
            )),
            F::Memory(bytes) => Some(format!(
                "the call passed its memory cap of {} MiB (package.limits.memory)",
                bytes >> 20
            )),
            F::Budget(budget) => Some(format!("the call was stopped by {budget}")),
            F::Host(_) => Some("the host could not run the call".into()),
            F::Trap { .. } => Some("the package trapped (the host's log says where)".into()),
            F::BadOutput(_) => Some("the package's answer broke the contract".into()),
            F::Returned(_) => None,
        };
        CallFailed {
            cause,
            detail: inrun_contract::errors::chain(&e),
        }
    }
}

/// What the pass calls: the package, behind a trait so the decisions can be tested with a
/// scripted one.
#[async_trait]
pub trait Infrastructure: Send + Sync {
    /// `validate`.
    async fn validate(&self, opts: &Options) -> Result<Vec<String>, CallFailed>;
    /// `identity`.
    async fn identity(&self, opts: &Options) -> Result<Identity, CallFailed>;
    /// `observe`.
    async fn observe(&self, opts: &Options) -> Result<Observation, CallFailed>;
    /// `converge` or `delete`, as `change` says.
    async fn workflow(&self, change: Change, opts: &Options) -> Result<Workflow, CallFailed>;
}

#[async_trait]
impl Infrastructure for inrun_reconcilers::package::Package {
    async fn validate(&self, opts: &Options) -> Result<Vec<String>, CallFailed> {
        Ok(inrun_reconcilers::package::Package::validate(self, opts).await?)
    }
    async fn identity(&self, opts: &Options) -> Result<Identity, CallFailed> {
        Ok(inrun_reconcilers::package::Package::identity(self, opts).await?)
    }
    async fn observe(&self, opts: &Options) -> Result<Observation, CallFailed> {
        Ok(inrun_reconcilers::package::Package::observe(self, opts).await?)
    }
    async fn workflow(&self, change: Change, opts: &Options) -> Result<Workflow, CallFailed> {
        Ok(inrun_reconcilers::package::Package::workflow(self, change, opts).await?)
    }
}

/// `spec.deletionPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Leave the infrastructure; only the finalizer is removed.
    Retain,
    /// Delete the infrastructure before the CR goes.
    Delete,
}

/// The spec fields every package CR has, with their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    /// `spec.state` (`running`).
    pub state: String,
    /// `spec.suspend` (false).
    pub suspend: bool,
    /// `spec.reconcileInterval` (`60s`).
    pub interval: Duration,
    /// `spec.deletionPolicy` (`Retain`).
    pub deletion: DeletionPolicy,
    /// `spec.config` (`{}`).
    pub config: Map<String, Value>,
}

impl Common {
    /// Reads the common fields of `object`'s spec.
    ///
    /// # Errors
    /// The field and what is wrong with it (host text: safe for status).
    pub fn of(object: &Value) -> Result<Common, String> {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let field = |name: &str| spec.get(name).filter(|v| !v.is_null());
        let state = match field("state") {
            None => "running".to_string(),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => return Err("spec.state: must be a non-empty string".into()),
        };
        let suspend = match field("suspend") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("spec.suspend: must be true or false".into()),
        };
        let interval = match field("reconcileInterval") {
            None => DEFAULT_INTERVAL,
            Some(Value::String(s)) => {
                let interval = inrun_contract::duration::parse(s)
                    .map_err(|e| format!("spec.reconcileInterval: {e}"))?;
                // Requeues run no sooner than a second: a shorter interval would not be
                // what it says.
                if interval < Duration::from_secs(1) {
                    return Err(format!(
                        "spec.reconcileInterval: {s} is under 1s, the shortest the host checks at"
                    ));
                }
                interval
            }
            Some(_) => {
                return Err(
                    "spec.reconcileInterval: must be a string like 60s (ms, s, m or h)".into(),
                );
            }
        };
        let deletion = match field("deletionPolicy") {
            None => DeletionPolicy::Retain,
            Some(v) if v == "Retain" => DeletionPolicy::Retain,
            Some(v) if v == "Delete" => DeletionPolicy::Delete,
            Some(_) => return Err("spec.deletionPolicy: must be Retain or Delete".into()),
        };
        let config = match field("config") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err("spec.config: must be an object".into()),
        };
        if config.get("profile").is_some_and(|p| !p.is_string()) {
            return Err("spec.config.profile: must be a string".into());
        }
        Ok(Common {
            state,
            suspend,
            interval,
            deletion,
            config,
        })
    }
}

/// The state identity's hash: sha256 over each entry in order, an absent one as a single
/// `0` byte, a present one as `1`, its length (8 bytes, big-endian) and its UTF-8 bytes;
/// lowercase hex. Unambiguous (`["a", "b"]` and `["ab"]` differ) and the same on every run.
pub fn identity_hash(state: &[Option<String>]) -> String {
    let mut h = Sha256::new();
    for entry in state {
        match entry {
            None => h.update([0u8]),
            Some(s) => {
                h.update([1u8]);
                h.update((s.len() as u64).to_be_bytes());
                h.update(s.as_bytes());
            }
        }
    }
    hex::encode(h.finalize())
}

/// The options every call of this pass receives.
fn options(p: &Pass<'_>, common: &Common, event: Event) -> Options {
    let spec = &p.crd.spec;
    let namespace = text(p.object, "/metadata/namespace").map(str::to_string);
    let name = text(p.object, "/metadata/name")
        .unwrap_or_default()
        .to_string();
    let profile = match common.config.get("profile").and_then(Value::as_str) {
        Some(p) => p.to_string(),
        None => match &namespace {
            Some(ns) => format!("{ns}--{name}"),
            None => name.clone(),
        },
    };
    Options {
        config: common.config.clone(),
        profile,
        state: common.state.clone(),
        event,
        resource: Descriptor {
            group: spec.group.clone(),
            version: spec.version.clone(),
            plural: spec.plural(),
            kind: spec.kind.clone(),
        },
        namespace,
        name,
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

fn generation(object: &Value) -> i64 {
    object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// What woke the CR, from what the status acknowledged last.
fn event(object: &Value) -> Event {
    let status = object.get("status");
    let seen = status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    if seen != Some(generation(object)) {
        return Event::Changed;
    }
    let handled = status
        .and_then(|s| s.get("lastHandledReconcileAt"))
        .and_then(Value::as_str);
    if annotation(object, RECONCILE_REQUEST).is_some_and(|r| Some(r) != handled) {
        return Event::Requested;
    }
    match status::ready_now(object) {
        Some((ok, _, _)) if ok == "True" => Event::Interval,
        _ => Event::Retry,
    }
}

/// Whether the CR carries the package finalizer.
fn finalized(object: &Value) -> bool {
    meta::has_finalizer(object, FINALIZER)
}

/// The `Ready` and `Reconciling` conditions a pass ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Conditions {
    ready: bool,
    reconciling: bool,
    reason: &'static str,
    message: Cow<'static, str>,
}

impl Conditions {
    const fn new(
        ready: bool,
        reconciling: bool,
        reason: &'static str,
        message: &'static str,
    ) -> Self {
        Conditions {
            ready,
            reconciling,
            reason,
            message: Cow::Borrowed(message),
        }
    }
}

/// What the pass stores in status besides the conditions.
#[derive(Debug, Clone, Default)]
struct Stored {
    profile: Option<String>,
    boundary: Option<String>,
    identity: Option<String>,
}

impl Stored {
    fn of(object: &Value) -> Self {
        let get = |k: &str| {
            object
                .pointer(&format!("/status/{k}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Stored {
            profile: get("profile"),
            boundary: get("boundary"),
            identity: get("identity"),
        }
    }

    /// Which part of the identity `now` changes against this stored one, if any: the state,
    /// the boundary or the profile (a part not stored yet changes nothing).
    fn changed(&self, now: &Stored) -> Option<&'static str> {
        self.identity.as_ref()?;
        let differs =
            |stored: &Option<String>, now: &Option<String>| stored.is_some() && stored != now;
        if differs(&self.identity, &now.identity) {
            Some("state")
        } else if differs(&self.boundary, &now.boundary) {
            Some("boundary")
        } else if differs(&self.profile, &now.profile) {
            Some("profile")
        } else {
            None
        }
    }

    fn from(id: &Identity) -> Self {
        Stored {
            profile: Some(id.profile.clone()),
            boundary: Some(id.boundary.clone()),
            identity: Some(identity_hash(&id.state)),
        }
    }
}

/// The status a pass writes: the stored identity, the request handled, the generation it
/// read, and both conditions (transition times kept while a condition's status holds).
fn desired(p: &Pass<'_>, view: &Value, stored: &Stored, c: &Conditions) -> Map<String, Value> {
    let now = meta::format_time(p.now);
    // The CRD's `emit.status` and `emit.conditions`, as for any CR; the package steps' own
    // fields win. A template that fails renders nothing here (the host's log says why).
    let mut fields = match p.crd.status(&Context::new(view), None) {
        Ok(emitted) => emitted,
        Err(e) => {
            tracing::warn!(error = %inrun_contract::errors::chain(&e), "emit.status of a package CR did not render");
            Map::new()
        }
    };
    for (k, v) in [
        ("profile", &stored.profile),
        ("boundary", &stored.boundary),
        ("identity", &stored.identity),
    ] {
        if let Some(v) = v {
            fields.insert(k.into(), json!(v));
        }
    }
    if let Some(request) = annotation(view, RECONCILE_REQUEST) {
        fields.insert("lastHandledReconcileAt".into(), json!(request));
    }
    let truth = |b: bool| if b { "True" } else { "False" };
    let ready = status::Ready {
        status: truth(c.ready),
        reason: c.reason,
        message: c.message.to_string(),
    };
    let mut fields = status::desired(view, fields, &status::Verdict::ready(ready), &now);
    let reconciling = status::condition(
        view,
        "Reconciling",
        truth(c.reconciling),
        c.reason,
        &c.message,
        &now,
    );
    if let Some(Value::Array(conditions)) = fields.get_mut("conditions") {
        conditions.retain(|c| c["type"] != "Reconciling");
        conditions.push(reconciling);
    }
    fields
}

/// A write found the CR changed since it was read: the pass that change starts decides.
#[derive(Debug)]
struct Stale;

/// One package pass: what it read, and the CR as its own writes left it (so a second
/// write compares against what is on the server now).
struct Run<'a, 'f> {
    p: Pass<'a>,
    fx: &'f mut dyn Effects,
    pkg: &'a dyn Infrastructure,
    view: Value,
    stored: Stored,
}

/// Run again soon: the CR changed under a write.
fn again() -> Done {
    Done {
        after: Some(super::STALE_RETRY),
        ..Done::default()
    }
}

/// Run again after the per-key retry delay (doubling, reset by an edit).
fn retry() -> Done {
    Done {
        retry: true,
        ..Done::default()
    }
}

const RECONCILING: Conditions =
    Conditions::new(false, true, "Progressing", "reconciling the infrastructure");

impl Run<'_, '_> {
    /// Writes the status if it differs; says whether `Ready` changed (for the event).
    async fn write(&mut self, c: &Conditions) -> Result<Result<bool, Stale>, Failure> {
        let desired = desired(&self.p, &self.view, &self.stored, c);
        if !status::differs(&self.view, &desired) {
            return Ok(Ok(false));
        }
        let changed = status::ready_changes(&self.view, &desired);
        Ok(match self.fx.status(&desired).await? {
            Written::Done => {
                self.view["status"] = Value::Object(desired);
                Ok(changed)
            }
            Written::Stale => Err(Stale),
        })
    }

    /// Writes `c`, records `note` when `Ready` changed, and ends the pass with `done`.
    async fn end(
        &mut self,
        c: &Conditions,
        reason: Reason,
        note: &str,
        done: Done,
    ) -> Result<Done, Failure> {
        match self.write(c).await? {
            Ok(true) if !note.is_empty() => {
                self.fx.record(reason, note.to_string()).await;
                Ok(done)
            }
            Ok(_) => Ok(done),
            Err(Stale) => Ok(again()),
        }
    }

    /// A step that failed: the generic condition, a generic event, and the failure (with
    /// the package's text) for the log and the retry.
    async fn failed(
        &mut self,
        reason: &'static str,
        message: &'static str,
        failed: CallFailed,
    ) -> Result<Done, Failure> {
        // The host's own account of a call it stopped is shown; the package's words are not.
        let message = match &failed.cause {
            Some(cause) => Cow::Owned(format!("{message}: {cause}")),
            None => Cow::Borrowed(message),
        };
        let c = Conditions {
            message,
            ..Conditions::new(false, false, reason, "")
        };
        match self.write(&c).await? {
            Ok(true) => {
                self.fx
                    .record(Reason::ReconcileError, format!("{reason}: {}", c.message))
                    .await;
            }
            Ok(false) => {}
            Err(Stale) => return Ok(again()),
        }
        Err(Failure::Package {
            reason,
            detail: failed.detail,
        })
    }

    async fn observe(&mut self, opts: &Options) -> Result<Result<Observation, Done>, Failure> {
        match self.pkg.observe(opts).await {
            Ok(o) => Ok(Ok(o)),
            Err(detail) => self
                .failed(
                    "ObserveFailed",
                    "observing the infrastructure failed",
                    detail,
                )
                .await
                .map(Err),
        }
    }

    /// The finalizer (at the resourceVersion read), before any infrastructure effect.
    async fn hold(&mut self) -> Result<Result<(), Stale>, Failure> {
        if finalized(&self.view) {
            return Ok(Ok(()));
        }
        // The infrastructure finalizer, and `runtime.finalizers.names` as on any CR.
        let mut finalizers = vec![FINALIZER.to_string()];
        finalizers.extend(
            self.p
                .runtime
                .finalizers
                .names
                .iter()
                .filter(|n| n.as_str() != FINALIZER)
                .cloned(),
        );
        let held = Metadata {
            finalizers: finalizers.clone(),
            labels: [(
                meta::MANAGED_BY.0.to_string(),
                meta::MANAGED_BY.1.to_string(),
            )]
            .into(),
            annotations: Default::default(),
        };
        if self
            .fx
            .versioned_metadata(meta::FINALIZER_MANAGER, &held)
            .await?
            == Written::Stale
        {
            return Ok(Err(Stale));
        }
        self.view["metadata"]["finalizers"] = json!(finalizers);
        Ok(Ok(()))
    }

    /// Removes the package finalizer (at the resourceVersion read) and says why.
    async fn release(&mut self, note: &str) -> Result<Done, Failure> {
        // The finalizers go; the managed-by label stays until the CR does.
        let released = Metadata {
            labels: [(
                meta::MANAGED_BY.0.to_string(),
                meta::MANAGED_BY.1.to_string(),
            )]
            .into(),
            ..Metadata::default()
        };
        if self
            .fx
            .versioned_metadata(meta::FINALIZER_MANAGER, &released)
            .await?
            == Written::Stale
        {
            return Ok(again());
        }
        self.fx.record(Reason::Finalized, note.to_string()).await;
        // The CR is done with its infrastructure: another may claim it now.
        if let (Some(boundary), Some(hash)) = (&self.stored.boundary, &self.stored.identity) {
            self.fx.unclaim(boundary, hash).await;
        }
        Ok(Done::default())
    }

    /// When the observation settles the pass: existing and matching (ready, or waiting to
    /// be without converging again).
    async fn settled(
        &mut self,
        common: &Common,
        seen: Observation,
    ) -> Result<Option<Done>, Failure> {
        if !(seen.exists && seen.matches) {
            return Ok(None);
        }
        Ok(Some(if seen.ready {
            let c = Conditions::new(
                true,
                false,
                "Ready",
                "the infrastructure matches the spec and is ready",
            );
            self.end(
                &c,
                Reason::Reconciled,
                "Ready: the infrastructure is ready",
                Done::after(common.interval),
            )
            .await?
        } else {
            let c = Conditions::new(
                false,
                true,
                "Progressing",
                "the infrastructure matches the spec but is not ready yet",
            );
            self.end(&c, Reason::Reconciled, "", retry()).await?
        }))
    }
}

/// Runs the package pass for one CR.
///
/// # Errors
/// [`Failure::Package`] when a package call failed (retried with backoff), or a write
/// failed.
pub async fn run(
    p: Pass<'_>,
    fx: &mut dyn Effects,
    pkg: &dyn Infrastructure,
) -> Result<Done, Failure> {
    let deleting = p
        .object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    // The gate, namespace rules and validation, as for any CR: a package CR they hold back
    // makes no call at all.
    if !deleting && let Some(done) = super::held_back(p, fx).await? {
        return Ok(done);
    }
    let mut run = Run {
        p,
        fx,
        pkg,
        view: p.object.clone(),
        stored: Stored::of(p.object),
    };
    let common = match Common::of(p.object) {
        Ok(c) => c,
        Err(why) => {
            if deleting && !finalized(p.object) {
                return Ok(Done::default());
            }
            tracing::warn!(problem = %why, "invalid package CR");
            let c = Conditions::new(false, false, "ValidationFailed", "spec is invalid");
            return match run.write(&c).await? {
                Ok(changed) => {
                    if changed {
                        run.fx
                            .record(Reason::Invalid, format!("ValidationFailed: {why}"))
                            .await;
                    }
                    Ok(Done::default())
                }
                Err(Stale) => Ok(again()),
            };
        }
    };
    if deleting {
        run.delete(&common).await
    } else {
        run.reconcile(&common).await
    }
}

impl Run<'_, '_> {
    async fn reconcile(&mut self, common: &Common) -> Result<Done, Failure> {
        let opts = options(&self.p, common, event(&self.view));

        // 2. Validate and identify.
        match self.pkg.validate(&opts).await {
            Ok(errors) if errors.is_empty() => {}
            Ok(errors) => {
                for e in &errors {
                    tracing::warn!(problem = %e, "the package found the CR invalid");
                }
                let c = Conditions::new(
                    false,
                    false,
                    "ValidationFailed",
                    "the package found the spec invalid; the host's log says why",
                );
                return self
                    .end(
                        &c,
                        Reason::Invalid,
                        "ValidationFailed: the package found the spec invalid",
                        Done::default(),
                    )
                    .await;
            }
            Err(detail) => {
                return self
                    .failed("ValidationFailed", "validating the spec failed", detail)
                    .await;
            }
        }
        let now = match self.identify(&opts).await? {
            Ok(now) => now,
            Err(done) => return Ok(done),
        };
        if let Some(part) = self.stored.changed(&now) {
            tracing::warn!(
                stored = self.stored.identity.as_deref().unwrap_or_default(),
                now = now.identity.as_deref().unwrap_or_default(),
                part,
                "the spec now identifies other infrastructure than the CR was created for"
            );
            let c = Conditions::new(
                false,
                false,
                "IdentityChanged",
                "the spec now identifies other infrastructure than the CR was created for; restore it, or delete the CR and create a new one",
            );
            return self
                .end(
                    &c,
                    Reason::Invalid,
                    &format!(
                        "IdentityChanged: the spec identifies other infrastructure than the CR was created for (its {part} changed)"
                    ),
                    Done::default(),
                )
                .await;
        }
        if let Some(holder) = self.conflict(&now).await? {
            let c = Conditions::new(
                false,
                false,
                "IdentityConflict",
                "another CR already manages the infrastructure this spec identifies; the event says which",
            );
            return self
                .end(
                    &c,
                    Reason::Invalid,
                    &format!(
                        "IdentityConflict: {holder} already manages the infrastructure this spec identifies; nothing is done for this CR while it does"
                    ),
                    Done::after(common.interval),
                )
                .await;
        }
        let unstored = self.stored.identity.is_none();
        let first = unstored || !finalized(&self.view);
        self.stored = now;

        // Before anything may exist: the finalizer, the identity and Reconciling.
        if first && (self.hold().await?.is_err() || self.write(&RECONCILING).await?.is_err()) {
            // The CR changed meanwhile: what it claimed is not stored anywhere yet, so it
            // lets go (the next pass claims what the CR names then).
            if unstored && let (Some(b), Some(h)) = (&self.stored.boundary, &self.stored.identity) {
                self.fx.unclaim(b, h).await;
            }
            return Ok(again());
        }

        // 3. Observe.
        let seen = match self.observe(&opts).await? {
            Ok(o) => o,
            Err(done) => return Ok(done),
        };
        if let Some(done) = self.settled(common, seen).await? {
            return Ok(done);
        }
        if common.suspend {
            let c = Conditions::new(
                false,
                false,
                "Suspended",
                "suspended: the infrastructure differs from the spec and is not converged",
            );
            return self
                .end(&c, Reason::Reconciled, "", Done::after(common.interval))
                .await;
        }

        // 4. Converge, then observe again. Reconciling is published when this converge
        // starts something new (ready infrastructure drifted, or the spec changed); a retry
        // after a failure keeps the failure on show instead of flipping back and forth.
        let new_work = matches!(status::ready_now(&self.view), Some((ok, _, _)) if ok == "True")
            || self
                .view
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64)
                != Some(generation(&self.view));
        if new_work && self.write(&RECONCILING).await?.is_err() {
            return Ok(again());
        }
        let outcome = match self.pkg.workflow(Change::Converge, &opts).await {
            Ok(w) => w,
            Err(detail) => {
                return self
                    .failed(
                        "ConvergeFailed",
                        "converging the infrastructure failed",
                        detail,
                    )
                    .await;
            }
        };
        log_detail(&outcome, "converge");
        match outcome.progress {
            Progress::Failed => {
                return self
                    .failed(
                        "ConvergeFailed",
                        "converging the infrastructure failed",
                        "the package reported the converge failed".into(),
                    )
                    .await;
            }
            Progress::Pending => {
                let c = Conditions::new(
                    false,
                    true,
                    "Progressing",
                    "converging: the backend is still working",
                );
                return self.end(&c, Reason::Reconciled, "", retry()).await;
            }
            Progress::Completed => {}
        }
        let seen = match self.observe(&opts).await? {
            Ok(o) => o,
            Err(done) => return Ok(done),
        };
        if let Some(done) = self.settled(common, seen).await? {
            return Ok(done);
        }
        let c = Conditions::new(
            false,
            true,
            "Progressing",
            "converged, but the infrastructure does not match the spec yet",
        );
        self.end(&c, Reason::Reconciled, "", retry()).await
    }

    async fn delete(&mut self, common: &Common) -> Result<Done, Failure> {
        if !finalized(&self.view) {
            return Ok(Done::default());
        }
        // The Blueprint's finalizer settings hold for package CRs too: `remove` releases
        // at once, and past `timeout` the CR is released whatever holds it (a
        // prevent-destroy, a changed identity, a backend that keeps failing). The
        // infrastructure is left in place then.
        let finalizers = &self.p.runtime.finalizers;
        if finalizers.remove {
            return self
                .release(
                    "finalizers.remove: the CR was released and the infrastructure left in place",
                )
                .await;
        }
        let left = super::time_left(&self.view, finalizers.timeout, self.p.now);
        if left == Some(Duration::ZERO) {
            let timeout = finalizers
                .timeout
                .map(inrun_contract::duration::format)
                .unwrap_or_default();
            self.fx
                .record(
                    Reason::FinalizeTimeout,
                    format!("finalizer timeout of {timeout} passed; releasing the CR; the infrastructure, if any, was left in place"),
                )
                .await;
            return self.release("released at the finalizer timeout").await;
        }
        let done = self.delete_within(common).await?;
        // Back by the timeout, whatever the step asked for.
        Ok(match left {
            Some(left) => Done {
                after: Some(done.after.map_or(left, |a| a.min(left))),
                ..done
            },
            None => done,
        })
    }

    /// Claims what `identity` names for the CR ([`Effects::claim`]); the CR holding it
    /// instead, if another does.
    async fn conflict(&mut self, identity: &Stored) -> Result<Option<String>, Failure> {
        let (Some(boundary), Some(hash)) = (&identity.boundary, &identity.identity) else {
            return Ok(None);
        };
        Ok(match self.fx.claim(boundary, hash).await? {
            Claimed::Held => None,
            Claimed::Conflict(holder) => {
                tracing::warn!(%holder, "another CR manages the infrastructure this CR's spec identifies");
                Some(holder)
            }
        })
    }

    /// The package's `identity` for `opts`, as it would be stored; `Err` with the pass's
    /// end when the call failed (said on the CR, retried).
    async fn identify(&mut self, opts: &Options) -> Result<Result<Stored, Done>, Failure> {
        match self.pkg.identity(opts).await {
            Ok(id) => Ok(Ok(Stored::from(&id))),
            Err(detail) => self
                .failed("IdentityFailed", "resolving the identity failed", detail)
                .await
                .map(Err),
        }
    }

    /// [`Run::delete`]'s steps while the finalizer timeout has not passed.
    async fn delete_within(&mut self, common: &Common) -> Result<Done, Failure> {
        if common.deletion == DeletionPolicy::Retain {
            return self
                .release("Retained: the infrastructure was left in place (deletionPolicy: Retain)")
                .await;
        }
        if annotation(&self.view, PREVENT_DESTROY) == Some("true") {
            let c = Conditions::new(
                false,
                false,
                "DestroyPrevented",
                "deletion refused: inrun.dev/prevent-destroy is \"true\"; remove the annotation to delete the infrastructure",
            );
            return self
                .end(
                    &c,
                    Reason::DeletionBlocked,
                    "DestroyPrevented: inrun.dev/prevent-destroy is \"true\"",
                    Done::default(),
                )
                .await;
        }
        let opts = options(&self.p, common, Event::Deleting);
        // What is deleted is what was created: a spec that names something else now (an
        // edit refused as IdentityChanged) deletes nothing until it is restored.
        let now = match self.identify(&opts).await? {
            Ok(now) => now,
            Err(done) => return Ok(done),
        };
        if self.stored.identity.is_some() {
            if let Some(part) = self.stored.changed(&now) {
                let c = Conditions::new(
                    false,
                    false,
                    "IdentityChanged",
                    "deletion refused: the spec now identifies other infrastructure than the CR was created for; restore the spec to delete what was created, or set deletionPolicy: Retain to leave it",
                );
                return self
                    .end(
                        &c,
                        Reason::DeletionBlocked,
                        &format!(
                            "IdentityChanged: deletion refused, the spec identifies other infrastructure than the CR was created for (its {part} changed)"
                        ),
                        Done::default(),
                    )
                    .await;
            }
        } else {
            self.stored = now;
        }
        // Only the CR that holds the infrastructure deletes it: one that never did (it was
        // refused as IdentityConflict) goes without touching it.
        if let Some(holder) = self.conflict(&self.stored.clone()).await? {
            return self
                .release(&format!(
                    "IdentityConflict: {holder} manages the infrastructure; the CR was released without deleting it"
                ))
                .await;
        }
        let seen = match self.observe(&opts).await? {
            Ok(o) => o,
            Err(done) => return Ok(done),
        };
        if !seen.exists {
            return self.release("Deleted: the infrastructure is gone").await;
        }
        let deleting = Conditions::new(false, true, "Deleting", "deleting the infrastructure");
        if self.write(&deleting).await?.is_err() {
            return Ok(again());
        }
        let outcome = match self.pkg.workflow(Change::Delete, &opts).await {
            Ok(w) => w,
            Err(detail) => {
                return self
                    .failed("DeleteFailed", "deleting the infrastructure failed", detail)
                    .await;
            }
        };
        log_detail(&outcome, "delete");
        match outcome.progress {
            Progress::Failed => {
                self.failed(
                    "DeleteFailed",
                    "deleting the infrastructure failed",
                    "the package reported the delete failed".into(),
                )
                .await
            }
            Progress::Pending => Ok(retry()),
            Progress::Completed => {
                let seen = match self.observe(&opts).await? {
                    Ok(o) => o,
                    Err(done) => return Ok(done),
                };
                if seen.exists {
                    // Not gone yet: observed again after the retry delay.
                    Ok(retry())
                } else {
                    self.release("Deleted: the infrastructure is gone").await
                }
            }
        }
    }
}

fn log_detail(w: &Workflow, what: &str) {
    if let Some(detail) = &w.detail {
        tracing::info!(step = what, progress = ?w.progress, detail = %detail, "package workflow");
    }
}

#[cfg(test)]
mod tests;
