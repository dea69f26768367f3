//! The package steps for a CR being deleted: `Retain` releases it, `Delete` deletes what
//! was created (unless `inrun.dev/prevent-destroy` or a changed identity refuses) and
//! releases it once `observe` sees it gone; the finalizer settings hold throughout.

use std::time::Duration;

use super::PREVENT_DESTROY;
use super::conditions::Conditions;
use super::shared::{Run, again, log_detail, retry};
use super::spec::{Common, DeletionPolicy, annotation, finalized, options};
use crate::failure::Failure;
use crate::finalize::time_left;
use crate::pass::Done;
use crate::reason::{ConditionReason, Reason};
use inrun_contract::package::{Change, Event, Options, Progress};

impl Run<'_, '_> {
    /// The deletion steps, bounded by the finalizer timeout.
    pub(super) async fn delete(&mut self, common: Result<Common, String>) -> Result<Done, Failure> {
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
        let left = time_left(&self.view, finalizers.timeout, self.p.now);
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
        let done = match common {
            Ok(common) => self.delete_within(&common).await?,
            // Nothing is deleted on a spec the host cannot read; an edit that fixes it
            // wakes the CR, and the timeout (below) still releases it.
            Err(why) => self.invalid(&why).await?,
        };
        // Back by the timeout, whatever the step asked for.
        Ok(match left {
            Some(left) => Done {
                after: Some(done.after.map_or(left, |a| a.min(left))),
                ..done
            },
            None => done,
        })
    }

    /// A CR being deleted whose `deletionPolicy` or `config` is invalid: `ValidationFailed`
    /// and an `Invalid` event, and nothing deleted.
    async fn invalid(&mut self, why: &str) -> Result<Done, Failure> {
        tracing::warn!(problem = %why, "invalid package CR being deleted");
        let c = Conditions::new(
            false,
            true,
            ConditionReason::ValidationFailed,
            "spec is invalid; the infrastructure is not deleted until it is fixed",
        );
        let note = format!("ValidationFailed: {why}");
        self.end(&c, Some((Reason::Invalid, &note)), Done::default())
            .await
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
                ConditionReason::DestroyPrevented,
                "deletion refused: inrun.dev/prevent-destroy is \"true\"; remove the annotation to delete the infrastructure",
            );
            let note = "DestroyPrevented: inrun.dev/prevent-destroy is \"true\"";
            return self
                .end(&c, Some((Reason::DeletionBlocked, note)), Done::default())
                .await;
        }
        let opts = options(&self.p, common, Event::Deleting);
        if let Some(done) = self.identity_kept(&opts).await? {
            return Ok(done);
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
        let deleting = Conditions::new(
            false,
            true,
            ConditionReason::Deleting,
            "deleting the infrastructure",
        );
        if self.write(&deleting).await?.is_err() {
            return Ok(again());
        }
        self.delete_infrastructure(&opts).await
    }

    /// What is deleted is what was created: `Some` with the pass's end when the spec names
    /// something else now (an edit refused as IdentityChanged; nothing is deleted until it
    /// is restored), or the identity call failed. A CR with no identity stored takes the
    /// one the spec names.
    async fn identity_kept(&mut self, opts: &Options) -> Result<Option<Done>, Failure> {
        let now = match self.identify(opts).await? {
            Ok(now) => now,
            Err(done) => return Ok(Some(done)),
        };
        if self.stored.identity.is_none() {
            self.stored = now;
            return Ok(None);
        }
        let Some(part) = self.stored.changed(&now) else {
            return Ok(None);
        };
        let c = Conditions::new(
            false,
            false,
            ConditionReason::IdentityChanged,
            "deletion refused: the spec now identifies other infrastructure than the CR was created for; restore the spec to delete what was created, or set deletionPolicy: Retain to leave it",
        );
        let note = format!(
            "IdentityChanged: deletion refused, the spec identifies other infrastructure than the CR was created for (its {part} changed)"
        );
        let done = self
            .end(&c, Some((Reason::DeletionBlocked, &note)), Done::default())
            .await?;
        Ok(Some(done))
    }

    /// The package's delete, then `observe`: released once the infrastructure is gone,
    /// else observed again after the retry delay.
    async fn delete_infrastructure(&mut self, opts: &Options) -> Result<Done, Failure> {
        let failed = "deleting the infrastructure failed";
        let outcome = match self.workflow(Change::Delete, opts).await {
            Ok(w) => w,
            Err(detail) => {
                return self
                    .failed(ConditionReason::DeleteFailed, failed, detail)
                    .await;
            }
        };
        log_detail(&outcome, "delete");
        match outcome.progress {
            Progress::Failed => {
                let detail = "the package reported the delete failed".into();
                self.failed(ConditionReason::DeleteFailed, failed, detail)
                    .await
            }
            Progress::Pending => Ok(retry()),
            Progress::Completed => {
                let seen = match self.observe(opts).await? {
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
