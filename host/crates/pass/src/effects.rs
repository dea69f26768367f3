//! What the pass reads from and writes to the world ([`Effects`]), and the values those
//! reads and writes answer with.

use std::collections::HashSet;

use async_trait::async_trait;
use serde_json::{Map, Value};

use inrun_blueprint::ReconcileSpec;

use crate::meta::Metadata;
use crate::reason::{ConditionReason, Reason};

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
    pub condition: Option<ConditionReason>,
}

impl From<crate::failpoint::Injected> for EffectError {
    /// A failpoint of a test build failed the effect.
    fn from(injected: crate::failpoint::Injected) -> Self {
        EffectError::new("a failpoint", injected)
    }
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

    /// The same error, reported with `condition` as the `Ready` reason instead of
    /// `ReconcileError`.
    #[must_use]
    pub fn with_condition(mut self, condition: ConditionReason) -> Self {
        self.condition = Some(condition);
        self
    }
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
    /// blocks, in any namespace (not `prune.keep`) — in delete waves ([`crate::waves`]), unless
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

/// [`Effects`] that pass everything on to the wrapped ones and note whether a warning
/// event was recorded: a pass that ends in a failure nothing said yet is reported on the
/// CR by its caller ([`crate::run`]), so no failure is left to the log alone.
pub(crate) struct Watched<'a> {
    inner: &'a mut dyn Effects,
    warned: &'a std::sync::atomic::AtomicBool,
}

impl<'a> Watched<'a> {
    /// Wraps `inner`; `warned` turns true at the first warning event.
    pub(crate) fn new(
        inner: &'a mut dyn Effects,
        warned: &'a std::sync::atomic::AtomicBool,
    ) -> Self {
        Watched { inner, warned }
    }
}

#[async_trait]
impl Effects for Watched<'_> {
    async fn children(&mut self, spec: &ReconcileSpec) -> Result<Value, EffectError> {
        self.inner.children(spec).await
    }
    async fn observe(
        &mut self,
        api_version: &str,
        key: &ChildKey,
    ) -> Result<Observed, EffectError> {
        self.inner.observe(api_version, key).await
    }
    async fn apply(
        &mut self,
        spec: &ReconcileSpec,
        resources: &[Value],
        owned: bool,
    ) -> Result<Applied, EffectError> {
        self.inner.apply(spec, resources, owned).await
    }
    async fn prune(
        &mut self,
        spec: &ReconcileSpec,
        keep: &HashSet<ChildKey>,
    ) -> Result<Pruned, EffectError> {
        self.inner.prune(spec, keep).await
    }
    async fn metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<(), EffectError> {
        self.inner.metadata(manager, metadata).await
    }
    async fn versioned_metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<Written, EffectError> {
        self.inner.versioned_metadata(manager, metadata).await
    }
    async fn status(&mut self, status: &Map<String, Value>) -> Result<Written, EffectError> {
        self.inner.status(status).await
    }
    async fn record(&mut self, reason: Reason, note: String) {
        if reason.event_type() == "Warning" {
            self.warned
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.record(reason, note).await;
    }
    async fn emit(&mut self, event: &inrun_contract::Event) {
        self.inner.emit(event).await;
    }
    async fn delete(&mut self) -> Result<(), EffectError> {
        self.inner.delete().await
    }
    async fn tear_down(
        &mut self,
        spec: &ReconcileSpec,
        forced: bool,
    ) -> Result<Teardown, EffectError> {
        self.inner.tear_down(spec, forced).await
    }
    async fn release(&mut self) -> Result<(), EffectError> {
        self.inner.release().await
    }
    async fn claim(&mut self, boundary: &str, identity: &str) -> Result<Claimed, EffectError> {
        self.inner.claim(boundary, identity).await
    }
    async fn unclaim(&mut self, boundary: &str, identity: &str) {
        self.inner.unclaim(boundary, identity).await;
    }
}
