//! Several Blueprints (tenants) in one host, each reloaded without a restart.
//!
//! A tenant is one Blueprint: the `--blueprint` file or directory, one file of a
//! `--tenants` directory, or one cluster-scoped `Blueprint` custom resource. Each tenant has
//! its own plugin slots, limits policy, CRDs and controllers (one worker pool per CRD).
//! One supervisor task owns every change: it reloads a tenant whose source changed (the
//! new Blueprint is assembled and checked before anything stops, so a broken edit leaves
//! the old one serving), starts and stops the controllers of CRDs added, changed or
//! removed, checks plugin sources and re-queues the CRDs whose plugin was swapped, and
//! refuses a Blueprint that claims a CRD another tenant already serves.

mod claims;
mod consent;
mod files;
mod lanes;
pub mod release;
mod resource_tenants;
mod resources;
mod serving;
mod shares;
#[cfg(test)]
mod testing;

pub use inrun_runtime::kinds::blueprint_resource;
pub use resources::{BLUEPRINT_CRD, blueprint_crd};

use claims::Reserved;
use files::fingerprint;
use lanes::Lane;
use serving::stop;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use inrun_blueprint::{
    self as blueprint, Blueprint, BlueprintError, CrdSpec, RuntimeSpec, ServiceAccountRef,
};
use inrun_reconcilers::assemble::{Assembly, BuildContext, Policy, Services};
use inrun_reconcilers::plugins::{Change, PluginSet, SlotStatus};
use inrun_reconcilers::sources::Location;
use inrun_runtime::impersonation::IdentityError;
use inrun_runtime::{self as runtime, RunError, Shared};
use inrun_wasm::Engine;

/// The longest a Blueprint resource's package call may take, whatever
/// `--max-package-deadline` says: thirty minutes.
const TENANT_PACKAGE_CEILING: Duration = Duration::from_secs(30 * 60);

/// How the fleet finds its tenants and treats them.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// One Blueprint, file or directory (merged), served as one tenant.
    pub blueprint: Option<PathBuf>,
    /// A directory whose every `*.yaml`/`*.yml` file is a tenant of its own.
    pub tenants: Option<PathBuf>,
    /// Serve every cluster-scoped `Blueprint` custom resource as a tenant.
    pub resources: bool,
    /// How often Blueprint files and plugin sources are checked; `None` never reloads.
    pub reload: Option<Duration>,
    /// Limits defaults and ceilings for every tenant (resource tenants may not name
    /// local plugin files whatever this says).
    pub policy: Policy,
    /// Install (server-side apply) the CRDs tenants declare.
    pub install_crds: bool,
    /// Let `Blueprint` resources grant their plugins capabilities (cluster reads, HTTP)
    /// and adopt objects they did not create.
    pub resource_capabilities: bool,
    /// Where `Blueprint` resources' calls may go (`--tenant-egress`); `None`: nowhere.
    pub tenant_egress: Option<inrun_reconcilers::egress::Egress>,
    /// The identity of `Blueprint` resources that name no `spec.serviceAccount`, one a
    /// Blueprint (`--default-tenant-service-account`); `None`: such a Blueprint is refused.
    pub default_tenant_service_account: Option<inrun_blueprint::AccountPattern>,
    /// The namespaces a Blueprint resource's `spec.serviceAccount` may live in
    /// (`--tenant-identity-namespaces`), besides the default pattern's; `None`: any.
    /// A tenant's ServiceAccount reads its kinds cluster-wide (its watches are), so it
    /// belongs in a namespace the operator keeps, where no tenant runs pods that could
    /// mount its token.
    pub tenant_identity_namespaces: Option<Vec<String>>,
    /// What becomes of the host's finalizers on the CRs of a tenant removed, or of a CRD
    /// its reloaded Blueprint dropped (`--on-tenant-removal`).
    pub on_removal: release::OnRemoval,
}

/// Where a tenant's Blueprint comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "type", content = "name", rename_all = "camelCase")]
pub enum TenantSource {
    /// A file or a directory of files merged into one Blueprint.
    File(PathBuf),
    /// A `Blueprint` custom resource, by name.
    Resource(String),
}

impl std::fmt::Display for TenantSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TenantSource::File(p) => write!(f, "{}", p.display()),
            TenantSource::Resource(n) => write!(f, "Blueprint/{n}"),
        }
    }
}

