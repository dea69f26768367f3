//! Inrun's runtime, the only crate that writes to Kubernetes: the controller (it watches
//! every CRD a Blueprint declares and the children its CRs own, queues changes per CRD with
//! a bounded worker pool, and runs [`inrun_pass`] with effects against the API server), the
//! tenant [`fleet`] that starts and stops one controller set per Blueprint, [`leader`]
//! election, the client's [`kubeconfig`], and the [`metrics`] they all record into.

pub mod access;
mod backoff;
mod cache;
mod cached;
mod children;
mod context;
pub mod crds;
mod effects;
mod events;
pub mod fence;
pub mod fleet;
pub mod health;
pub mod identity;
pub mod kinds;
pub mod kubeconfig;
pub mod leader;
pub mod locks;
pub mod metrics;
mod pass;
pub mod release;
mod safeguard;
pub mod settings;
mod stores;
mod teardown;
mod triggers;
pub mod write_limit;

pub use cache::WatchCache;
pub use cached::{
    DEFAULT_MAX_BODY as DEFAULT_MAX_CR_BYTES, set_max_body_bytes as set_max_cr_bytes,
};
pub use children::APPLIED_HASH;
pub use events::Reason;
pub use inrun_pass::meta::{CLEANUP_AT, FINALIZER, OWNER_UID, RECONCILER_MANAGER};

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{FutureExt, StreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{ObjectRef, reflector, store::Writer};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use tokio::sync::watch;

use context::Ctx;
use inrun_blueprint::Scope;
use inrun_pass::waves;
use inrun_reconcilers::assemble::Assembly;
pub use kinds::{Kind, Kinds};
use triggers::ChildChange;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Install (server-side apply) the Blueprint's CRDs instead of requiring them.
    pub install_crds: bool,
    /// This replica's name, for events (e.g. the pod name).
    pub instance: String,
    /// Where the controllers record.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Where package CRs' identity locks are kept (Leases, written with `client`); `None`:
    /// not kept, every claim holds.
    pub lock_namespace: Option<String>,
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The host's identity lacks permissions the Blueprint needs.
    #[error(transparent)]
    Access(#[from] access::AccessError),
    /// A CRD is missing or could not be installed.
    #[error(transparent)]
    Crd(#[from] crds::CrdError),
    /// A kind in `managedResources` is not served by the API server.
    #[error("{field}")]
    ManagedKind {
        /// Where the kind is named.
        field: String,
        /// Why.
        #[source]
        source: kinds::UnknownKind,
    },
    /// The Blueprint names an identity this entry point cannot assume.
    #[error(
        "the Blueprint acts as ServiceAccount {0} (spec.serviceAccount); serve it through the fleet (`inrun run`), which impersonates it"
    )]
    Identity(String),
}

/// A CRD's CR resource, from the Blueprint.
fn cr_resource(crd: &inrun_blueprint::CrdSpec) -> ApiResource {
    ApiResource {
        group: crd.group.clone(),
        version: crd.version.clone(),
        api_version: crd.api_version(),
        kind: crd.kind.clone(),
        plural: crd.plural(),
    }
}

/// Everything one CRD's controller needs besides its plan.
#[derive(Clone)]
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// Kinds discovered so far, shared by every controller.
    pub kinds: Arc<Kinds>,
    /// This replica's name, for events.
    pub instance: String,
    /// Where controllers record; its [`health::Health`] is what `/readyz` reads.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// How clients acting as a tenant's ServiceAccount are built; `None`: this host
    /// cannot impersonate, and a Blueprint that names an identity is refused.
    pub impersonation: Option<identity::Impersonation>,
    /// Whom `client` acts as: `None` for the host's own identity.
    pub identity: Option<inrun_blueprint::ServiceAccountRef>,
    /// Where package CRs claim the infrastructure they manage, one owner a thing, shared
    /// by every tenant; `None`: claims are not kept (every claim holds).
    pub locks: Option<Arc<locks::IdentityLocks>>,
}

