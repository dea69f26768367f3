//! One package pass's state ([`Run`]) and what its steps share: the status write, a
//! failed call, the package's `observe` and `identity`, the claim, the finalizer added
//! and removed.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::FINALIZER;
use super::conditions::{Conditions, desired};
use super::identity::Stored;
use super::spec::finalized;
use crate::effects::{Claimed, Effects, Written};
use crate::failpoint;
use crate::failure::Failure;
use crate::meta::{self, Metadata};
use crate::package::{CallFailed, Infrastructure};
use crate::pass::{Done, Pass, STALE_RETRY};
use crate::reason::{ConditionReason, Reason};
use crate::status;
use inrun_contract::package::{Change, Observation, Options, Workflow};

/// A write found the CR changed since it was read: the pass that change starts decides.
#[derive(Debug)]
pub(super) struct Stale;

/// One package pass: what it read, and the CR as its own writes left it (so a second
/// write compares against what is on the server now).
pub(super) struct Run<'a, 'f> {
    pub(super) p: Pass<'a>,
    pub(super) fx: &'f mut dyn Effects,
    pub(super) pkg: &'a dyn Infrastructure,
    /// The CR as the pass read it, with its own writes since.
    pub(super) view: Value,
    /// The identity stored in status (or about to be).
    pub(super) stored: Stored,
}

/// Run again soon: the CR changed under a write.
pub(super) fn again() -> Done {
    Done {
        after: Some(STALE_RETRY),
        ..Done::default()
    }
}

/// Run again after the per-key retry delay (doubling, reset by an edit).
pub(super) fn retry() -> Done {
    Done {
        retry: true,
        ..Done::default()
    }
}

