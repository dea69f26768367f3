//! The controller's entry into [`inrun_pass`]: one span and the metrics per reconcile, the
//! pass run with [`ApiEffects`], and its answer turned into the next action.

use std::sync::Arc;
use std::time::Duration;

use super::cached::CachedCr;
use kube::runtime::controller::Action;
use tracing::Instrument;

use super::context::Ctx;
use super::effects::ApiEffects;
use inrun_pass::{self as pass, Failure, Pass};

/// Entry point for the controller.
///
/// # Errors
/// [`Failure`] when the pass failed; [`error_policy`] retries it with backoff.
pub async fn reconcile(cached: Arc<CachedCr>, ctx: Arc<Ctx>) -> Result<Action, Failure> {
    let crd = ctx.plan();
    let key = Ctx::key(cached.as_ref());
    let object = cached.value();
    // The reconcile block that serves this CR (its serve target's, if it names one), and
    // one read of each plugin slot: the versions serving as the pass starts.
    let (_, plan) = pass::route(crd, &object, None);
    let serving: Vec<_> = plan.slots.iter().map(|s| s.current()).collect();
    let span = tracing::info_span!(
        "reconcile",
        object.ref = %format!("{}/{}", ctx.cr_resource.kind, key),
        reconciler.kind = %plan.reconciler.kind(),
        plugin.digest = %serving.first().map_or("-", |p| p.id().digest.as_str()),
    );
    let metrics = &ctx.metrics;
    if let Some(waited) = ctx.queued.take(&key) {
        metrics.queue_wait(&crd.spec.crd_name(), waited);
    }
    let started = metrics.reconcile_started(&crd.spec.crd_name());
    let plugins: Vec<String> = serving.iter().map(|p| p.id().name.clone()).collect();
    async {
        ctx.triggers.begin(&key);
        let mut fx = ApiEffects::new(&ctx, cached.head());
        let p = Pass {
            crd,
            runtime: &ctx.runtime,
            object: &object,
            target: None,
            now: k8s_openapi::jiff::Timestamp::now(),
        };
        let result = match &plan.package {
            Some(package) => pass::package::run(p, &mut fx, package.as_ref()).await,
            None => pass::run(p, &mut fx).await,
        };
        let changed_meanwhile = ctx.triggers.end(&key);
        let error = result
            .as_ref()
            .err()
            .map(|e| e as &(dyn std::error::Error + 'static));
        metrics.reconcile_finished(started, &key, &plugins, error);
        match result {
            Ok(done) => {
                tracing::debug!(?done, "reconciled");
                // Not there yet (a package's infrastructure): the retry delay, which an
                // edit of the spec resets.
                let retry = done.retry.then(|| {
                    ctx.backoff
                        .failed(&key, cached.metadata.generation.unwrap_or_default())
                });
                if retry.is_none() {
                    ctx.backoff.succeeded(&key);
                }
                // A change by someone else arrived while the pass ran: run again now.
                let after = if changed_meanwhile {
                    Some(Duration::ZERO)
                } else if retry.is_some() {
                    retry
                } else {
                    // A reconciler may not ask for less than the floor.
                    done.after
                        .map(|a| jitter(a.max(ctx.runtime.min_requeue), &key, ctx.runtime.resync))
                };
                Ok(after.map_or_else(Action::await_change, Action::requeue))
            }
            Err(e) => {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "reconcile failed");
                Err(e)
            }
        }
    }
    .instrument(span)
    .await
}

/// Spreads resyncs of many CRs over a tenth of the period (by key, so each CR keeps its
/// own rhythm) instead of waking them all at once.
fn jitter(after: Duration, key: &str, resync: Option<Duration>) -> Duration {
    use std::hash::{DefaultHasher, Hash, Hasher};
    if resync != Some(after) {
        return after;
    }
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    let spread = after / 10;
    let nanos = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX).max(1);
    after + Duration::from_nanos(h.finish() % nanos)
}

/// What the controller does with a failure: back off per key.
pub fn error_policy(obj: Arc<CachedCr>, _err: &Failure, ctx: Arc<Ctx>) -> Action {
    let delay = ctx.backoff.failed(
        &Ctx::key(obj.as_ref()),
        obj.metadata.generation.unwrap_or_default(),
    );
    Action::requeue(delay)
}