impl Shared {
    /// State shared by controllers started on `client`.
    pub fn new(client: Client, instance: String) -> Self {
        Shared {
            client,
            kinds: Arc::new(Kinds::default()),
            instance,
            metrics: Arc::default(),
            impersonation: None,
            identity: None,
            locks: None,
        }
    }

    /// The same, keeping package CRs' identity locks as Leases in `namespace`, written
    /// with `client`'s (the host's own) credentials.
    #[must_use]
    pub fn with_locks(mut self, namespace: &str) -> Self {
        self.locks = Some(Arc::new(locks::IdentityLocks::new(
            self.client.clone(),
            namespace,
        )));
        self
    }

    /// The same, able to act as tenants' ServiceAccounts (clients built from `config`,
    /// the host's own, writing only while `fence` is open).
    #[must_use]
    pub fn with_impersonation(mut self, config: kube::Config, fence: fence::Fence) -> Self {
        self.impersonation = Some(identity::Impersonation::new(config, fence));
        self
    }

    /// The same state acting as `sa`: its client impersonates the ServiceAccount; kinds
    /// and metrics stay shared.
    ///
    /// # Errors
    /// A message when this host cannot impersonate or the client cannot be built.
    pub fn acting_as(&self, sa: &inrun_blueprint::ServiceAccountRef) -> Result<Shared, String> {
        let impersonation = self.impersonation.as_ref().ok_or_else(|| {
            format!("the Blueprint runs as ServiceAccount {sa}, but this host was started without a way to impersonate")
        })?;
        let client = impersonation
            .client(sa)
            .map_err(|e| format!("a client acting as ServiceAccount {sa}: {e}"))?;
        Ok(Shared {
            client,
            identity: Some(sa.clone()),
            ..self.clone()
        })
    }

    /// The same, recording into `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }
}

/// The retry delays of a CRD's CRs, no shorter than the requeue floor: a package's (its
/// failures, and re-observing infrastructure not there or not ready yet) go from 1 s to
/// 1 min (seed 002) unless the Blueprint sets its own; anything else's follow
/// `runtime.backoff`.
fn retries(package: bool, runtime: &inrun_blueprint::RuntimeSpec) -> backoff::Backoff {
    let (base, max) = if package && runtime.backoff == inrun_blueprint::BackoffSpec::default() {
        (
            inrun_pass::package::RETRY_BASE,
            inrun_pass::package::RETRY_MAX,
        )
    } else {
        (runtime.backoff.base, runtime.backoff.max)
    };
    backoff::Backoff::new(base.max(runtime.min_requeue), max.max(runtime.min_requeue))
}

/// The kinds one CRD's CRs may own.
#[derive(Debug, Clone, Default)]
pub struct CrdKinds {
    /// Kinds the API server serves: their children are watched from the start.
    pub served: Vec<kinds::Kind>,
    /// Kinds (apiVersion, kind) it does not serve yet — typically defined by a CRD a
    /// Result creates: their children are watched once it does.
    pub pending: Vec<(String, String)>,
}

/// The kinds each CRD's CRs may own, in `assembly.crds()` order.
pub type ChildKinds = Vec<CrdKinds>;