impl Run<'_, '_> {
    /// Writes the status if it differs; says whether `Ready` changed (for the event).
    pub(super) async fn write(&mut self, c: &Conditions) -> Result<Result<bool, Stale>, Failure> {
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

    /// Writes `c`, records `event` (a reason and its note) when `Ready` changed, and ends
    /// the pass with `done`.
    pub(super) async fn end(
        &mut self,
        c: &Conditions,
        event: Option<(Reason, &str)>,
        done: Done,
    ) -> Result<Done, Failure> {
        match self.write(c).await? {
            Ok(true) => {
                if let Some((reason, note)) = event {
                    self.fx.record(reason, note.to_string()).await;
                }
                Ok(done)
            }
            Ok(false) => Ok(done),
            Err(Stale) => Ok(again()),
        }
    }

    /// A failure no step said: `Ready=False` with its reason and the host's account of it
    /// (never a package's words: those are [`Failure::Package`], said by
    /// [`Run::failed`]), and a `ReconcileError` event. Returns the failure for the retry.
    pub(super) async fn report(&mut self, failure: Failure) -> Failure {
        let reason = failure.condition();
        let message = inrun_contract::errors::chain(&failure);
        let c = Conditions {
            message: Cow::Owned(message.clone()),
            ..Conditions::new(false, false, reason, "")
        };
        if let Err(e) = self.write(&c).await {
            tracing::warn!(error = %inrun_contract::errors::chain(&e), "could not write the failure to status");
        }
        self.fx
            .record(Reason::ReconcileError, format!("{reason}: {message}"))
            .await;
        failure
    }

    /// A step that failed: the generic condition, a generic event, and the failure (with
    /// the package's text) for the log and the retry.
    pub(super) async fn failed(
        &mut self,
        reason: ConditionReason,
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

    pub(super) async fn observe(
        &mut self,
        opts: &Options,
    ) -> Result<Result<Observation, Done>, Failure> {
        match self.pkg.observe(opts).await {
            Ok(o) => Ok(Ok(o)),
            Err(detail) => self
                .failed(
                    ConditionReason::ObserveFailed,
                    "observing the infrastructure failed",
                    detail,
                )
                .await
                .map(Err),
        }
    }

    /// The package's `converge` or `delete`, between its two failpoints.
    pub(super) async fn workflow(
        &mut self,
        change: Change,
        opts: &Options,
    ) -> Result<Workflow, CallFailed> {
        let (before, after) = match change {
            Change::Converge => (
                failpoint::PACKAGE_CONVERGE_BEFORE,
                failpoint::PACKAGE_CONVERGE_AFTER,
            ),
            Change::Delete => (
                failpoint::PACKAGE_DELETE_BEFORE,
                failpoint::PACKAGE_DELETE_AFTER,
            ),
        };
        failpoint::hit(before)?;
        let outcome = self.pkg.workflow(change, opts).await?;
        failpoint::hit(after)?;
        Ok(outcome)
    }

    /// Whether the CR's finalizers are as the Blueprint's settings want them: the package
    /// finalizer on it, or with `finalizers.remove` off it (a CR then deletes with no host
    /// running, as the seed's testing case asks).
    pub(super) fn finalizers_settled(&self) -> bool {
        if !self.p.runtime.finalizers.remove {
            return finalized(&self.view);
        }
        let label = self.view["metadata"]["labels"][meta::MANAGED_BY.0].as_str();
        !finalized(&self.view) && label == Some(meta::MANAGED_BY.1)
    }

    /// Adds the finalizer (at the resourceVersion read), before any infrastructure effect;
    /// with `finalizers.remove`, takes off the one an earlier Blueprint added instead.
    pub(super) async fn add_finalizer(&mut self) -> Result<Result<(), Stale>, Failure> {
        if self.finalizers_settled() {
            return Ok(Ok(()));
        }
        // The infrastructure finalizer, and `runtime.finalizers.names` as on any CR.
        let mut finalizers = Vec::new();
        if !self.p.runtime.finalizers.remove {
            finalizers.push(FINALIZER.to_string());
            finalizers.extend(
                self.p
                    .runtime
                    .finalizers
                    .names
                    .iter()
                    .filter(|n| n.as_str() != FINALIZER)
                    .cloned(),
            );
        }
        let finalized = Metadata {
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
            .versioned_metadata(meta::FINALIZER_MANAGER, &finalized)
            .await?
            == Written::Stale
        {
            return Ok(Err(Stale));
        }
        self.view["metadata"]["finalizers"] = json!(finalizers);
        self.view["metadata"]["labels"][meta::MANAGED_BY.0] = json!(meta::MANAGED_BY.1);
        Ok(Ok(()))
    }

    /// Removes the package finalizer (at the resourceVersion read) and says why.
    pub(super) async fn release(&mut self, note: &str) -> Result<Done, Failure> {
        // The CR is done with its infrastructure: another may claim it now. Let go before
        // the finalizer goes: a host that dies between the two finds the CR again and lets
        // go again (a no-op), where the other order would leave the lock held by a CR that
        // no longer exists, for no one to let go of.
        if let (Some(boundary), Some(hash)) = (&self.stored.boundary, &self.stored.identity) {
            self.fx.unclaim(boundary, hash).await;
        }
        failpoint::hit(failpoint::RELEASE_BEFORE)?;
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
        Ok(Done::default())
    }

    /// Claims what `identity` names for the CR ([`Effects::claim`]); the CR holding it
    /// instead, if another does.
    pub(super) async fn conflict(&mut self, identity: &Stored) -> Result<Option<String>, Failure> {
        let (Some(boundary), Some(hash)) = (&identity.boundary, &identity.identity) else {
            return Ok(None);
        };
        let claimed = match self.fx.claim(boundary, hash).await {
            Ok(claimed) => claimed,
            // The host's own account (the tenant's cap on locks, an API error) is shown on
            // the CR, which made no call yet; the pass fails and is retried.
            Err(e) => {
                let c = Conditions {
                    message: Cow::Owned(inrun_contract::errors::chain(&e)),
                    ..Conditions::new(
                        false,
                        false,
                        e.condition.unwrap_or(ConditionReason::ReconcileError),
                        "",
                    )
                };
                let _ = self.write(&c).await?;
                return Err(Failure::Effect(e));
            }
        };
        Ok(match claimed {
            Claimed::Held => None,
            Claimed::Conflict(holder) => {
                tracing::warn!(%holder, "another CR manages the infrastructure this CR's spec identifies");
                Some(holder)
            }
        })
    }

    /// The package's `identity` for `opts`, as it would be stored; `Err` with the pass's
    /// end when the call failed (said on the CR, retried).
    pub(super) async fn identify(
        &mut self,
        opts: &Options,
    ) -> Result<Result<Stored, Done>, Failure> {
        match self.pkg.identity(opts).await {
            Ok(id) => Ok(Ok(Stored::from(&id))),
            Err(detail) => self
                .failed(
                    ConditionReason::IdentityFailed,
                    "resolving the identity failed",
                    detail,
                )
                .await
                .map(Err),
        }
    }
}

/// The workflow's own account of a `what` step, for the log.
pub(super) fn log_detail(w: &Workflow, what: &str) {
    if let Some(detail) = &w.detail {
        tracing::info!(step = what, progress = ?w.progress, detail = %detail, "package workflow");
    }
}
