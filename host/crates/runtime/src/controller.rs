//! One CRD's controller, wired step by step: its shared context, the stream of CRs that
//! wake, the children's watches, and the run until the stop signal; and [`run`], which
//! serves one fixed Blueprint with a controller per CRD.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{FutureExt, Stream, StreamExt};
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, reflector, store::Writer};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;

use crate::cached::CachedCr;
use crate::child_watches::{child_watch, lazy_watches};
use crate::context::Ctx;
use crate::kinds::cr_resource;
use crate::shared::{RunOptions, Shared};
use crate::startup::{CrdKinds, RunError, prepare};
use crate::{backoff, events, reconcile, stores, triggers};
use inrun_blueprint::Scope;
use inrun_reconcilers::assemble::Assembly;

/// The per-CR backoff of a CRD's controller: the pass picks its bounds
/// ([`inrun_pass::retry_bounds`]: a package's own, or `runtime.backoff`, above the requeue
/// floor).
fn retries(
    crd: &inrun_blueprint::CrdSpec,
    runtime: &inrun_blueprint::RuntimeSpec,
) -> backoff::Backoff {
    let (base, max) = inrun_pass::retry_bounds(crd, runtime);
    backoff::Backoff::new(base, max)
}

/// One CRD's controller: watches its CRs and the children they own and runs the pass,
/// until `stop` turns true (reconciles in flight then finish). Each item of `requeue`
/// queues every CR of the CRD (after a plugin it calls was reloaded).
///
/// A CR is reconciled when it or one of its children changes other than by the host's own
/// write (see `triggers.rs`), on a requeue, and on `requeue`; children are watched by
/// metadata only, and mapped to their CR through an index by owner uid.
///
/// With `rollout`, the CRs it has not moved are served by the version before
/// ([`crate::rollout`]), and its driver runs beside the controller.
pub fn controller(
    shared: &Shared,
    assembly: Arc<Assembly>,
    index: usize,
    child_kinds: CrdKinds,
    stop: watch::Receiver<bool>,
    requeue: impl Stream<Item = ()> + Send + 'static,
    rollout: Option<Arc<crate::rollout::Rollout>>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let ar = cr_resource(&assembly.crds()[index].spec);
    let triggers = Arc::new(triggers::Triggers::new(ar.clone()));
    // Children: a metadata-only watch per kind, by the owner label; each change that is
    // not the host's own wakes its CR.
    let stores = stores::ChildStores::default();
    let served: Vec<_> = child_kinds
        .served
        .iter()
        .map(|kind| {
            child_watch(
                &shared.client,
                kind,
                &triggers,
                &stores,
                shared.shard.as_ref(),
            )
            .0
        })
        .collect();
    let mut ctx = context(shared, assembly, index, stores, triggers);
    ctx.rollout = rollout;
    let ctx = Arc::new(ctx);
    // The CRs' cache holds them compacted ([`CachedCr`]); a pass reads one whole.
    let writer = Writer::new(ar.clone());
    let crs = writer.as_reader();
    let counted = Arc::new(AtomicBool::new(false));
    let woken_by_crs = cr_triggers(&ctx, shared, writer, counted.clone());
    // The children's watches run as tasks of their own, not inside the controller: their
    // caches then fill while passes wait for them, whatever the controller polls first.
    let (woken, woken_rx) = tokio::sync::mpsc::unbounded_channel();
    let controller =
        Controller::for_stream_with(woken_by_crs, crs.clone(), ar)
            .with_config(kube::runtime::controller::Config::default().concurrency(
                u16::try_from(ctx.plan().spec.workers(&ctx.runtime)).unwrap_or(u16::MAX),
            ))
            .reconcile_all_on(requeue_all(&ctx, &crs, requeue))
            .reconcile_on(children_woken(&ctx, woken_rx));
    run_until_stopped(Running {
        controller,
        watches: ChildWatches {
            served,
            pending: child_kinds.pending,
            crs,
            woken,
            synced: counted.clone(),
        },
        ctx,
        metrics: shared.metrics.clone(),
        counted,
        stop,
    })
}

/// The state every reconcile of the CRD `index` of `assembly` shares.
fn context(
    shared: &Shared,
    assembly: Arc<Assembly>,
    index: usize,
    children: stores::ChildStores,
    triggers: Arc<triggers::Triggers>,
) -> Ctx {
    let client = shared.client.clone();
    let plan = &assembly.crds()[index];
    let runtime = assembly.blueprint.spec.runtime.clone();
    let workers = plan.spec.workers(&runtime);
    Ctx {
        client: client.clone(),
        cr_resource: cr_resource(&plan.spec),
        namespaced: plan.spec.scope == Scope::Namespaced,
        kinds: shared.kinds.clone(),
        locks: shared.locks.clone(),
        events: events::Events::new(client, shared.instance.clone()),
        backoff: retries(&plan.spec, &runtime),
        queue: shared.metrics.controller(
            &plan.spec.crd_name(),
            usize::try_from(workers).unwrap_or(usize::MAX),
        ),
        runtime,
        children,
        triggers,
        metrics: shared.metrics.clone(),
        trace_ids: shared.trace_ids,
        kinds_changed: Arc::default(),
        shard: shared.shard.clone(),
        fresh: Arc::default(),
        host_memory: shared.host_memory.clone(),
        rollout: None,
        leading: shared.leading.clone(),
        crd: index,
        assembly,
    }
}

