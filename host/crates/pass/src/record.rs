//! [`Effects`] that write nothing and remember everything: what `inrun render` prints, and
//! what the pass's own tests read back.

use std::collections::HashSet;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::effects::{
    Applied, AppliedChild, ChildKey, Claimed, EffectError, Effects, Observed, Pruned, Teardown,
    Written,
};
use super::meta::Metadata;
use super::reason::Reason;
use inrun_blueprint::ReconcileSpec;

/// Every effect of a pass, in order, without a cluster.
#[derive(Debug, Default)]
pub struct Recorder {
    /// The CR's namespace, for children that name none.
    pub namespace: Option<String>,
    /// What `children` answers (offline: none observed).
    pub children: Option<Value>,
    /// Children "on the server", for prune and deletion.
    pub existing: Vec<ChildKey>,
    /// Whether applied children are already as desired (then an apply writes nothing).
    pub up_to_date: bool,
    /// Objects "on the server" whose state decides readiness (`inrun render --observed`);
    /// `None`: nothing is observed, and a child whose readiness reads its status is
    /// `Unknown`.
    pub observed: Option<Vec<Value>>,
    /// What an apply says a later wave waits for (offline: nothing).
    pub waiting: Option<String>,
    /// What a teardown answers; `None`: every existing child deleted.
    pub teardown: Option<Teardown>,
    /// Why a teardown fails, as the API client would say it (before `teardown`).
    pub teardown_fails: Option<String>,
    /// One line per effect, in order: `apply 2 owned`, `metadata inrun-finalizer`, ...
    pub steps: Vec<String>,
    /// Every resource applied, in the Result's order.
    pub applied: Vec<Value>,
    /// Metadata written, by field manager.
    pub metadata: Vec<(&'static str, Metadata)>,
    /// The last status written.
    pub status: Option<Map<String, Value>>,
    /// Events recorded.
    pub events: Vec<(Reason, String)>,
    /// Events the reconciler asked for.
    pub emitted: Vec<inrun_contract::Event>,
    /// Whether the CR "changed on the server" since it was read: status and versioned
    /// metadata writes answer [`Written::Stale`].
    pub stale: bool,
    /// Another CR holding every identity this one claims (`Kind ns/name`); `None`: every
    /// claim holds.
    pub held_by: Option<String>,
    /// Identities let go of, as (boundary, state hash).
    pub unclaimed: Vec<(String, String)>,
    /// Where each step is also written, with what else a test notes there (a scripted
    /// package's calls): one order across effects and calls. A status write that stores a
    /// package's identity adds `status stores identity "…"`.
    pub journal: Option<std::sync::Arc<std::sync::Mutex<Vec<String>>>>,
    /// Effects that fail, by name (`apply`, `status`, `metadata`, `claim`, ...), as a
    /// write the API server refused would.
    pub fails: Vec<&'static str>,
}

impl Recorder {
    /// A recorder for a CR in `namespace`.
    pub fn new(namespace: Option<String>) -> Self {
        Recorder {
            namespace,
            ..Recorder::default()
        }
    }

    /// `Err` when `effect` is one of [`Recorder::fails`].
    fn failing(&mut self, effect: &'static str) -> Result<(), EffectError> {
        if !self.fails.contains(&effect) {
            return Ok(());
        }
        self.step(format!("{effect} refused"));
        Err(EffectError::new(
            format!("{effect} (test)"),
            std::io::Error::other("refused by the API server"),
        ))
    }

    fn step(&mut self, step: String) {
        if let Some(journal) = &self.journal {
            journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(step.clone());
        }
        self.steps.push(step);
    }

    /// The metadata last written under `manager`.
    pub fn metadata_of(&self, manager: &str) -> Option<&Metadata> {
        self.metadata
            .iter()
            .rev()
            .find(|(m, _)| *m == manager)
            .map(|(_, m)| m)
    }

    fn key(&self, resource: &Value) -> ChildKey {
        let text = |p: &str| {
            resource
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let api_version = text("/apiVersion").unwrap_or_default();
        ChildKey {
            group: inrun_contract::api_version::group_of(&api_version).to_string(),
            kind: text("/kind").unwrap_or_default(),
            namespace: text("/metadata/namespace").or_else(|| self.namespace.clone()),
            name: text("/metadata/name").unwrap_or_default(),
        }
    }
}

#[async_trait]
impl Effects for Recorder {
    async fn children(&mut self, _spec: &ReconcileSpec) -> Result<Value, EffectError> {
        self.failing("children")?;
        self.step("children".into());
        Ok(self
            .children
            .clone()
            .unwrap_or_else(|| Value::Object(Map::new())))
    }

