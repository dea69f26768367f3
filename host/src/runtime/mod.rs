//! The controller: watches every CRD a Blueprint declares and the children its CRs own,
//! queues changes per CRD with a bounded worker pool, and runs the pass. The only code that
//! writes to Kubernetes.

pub mod access;
mod backoff;
mod cache;
mod children;
mod context;
pub mod crds;
mod events;
mod finalize;
pub mod kinds;
mod meta;
mod pass;
mod safeguard;
mod status;

pub use cache::WatchCache;
pub use children::OWNER_UID;
pub use events::Reason;
pub use meta::{CLEANUP_AT, FINALIZER, RECONCILER_MANAGER};

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{ObjectRef, reflector, store::Writer};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::assemble::Assembly;
use crate::blueprint::Scope;
use context::Ctx;
pub use kinds::{Kind, Kinds};

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Install (server-side apply) the Blueprint's CRDs instead of requiring them.
    pub install_crds: bool,
    /// This replica's name, for events (e.g. the pod name).
    pub instance: String,
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
}

/// A CRD's CR resource, from the Blueprint.
fn cr_resource(crd: &crate::blueprint::CrdSpec) -> ApiResource {
    ApiResource {
        group: crd.group.clone(),
        version: crd.version.clone(),
        api_version: crd.api_version(),
        kind: crd.kind.clone(),
        plural: crd.plural(),
    }
}

/// What a change to a CR must touch to start a pass: its spec (generation), labels,
/// annotations, finalizers or deletion. A status-only change — above all the host's own
/// status write — starts none, so a status that differs on every pass (a counter, a time)
/// cannot make the CR reconcile in a loop.
fn spec_or_metadata(cr: &DynamicObject) -> Option<u64> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let meta = &cr.metadata;
    let mut h = DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut h);
    Some(h.finish())
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
    /// How many controllers' caches have synced (for `/readyz` and the metric).
    pub synced: Arc<AtomicI64>,
}

impl Shared {
    /// State shared by controllers started on `client`.
    pub fn new(client: Client, instance: String) -> Self {
        Shared {
            client,
            kinds: Arc::new(Kinds::default()),
            instance,
            synced: Arc::new(AtomicI64::new(0)),
        }
    }
}

/// The kinds each CRD's CRs may own, in `assembly.crds()` order.
pub type ChildKinds = Vec<Vec<kinds::Kind>>;

/// Checks what `assembly` needs before a controller starts: the host's permissions, its
/// CRDs (installed when `install_crds`), and that every managed kind is served. Returns
/// the kinds each CRD's CRs may own.
///
/// # Errors
/// [`RunError`] naming what is missing.
pub async fn prepare(
    shared: &Shared,
    assembly: &Assembly,
    install_crds: bool,
) -> Result<ChildKinds, RunError> {
    let client = &shared.client;
    let needed = crate::generate::rbac::required(
        &assembly.blueprint,
        &crate::generate::rbac::RbacOptions {
            install_crds,
            ..Default::default()
        },
    );
    // The Lease is checked by the leader elector, which knows its namespace.
    let needed: Vec<_> = needed
        .into_iter()
        .filter(|p| p.namespace.is_none())
        .collect();
    access::check(client, &needed).await?;
    let specs: Vec<_> = assembly.crds().iter().map(|c| &c.spec).collect();
    crds::ensure(client, &specs, install_crds).await?;
    let mut all = Vec::new();
    for plan in assembly.crds() {
        // Every kind this CRD's CRs may own, from every reconcile block.
        let mut child_kinds = Vec::new();
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
                let kind = shared
                    .kinds
                    .resolve(client, &m.api_version, &m.kind)
                    .await
                    .map_err(|source| RunError::ManagedKind {
                        field: format!(
                            "{}: crd {}: {field}.managedResources[{i}]",
                            plan.spec.source.file.display(),
                            plan.spec.kind
                        ),
                        source,
                    })?;
                child_kinds.push(kind);
            }
        }
        all.push(child_kinds);
    }
    Ok(all)
}

