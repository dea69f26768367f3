//! The pass's [`Effects`] against the API server, for one CR: server-side applies to the
//! CR's metadata and status and to its children, deletes, and events. Every write's
//! answer is noted in the trigger state, so the write never wakes the CR it was for.

use crate::children::ApiFailure;
use std::collections::HashSet;

use async_trait::async_trait;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::apply::{self, Ownership};
use super::children::{self, ChildError};
use super::context::Ctx;
use super::teardown;
use inrun_blueprint::ReconcileSpec;
use inrun_pass::failpoint;
use inrun_pass::meta::{self, Metadata};
use inrun_pass::{
    Applied, ChildKey, Claimed, EffectError, Effects, Observed, Pruned, Reason, Teardown, Written,
};

/// One CR's effects.
pub struct ApiEffects<'a> {
    ctx: &'a Ctx,
    /// The CR's identity and metadata as the pass read it (`CachedCr::head`: effects address
    /// the CR, they never read its body), with the resourceVersion of the host's latest write.
    cr: DynamicObject,
    /// The generation the pass saw.
    generation: Option<i64>,
    key: String,
    id: String,
}

impl<'a> ApiEffects<'a> {
    /// Effects for `cr`.
    pub fn new(ctx: &'a Ctx, cr: DynamicObject) -> Self {
        let key = Ctx::key(&cr);
        let id = ctx.cr_id(&cr);
        ApiEffects {
            ctx,
            generation: cr.metadata.generation,
            cr,
            key,
            id,
        }
    }

    /// The CR, as an identity lock names its holder.
    fn holder(&self) -> crate::locks::Holder {
        crate::locks::Holder {
            uid: self.cr.metadata.uid.clone().unwrap_or_default(),
            resource: self.ctx.cr_resource.clone(),
            namespace: self.cr.metadata.namespace.clone(),
            name: self.cr.metadata.name.clone().unwrap_or_default(),
        }
    }

    /// The CR's identity for an apply. The uid makes the API server refuse (409) an apply
    /// to a CR that is gone, which server-side apply would otherwise create anew.
    fn skeleton(&self) -> Value {
        let mut meta = json!({"name": self.cr.metadata.name, "uid": self.cr.metadata.uid});
        if let Some(ns) = &self.cr.metadata.namespace {
            meta["namespace"] = json!(ns);
        }
        json!({
            "apiVersion": self.ctx.cr_resource.api_version,
            "kind": self.ctx.cr_resource.kind,
            "metadata": meta,
        })
    }

    async fn apply_cr(&mut self, manager: &str, patch: Value) -> Result<(), kube::Error> {
        let name = self.cr.metadata.name.clone().unwrap_or_default();
        let written = self
            .ctx
            .cr_api(&self.cr)
            .patch(
                &name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        self.noted(&written);
        self.cr.metadata.resource_version = written.metadata.resource_version;
        self.cr.metadata.generation = written.metadata.generation;
        Ok(())
    }

    /// Keeps an event of this CR for the console's CR page.
    fn console_event(&self, kind: &str, reason: &str, note: &str) {
        self.ctx
            .metrics
            .event_recorded(inrun_observe::console::EventRecord {
                at_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis(),
                controller: self.ctx.queue.controller().to_string(),
                key: self.key.clone(),
                type_: kind.to_string(),
                reason: reason.to_string(),
                note: note.to_string(),
            });
    }

    fn noted(&self, written: &DynamicObject) {
        if let Some(rv) = &written.metadata.resource_version {
            self.ctx.triggers.wrote(&self.key, &self.id, rv);
        }
    }
}

fn child_error(what: &str) -> impl FnOnce(ChildError) -> EffectError + '_ {
    move |e| {
        let condition = e.condition();
        let error = EffectError::new(what, e);
        match condition {
            Some(c) => error.with_condition(c),
            None => error,
        }
    }
}