/// Checks what `assembly` needs before a controller starts: the host's permissions, its
/// CRDs (installed when `install_crds`), and every managed kind. A kind the API server
/// does not serve yet is accepted with a warning (a CRD among the CR's children may define
/// it): its watch starts when it is served. Returns the kinds each CRD's CRs may own.
///
/// # Errors
/// [`RunError`] naming what is missing.
pub async fn prepare(
    shared: &Shared,
    assembly: &Assembly,
    install_crds: bool,
) -> Result<ChildKinds, RunError> {
    let client = &shared.client;
    let options = inrun_generate::rbac::RbacOptions {
        install_crds,
        ..Default::default()
    };
    let needed: Vec<_> = match &shared.identity {
        // A tenant's ServiceAccount is checked for reading its kinds cluster-wide (the
        // watches are) and for its CRDs. Where it may write is its RBAC's business,
        // enforced on every write: a refused one fails that CR's pass with `Forbidden`.
        Some(_) => inrun_generate::rbac::tenant_required(&assembly.blueprint, &[], &options)
            .into_iter()
            .filter_map(|mut p| {
                if p.resource != "customresourcedefinitions" {
                    p.verbs
                        .retain(|v| ["get", "list", "watch"].contains(&v.as_str()));
                }
                (!p.verbs.is_empty()).then_some(p)
            })
            .collect(),
        // The Lease is checked by the leader elector, which knows its namespace; the
        // rest, namespaced grants too (children written where the Blueprint bounds them,
        // the Secrets it names), is checked here.
        None => inrun_generate::rbac::required(&assembly.blueprint, &options)
            .into_iter()
            .filter(|p| p.resource != "leases")
            .collect(),
    };
    access::check(client, shared.identity.as_ref(), &needed).await?;
    let specs: Vec<_> = assembly.crds().iter().map(|c| &c.spec).collect();
    crds::ensure(client, &specs, install_crds).await?;
    let mut all = Vec::new();
    for plan in assembly.crds() {
        // Every kind this CRD's CRs may own, from every reconcile block.
        let mut child_kinds = CrdKinds::default();
        let mut seen = HashSet::new();
        let blocks = std::iter::once((plan.spec.source.field() + ".reconcile", &plan.default))
            .chain(plan.targets.iter().map(|(t, p)| {
                (
                    format!("{}.serve.targets[{t}]", plan.spec.source.field()),
                    p,
                )
            }));
        for (field, block) in blocks {
            for (i, m) in block.spec.managed_resources.iter().enumerate() {
                if !seen.insert((m.api_version.clone(), m.kind.clone())) {
                    continue;
                }
                let at = || {
                    format!(
                        "{}: crd {}: {field}.managedResources[{i}]",
                        plan.spec.source.file.display(),
                        plan.spec.kind
                    )
                };
                match shared.kinds.resolve(client, &m.api_version, &m.kind).await {
                    Ok(kind) => child_kinds.served.push(kind),
                    // A kind of a group with a dot may be a CRD's, created later (by a
                    // Result, or by anyone); a built-in group's kind never appears, so a
                    // typo there is still refused.
                    Err(e) if e.not_served() && may_be_defined_later(&m.api_version) => {
                        let defined_here = block
                            .spec
                            .managed_resources
                            .iter()
                            .any(|c| waves::defines_types(&c.api_version, &c.kind));
                        tracing::warn!(
                            at = %at(),
                            kind = %format!("{} {}", m.api_version, m.kind),
                            defined_here,
                            "the API server does not serve this kind yet; its children are watched once it does"
                        );
                        child_kinds
                            .pending
                            .push((m.api_version.clone(), m.kind.clone()));
                    }
                    Err(source) => {
                        return Err(RunError::ManagedKind {
                            field: at(),
                            source,
                        });
                    }
                }
            }
        }
        all.push(child_kinds);
    }
    Ok(all)
}

/// Whether a kind of `api_version` may be served later: its group could be a CRD's (it
/// has a dot; the built-in groups without one, core included, never gain kinds).
fn may_be_defined_later(api_version: &str) -> bool {
    inrun_contract::api_version::group_of(api_version).contains('.')
}