/// The CRs that wake, as the controller's triggers, from the watch of every CR that fills
/// `writer`'s cache; those of a (re)list only once it is complete ([`triggers::ListGate`]).
/// The first complete list marks the cache synced for `/readyz` (and sets `counted`).
fn cr_triggers(
    ctx: &Arc<Ctx>,
    shared: &Shared,
    writer: Writer<CachedCr>,
    counted: Arc<AtomicBool>,
) -> impl Stream<Item = Result<CachedCr, watcher::Error>> + Send + 'static {
    let health = shared.metrics.health().clone();
    let metrics = shared.metrics.clone();
    let gone = ctx.triggers.clone();
    let fresh = ctx.fresh.clone();
    let armed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Under sharding, only the CRs of the buckets held: by their bucket label, or the
    // server's shardSelector.
    let events = match &ctx.shard {
        Some(shard) if shard.by_labels() => crate::sharded_watch::labelled_watcher(
            ctx.client.clone(),
            ctx.cr_resource.clone(),
            shard.subscribe(),
            ctx.fresh.clone(),
        )
        .boxed(),
        Some(shard) => crate::sharded_watch::sharded_watcher(
            ctx.client.clone(),
            ctx.cr_resource.clone(),
            shard.subscribe(),
            ctx.fresh.clone(),
        )
        .boxed(),
        None => {
            let api: Api<CachedCr> = Api::all_with(ctx.client.clone(), &ctx.cr_resource);
            watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed()
        }
    };
    let ctx = ctx.clone();
    reflector(writer, events)
        .inspect(move |event| match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::InitApply(_)) => {
                metrics.cr_watch_event();
            }
            // The buckets fresh when a list starts are served once it is complete.
            Ok(watcher::Event::Init) => {
                armed.store(fresh.load(Ordering::Acquire), Ordering::Release)
            }
            // The first complete list: the cache of CRs is synced (for /readyz).
            Ok(watcher::Event::InitDone) => {
                fresh.fetch_and(!armed.load(Ordering::Acquire), Ordering::AcqRel);
                if !counted.swap(true, Ordering::Relaxed) {
                    health.cache_synced(true);
                }
            }
            Ok(watcher::Event::Delete(cr)) => gone.cr_gone(&cr.metadata),
            _ => {}
        })
        .scan(
            triggers::ListGate::default(),
            move |gate: &mut triggers::ListGate<CachedCr>, event| {
                let out: Vec<Result<CachedCr, watcher::Error>> = match event {
                    Ok(event) => gate
                        .pass(
                            event,
                            |cr| {
                                // A CR of a bucket held elsewhere is not recorded as seen;
                                // one of a bucket just taken wakes however it was last seen.
                                let wake = ctx.serves(cr)
                                    && (ctx.triggers.cr_changed(&cr.metadata, &ctx.cr_id(cr))
                                        | ctx.fresh(cr));
                                if wake {
                                    ctx.queue.queued(&Ctx::key(cr));
                                }
                                wake
                            },
                            |cr| {
                                ctx.triggers.unsee(&cr.metadata);
                                ctx.queue.forget(&Ctx::key(cr));
                            },
                        )
                        .into_iter()
                        .map(Ok)
                        .collect(),
                    Err(e) => vec![Err(e)],
                };
                futures::future::ready(Some(futures::stream::iter(out)))
            },
        )
        .flatten()
}

/// The CRs the children's watches wake, as they send them on `woken`, each told to the
/// work queue.
fn children_woken(
    ctx: &Ctx,
    woken: UnboundedReceiver<ObjectRef<CachedCr>>,
) -> impl Stream<Item = ObjectRef<CachedCr>> + Send + 'static {
    let queued = ctx.queue.clone();
    futures::stream::unfold(
        woken,
        |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
    )
    .inspect(move |r: &ObjectRef<CachedCr>| {
        queued.queued(&triggers::key_of(r.namespace.as_deref(), &r.name));
    })
}