#[async_trait]
impl Effects for ApiEffects<'_> {
    async fn children(&mut self, spec: &ReconcileSpec) -> Result<Value, EffectError> {
        children::observed(self.ctx, &self.cr, spec)
            .await
            .map_err(child_error("reading the CR's children"))
    }

    async fn observe(
        &mut self,
        api_version: &str,
        key: &ChildKey,
    ) -> Result<Observed, EffectError> {
        children::observe(self.ctx, api_version, key)
            .await
            .map_err(child_error("reading a child's status"))
    }

    async fn apply(
        &mut self,
        spec: &ReconcileSpec,
        resources: &[Value],
        owned: bool,
    ) -> Result<Applied, EffectError> {
        let ownership = if owned {
            Ownership::Owned
        } else {
            Ownership::Unowned
        };
        apply::apply(self.ctx, &self.cr, spec, resources, ownership)
            .await
            .map_err(child_error("applying the Result's resources"))
    }

    async fn prune(
        &mut self,
        spec: &ReconcileSpec,
        keep: &HashSet<ChildKey>,
    ) -> Result<Pruned, EffectError> {
        teardown::prune(self.ctx, &self.cr, spec, keep)
            .await
            .map_err(child_error("pruning children"))
    }

    async fn metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<(), EffectError> {
        let mut patch = self.skeleton();
        // An empty map is left out rather than sent as `{}`: on a custom resource, applying
        // `{}` rewrites the managed fields every time. Leaving the key out removes the
        // manager's old keys just the same.
        if !metadata.finalizers.is_empty() {
            patch["metadata"]["finalizers"] = json!(metadata.finalizers);
        }
        if !metadata.labels.is_empty() {
            patch["metadata"]["labels"] = json!(metadata.labels);
        }
        if !metadata.annotations.is_empty() {
            patch["metadata"]["annotations"] = json!(metadata.annotations);
        }
        let what = if manager == meta::FINALIZER_MANAGER {
            "putting finalizers on the CR"
        } else {
            "setting the Result's labels and annotations on the CR"
        };
        self.apply_cr(manager, patch)
            .await
            .map_err(|e| EffectError::new(what, ApiFailure(e)))?;
        if manager == meta::FINALIZER_MANAGER && !metadata.finalizers.is_empty() {
            failpoint::hit(failpoint::FINALIZER_STORED)?;
        }
        Ok(())
    }

    async fn versioned_metadata(
        &mut self,
        manager: &'static str,
        metadata: &Metadata,
    ) -> Result<Written, EffectError> {
        let mut patch = self.skeleton();
        patch["metadata"]["resourceVersion"] = json!(self.cr.metadata.resource_version);
        patch["metadata"]["finalizers"] = json!(metadata.finalizers);
        if !metadata.labels.is_empty() {
            patch["metadata"]["labels"] = json!(metadata.labels);
        }
        match self.apply_cr(manager, patch).await {
            Ok(()) => {
                if !metadata.finalizers.is_empty() {
                    failpoint::hit(failpoint::FINALIZER_STORED)?;
                }
                Ok(Written::Done)
            }
            // Changed since it was read (409), or gone (404).
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(Written::Stale),
            Err(e) => Err(EffectError::new(
                "writing the CR's finalizer",
                ApiFailure(e),
            )),
        }
    }

    async fn status(&mut self, status: &Map<String, Value>) -> Result<Written, EffectError> {
        // The spec changed while this pass ran: its status would acknowledge a generation
        // it never saw. Leave the status to the pass that change starts.
        if self.cr.metadata.generation != self.generation {
            return Ok(Written::Stale);
        }
        let mut meta = json!({
            "name": self.cr.metadata.name,
            "resourceVersion": self.cr.metadata.resource_version,
        });
        if let Some(ns) = &self.cr.metadata.namespace {
            meta["namespace"] = json!(ns);
        }
        let patch = json!({
            "apiVersion": self.ctx.cr_resource.api_version,
            "kind": self.ctx.cr_resource.kind,
            "metadata": meta,
            "status": status,
        });
        let name = self.cr.metadata.name.clone().unwrap_or_default();
        failpoint::hit(failpoint::STATUS_BEFORE)?;
        let result = self
            .ctx
            .cr_api(&self.cr)
            .patch_status(
                &name,
                &PatchParams::apply(meta::STATUS_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await;
        match result {
            Ok(written) => {
                self.noted(&written);
                self.cr.metadata.resource_version = written.metadata.resource_version;
                failpoint::hit(failpoint::STATUS_AFTER)?;
                Ok(Written::Done)
            }
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(Written::Stale),
            Err(e) => Err(EffectError::new("writing status", ApiFailure(e))),
        }
    }

    async fn record(&mut self, reason: Reason, note: String) {
        let on = self.ctx.reference(&self.cr);
        self.console_event(reason.event_type(), reason.as_str(), &note);
        self.ctx.events.record(&on, reason, note).await;
    }

    async fn emit(&mut self, event: &inrun_contract::Event) {
        let on = self.ctx.reference(&self.cr);
        if self.ctx.events.emit(&on, event).await {
            let kind = if event.is_warning() {
                "Warning"
            } else {
                "Normal"
            };
            self.console_event(kind, &event.reason, &event.message);
        }
    }

    async fn delete(&mut self) -> Result<(), EffectError> {
        let name = self.cr.metadata.name.clone().unwrap_or_default();
        self.ctx
            .cr_api(&self.cr)
            .delete(&name, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(|e| {
                EffectError::new(
                    "deleting the CR after its cleanup grace period",
                    ApiFailure(e),
                )
            })
    }

    async fn tear_down(
        &mut self,
        spec: &ReconcileSpec,
        forced: bool,
    ) -> Result<Teardown, EffectError> {
        // Forced (the finalizer timeout passed), it never fails: the CR is released.
        if forced {
            return Ok(teardown::forced_tear_down(self.ctx, &self.cr, spec).await);
        }
        teardown::tear_down(self.ctx, &self.cr, spec)
            .await
            .map_err(child_error("deleting the CR's children"))
    }

    async fn claim(&mut self, boundary: &str, identity: &str) -> Result<Claimed, EffectError> {
        let Some(locks) = &self.ctx.locks else {
            return Ok(Claimed::Held);
        };
        failpoint::hit(failpoint::LOCK_CLAIM_BEFORE)?;
        let claimed = locks
            .claim(boundary, identity, &self.holder(), &self.ctx.client)
            .await
            .map_err(|e| {
                let what = "claiming the infrastructure's identity lock";
                match e {
                    crate::locks::LockError::Api(e) => EffectError::new(what, ApiFailure(e)),
                    // The tenant's cap on locks: a budget, named in the message.
                    cap => EffectError::new(what, cap)
                        .with_condition(inrun_pass::ConditionReason::BudgetExceeded),
                }
            })?;
        failpoint::hit(failpoint::LOCK_CLAIM_AFTER)?;
        Ok(claimed)
    }

    async fn unclaim(&mut self, boundary: &str, identity: &str) {
        let Some(locks) = &self.ctx.locks else {
            return;
        };
        let uid = self.cr.metadata.uid.clone().unwrap_or_default();
        // Letting go is best effort: an injected error is as a failed release, logged.
        let _ = failpoint::hit(failpoint::LOCK_RELEASE_BEFORE);
        if let Err(e) = locks.release(boundary, identity, &uid).await {
            tracing::warn!(error = %e, lease = ?locks.name_for(boundary, identity),
                "could not let go of the identity lock; a later claim takes it over once the CR is gone");
        }
        let _ = failpoint::hit(failpoint::LOCK_RELEASE_AFTER);
    }

    async fn release(&mut self) -> Result<(), EffectError> {
        let ours = meta::finalizers(&self.ctx.runtime);
        let held = self
            .cr
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| ours.contains(f));
        if !held {
            return Ok(());
        }
        failpoint::hit(failpoint::RELEASE_BEFORE)?;
        let mut patch = self.skeleton();
        patch["metadata"]["finalizers"] = json!([]);
        match self.apply_cr(meta::FINALIZER_MANAGER, patch).await {
            Ok(()) => Ok(()),
            // Gone already (409: the uid no longer exists): another finalizer holder
            // finished after us.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(EffectError::new("removing finalizers", ApiFailure(e))),
        }
    }
}