/// What the console and `/tenants` show of one tenant.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantView {
    /// Where the Blueprint comes from.
    pub source: TenantSource,
    /// The Blueprint's `metadata.name`, once one loaded.
    pub name: Option<String>,
    /// Whether a Blueprint of this tenant serves (possibly an older one than the source).
    pub serving: bool,
    /// The CRDs it serves.
    pub crds: Vec<String>,
    /// Why the tenant's newest Blueprint is not the one serving, while that is so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its plugins and their versions.
    pub plugins: Vec<SlotStatus>,
    /// Blueprint versions applied after the first.
    pub reloads: u64,
    /// The share of the host its Blueprint asked for (`spec.runtime.budget`), within the
    /// operator's ceilings.
    #[serde(skip_serializing_if = "inrun_blueprint::BudgetSpec::is_empty")]
    pub budget: inrun_blueprint::BudgetSpec,
    /// What it uses of its share of the plugin engine now (read when the view is asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<inrun_wasm::TenantUsage>,
    /// The serving assembly, for `/blueprint`.
    #[serde(skip)]
    pub assembly: Option<Arc<Assembly>>,
}

impl std::fmt::Debug for TenantView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantView")
            .field("source", &self.source)
            .field("name", &self.name)
            .field("serving", &self.serving)
            .field("crds", &self.crds)
            .field("error", &self.error)
            .field("plugins", &self.plugins)
            .field("reloads", &self.reloads)
            .finish_non_exhaustive()
    }
}

/// Why the fleet could not start.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The `--blueprint` file does not load.
    #[error(transparent)]
    Blueprint(#[from] BlueprintError),
    /// The `--blueprint` tenant could not start.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A CRD of the Blueprint is already served by another tenant.
    #[error(transparent)]
    Claimed(BlueprintError),
    /// The `Blueprint` CRD could not be installed or read.
    #[error("the Blueprint custom resource definition")]
    Resources(#[source] inrun_runtime::crds::CrdError),
    /// The tenant has no identity to act as, or it cannot be assumed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

impl FleetError {
    /// The reason a `Blueprint` resource's `Accepted` condition gives for this refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            FleetError::Claimed(_) => "CrdConflict",
            FleetError::Blueprint(_) | FleetError::Resources(_) => "Invalid",
            FleetError::Run(_) => "StartFailed",
            FleetError::Identity(_) => "NoIdentity",
        }
    }
}

/// Why a tenant's Blueprint is not served: the classification and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// [`FleetError::reason`].
    pub(crate) reason: &'static str,
    /// The error chain.
    pub(crate) message: String,
}

struct Running {
    spec: CrdSpec,
    runtime: RuntimeSpec,
    identity: Option<ServiceAccountRef>,
    plugins: BTreeSet<String>,
    stop: watch::Sender<bool>,
    requeue: mpsc::UnboundedSender<()>,
    task: JoinHandle<()>,
}

/// Whom a tenant acts as, and the clients that do: the host's own, or its ServiceAccount's.
#[derive(Clone)]
struct Acting {
    identity: Option<ServiceAccountRef>,
    /// The share its Blueprint asked for (`spec.runtime.budget`).
    budget: inrun_blueprint::BudgetSpec,
    shared: Shared,
    services: Services,
    /// Plugin slots, whose pull secrets are read as this identity.
    plugins: Arc<PluginSet>,
}

struct Tenant {
    source: TenantSource,
    policy: Policy,
    /// The identity its serving Blueprint acts as.
    acting: Acting,
    /// The identity a refused Blueprint asked for, kept so a retry reuses its clients and
    /// plugin slots (fetched and compiled once) instead of building them again.
    candidate: Option<Acting>,
    /// Hash of the source's text (file contents, or the resource's spec).
    fingerprint: Option<u64>,
    /// A fingerprint that failed, so it is not retried until the source changes.
    failed: Option<u64>,
    assembly: Option<Arc<Assembly>>,
    running: BTreeMap<String, Running>,
    error: Option<String>,
    reloads: u64,
    /// The last document of a resource tenant, to retry a refused one.
    object: Option<resources::Object>,
}

