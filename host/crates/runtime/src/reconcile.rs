//! The controller's entry into [`inrun_pass`]: one span and the metrics per reconcile, the
//! pass run with [`ApiEffects`] (a panic inside it caught and made this CR's failure), and
//! its answer turned into the next action.

use std::sync::Arc;
use std::time::Duration;

use super::cached::CachedCr;
use futures::FutureExt;
use kube::runtime::controller::Action;
use tracing::Instrument;

use super::context::Ctx;
use super::effects::ApiEffects;
use inrun_observe::metrics::{Finished, ReconcileResult};
use inrun_pass::{self as pass, Failure, Pass};

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The pass failed.
    #[error(transparent)]
    Pass(#[from] Failure),
    /// The pass panicked; the panic was caught, so only this CR's reconcile failed.
    #[error("the reconcile panicked: {0}")]
    Panicked(String),
}

/// Runs `work`, turning a panic inside it into `Err` with the panic's message, so one CR's
/// bug neither kills the controller (kube-runtime polls reconciles inside its own stream)
/// nor leaves the CR's trigger state half-way.
async fn guarded<T>(work: impl std::future::Future<Output = T>) -> Result<T, String> {
    std::panic::AssertUnwindSafe(work)
        .catch_unwind()
        .await
        .map_err(|panic| {
            panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string())
        })
}

/// Entry point for the controller.
///
/// # Errors
/// [`ReconcileError`] when the pass failed or panicked; [`error_policy`] retries it with
/// backoff.
pub async fn reconcile(cached: Arc<CachedCr>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    // During a rollout, the version the rollout has the CR on.
    let (crd, version) = ctx.plan_of(cached.as_ref());
    let key = Ctx::key(cached.as_ref());
    // Under sharding, a CR of a bucket another replica holds is left to it (a requeue or
    // a wake queued before the bucket moved); the replica taking a bucket wakes its CRs.
    if !ctx.serves(cached.as_ref()) {
        ctx.queue.forget(&key);
        return Ok(Action::await_change());
    }
    let fenced = ctx.shard.clone().zip(ctx.bucket(cached.as_ref()));
    // Watched by label: the maintain step keeps the CR's bucket on it.
    let bucket_label = fenced
        .as_ref()
        .filter(|(shard, _)| shard.by_labels())
        .map(|(_, bucket)| inrun_ring::sharding::buckets::label_value(*bucket));
    let object = cached.value();
    // The reconcile block that serves this CR (its serve target's, if it names one), and
    // one read of each plugin slot: the versions serving as the pass starts.
    let (_, plan) = pass::route(crd, &object, None);
    let serving: Vec<_> = plan.slots.iter().map(|s| s.current()).collect();
    let span = reconcile_span(ctx.as_ref(), &key, plan, serving.first());
    let in_flight = ctx.queue.started(&key);
    let plugins: Vec<String> = serving.iter().map(|p| p.id().name.clone()).collect();
    let work = async {
        ctx.triggers.begin(&key);
        let mut fx = ApiEffects::new(&ctx, cached.head());
        let p = Pass {
            crd,
            runtime: &ctx.runtime,
            object: &object,
            target: None,
            now: k8s_openapi::jiff::Timestamp::now(),
            infrastructure: None,
            bucket_label: bucket_label.as_deref(),
        };
        let run = async {
            if let Some(message) = cached.too_large() {
                return pass::refuse(p, &mut fx, message).await;
            }
            pass::run(p, &mut fx).await
        };
        let (result, panicked) = match guarded(run).await {
            Ok(result) => (result.map_err(ReconcileError::Pass), false),
            Err(message) => (Err(ReconcileError::Panicked(message)), true),
        };
        let changed_meanwhile = ctx.triggers.end(&key);
        // When the pass itself asked to run again: `None` waits for a change.
        let requested = result.as_ref().ok().and_then(|done| {
            tracing::debug!(?done, "reconciled");
            next_run(
                &ctx,
                &key,
                cached.metadata.generation.unwrap_or_default(),
                done,
            )
        });
        let error = result.as_ref().err();
        if let (Some(rollout), Some(version)) = (&ctx.rollout, version) {
            rollout.record(cached.metadata.uid.as_deref(), version, error.is_none());
            ctx.metrics.rollout_pass(
                &rollout.crd,
                version == crate::rollout::Version::New,
                error.is_none(),
            );
        }
        let again = record_finished(
            &ctx.metrics,
            &ctx.queue,
            in_flight,
            Ended {
                key: &key,
                plugins: &plugins,
                error: error.map(|e| e as &(dyn std::error::Error + 'static)),
                panicked,
                requested,
                changed: changed_meanwhile,
            },
        );
        match result {
            Ok(_) => Ok(again.map_or_else(Action::await_change, Action::requeue)),
            Err(e) => {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "reconcile failed");
                Err(e)
            }
        }
    }
    .instrument(span);
    // What reconcilers return is held against the tenant's host memory until the pass
    // ends ([`inrun_wasm::HostMemory`]). Boxed: the pass's future is deep enough.
    let work = Box::pin(work);
    let work = async {
        match &ctx.host_memory {
            Some(memory) => memory.scope(work).await,
            None => work.await,
        }
    };
    // Every write of the pass passes the bucket's fence.
    match fenced {
        Some((shard, bucket)) => shard.scope(bucket, work).await,
        None => work.await,
    }
}

/// The span of one reconcile, named for the CR, its reconciler and the plugin version
/// serving it; it records the trace id when the process exports traces.
fn reconcile_span(
    ctx: &Ctx,
    key: &str,
    plan: &inrun_reconcilers::plan::ReconcilePlan,
    plugin: Option<&inrun_wasm::Plugin>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "reconcile",
        object.ref = %format!("{}/{}", ctx.cr_resource.kind, key),
        reconciler.kind = %plan.reconciler.kind(),
        plugin.digest = %plugin.map_or("-", |p| p.id().digest.as_str()),
        inrun.crd = %ctx.queue.controller(),
        inrun.blueprint = %ctx.assembly.blueprint.metadata.name,
        trace_id = tracing::field::Empty,
    );
    if let Some(id) = ctx.trace_ids.and_then(|read| read(&span)) {
        span.record("trace_id", tracing::field::display(id));
    }
    span
}