    async fn apply(
        &mut self,
        _spec: &ReconcileSpec,
        resources: &[Value],
        owned: bool,
    ) -> Result<Applied, EffectError> {
        self.failing("apply")?;
        let how = if owned { "owned" } else { "unowned" };
        self.step(format!("apply {} {how}", resources.len()));
        self.applied.extend(resources.iter().cloned());
        let children = resources
            .iter()
            .enumerate()
            .map(|(index, r)| AppliedChild {
                index,
                api_version: r["apiVersion"].as_str().unwrap_or_default().to_string(),
                key: self.key(r),
                object: None,
            })
            .collect();
        Ok(Applied {
            children,
            keys: resources.iter().map(|r| self.key(r)).collect(),
            written: if self.up_to_date { 0 } else { resources.len() },
            waiting: self.waiting.clone(),
        })
    }

    async fn observe(
        &mut self,
        api_version: &str,
        key: &ChildKey,
    ) -> Result<Observed, EffectError> {
        self.failing("observe")?;
        self.step(format!("observe {key}"));
        let Some(observed) = &self.observed else {
            return Ok(Observed::Unknown);
        };
        let found = observed
            .iter()
            .find(|o| o["apiVersion"] == api_version && self.key(o) == *key);
        Ok(found.map_or(Observed::Missing, |o| Observed::Object(o.clone())))
    }

    async fn prune(
        &mut self,
        _spec: &ReconcileSpec,
        keep: &HashSet<ChildKey>,
    ) -> Result<Pruned, EffectError> {
        self.failing("prune")?;
        let deleted: Vec<ChildKey> = self
            .existing
            .iter()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        self.step(format!("prune {}", deleted.len()));
        Ok(Pruned {
            deleted,
            ..Pruned::default()
        })
    }

    async fn metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<(), EffectError> {
        self.failing("metadata")?;
        self.step(format!("metadata {manager}"));
        self.metadata.push((manager, metadata.clone()));
        Ok(())
    }

    async fn versioned_metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<Written, EffectError> {
        if self.stale {
            self.step(format!("stale metadata {manager}"));
            return Ok(Written::Stale);
        }
        self.metadata(manager, metadata).await?;
        Ok(Written::Done)
    }

    async fn status(&mut self, status: &Map<String, Value>) -> Result<Written, EffectError> {
        self.failing("status")?;
        if self.stale {
            self.step("stale status".into());
            return Ok(Written::Stale);
        }
        self.step("status".into());
        if let (Some(journal), Some(identity)) = (&self.journal, status.get("identity")) {
            journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("status stores identity {identity}"));
        }
        self.status = Some(status.clone());
        Ok(Written::Done)
    }

    async fn record(&mut self, reason: Reason, note: String) {
        self.step(format!("event {}", reason.as_str()));
        self.events.push((reason, note));
    }

    async fn emit(&mut self, event: &inrun_contract::Event) {
        self.step(format!("emit {}", event.reason));
        self.emitted.push(event.clone());
    }

    async fn delete(&mut self) -> Result<(), EffectError> {
        self.failing("delete")?;
        self.step("delete".into());
        Ok(())
    }

    async fn tear_down(
        &mut self,
        _spec: &ReconcileSpec,
        forced: bool,
    ) -> Result<Teardown, EffectError> {
        self.failing("tear_down")?;
        let how = if forced { " forced" } else { "" };
        self.steps
            .push(format!("delete children {}{how}", self.existing.len()));
        if let Some(why) = &self.teardown_fails {
            return Err(EffectError::new(
                "deleting the CR's children",
                std::io::Error::other(why.clone()),
            ));
        }
        if let Some(answer) = self.teardown.clone() {
            return Ok(answer);
        }
        Ok(Teardown::Done {
            deleted: std::mem::take(&mut self.existing),
            orphaned: Vec::new(),
            spared: None,
        })
    }

    async fn release(&mut self) -> Result<(), EffectError> {
        self.failing("release")?;
        self.step("release".into());
        Ok(())
    }

    async fn claim(&mut self, _boundary: &str, _identity: &str) -> Result<Claimed, EffectError> {
        self.failing("claim")?;
        Ok(match &self.held_by {
            Some(holder) => Claimed::Conflict(holder.clone()),
            None => Claimed::Held,
        })
    }

    async fn unclaim(&mut self, boundary: &str, identity: &str) {
        self.unclaimed
            .push((boundary.to_string(), identity.to_string()));
    }
}