/// `requeue`, each item of which (a plugin reload) queues every CR the cache `crs` holds.
fn requeue_all(
    ctx: &Ctx,
    crs: &Store<CachedCr>,
    requeue: impl Stream<Item = ()> + Send + 'static,
) -> impl Stream<Item = ()> + Send + 'static {
    let (queued, crs) = (ctx.queue.clone(), crs.clone());
    requeue.inspect(move |()| {
        for cr in crs.state() {
            queued.queued(&Ctx::key(cr.as_ref()));
        }
    })
}

/// The children's watches of one controller, started when it runs.
struct ChildWatches {
    /// One a kind served at start-up, yielding the CRs their changes wake.
    served: Vec<futures::stream::BoxStream<'static, ObjectRef<CachedCr>>>,
    /// Kinds not served yet, watched once they are ([`lazy_watches`]).
    pending: Vec<(String, String)>,
    /// The CRs' cache, every CR of which a new lazy watch wakes once.
    crs: Store<CachedCr>,
    /// Where the CRs they wake go.
    woken: UnboundedSender<ObjectRef<CachedCr>>,
    /// Set once the CRs' cache is complete (its first listing).
    synced: Arc<AtomicBool>,
}

impl ChildWatches {
    /// Spawns every watch, each a task that ends when the controller aborts it.
    fn spawn(self, ctx: &Arc<Ctx>) -> Vec<tokio::task::JoinHandle<()>> {
        let ChildWatches {
            served,
            pending,
            crs,
            woken,
            synced,
        } = self;
        served
            .into_iter()
            .map(|stream| {
                let tx = woken.clone();
                tokio::spawn(stream.for_each(move |r| {
                    let _ = tx.send(r);
                    futures::future::ready(())
                }))
            })
            .chain(ctx.shard.clone().map(|shard| {
                tokio::spawn(bucket_moves(ctx.clone(), shard, crs.clone(), woken.clone()))
            }))
            .chain(ctx.rollout.clone().map(|rollout| {
                tokio::spawn(crate::rollout::drive(
                    ctx.clone(),
                    rollout,
                    crs.clone(),
                    synced.clone(),
                    woken.clone(),
                ))
            }))
            .chain(
                (!pending.is_empty())
                    .then(|| tokio::spawn(lazy_watches(ctx.clone(), crs, pending, woken.clone()))),
            )
            .collect()
    }
}

/// Follows the buckets `shard` holds: the cached CRs of a bucket given up are forgotten
/// by the triggers (so they wake again if it comes back), those of a bucket taken wake
/// (sent on `woken`; when the server does not shard the watch, the cache has them).
async fn bucket_moves(
    ctx: Arc<Ctx>,
    shard: Arc<inrun_ring::sharding::shard::Shard>,
    crs: Store<CachedCr>,
    woken: UnboundedSender<ObjectRef<CachedCr>>,
) {
    let mut held = shard.subscribe();
    let mut before = *held.borrow_and_update();
    while held.changed().await.is_ok() {
        let now = *held.borrow_and_update();
        let (taken, given) = (now & !before, before & !now);
        before = now;
        if taken | given == 0 {
            continue;
        }
        let _ = crs.wait_until_ready().await;
        for cr in crs.state() {
            let Some(bucket) = ctx.bucket(cr.as_ref()) else {
                continue;
            };
            let bit = inrun_ring::sharding::shard::bit(bucket);
            if given & bit != 0 {
                ctx.triggers.unsee(&cr.metadata);
            } else if taken & bit != 0 {
                let _ = woken.send(ObjectRef::from_obj_with(
                    cr.as_ref(),
                    ctx.cr_resource.clone(),
                ));
            }
        }
    }
}

/// A controller wired and ready to run.
struct Running {
    controller: Controller<CachedCr>,
    watches: ChildWatches,
    ctx: Arc<Ctx>,
    metrics: Arc<inrun_observe::metrics::Metrics>,
    /// Whether the CRs' cache was counted as synced (to take it back at the end).
    counted: Arc<AtomicBool>,
    stop: watch::Receiver<bool>,
}

/// Runs the controller and its children's watches until `stop` turns true, keeping the
/// health counts; reconciles in flight finish first.
async fn run_until_stopped(running: Running) {
    let Running {
        controller,
        watches,
        ctx,
        metrics,
        counted,
        stop,
    } = running;
    let health = metrics.health();
    let name = ctx.plan().spec.crd_name();
    let queue = ctx.queue.clone();
    let synced = watches.crs.clone();
    let watches = watches.spawn(&ctx);
    health.controller_running(true);
    metrics.controller_started(&name);
    let cache = metrics.cr_source(&name, cr_views(name.clone(), synced.clone()));
    let running = queue.run();
    tracing::debug!(crd = %name, "controller started");
    let mut stop_on = stop.clone();
    let run = controller
        .graceful_shutdown_on(async move {
            let _ = stop_on.wait_for(|s| *s).await;
        })
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| {
            match result {
                // A CR deleted before its turn: what was queued for it will not run.
                Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
                    queue.forget(&triggers::key_of(obj.namespace.as_deref(), &obj.name));
                }
                Err(e) => tracing::debug!(error = %e, "controller event"),
                Ok(_) => {}
            }
            futures::future::ready(())
        });
    tokio::select! {
        () = run => {}
        () = stopped_before_sync(stop, synced) => tracing::debug!(crd = %name, "controller stopped before its cache synced"),
    }
    drop(running);
    for watch in watches {
        watch.abort();
    }
    health.controller_running(false);
    metrics.cr_source_gone(&name, cache);
    if counted.load(Ordering::Relaxed) {
        health.cache_synced(false);
    }
    tracing::debug!(crd = %name, "controller stopped");
}