/// When the pass that ended `done` asked to run again: a retry (a package's
/// infrastructure not there yet; its delay, which an edit of the spec resets), a requeue
/// (never under the floor), or whichever comes first; `None` waits for a change.
fn next_run(ctx: &Ctx, key: &str, generation: i64, done: &pass::Done) -> Option<Duration> {
    let retry = done.retry.then(|| ctx.backoff.failed(key, generation));
    if retry.is_none() {
        ctx.backoff.succeeded(key);
    }
    let after = done
        .after
        .map(|a| jitter(a.max(ctx.runtime.min_requeue), key, ctx.runtime.resync));
    // A retry that must also run by a deadline (a deletion failing until its finalizer
    // timeout): whichever comes first.
    match (retry, after) {
        (Some(r), Some(a)) => Some(r.min(a)),
        (r, a) => r.or(a),
    }
}

/// How a pass ended, for [`record_finished`].
struct Ended<'a> {
    key: &'a str,
    plugins: &'a [String],
    /// Why it failed, when it did.
    error: Option<&'a (dyn std::error::Error + 'static)>,
    panicked: bool,
    /// When the pass itself asked to run again (`None`: at the next change).
    requested: Option<Duration>,
    /// Someone else changed the CR or a child while the pass ran.
    changed: bool,
}