/// Every tenant of one host and the supervisor that keeps them current.
pub struct Fleet {
    shared: Shared,
    engine: Engine,
    services: Services,
    options: FleetOptions,
    tenants: tokio::sync::Mutex<BTreeMap<TenantSource, Tenant>>,
    /// CRDs a tenant prepares (installs) outside the tenants lock, by name: no other
    /// tenant may claim them meanwhile.
    reserved: Mutex<BTreeMap<String, TenantSource>>,
    views: Mutex<BTreeMap<TenantSource, TenantView>>,
    /// One lane per tenant: its loads and removals run one at a time, in order, each as
    /// its own task, so one tenant's slow source never holds up another's.
    lanes: Mutex<BTreeMap<TenantSource, Arc<Mutex<Lane>>>>,
    /// The tasks of those lanes, awaited at shutdown.
    jobs: Mutex<Vec<JoinHandle<()>>>,
    /// Turns true at shutdown: loads in flight give up, none starts controllers.
    closing: watch::Sender<bool>,
    /// The status each `Blueprint` resource should have, by name: written by the replica
    /// that leads (under sharding), and again by whichever comes to lead.
    statuses: Mutex<BTreeMap<String, resources::Status>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The locations (as the plugin slots name them) each CRD of `blueprint` calls.
fn plugin_locations(blueprint: &Blueprint) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in blueprint.plugins() {
        if let Ok(location) = Location::parse(r.location, r.digest, r.crd.source.base_dir()) {
            out.entry(r.crd.crd_name())
                .or_default()
                .insert(location.to_string());
        }
    }
    out
}

impl Fleet {
    /// A fleet with no tenant loaded yet.
    pub fn new(
        shared: Shared,
        engine: Engine,
        services: Services,
        options: FleetOptions,
    ) -> Arc<Self> {
        Arc::new(Fleet {
            shared,
            engine,
            services,
            options,
            tenants: tokio::sync::Mutex::new(BTreeMap::new()),
            reserved: Mutex::new(BTreeMap::new()),
            views: Mutex::new(BTreeMap::new()),
            lanes: Mutex::new(BTreeMap::new()),
            jobs: Mutex::new(Vec::new()),
            closing: watch::channel(false).0,
            statuses: Mutex::new(BTreeMap::new()),
        })
    }

    /// Records the outcome of loading the `Blueprint` resource `object` as its status, and
    /// writes it when this replica makes the host's cluster-wide writes.
    async fn report(
        &self,
        object: &resources::Object,
        result: Result<(), Refusal>,
        crds: Vec<String>,
    ) {
        let status = resources::Status::new(object, result, crds);
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(object.name.clone(), status.clone());
        if self.shared.leads() {
            status.write(&self.shared.client).await;
        }
    }

