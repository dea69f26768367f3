//! The package steps for a CR that is not being deleted (2–4 of the order in
//! [`super`]): validate and identify, observe, converge and observe again.

use serde_json::Value;

use super::conditions::{Conditions, RECONCILING};
use super::identity::Stored;
use super::shared::{Run, again, log_detail, retry};
use super::spec::{Common, event, generation, options};
use crate::failure::Failure;
use crate::pass::Done;
use crate::reason::{ConditionReason, Reason};
use crate::status;
use inrun_contract::package::{Change, Observation, Options, Progress};

impl Run<'_, '_> {
    /// The steps, numbered as the module's order has them.
    pub(super) async fn reconcile(&mut self, common: &Common) -> Result<Done, Failure> {
        let opts = options(&self.p, common, event(&self.view));

        // 2. Validate and identify.
        if let Some(done) = self.validate(&opts).await? {
            return Ok(done);
        }
        let now = match self.identify(&opts).await? {
            Ok(now) => now,
            Err(done) => return Ok(done),
        };
        if let Some(done) = self.refused(common, &now).await? {
            return Ok(done);
        }
        let unstored = self.stored.identity.is_none();
        let first = unstored || !self.finalizers_settled();
        self.stored = now;

        // Before anything may exist: the finalizer, the identity and Reconciling.
        if first
            && (self.add_finalizer().await?.is_err() || self.write(&RECONCILING).await?.is_err())
        {
            // The CR changed meanwhile: what it claimed is not stored anywhere yet, so it
            // lets go (the next pass claims what the CR names then).
            if unstored && let (Some(b), Some(h)) = (&self.stored.boundary, &self.stored.identity) {
                self.fx.unclaim(b, h).await;
            }
            return Ok(again());
        }
        if first {
            crate::failpoint::hit(crate::failpoint::PACKAGE_IDENTITY_STORED)?;
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
                ConditionReason::Suspended,
                "suspended: the infrastructure differs from the spec and is not converged",
            );
            return self.end(&c, None, Done::after(common.interval)).await;
        }

        // 4. Converge, then observe again.
        self.converge(common, &opts).await
    }

    /// The package's `validate`: `Some` with the pass's end when it found the spec invalid
    /// or failed.
    async fn validate(&mut self, opts: &Options) -> Result<Option<Done>, Failure> {
        let errors = match self.pkg.validate(opts).await {
            Ok(errors) if errors.is_empty() => return Ok(None),
            Ok(errors) => errors,
            Err(detail) => {
                let message = "validating the spec failed";
                let done = self
                    .failed(ConditionReason::ValidationFailed, message, detail)
                    .await?;
                return Ok(Some(done));
            }
        };
        for e in &errors {
            tracing::warn!(problem = %e, "the package found the CR invalid");
        }
        let c = Conditions::new(
            false,
            false,
            ConditionReason::ValidationFailed,
            "the package found the spec invalid; the host's log says why",
        );
        let note = "ValidationFailed: the package found the spec invalid";
        let done = self
            .end(&c, Some((Reason::Invalid, note)), Done::default())
            .await?;
        Ok(Some(done))
    }

    /// `Some` with the pass's end when the identity `now` is refused: it names other
    /// infrastructure than the stored one (`IdentityChanged`), or another CR holds it
    /// (`IdentityConflict`).
    async fn refused(&mut self, common: &Common, now: &Stored) -> Result<Option<Done>, Failure> {
        if let Some(part) = self.stored.changed(now) {
            tracing::warn!(
                stored = self.stored.identity.as_deref().unwrap_or_default(),
                now = now.identity.as_deref().unwrap_or_default(),
                part,
                "the spec now identifies other infrastructure than the CR was created for"
            );
            let c = Conditions::new(
                false,
                false,
                ConditionReason::IdentityChanged,
                "the spec now identifies other infrastructure than the CR was created for; restore it, or delete the CR and create a new one",
            );
            let note = format!(
                "IdentityChanged: the spec identifies other infrastructure than the CR was created for (its {part} changed)"
            );
            let done = self
                .end(&c, Some((Reason::Invalid, &note)), Done::default())
                .await?;
            return Ok(Some(done));
        }
        let Some(holder) = self.conflict(now).await? else {
            return Ok(None);
        };
        let c = Conditions::new(
            false,
            false,
            ConditionReason::IdentityConflict,
            "another CR already manages the infrastructure this spec identifies; the event says which",
        );
        let note = format!(
            "IdentityConflict: {holder} already manages the infrastructure this spec identifies; nothing is done for this CR while it does"
        );
        let done = self
            .end(
                &c,
                Some((Reason::Invalid, &note)),
                Done::after(common.interval),
            )
            .await?;
        Ok(Some(done))
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
                ConditionReason::Ready,
                "the infrastructure matches the spec and is ready",
            );
            let note = "Ready: the infrastructure is ready";
            self.end(
                &c,
                Some((Reason::Reconciled, note)),
                Done::after(common.interval),
            )
            .await?
        } else {
            let c = Conditions::new(
                false,
                true,
                ConditionReason::Progressing,
                "the infrastructure matches the spec but is not ready yet",
            );
            self.end(&c, None, retry()).await?
        }))
    }

    /// Step 4: the package's converge, then `observe` again. Reconciling is published when
    /// this converge starts something new (ready infrastructure drifted, or the spec
    /// changed); a retry after a failure keeps the failure on show instead of flipping
    /// back and forth.
    async fn converge(&mut self, common: &Common, opts: &Options) -> Result<Done, Failure> {
        let new_work = matches!(status::ready_now(&self.view), Some((ok, _, _)) if ok == "True")
            || self
                .view
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64)
                != Some(generation(&self.view));
        if new_work && self.write(&RECONCILING).await?.is_err() {
            return Ok(again());
        }
        let failed = "converging the infrastructure failed";
        let outcome = match self.workflow(Change::Converge, opts).await {
            Ok(w) => w,
            Err(detail) => {
                return self
                    .failed(ConditionReason::ConvergeFailed, failed, detail)
                    .await;
            }
        };
        log_detail(&outcome, "converge");
        match outcome.progress {
            Progress::Failed => {
                let detail = "the package reported the converge failed".into();
                return self
                    .failed(ConditionReason::ConvergeFailed, failed, detail)
                    .await;
            }
            Progress::Pending => {
                let c = Conditions::new(
                    false,
                    true,
                    ConditionReason::Progressing,
                    "converging: the backend is still working",
                );
                return self.end(&c, None, retry()).await;
            }
            Progress::Completed => {}
        }
        let seen = match self.observe(opts).await? {
            Ok(o) => o,
            Err(done) => return Ok(done),
        };
        if let Some(done) = self.settled(common, seen).await? {
            return Ok(done);
        }
        let c = Conditions::new(
            false,
            true,
            ConditionReason::Progressing,
            "converged, but the infrastructure does not match the spec yet",
        );
        self.end(&c, None, retry()).await
    }
}