/// Records a finished pass and returns when the CR runs again (`None`: at its next
/// change; a failure is requeued by [`error_policy`]). The reconcile is classified by
/// what it asked for itself. A change that arrived while it ran makes it run again at
/// once — as client-go re-queues an item added while it was processing: a plain add,
/// not a retry. A requeue the pass asked for is a retry, as controller-runtime's
/// `AddAfter` and `AddRateLimited` count it.
fn record_finished(
    metrics: &inrun_observe::metrics::Metrics,
    queue: &inrun_observe::metrics::WorkQueue,
    in_flight: inrun_observe::metrics::InFlight,
    ended: Ended<'_>,
) -> Option<Duration> {
    let failed = ended.error.is_some();
    metrics.reconcile_finished(
        in_flight,
        Finished {
            key: ended.key,
            plugins: ended.plugins,
            result: ReconcileResult::classify(failed, ended.requested),
            error: ended.error,
            panicked: ended.panicked,
            timeline: inrun_observe::console::timeline::current(),
        },
    );
    if failed {
        return None;
    }
    if ended.changed {
        queue.queued(ended.key);
    }
    if let Some(after) = ended.requested {
        queue.requeued(ended.key, after);
    }
    if ended.changed {
        Some(Duration::ZERO)
    } else {
        ended.requested
    }
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
pub fn error_policy(obj: Arc<CachedCr>, _err: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    let key = Ctx::key(obj.as_ref());
    let delay = ctx
        .backoff
        .failed(&key, obj.metadata.generation.unwrap_or_default());
    ctx.queue.requeued(&key, delay);
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use inrun_observe::metrics::Metrics;

    /// Records one pass of `ns/a` that asked for `requested` while `changed` arrived, as
    /// [`reconcile`] does; returns when the CR runs again.
    fn pass(
        m: &Metrics,
        queue: &inrun_observe::metrics::WorkQueue,
        requested: Option<Duration>,
        changed: bool,
    ) -> Option<Duration> {
        let ended = Ended {
            key: "ns/a",
            plugins: &[],
            error: None,
            panicked: false,
            requested,
            changed,
        };
        record_finished(m, queue, queue.started("ns/a"), ended)
    }

    #[test]
    fn a_change_during_a_pass_is_a_plain_add_and_the_pass_keeps_its_own_result() {
        let m = Metrics::default();
        let queue = m.controller("pairs.example.dev", 1);
        let _running = queue.run();
        let text = |m: &Metrics, series: &str| -> f64 {
            let rendered = m.render();
            let line =
                format!("{series}{{controller=\"pairs.example.dev\",name=\"pairs.example.dev\"}} ");
            rendered
                .lines()
                .find_map(|l| l.strip_prefix(&line)?.parse().ok())
                .unwrap_or_else(|| panic!("{line} in {rendered}"))
        };
        queue.queued("ns/a");
        // Someone edits the CR while its pass runs: it runs again at once, counted as a
        // success plus one add (client-go's dirty item), with no retry.
        assert_eq!(pass(&m, &queue, None, true), Some(Duration::ZERO));
        assert_eq!(m.reconciles("pairs.example.dev", "success"), 1);
        assert_eq!(m.reconciles("pairs.example.dev", "requeue"), 0);
        assert_eq!(text(&m, "workqueue_adds_total"), 2.0);
        assert_eq!(text(&m, "workqueue_retries_total"), 0.0);
        assert_eq!(queue.depth(), 1);
        // A pass that asked for a resync and saw a change: `requeue_after`, one retry, and
        // still one add (the CR is queued already).
        let resync = Duration::from_secs(600);
        assert_eq!(pass(&m, &queue, Some(resync), true), Some(Duration::ZERO));
        assert_eq!(m.reconciles("pairs.example.dev", "requeue_after"), 1);
        assert_eq!(text(&m, "workqueue_adds_total"), 3.0);
        assert_eq!(text(&m, "workqueue_retries_total"), 1.0);
        assert_eq!(queue.depth(), 1);
        // Without a change: the pass's own request, and nothing queued now.
        assert_eq!(pass(&m, &queue, Some(resync), false), Some(resync));
        assert_eq!(queue.depth(), 0);
        assert_eq!(pass(&m, &queue, None, false), None);
        assert_eq!(m.reconciles("pairs.example.dev", "success"), 2);
        assert_eq!(text(&m, "workqueue_retries_total"), 2.0);
    }

    #[tokio::test]
    async fn a_panic_inside_a_pass_becomes_its_error_with_the_message() {
        let key = "ns/a".to_string();
        let panicked = guarded(async { panic!("index out of bounds for {key}") }).await;
        assert_eq!(
            panicked,
            Err::<(), _>("index out of bounds for ns/a".to_string())
        );
        let literal = guarded(async { std::panic::panic_any("boom") }).await;
        assert_eq!(literal, Err::<(), _>("boom".to_string()));
        assert_eq!(guarded(async { 7 }).await, Ok(7));
    }
}