    /// This replica has come to lead its ring (under sharding): it installs the CRDs its
    /// tenants serve (another replica's version of them may be in place) and writes the
    /// `Blueprint` resources' status, which the replicas that did not lead only recorded.
    pub async fn lead(&self) {
        if self.options.install_crds {
            // Each tenant's CRDs as that tenant installs them (as itself, when it acts as a
            // ServiceAccount).
            let served: Vec<(kube::Client, Vec<CrdSpec>)> = self
                .tenants
                .lock()
                .await
                .values()
                .map(|t| {
                    let specs = t.running.values().map(|r| r.spec.clone()).collect();
                    (t.acting.shared.client.clone(), specs)
                })
                .collect();
            for (client, specs) in served {
                let specs: Vec<&CrdSpec> = specs.iter().collect();
                if let Err(e) = inrun_runtime::crds::ensure(&client, &specs, true).await {
                    tracing::warn!(error = %inrun_contract::errors::chain(&e), "installing the CRDs on coming to lead");
                }
            }
            if self.options.resources
                && let Err(e) = resources::ensure_crd(&self.shared.client, true.into()).await
            {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "installing the Blueprint CRD on coming to lead");
            }
        }
        let statuses: Vec<resources::Status> = self
            .statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for status in statuses {
            status.write(&self.shared.client).await;
        }
    }

    /// What the console shows: every tenant, in source order, with what it uses now.
    pub fn views(&self) -> Vec<TenantView> {
        let mut views: Vec<TenantView> = self
            .views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for view in &mut views {
            view.usage = self.engine.tenant_usage(&view.source.to_string());
        }
        views
    }

    /// The assemblies serving now, one per tenant that serves.
    pub fn assemblies(&self) -> Vec<Arc<Assembly>> {
        self.views()
            .into_iter()
            .filter_map(|v| v.assembly)
            .collect()
    }

    /// The host's own Blueprint (`--blueprint`) as it serves; `None` when the host serves
    /// only tenants, or before it loads.
    pub fn own_assembly(&self) -> Option<Arc<Assembly>> {
        let path = self.options.blueprint.as_ref()?;
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        views
            .get(&TenantSource::File(path.clone()))?
            .assembly
            .clone()
    }

    /// The runtime section of the host's own Blueprint (`--blueprint`), which alone sets
    /// host-wide settings such as the health port and leader election; `None` when the
    /// host serves only tenants.
    pub fn host_runtime(&self) -> Option<RuntimeSpec> {
        let path = self.options.blueprint.as_ref()?;
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        let view = views.get(&TenantSource::File(path.clone()))?;
        Some(view.assembly.as_ref()?.blueprint.spec.runtime.clone())
    }

    fn publish(&self, tenant: &Tenant) {
        let view = TenantView {
            source: tenant.source.clone(),
            name: tenant
                .assembly
                .as_ref()
                .map(|a| a.blueprint.metadata.name.clone()),
            serving: tenant.assembly.is_some(),
            crds: tenant.running.keys().cloned().collect(),
            error: tenant.error.clone(),
            plugins: tenant
                .acting
                .plugins
                .slots()
                .iter()
                .map(|s| s.status())
                .collect(),
            reloads: tenant.reloads,
            budget: tenant.acting.budget.clone(),
            usage: None,
            assembly: tenant.assembly.clone(),
        };
        self.views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tenant.source.clone(), view);
    }

    fn unpublish(&self, source: &TenantSource) {
        self.views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(source);
    }

    fn new_tenant(&self, source: TenantSource) -> Tenant {
        let mut policy = self.options.policy.clone();
        if matches!(source, TenantSource::Resource(_)) {
            policy.local_plugins = false;
            policy.foreign_secrets = false;
            policy.ceilings = policy.tenant_ceilings;
            // A tenant's package call holds one of its call slots while it waits.
            policy.package_deadline = policy.package_deadline.min(TENANT_PACKAGE_CEILING);
            policy.capabilities = self.options.resource_capabilities;
            // No list: a Blueprint resource calls out nowhere.
            policy.egress = Some(self.options.tenant_egress.clone().unwrap_or_else(|| {
                inrun_reconcilers::egress::Egress::new(&[], Vec::new())
                    .expect("an empty allowlist parses")
            }));
        }
        Tenant {
            acting: self.host_acting(&source, &inrun_blueprint::BudgetSpec::default()),
            source,
            policy,
            candidate: None,
            fingerprint: None,
            failed: None,
            assembly: None,
            running: BTreeMap::new(),
            error: None,
            reloads: 0,
            object: None,
        }
    }

    async fn assemble(
        &self,
        policy: &Policy,
        acting: &Acting,
        blueprint: Blueprint,
    ) -> Result<Assembly, BlueprintError> {
        Assembly::build(
            blueprint,
            BuildContext {
                plugins: &acting.plugins,
                services: &acting.services,
                policy,
            },
        )
        .await
    }

    fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// `work`, unless the fleet starts shutting down first.
    async fn until_closing<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        let mut closing = self.closing.subscribe();
        tokio::select! {
            () = async {
                let _ = closing.wait_for(|c| *c).await;
            } => None,
            out = work => Some(out),
        }
    }

    /// Serves every tenant until `shutdown` turns true, then stops every controller
    /// (reconciles in flight finish).
    ///
    /// # Errors
    /// [`FleetError`] when the `--blueprint` tenant cannot start (a missing CRD, missing
    /// permissions): with a single Blueprint there is nothing else to serve.
    pub async fn run(
        self: Arc<Self>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), FleetError> {
        if let Some(path) = &self.options.blueprint {
            let source = TenantSource::File(path.clone());
            let loaded = self.tenants.lock().await.contains_key(&source);
            if !loaded {
                self.load_initial().await?;
            }
            // Prepared without the tenants lock, as any tenant's start.
            let serving = {
                let tenants = self.tenants.lock().await;
                tenants
                    .get(&source)
                    .and_then(|t| Some((t.assembly.clone()?, t.acting.clone())))
            };
            let prepared = match &serving {
                Some((assembly, acting)) => Some(
                    runtime::prepare(&acting.shared, assembly, self.options.install_crds).await,
                ),
                None => None,
            };
            let mut tenants = self.tenants.lock().await;
            if let Some(tenant) = tenants.remove(&source) {
                let mut tenant = tenant;
                let started = match (serving, prepared) {
                    (Some((a, acting)), Some(Ok(kinds))) => {
                        Self::serve(&mut tenant, &acting, a, kinds, &tenants).map_or(Ok(()), Err)
                    }
                    (_, Some(Err(e))) => Err(FleetError::from(e)),
                    _ => Ok(()),
                };
                self.publish(&tenant);
                tenants.insert(source, tenant);
                started?;
            }
        }
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let watch_task = if self.options.resources {
            resources::ensure_crd(
                &self.shared.client,
                self.shared.install(self.options.install_crds),
            )
            .await
            .map_err(FleetError::Resources)?;
            Some(tokio::spawn(resources::watch(
                self.shared.client.clone(),
                events_tx,
            )))
        } else {
            drop(events_tx);
            None
        };
        self.sync_tenant_files();
        let interval = self.options.reload;
        // Checking plugin sources may take as long as a registry makes it: a task per
        // tenant, one check at a time each, so a slow registry holds up only its tenant's.
        let mut polling: BTreeMap<TenantSource, JoinHandle<()>> = BTreeMap::new();
        // One ticker for the whole loop: a sleep made anew each turn would be pushed back
        // by every event, so a tenant touching its Blueprint resource every few seconds
        // would stop reloads, retries and plugin polls for every tenant.
        let mut ticker = interval.map(|d| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        loop {
            let tick = async {
                match ticker.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = async {
                    // The guard `wait_for` returns is not Send: drop it here.
                    let _ = shutdown.wait_for(|s| *s).await;
                } => break,
                Some(event) = events.recv() => self.resource_event(event),
                () = tick => {
                    self.reload_files();
                    self.recheck_consent().await;
                    self.retry_resources().await;
                    self.poll_plugins(&mut polling).await;
                }
            }
        }
        if let Some(task) = watch_task {
            task.abort();
        }
        for task in polling.into_values() {
            task.abort();
        }
        // Loads in flight give up (none starts a controller now); then every tenant stops.
        self.closing.send_replace(true);
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(|p| p.into_inner()));
        for job in jobs {
            let _ = job.await;
        }
        let mut tenants = self.tenants.lock().await;
        // Every controller of every tenant stops starting reconciles at once (a lost lease
        // must not leave some writing while others drain); then passes in flight finish.
        for running in tenants.values().flat_map(|t| t.running.values()) {
            let _ = running.stop.send(true);
        }
        for tenant in tenants.values_mut() {
            Self::stop_all(tenant).await;
            self.publish(tenant);
        }
        Ok(())
    }

    /// Loads (or reloads) `source` from `blueprint`, applying it if it assembles and
    /// starts; on failure the tenant's serving Blueprint, if any, keeps serving. The
    /// identity check and the plugins' fetch and compile run without the tenants lock, so
    /// other tenants load, reload and report meanwhile. `None`: the fleet is shutting down
    /// and nothing changed.
    async fn load_tenant(
        &self,
        source: TenantSource,
        fingerprint: u64,
        loaded: Result<Blueprint, BlueprintError>,
    ) -> Option<Result<(), Refusal>> {
        let (policy, current, candidate) = {
            let tenants = self.tenants.lock().await;
            match tenants.get(&source) {
                Some(t) => (t.policy.clone(), t.acting.clone(), t.candidate.clone()),
                None => {
                    let t = self.new_tenant(source.clone());
                    (t.policy, t.acting, None)
                }
            }
        };
        let (acting, assembled) = self
            .until_closing(async {
                let bp = match loaded {
                    Ok(bp) => bp,
                    Err(e) => return (None, Err(FleetError::Blueprint(e))),
                };
                let refused = self
                    .over_budget(&bp)
                    .map(|(field, why)| (format!("spec.runtime.budget.{field}"), why))
                    .or_else(|| self.oversized(&source, &bp));
                if let Some((field, why)) = refused {
                    let problem =
                        blueprint::Problem::new(Path::new(&source.to_string()), None, field, why);
                    return (
                        None,
                        Err(FleetError::Blueprint(BlueprintError::Invalid {
                            problems: vec![problem],
                        })),
                    );
                }
                match self
                    .acting(&source, &current, candidate.as_ref(), &bp)
                    .await
                {
                    Err(e) => (None, Err(FleetError::Identity(e))),
                    Ok(acting) => {
                        let assembled = self
                            .assemble(&policy, &acting, bp)
                            .await
                            .map_err(FleetError::Blueprint);
                        (Some(acting), assembled)
                    }
                }
            })
            .await?;
        // Prepared (access reviews, CRDs installed and established, kinds discovered) without
        // the tenants lock: that takes seconds to minutes for a large or refused tenant, and
        // other tenants load, reload and report meanwhile. Its CRDs must be unclaimed first:
        // preparing installs them.
        let _reserved = Reserved {
            fleet: self,
            source: source.clone(),
        };
        let assembled = match (&acting, assembled) {
            (Some(acting), Ok(a)) => {
                let assembly = Arc::new(a);
                let claimed = {
                    let tenants = self.tenants.lock().await;
                    Self::claimed(&assembly, &tenants, Some(&source))
                        .or_else(|| self.reserve(&assembly, &source))
                };
                match claimed {
                    Some(e) => Err(e),
                    None => self
                        .until_closing(runtime::prepare(
                            &acting.shared,
                            &assembly,
                            self.options.install_crds,
                        ))
                        .await?
                        .map(|kinds| (assembly, kinds))
                        .map_err(FleetError::from),
                }
            }
            (_, Err(e)) => Err(e),
            (None, Ok(_)) => unreachable!("an assembly is built only with an identity"),
        };
        let mut tenants = self.tenants.lock().await;
        if self.is_closing() {
            return None;
        }
        let mut tenant = tenants
            .remove(&source)
            .unwrap_or_else(|| self.new_tenant(source.clone()));
        let first = tenant.assembly.is_none();
        let result = match (acting, assembled) {
            (Some(acting), Ok((assembly, kinds))) => {
                let retired = match Self::claimed(&assembly, &tenants, None) {
                    Some(_) => Vec::new(),
                    None => Self::retire(&mut tenant, &assembly, &acting),
                };
                if !retired.is_empty() {
                    // Reconciles in flight may take minutes to finish: drained without the
                    // tenants lock, so other tenants load, reload and report meanwhile. The
                    // tenant stays visible, serving the CRDs it keeps; its lane holds its
                    // next job, its reservation the CRDs it prepared.
                    tenants.insert(source.clone(), tenant);
                    drop(tenants);
                    self.drain(retired).await;
                    tenants = self.tenants.lock().await;
                    if self.is_closing() {
                        return None;
                    }
                    tenant = tenants
                        .remove(&source)
                        .unwrap_or_else(|| self.new_tenant(source.clone()));
                }
                let started = Self::serve(&mut tenant, &acting, assembly, kinds, &tenants)
                    .map_or(Ok(()), Err);
                // Serving, `serve` made it the tenant's; refused, it waits for a retry.
                tenant.candidate = (started.is_err() && acting.identity != tenant.acting.identity)
                    .then_some(acting);
                started
            }
            (Some(acting), Err(e)) => {
                tenant.candidate = (acting.identity != tenant.acting.identity).then_some(acting);
                Err(e)
            }
            (None, Err(e)) => Err(e),
            (None, Ok(_)) => unreachable!("an assembly is built only with an identity"),
        };
        let name = source.to_string();
        let outcome = match result {
            Ok(()) => {
                tenant.fingerprint = Some(fingerprint);
                tenant.failed = None;
                tenant.error = None;
                if !first {
                    tenant.reloads += 1;
                    self.shared.metrics.blueprint_reloaded(&name, true);
                    // It may have dropped a CRD another Blueprint was refused for.
                    Self::forget_refusals(&mut tenants);
                }
                tracing::info!(tenant = %name, crds = tenant.running.len(), "Blueprint serving");
                Ok(())
            }
            Err(e) => {
                // The refused assembly's plugins are held by nothing now: their slots and
                // compiled code go (the serving assembly's stay).
                tenant.acting.plugins.retain_used();
                if let Some(candidate) = &tenant.candidate {
                    candidate.plugins.retain_used();
                }
                let message = inrun_contract::errors::chain(&e);
                // Missing permissions or an identity that cannot be assumed can be fixed
                // without touching the Blueprint (RBAC, the ServiceAccount): tried again at
                // every check. Anything else waits for the Blueprint to change.
                let retried = matches!(e, FleetError::Run(_) | FleetError::Identity(_));
                tenant.failed = (!retried).then_some(fingerprint);
                let repeated = tenant.error.as_ref() == Some(&message);
                tenant.error = Some(message.clone());
                if !repeated {
                    self.shared.metrics.blueprint_reloaded(&name, false);
                    if first {
                        tracing::error!(tenant = %name, error = %message, "Blueprint refused");
                    } else {
                        tracing::error!(tenant = %name, error = %message,
                            "changed Blueprint refused; the previous one keeps serving");
                    }
                }
                Err(Refusal {
                    reason: e.reason(),
                    message,
                })
            }
        };
        self.publish(&tenant);
        tenants.insert(source, tenant);
        Some(outcome)
    }
}