/// Ends when `stop` turns true before the cache `synced` first synced; else never.
/// Stopped before then, the controller would wait for a sync that its stopped watch never
/// brings (its runner starts only then): no pass has run, so it ends at once instead.
async fn stopped_before_sync(mut stop: watch::Receiver<bool>, synced: Store<CachedCr>) {
    let _ = stop.wait_for(|s| *s).await;
    if synced.wait_until_ready().now_or_never().is_none() {
        return;
    }
    std::future::pending::<()>().await;
}

/// Reconciles every CR of every CRD in `assembly` until `shutdown` turns true; reconciles
/// in flight then finish their writes. The Blueprint is fixed for the run; [`crate::fleet`]
/// serves several Blueprints and reloads them.
///
/// # Errors
/// [`RunError`] when startup checks fail (missing CRD, unknown managed kind).
pub async fn run(
    assembly: Arc<Assembly>,
    client: Client,
    options: RunOptions,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    // `client` is used as given: acting with it for a Blueprint that names another
    // identity would widen what that Blueprint may do.
    if let Some(sa) = &assembly.blueprint.spec.service_account {
        return Err(RunError::Identity(sa.clone()));
    }
    let mut shared =
        Shared::new(client, options.instance.clone()).with_metrics(options.metrics.clone());
    if let Some(namespace) = &options.lock_namespace {
        shared = shared.with_locks(namespace);
    }
    let child_kinds = prepare(&shared, &assembly, options.install_crds).await?;
    let controllers: Vec<_> = child_kinds
        .into_iter()
        .enumerate()
        .map(|(index, kinds)| {
            controller(
                &shared,
                assembly.clone(),
                index,
                kinds,
                shutdown.clone(),
                futures::stream::pending(),
                None,
            )
        })
        .collect();
    tracing::info!(crds = controllers.len(), "controllers started");
    futures::future::join_all(controllers).await;
    tracing::info!("controllers stopped");
    Ok(())
}

/// The CRs of `crs` (a controller's cache of the CRD `crd`) as the console shows them,
/// sorted by namespace and name, [`inrun_observe::console::crs::SHOWN_PER_CRD`] at most:
/// read from the cache the controller keeps anyway, so a view costs the API server nothing.
fn cr_views(crd: String, crs: Store<CachedCr>) -> inrun_observe::console::CrSource {
    use inrun_observe::console::crs::{SHOWN_PER_CRD, view};
    Arc::new(move || {
        let mut all = crs.state();
        all.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        all.iter()
            .take(SHOWN_PER_CRD)
            .map(|cr| view(&crd, &cr.value()))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_packages_retries_double_from_one_second_up_to_one_minute_unless_the_blueprint_says() {
        let bp = inrun_blueprint::from_str(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds:\n    - {group: t.inrun.dev, version: v1, kind: Db}\n",
            "t.yaml",
        )
        .expect("blueprint");
        let runtime = bp.spec.runtime.clone();
        let plain = bp.spec.crds[0].clone();
        let mut package = plain.clone();
        package.reconcile.package = Some(
            serde_json::from_value(serde_json::json!({"location": "oci://example/db"}))
                .expect("plugin"),
        );
        let b = super::retries(&package, &runtime);
        let delays: Vec<u64> = (0..9).map(|_| b.failed("ns/a", 1).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // An edit of the spec starts again at 1 s.
        assert_eq!(b.failed("ns/a", 2), Duration::from_secs(1));
        // Anything else follows runtime.backoff (up to 5 min by default).
        let b = super::retries(&plain, &runtime);
        let last = (0..12).map(|_| b.failed("ns/a", 1)).last();
        assert_eq!(last, Some(runtime.backoff.max));
        assert!(runtime.backoff.max > Duration::from_secs(60));
        // A Blueprint's own backoff holds for packages too.
        let mut own = runtime.clone();
        own.backoff.max = Duration::from_secs(10);
        let b = super::retries(&package, &own);
        let last = (0..12).map(|_| b.failed("ns/a", 1)).last();
        assert_eq!(last, Some(Duration::from_secs(10)));
    }
}