/// One CRD's controller: watches its CRs and the children they own and runs the pass,
/// until `stop` turns true (reconciles in flight then finish). Each item of `requeue`
/// queues every CR of the CRD (after a plugin it calls was reloaded).
pub fn controller(
    shared: &Shared,
    assembly: Arc<Assembly>,
    index: usize,
    child_kinds: Vec<kinds::Kind>,
    stop: watch::Receiver<bool>,
    requeue: impl futures::Stream<Item = ()> + Send + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let client = shared.client.clone();
    let plan = &assembly.crds()[index];
    let runtime = assembly.blueprint.spec.runtime.clone();
    let ar = cr_resource(&plan.spec);
    let workers = plan.spec.workers(&runtime);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        assembly: assembly.clone(),
        crd: index,
        cr_resource: ar.clone(),
        namespaced: plan.spec.scope == Scope::Namespaced,
        kinds: shared.kinds.clone(),
        events: events::Events::new(client.clone(), shared.instance.clone()),
        backoff: backoff::Backoff::new(runtime.backoff.base, runtime.backoff.max),
        runtime,
        queued: context::Queued::default(),
    });
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let writer = Writer::new(ar.clone());
    let reader = writer.as_reader();
    let queued = ctx.queued.clone();
    let synced = shared.synced.clone();
    let counted = Arc::new(AtomicBool::new(false));
    let counted_here = counted.clone();
    let crs = reflector(writer, watcher(api, watcher::Config::default()))
        .inspect(move |event| {
            // The first complete list: the cache of CRs is synced (for /readyz).
            if matches!(event, Ok(watcher::Event::InitDone))
                && !counted_here.swap(true, Ordering::Relaxed)
            {
                synced.fetch_add(1, Ordering::Relaxed);
                crate::metrics::global().cache_synced(1);
            }
        })
        .applied_objects()
        .predicate_filter(spec_or_metadata, Default::default())
        .inspect(move |item| {
            if let Ok(obj) = item {
                queued.push(Ctx::key(obj));
            }
        });
    let mut controller = Controller::for_stream_with(crs, reader, ar.clone())
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(u16::try_from(workers).unwrap_or(u16::MAX)),
        )
        .reconcile_all_on(requeue);
    for kind in child_kinds {
        let store = controller.store();
        let owner_ar = ar.clone();
        let queued = ctx.queued.clone();
        let child_api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
        controller = controller.watches_with(
            child_api,
            kind.resource.clone(),
            watcher::Config::default().labels(OWNER_UID),
            move |child: DynamicObject| {
                let uid = child
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(OWNER_UID))
                    .cloned();
                uid.and_then(|uid| {
                    store
                        .state()
                        .into_iter()
                        .find(|cr| cr.metadata.uid.as_deref() == Some(uid.as_str()))
                })
                .map(|cr| {
                    queued.push(Ctx::key(&cr));
                    ObjectRef::from_obj_with(cr.as_ref(), owner_ar.clone())
                })
            },
        );
    }
    let mut stop_on = stop;
    let synced = shared.synced.clone();
    let name = plan.spec.crd_name();
    async move {
        crate::metrics::global().controllers_running(1);
        tracing::debug!(crd = %name, "controller started");
        controller
            .graceful_shutdown_on(async move {
                let _ = stop_on.wait_for(|s| *s).await;
            })
            .run(pass::reconcile, pass::error_policy, ctx)
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "controller event");
                }
            })
            .await;
        crate::metrics::global().controllers_running(-1);
        if counted.load(Ordering::Relaxed) {
            synced.fetch_sub(1, Ordering::Relaxed);
            crate::metrics::global().cache_synced(-1);
        }
        tracing::debug!(crd = %name, "controller stopped");
    }
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
    let shared = Shared::new(client, options.instance.clone());
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
    use super::*;
    use serde_json::json;

    fn cr(generation: i64, labels: serde_json::Value, status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": "web", "namespace": "a", "generation": generation,
                         "labels": labels, "resourceVersion": status.to_string()},
            "status": status,
        }))
        .expect("cr")
    }

    #[test]
    fn a_status_only_change_starts_no_pass() {
        let before = spec_or_metadata(&cr(1, json!({"a": "1"}), json!({"passes": 1})));
        let status = spec_or_metadata(&cr(1, json!({"a": "1"}), json!({"passes": 2})));
        assert_eq!(before, status);
        assert_ne!(
            before,
            spec_or_metadata(&cr(2, json!({"a": "1"}), json!({})))
        );
        assert_ne!(
            before,
            spec_or_metadata(&cr(1, json!({"a": "2"}), json!({})))
        );
    }
}