/// One CRD's controller: watches its CRs and the children they own and runs the pass,
/// until `stop` turns true (reconciles in flight then finish). Each item of `requeue`
/// queues every CR of the CRD (after a plugin it calls was reloaded).
///
/// A CR is reconciled when it or one of its children changes other than by the host's own
/// write (see [`triggers`]), on a requeue, and on `requeue`; children are watched by
/// metadata only, and mapped to their CR through an index by owner uid.
pub fn controller(
    shared: &Shared,
    assembly: Arc<Assembly>,
    index: usize,
    child_kinds: CrdKinds,
    stop: watch::Receiver<bool>,
    requeue: impl futures::Stream<Item = ()> + Send + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let client = shared.client.clone();
    let plan = &assembly.crds()[index];
    let runtime = assembly.blueprint.spec.runtime.clone();
    let ar = cr_resource(&plan.spec);
    let workers = plan.spec.workers(&runtime);
    let triggers = Arc::new(triggers::Triggers::new(ar.clone()));

    // Children: a metadata-only watch per kind, by the owner label; each change that is
    // not the host's own wakes its CR.
    let stores = stores::ChildStores::default();
    let child_triggers: Vec<_> = child_kinds
        .served
        .iter()
        .map(|kind| child_watch(&client, kind, &triggers, &stores).0)
        .collect();
    let pending = child_kinds.pending;

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        assembly: assembly.clone(),
        crd: index,
        cr_resource: ar.clone(),
        namespaced: plan.spec.scope == Scope::Namespaced,
        kinds: shared.kinds.clone(),
        locks: shared.locks.clone(),
        events: events::Events::new(client.clone(), shared.instance.clone()),
        backoff: retries(plan.spec.serves_a_package(), &runtime),
        runtime,
        queue: shared.metrics.controller(
            &plan.spec.crd_name(),
            usize::try_from(workers).unwrap_or(usize::MAX),
        ),
        children: stores,
        triggers: triggers.clone(),
        metrics: shared.metrics.clone(),
        kinds_changed: Arc::default(),
    });
    // The CRs' cache holds them compacted ([`cached::CachedCr`]); a pass reads one whole.
    let api: Api<cached::CachedCr> = Api::all_with(client.clone(), &ar);
    let writer = Writer::new(ar.clone());
    let reader = writer.as_reader();
    let lazy_crs = reader.clone();
    let queued = ctx.queue.clone();
    let health = shared.metrics.health().clone();
    let counted = Arc::new(AtomicBool::new(false));
    let counted_here = counted.clone();
    let cr_triggers = triggers.clone();
    let cr_ctx = ctx.clone();
    let crs = reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .inspect(move |event| match event {
        // The first complete list: the cache of CRs is synced (for /readyz).
        Ok(watcher::Event::InitDone) if !counted_here.swap(true, Ordering::Relaxed) => {
            health.cache_synced(true);
        }
        Ok(watcher::Event::Delete(cr)) => cr_triggers.cr_gone(&cr.metadata),
        _ => {}
    })
    // The CRs that wake, as the controller's triggers; those of a (re)list only once it
    // is complete ([`triggers::ListGate`]).
    .scan(
        triggers::ListGate::default(),
        move |gate: &mut triggers::ListGate<cached::CachedCr>, event| {
            let out: Vec<Result<cached::CachedCr, watcher::Error>> = match event {
                Ok(event) => gate
                    .pass(
                        event,
                        |cr| {
                            let wake = triggers.cr_changed(&cr.metadata, &cr_ctx.cr_id(cr));
                            if wake {
                                queued.queued(&Ctx::key(cr));
                            }
                            wake
                        },
                        |cr| {
                            triggers.unsee(&cr.metadata);
                            queued.forget(&Ctx::key(cr));
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
    .flatten();
    // The children's watches run as tasks of their own, not inside the controller: their
    // caches then fill while passes wait for them, whatever the controller polls first.
    let (woken_tx, woken_rx) = tokio::sync::mpsc::unbounded_channel();
    let queued = ctx.queue.clone();
    let children_woken = futures::stream::unfold(woken_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    })
    .inspect(move |r: &ObjectRef<cached::CachedCr>| {
        queued.queued(&triggers::key_of(r.namespace.as_deref(), &r.name));
    });
    // A plugin reload queues every CR the cache holds.
    let (all_queued, all_crs) = (ctx.queue.clone(), reader.clone());
    let requeue = requeue.inspect(move |()| {
        for cr in all_crs.state() {
            all_queued.queued(&Ctx::key(cr.as_ref()));
        }
    });
    let synced = reader.clone();
    let controller = Controller::for_stream_with(crs, reader, ar.clone())
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(u16::try_from(workers).unwrap_or(u16::MAX)),
        )
        .reconcile_all_on(requeue)
        .reconcile_on(children_woken);
    let mut stop_on = stop.clone();
    let mut stopped_early = stop;
    let metrics = shared.metrics.clone();
    let lazy_ctx = ctx.clone();
    let queue = ctx.queue.clone();
    let name = plan.spec.crd_name();
    async move {
        let health = metrics.health();
        let watches: Vec<_> =
            child_triggers
                .into_iter()
                .map(|stream| {
                    let tx = woken_tx.clone();
                    tokio::spawn(stream.for_each(move |r| {
                        let _ = tx.send(r);
                        futures::future::ready(())
                    }))
                })
                .chain((!pending.is_empty()).then(|| {
                    tokio::spawn(lazy_watches(lazy_ctx, lazy_crs, pending, woken_tx.clone()))
                }))
                .collect();
        drop(woken_tx);
        health.controller_running(true);
        metrics.controller_started(&name);
        let running = queue.run();
        tracing::debug!(crd = %name, "controller started");
        let run = controller
            .graceful_shutdown_on(async move {
                let _ = stop_on.wait_for(|s| *s).await;
            })
            .run(pass::reconcile, pass::error_policy, ctx)
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
        // Stopped before its cache of CRs first synced, the controller would wait for a
        // sync that its stopped watch never brings (its runner starts only then): no pass
        // has run, so it ends at once instead.
        let before_sync = async move {
            let _ = stopped_early.wait_for(|s| *s).await;
            if synced.wait_until_ready().now_or_never().is_none() {
                return;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = run => {}
            () = before_sync => tracing::debug!(crd = %name, "controller stopped before its cache synced"),
        }
        drop(running);
        for watch in watches {
            watch.abort();
        }
        health.controller_running(false);
        if counted.load(Ordering::Relaxed) {
            health.cache_synced(false);
        }
        tracing::debug!(crd = %name, "controller stopped");
    }
}

/// The metadata-only watch of `kind`'s children (by the owner label), its cache added to
/// `stores`; yields the CRs that changes other than the host's own wake.
fn child_watch(
    client: &Client,
    kind: &kinds::Kind,
    triggers: &Arc<triggers::Triggers>,
    stores: &stores::ChildStores,
) -> (
    futures::stream::BoxStream<'static, ObjectRef<cached::CachedCr>>,
    kube::runtime::reflector::Store<PartialObjectMeta<DynamicObject>>,
) {
    // `Api<PartialObjectMeta<_>>` asks for metadata only.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &kind.resource);
    let writer: Writer<PartialObjectMeta<DynamicObject>> = Writer::new(kind.resource.clone());
    let store = writer.as_reader();
    stores.insert(kind, store.clone());
    let triggers = triggers.clone();
    let (group, kind_name) = (kind.resource.group.clone(), kind.resource.kind.clone());
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default().labels(OWNER_UID))
            .default_backoff()
            .modify(stores::trim),
    )
    .filter_map(move |event| {
        let kind = (group.as_str(), kind_name.as_str());
        let woken = match &event {
            Ok(watcher::Event::Apply(c)) => child_event(&triggers, kind, c, ChildChange::Applied),
            Ok(watcher::Event::InitApply(c)) => {
                child_event(&triggers, kind, c, ChildChange::Listed)
            }
            Ok(watcher::Event::Delete(c)) => child_event(&triggers, kind, c, ChildChange::Deleted),
            _ => None,
        };
        futures::future::ready(woken)
    })
    .boxed();
    (stream, store)
}

/// Watches the children of kinds the API server did not serve at start-up, each from when
/// it does: tried again when a pass saw a CRD of the CR's become `Established`, and on a
/// timer (1 s, doubling to 30 s) for types created any other way. Once a new watch has
/// listed, every CR of `crs` is reconciled once: a child changed before the watch began
/// (deleted behind the host's back, say) has no event to wake its CR.
async fn lazy_watches(
    ctx: Arc<Ctx>,
    crs: kube::runtime::reflector::Store<cached::CachedCr>,
    mut pending: Vec<(String, String)>,
    woken: tokio::sync::mpsc::UnboundedSender<ObjectRef<cached::CachedCr>>,
) {
    const FIRST: std::time::Duration = std::time::Duration::from_secs(1);
    const MOST: std::time::Duration = std::time::Duration::from_secs(30);
    let mut watches = futures::stream::SelectAll::new();
    let mut wait = FIRST;
    let mut next_try = tokio::time::Instant::now();
    loop {
        if !pending.is_empty() && tokio::time::Instant::now() >= next_try {
            let mut still = Vec::new();
            for (api_version, kind) in pending {
                match ctx.kinds.resolve(&ctx.client, &api_version, &kind).await {
                    Ok(resolved) => {
                        tracing::info!(kind = %format!("{api_version} {kind}"), "the API server serves this kind now; watching its children");
                        let (watch, store) =
                            child_watch(&ctx.client, &resolved, &ctx.triggers, &ctx.children);
                        watches.push(watch);
                        let crs = crs.clone();
                        let resource = ctx.cr_resource.clone();
                        let every_cr = futures::stream::once(async move {
                            let _ = store.wait_until_ready().await;
                            crs.state()
                                .iter()
                                .map(|cr| {
                                    let r = ObjectRef::new_with(
                                        cr.metadata.name.as_deref().unwrap_or_default(),
                                        resource.clone(),
                                    );
                                    match cr.metadata.namespace.as_deref() {
                                        Some(ns) => r.within(ns),
                                        None => r,
                                    }
                                })
                                .collect::<Vec<_>>()
                        })
                        .flat_map(futures::stream::iter);
                        watches.push(every_cr.boxed());
                    }
                    Err(_) => still.push((api_version, kind)),
                }
            }
            pending = still;
            next_try = tokio::time::Instant::now() + wait;
            wait = (wait * 2).min(MOST);
        }
        tokio::select! {
            Some(r) = watches.next(), if !watches.is_empty() => {
                let _ = woken.send(r);
            }
            () = ctx.kinds_changed.notified(), if !pending.is_empty() => {
                next_try = tokio::time::Instant::now();
                wait = FIRST;
            }
            () = tokio::time::sleep_until(next_try), if !pending.is_empty() => {}
            else => {
                if pending.is_empty() && watches.is_empty() {
                    return;
                }
            }
        }
    }
}

/// The CR a child's watch event wakes, if any.
fn child_event(
    triggers: &triggers::Triggers,
    (group, kind): (&str, &str),
    child: &PartialObjectMeta<DynamicObject>,
    change: ChildChange,
) -> Option<ObjectRef<cached::CachedCr>> {
    let meta = &child.metadata;
    let owner = meta.labels.as_ref()?.get(OWNER_UID)?;
    let id = stores::child_id(
        group,
        kind,
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    );
    let rv = meta.resource_version.as_deref().unwrap_or_default();
    triggers.child_changed(owner, &id, rv, change)
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
        return Err(RunError::Identity(sa.to_string()));
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
            )
        })
        .collect();
    tracing::info!(crds = controllers.len(), "controllers started");
    futures::future::join_all(controllers).await;
    tracing::info!("controllers stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_packages_retries_double_from_one_second_up_to_one_minute_unless_the_blueprint_says() {
        let runtime = inrun_blueprint::RuntimeSpec::default();
        let b = super::retries(true, &runtime);
        let delays: Vec<u64> = (0..9).map(|_| b.failed("ns/a", 1).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // An edit of the spec starts again at 1 s.
        assert_eq!(b.failed("ns/a", 2), Duration::from_secs(1));
        // Anything else follows runtime.backoff (up to 5 min by default).
        let b = super::retries(false, &runtime);
        let last = (0..12).map(|_| b.failed("ns/a", 1)).last();
        assert_eq!(last, Some(runtime.backoff.max));
        assert!(runtime.backoff.max > Duration::from_secs(60));
        // A Blueprint's own backoff holds for packages too.
        let mut own = runtime.clone();
        own.backoff.max = Duration::from_secs(10);
        let b = super::retries(true, &own);
        let last = (0..12).map(|_| b.failed("ns/a", 1)).last();
        assert_eq!(last, Some(Duration::from_secs(10)));
    }

    #[test]
    fn only_kinds_of_groups_a_crd_could_define_are_waited_for() {
        assert!(super::may_be_defined_later("parts.example.com/v1"));
        assert!(super::may_be_defined_later("gateway.networking.k8s.io/v1"));
        assert!(!super::may_be_defined_later("v1"), "core");
        assert!(!super::may_be_defined_later("apps/v1"));
    }
}
