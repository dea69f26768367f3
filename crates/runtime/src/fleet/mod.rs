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

mod resources;

pub use resources::{BLUEPRINT_CRD, blueprint_crd, blueprint_resource};

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::{self as runtime, RunError, Shared};
use inrun_blueprint::{
    self as blueprint, Blueprint, BlueprintError, CrdSpec, RuntimeSpec, ServiceAccountRef,
};
use inrun_reconcilers::assemble::{Assembly, BuildContext, Policy, Services};
use inrun_reconcilers::plugins::{Change, PluginSet, SlotStatus};
use inrun_reconcilers::sources::Location;
use inrun_wasm::Engine;

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
    #[error("the Blueprint custom resource definition: {0}")]
    Resources(String),
    /// The tenant has no identity to act as, or it cannot be assumed.
    #[error("{0}")]
    Identity(String),
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
}

/// A job of one tenant's lane.
type Job = Box<
    dyn FnOnce(Arc<Fleet>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send,
>;

/// One tenant's jobs: one runs at a time, and of those waiting only the newest is kept
/// (it sees the newest state: a reload queued every tick while a fetch hangs is one job).
#[derive(Default)]
struct Lane {
    /// The job to run next.
    pending: Option<Job>,
    /// Whether a task is draining the lane.
    draining: bool,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Hash of text, to tell whether a source changed.
fn fingerprint(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Every `*.yaml`/`*.yml` file directly in `dir`, in name order.
fn yaml_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// The text of a file source (every YAML file of a directory, in order).
fn source_text(path: &Path) -> std::io::Result<String> {
    if path.is_dir() {
        let mut text = String::new();
        for file in yaml_files(path)? {
            text.push_str(&file.display().to_string());
            text.push('\n');
            text.push_str(&std::fs::read_to_string(&file)?);
        }
        Ok(text)
    } else {
        std::fs::read_to_string(path)
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
        })
    }

    /// What the console shows: every tenant, in source order.
    pub fn views(&self) -> Vec<TenantView> {
        self.views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The assemblies serving now, one per tenant that serves.
    pub fn assemblies(&self) -> Vec<Arc<Assembly>> {
        self.views()
            .into_iter()
            .filter_map(|v| v.assembly)
            .collect()
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

    /// The host's own identity, for the tenant of `source` when it names none.
    fn host_acting(&self, source: &TenantSource, budget: &inrun_blueprint::BudgetSpec) -> Acting {
        Acting {
            identity: None,
            budget: budget.clone(),
            shared: self.write_limited(source, self.shared.clone(), budget),
            services: self.services.clone(),
            plugins: self.plugin_set(source, budget, self.services.sources.clone()),
        }
    }

    /// The plugins of `source`'s tenant, fetched through `sources`: held to a tenant's
    /// compile limits ([`Policy::tenant_size`]), but for the operator's own `--blueprint`.
    fn plugin_set(
        &self,
        source: &TenantSource,
        budget: &inrun_blueprint::BudgetSpec,
        sources: inrun_reconcilers::sources::Sources,
    ) -> Arc<PluginSet> {
        let set = PluginSet::new(self.engine_of(source, budget), sources);
        Arc::new(if self.operators(source) {
            set
        } else {
            set.with_compile_limits(self.options.policy.tenant_size.compile)
        })
    }

    /// Whether `source` is the operator's own `--blueprint`.
    fn operators(&self, source: &TenantSource) -> bool {
        matches!(source, TenantSource::File(path)
            if self.options.blueprint.as_deref() == Some(path.as_path()))
    }

    /// `shared` with its writes at `source`'s tenant's rate ([`Policy::tenant_api_writes`],
    /// or lower where its Blueprint asks); the operator's own `--blueprint` writes at no
    /// limit but its own.
    fn write_limited(
        &self,
        source: &TenantSource,
        mut shared: Shared,
        budget: &inrun_blueprint::BudgetSpec,
    ) -> Shared {
        let host = if self.operators(source) {
            0
        } else {
            self.options.policy.tenant_api_writes
        };
        let rate = match (host, budget.api_writes_per_second) {
            (0, asked) => asked.unwrap_or(0),
            // At least one a second: `0` would be no limit at all.
            (host, asked) => asked.map_or(host, |a| a.clamp(1, host)),
        };
        if rate > 0 {
            shared.client = crate::write_limit::limited(shared.client, rate);
        }
        shared
    }

    /// Where `blueprint` of `source` is larger than a tenant's may be
    /// ([`Policy::tenant_size`]), if it is: the field and why. The operator's own
    /// `--blueprint` is not held to it.
    fn oversized(&self, source: &TenantSource, blueprint: &Blueprint) -> Option<(String, String)> {
        if self.operators(source) {
            return None;
        }
        let size = self.options.policy.tenant_size;
        let crds = &blueprint.spec.crds;
        if crds.len() > size.crds {
            return Some((
                "spec.crds".into(),
                format!(
                    "{} CRDs; a tenant may declare at most {}",
                    crds.len(),
                    size.crds
                ),
            ));
        }
        let plugins: BTreeSet<String> = plugin_locations(blueprint)
            .into_values()
            .flatten()
            .collect();
        if plugins.len() > size.plugins {
            return Some((
                "spec.crds".into(),
                format!(
                    "{} distinct plugins; a tenant may use at most {}",
                    plugins.len(),
                    size.plugins
                ),
            ));
        }
        let workers: usize = crds
            .iter()
            .map(|c| c.workers.unwrap_or(blueprint.spec.runtime.workers) as usize)
            .sum();
        if workers > size.workers {
            return Some((
                "spec.crds[].workers".into(),
                format!(
                    "{workers} workers in all; a tenant may run at most {}",
                    size.workers
                ),
            ));
        }
        for (i, crd) in crds.iter().enumerate() {
            let blocks = std::iter::once((format!("spec.crds[{i}].reconcile"), &crd.reconcile))
                .chain(
                    crd.serve
                        .iter()
                        .flat_map(|s| s.targets.iter())
                        .enumerate()
                        .map(|(t, target)| {
                            (
                                format!("spec.crds[{i}].serve.targets[{t}].reconcile"),
                                &target.reconcile,
                            )
                        }),
                );
            for (at, block) in blocks {
                if block.external.len() > size.external_calls {
                    return Some((
                        format!("{at}.external"),
                        format!(
                            "{} external calls; a tenant's reconcile block may make at most {}",
                            block.external.len(),
                            size.external_calls
                        ),
                    ));
                }
            }
        }
        None
    }

    /// Why `blueprint` asks for more than the host's per-tenant budget, if it does.
    fn over_budget(&self, blueprint: &Blueprint) -> Option<(&'static str, String)> {
        let asked = &blueprint.spec.runtime.budget;
        let host = self.engine.budgets().tenant;
        let writes = self.options.policy.tenant_api_writes;
        let over = |field: &'static str, asked: Option<u64>, host: u64, unit: &str| {
            asked.filter(|&a| a > host && host > 0).map(|a| {
                (
                    field,
                    format!("{a}{unit} exceeds the host's per-tenant budget of {host}{unit}"),
                )
            })
        };
        over(
            "pluginCalls",
            asked.plugin_calls.map(u64::from),
            host.calls as u64,
            "",
        )
        .or_else(|| {
            over(
                "pluginMemory",
                asked.plugin_memory.map(|q| q.bytes() >> 20),
                (host.memory_bytes >> 20) as u64,
                "Mi",
            )
        })
        .or_else(|| {
            over(
                "logLinesPerSecond",
                asked.log_lines_per_second.map(u64::from),
                u64::from(host.log_lines_per_second),
                "",
            )
        })
        .or_else(|| {
            over(
                "apiWritesPerSecond",
                asked.api_writes_per_second.map(u64::from),
                u64::from(writes),
                "",
            )
        })
    }

    /// The engine the plugins of `source`'s tenant load through: the host's, their calls
    /// under the tenant's budget, reporting their loads and calls with the tenant's name.
    fn engine_of(&self, source: &TenantSource, budget: &inrun_blueprint::BudgetSpec) -> Engine {
        let tenant = source.to_string();
        let mut share = self.engine.budgets().tenant;
        if let Some(calls) = budget.plugin_calls {
            share.calls = share.calls.min(calls as usize).max(1);
        }
        if let Some(memory) = budget.plugin_memory {
            share.memory_bytes = share
                .memory_bytes
                .min(usize::try_from(memory.bytes()).unwrap_or(usize::MAX));
        }
        if let Some(lines) = budget.log_lines_per_second {
            share.log_lines_per_second = share.log_lines_per_second.min(lines);
        }
        self.engine
            .for_tenant(&tenant, Some(share))
            .observed_by(self.shared.metrics.tenant_observer(&tenant))
    }

    /// Whom `blueprint` of `tenant` acts as: its `spec.serviceAccount`, for a Blueprint
    /// resource the one the operator's pattern derives from its name, or (for a file) the
    /// host itself; a Blueprint resource's only with the ServiceAccount's consent. The tenant's
    /// current clients when that did not change.
    ///
    /// # Errors
    /// Why, for a Blueprint resource with neither, or when the host cannot act as the
    /// ServiceAccount (a [`FleetError::Identity`]).
    async fn acting(
        &self,
        source: &TenantSource,
        current: &Acting,
        candidate: Option<&Acting>,
        blueprint: &Blueprint,
    ) -> Result<Acting, String> {
        let identity = match (source, &blueprint.spec.service_account) {
            (_, Some(sa)) => Some(sa.clone()),
            (TenantSource::File(_), None) => None,
            (TenantSource::Resource(name), None) => {
                let Some(pattern) = &self.options.default_tenant_service_account else {
                    return Err(
                        "a Blueprint resource acts as a Kubernetes identity: set spec.serviceAccount {namespace, name}, or start the host with --default-tenant-service-account namespace/{name}".into(),
                    );
                };
                Some(pattern.for_blueprint(name)?)
            }
        };
        // A Blueprint resource acts as a ServiceAccount only with its consent, named or
        // derived from the Blueprint's name: otherwise one tenant could name another's, or
        // take the name another's ServiceAccount was made for before that one exists.
        if let (TenantSource::Resource(name), Some(sa)) = (source, &identity) {
            crate::identity::admits(&self.shared.client, sa, name, None).await?;
        }
        let budget = &blueprint.spec.runtime.budget;
        if identity == current.identity && *budget == current.budget {
            return Ok(current.clone());
        }
        if let Some(candidate) = candidate.filter(|c| c.identity == identity && c.budget == *budget)
        {
            return Ok(candidate.clone());
        }
        let Some(sa) = identity else {
            return Ok(self.host_acting(source, budget));
        };
        let shared = self.write_limited(source, self.shared.acting_as(&sa)?, budget);
        let secrets: Arc<dyn inrun_reconcilers::secrets::Secrets> = Arc::new(
            inrun_reconcilers::secrets::KubeSecrets::new(shared.client.clone()),
        );
        let sources = self.services.sources.with_secrets(secrets.clone());
        let mut services = self.services.clone();
        services.secrets = secrets;
        services.sources = sources.clone();
        services.cluster = Arc::new(crate::WatchCache::new(shared.client.clone()));
        Ok(Acting {
            identity: Some(sa),
            shared,
            services,
            budget: budget.clone(),
            plugins: self.plugin_set(source, budget, sources),
        })
    }

    /// Loads the `--blueprint` tenant, so a broken Blueprint stops the host before it
    /// waits for a lease or starts anything.
    ///
    /// # Errors
    /// [`FleetError::Blueprint`] with every problem found.
    pub async fn load_initial(&self) -> Result<(), FleetError> {
        let Some(path) = self.options.blueprint.clone() else {
            return Ok(());
        };
        let source = TenantSource::File(path.clone());
        let mut tenant = self.new_tenant(source.clone());
        let text = source_text(&path).map_err(|e| {
            FleetError::Blueprint(BlueprintError::Read {
                path: path.clone(),
                source: e,
            })
        })?;
        let blueprint = blueprint::load(&path)?;
        tenant.acting = self
            .acting(&source, &tenant.acting, None, &blueprint)
            .await
            .map_err(FleetError::Identity)?;
        let assembly = self
            .assemble(&tenant.policy, &tenant.acting, blueprint)
            .await?;
        tenant.fingerprint = Some(fingerprint(&text));
        tenant.assembly = Some(Arc::new(assembly));
        self.publish(&tenant);
        self.tenants.lock().await.insert(source, tenant);
        Ok(())
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

    /// Runs `job` in `source`'s lane: after the job of the tenant that runs now, if any,
    /// and instead of one still waiting (the newer one sees the newer state).
    fn enqueue<F, Fut>(self: &Arc<Self>, source: TenantSource, job: F)
    where
        F: FnOnce(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.queue(source, job, true);
    }

    /// [`Fleet::enqueue`], unless the lane has a job running or waiting.
    fn enqueue_if_idle<F, Fut>(self: &Arc<Self>, source: TenantSource, job: F)
    where
        F: FnOnce(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.queue(source, job, false);
    }

    fn queue<F, Fut>(self: &Arc<Self>, source: TenantSource, job: F, when_busy: bool)
    where
        F: FnOnce(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let lane = lanes.entry(source).or_default().clone();
        let mut state = lane.lock().unwrap_or_else(|p| p.into_inner());
        if !when_busy && (state.draining || state.pending.is_some()) {
            return;
        }
        state.pending = Some(Box::new(move |fleet| Box::pin(job(fleet))));
        if state.draining {
            return;
        }
        state.draining = true;
        drop(state);
        drop(lanes);
        let fleet = self.clone();
        let task = tokio::spawn(async move {
            loop {
                let next = {
                    let mut state = lane.lock().unwrap_or_else(|p| p.into_inner());
                    let next = state.pending.take();
                    state.draining = next.is_some();
                    next
                };
                match next {
                    Some(job) if !fleet.is_closing() => job(fleet.clone()).await,
                    Some(_) => {}
                    None => break,
                }
            }
        });
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.retain(|j| !j.is_finished());
        jobs.push(task);
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
                        Self::start(&mut tenant, &acting, a, kinds, &tenants).map_or(Ok(()), Err)
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
            resources::ensure_crd(&self.shared.client, self.options.install_crds)
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

    /// Stops every controller of `tenant`: all are told at once, then each is awaited.
    async fn stop_all(tenant: &mut Tenant) {
        for running in tenant.running.values() {
            let _ = running.stop.send(true);
        }
        let all = std::mem::take(&mut tenant.running);
        for (_, r) in all {
            stop(r).await;
        }
    }

    /// Which other tenant serves `crd` now, if any.
    fn claimant<'t>(
        tenants: &'t BTreeMap<TenantSource, Tenant>,
        crd: &str,
    ) -> Option<&'t TenantSource> {
        tenants
            .values()
            // Running controllers are always of the serving assembly's CRDs; a tenant
            // loaded but not started yet claims its CRDs too.
            .find(|t| {
                t.assembly
                    .as_ref()
                    .is_some_and(|a| a.crds().iter().any(|c| c.spec.crd_name() == crd))
            })
            .map(|t| &t.source)
    }

    /// Reserves `assembly`'s CRDs for `source` while it prepares them outside the tenants
    /// lock (the caller holds it); the refusal if another tenant reserved one first. The
    /// reservation ends when `apply` does ([`Reserved`]).
    fn reserve(&self, assembly: &Assembly, source: &TenantSource) -> Option<FleetError> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        for plan in assembly.crds() {
            let name = plan.spec.crd_name();
            if let Some(owner) = reserved.get(&name).filter(|o| *o != source) {
                return Some(claim_refusal(
                    plan,
                    format!(
                        "CRD {name} is being installed by the tenant {owner}; a CRD belongs to one Blueprint"
                    ),
                ));
            }
        }
        for plan in assembly.crds() {
            reserved.insert(plan.spec.crd_name(), source.clone());
        }
        None
    }

    /// The refusal of `assembly` if a tenant of `tenants` (but `itself`) serves one of its
    /// CRDs.
    fn claimed(
        assembly: &Assembly,
        tenants: &BTreeMap<TenantSource, Tenant>,
        itself: Option<&TenantSource>,
    ) -> Option<FleetError> {
        for plan in assembly.crds() {
            let name = plan.spec.crd_name();
            if let Some(owner) = Self::claimant(tenants, &name).filter(|o| Some(*o) != itself) {
                return Some(claim_refusal(
                    plan,
                    format!(
                        "CRD {name} is already served by the tenant {owner}; a CRD belongs to one Blueprint"
                    ),
                ));
            }
        }
        None
    }

    /// Takes from `tenant` the controllers `assembly` does not keep (its CRD removed, or
    /// changed: spec, runtime settings or identity) and tells each to stop: quick, under
    /// the tenants lock. Awaiting them ([`Fleet::drain`]) is not: reconciles in flight
    /// finish first.
    fn retire(tenant: &mut Tenant, assembly: &Assembly, acting: &Acting) -> Vec<Retired> {
        let runtime_spec = &assembly.blueprint.spec.runtime;
        let wanted: BTreeMap<String, &CrdSpec> = assembly
            .crds()
            .iter()
            .map(|c| (c.spec.crd_name(), &c.spec))
            .collect();
        let names: Vec<String> = tenant.running.keys().cloned().collect();
        let mut retired = Vec::new();
        for name in names {
            let keep = wanted.get(&name).is_some_and(|spec| {
                let r = &tenant.running[&name];
                r.spec == **spec && r.runtime == *runtime_spec && r.identity == acting.identity
            });
            if !keep && let Some(running) = tenant.running.remove(&name) {
                tracing::info!(tenant = %tenant.source, crd = %name, "stopping the controller of a removed or changed CRD");
                let _ = running.stop.send(true);
                retired.push(Retired {
                    removed: !wanted.contains_key(&name),
                    name,
                    running,
                });
            }
        }
        retired
    }

    /// Waits for `retired` controllers to stop (the caller holds no lock): a removed CRD's
    /// series go; a changed one's stay for its new controller.
    async fn drain(&self, retired: Vec<Retired>) {
        for r in retired {
            stop(r.running).await;
            if r.removed {
                self.shared.metrics.controller_retired(&r.name);
            }
        }
    }

    /// Makes `assembly`, prepared (permissions checked, CRDs installed, `kinds`
    /// discovered), the tenant's serving Blueprint: refuses it if another tenant serves one
    /// of its CRDs by now (the refusal returned), then starts the controllers of CRDs
    /// `tenant` does not run (those removed or changed were retired first:
    /// [`Fleet::retire`]).
    fn start(
        tenant: &mut Tenant,
        acting: &Acting,
        assembly: Arc<Assembly>,
        kinds: runtime::ChildKinds,
        others: &BTreeMap<TenantSource, Tenant>,
    ) -> Option<FleetError> {
        if let Some(refused) = Self::claimed(&assembly, others, None) {
            return Some(refused);
        }
        let locations = plugin_locations(&assembly.blueprint);
        let runtime_spec = assembly.blueprint.spec.runtime.clone();
        for (index, plan) in assembly.crds().iter().enumerate() {
            let name = plan.spec.crd_name();
            if tenant.running.contains_key(&name) {
                continue;
            }
            let (stop_tx, stop_rx) = watch::channel(false);
            let (requeue_tx, requeue_rx) = mpsc::unbounded_channel();
            let requeue = futures::stream::unfold(requeue_rx, |mut rx| async move {
                rx.recv().await.map(|()| ((), rx))
            });
            let future = runtime::controller(
                &acting.shared,
                assembly.clone(),
                index,
                kinds[index].clone(),
                stop_rx,
                requeue,
            );
            tracing::info!(tenant = %tenant.source, crd = %name, "starting the controller");
            tenant.running.insert(
                name.clone(),
                Running {
                    spec: plan.spec.clone(),
                    runtime: runtime_spec.clone(),
                    identity: acting.identity.clone(),
                    plugins: locations.get(&name).cloned().unwrap_or_default(),
                    stop: stop_tx,
                    requeue: requeue_tx,
                    task: tokio::spawn(future),
                },
            );
        }
        tenant.assembly = Some(assembly);
        tenant.acting = acting.clone();
        tenant.acting.plugins.retain_used();
        None
    }

    /// Loads (or reloads) `source` from `blueprint`, applying it if it assembles and
    /// starts; on failure the tenant's serving Blueprint, if any, keeps serving. The
    /// identity check and the plugins' fetch and compile run without the tenants lock, so
    /// other tenants load, reload and report meanwhile. `None`: the fleet is shutting down
    /// and nothing changed.
    async fn apply(
        &self,
        source: TenantSource,
        print: u64,
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
                let started = Self::start(&mut tenant, &acting, assembly, kinds, &tenants)
                    .map_or(Ok(()), Err);
                // Serving, `start` made it the tenant's; refused, it waits for a retry.
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
                tenant.fingerprint = Some(print);
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
                tenant.failed = (!retried).then_some(print);
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

    /// Removes the tenant of `source` and stops its controllers (outside the tenants lock:
    /// passes in flight may take their time).
    async fn remove(&self, source: &TenantSource) {
        let removed = {
            let mut tenants = self.tenants.lock().await;
            let removed = tenants.remove(source);
            self.unpublish(source);
            Self::forget_refusals(&mut tenants);
            removed
        };
        if let Some(mut tenant) = removed {
            tracing::info!(tenant = %source, "tenant removed; stopping its controllers (its CRDs and CRs stay)");
            let names: Vec<String> = tenant.running.keys().cloned().collect();
            Self::stop_all(&mut tenant).await;
            for name in names {
                self.shared.metrics.controller_retired(&name);
            }
            // Its compiled plugins go too (the engine keeps digests only for live slots).
            tenant.assembly = None;
            tenant.acting.plugins.retain_used();
            if let Some(candidate) = &tenant.candidate {
                candidate.plugins.retain_used();
            }
            self.shared.metrics.tenant_retired(&source.to_string());
        }
    }

    /// Lets refused Blueprints be tried again at the next check: a CRD they claimed may
    /// be free now.
    fn forget_refusals(tenants: &mut BTreeMap<TenantSource, Tenant>) {
        for t in tenants.values_mut() {
            t.failed = None;
        }
    }

    /// Asks again, for every Blueprint resource serving as a ServiceAccount (named or
    /// derived), whether that ServiceAccount still admits it
    /// ([`crate::identity::admits`]). One whose consent is gone stops serving (its controllers stop; its CRDs and CRs stay) and is
    /// refused with `NoIdentity`; it serves again once admitted, at a later check.
    async fn recheck_consent(self: &Arc<Self>) {
        // The uid the watch told with the Blueprint: one read (the ServiceAccount) a check.
        let serving: Vec<(TenantSource, ServiceAccountRef, Option<String>)> = self
            .tenants
            .lock()
            .await
            .values()
            .filter(|t| t.error.is_none() && matches!(t.source, TenantSource::Resource(_)))
            .filter(|t| t.assembly.is_some())
            .filter_map(|t| {
                let uid = t.object.as_ref().and_then(|o| o.uid.clone());
                Some((t.source.clone(), t.acting.identity.clone()?, uid))
            })
            .collect();
        for (source, sa, uid) in serving {
            let TenantSource::Resource(name) = &source else {
                continue;
            };
            let admitted =
                crate::identity::admits(&self.shared.client, &sa, name, uid.as_deref()).await;
            let Err(why) = admitted else {
                continue;
            };
            // Into the tenant's lane, after whatever it is doing: a newer Blueprint may have
            // changed its identity meanwhile.
            self.enqueue(source.clone(), move |fleet| async move {
                fleet.withdraw(source, sa, why).await;
            });
        }
    }

    /// Stops the tenant of `source` serving, if it still acts as `sa`: its consent is gone.
    async fn withdraw(&self, source: TenantSource, sa: ServiceAccountRef, why: String) {
        let (object, stopped) = {
            let mut tenants = self.tenants.lock().await;
            let Some(tenant) = tenants.get_mut(&source) else {
                return;
            };
            if tenant.acting.identity.as_ref() != Some(&sa) || tenant.error.is_some() {
                return;
            }
            let message = FleetError::Identity(why).to_string();
            tracing::error!(tenant = %source, error = %message, "consent withdrawn; the tenant stops serving");
            let stopped: Vec<Running> = std::mem::take(&mut tenant.running).into_values().collect();
            tenant.assembly = None;
            tenant.fingerprint = None;
            tenant.failed = None;
            tenant.error = Some(message);
            self.publish(tenant);
            (tenant.object.clone(), stopped)
        };
        for running in &stopped {
            let _ = running.stop.send(true);
        }
        for running in stopped {
            stop(running).await;
        }
        if let Some(object) = object {
            let message = self
                .tenants
                .lock()
                .await
                .get(&source)
                .and_then(|t| t.error.clone())
                .unwrap_or_default();
            resources::report(
                &self.shared.client,
                &object,
                Err(Refusal {
                    reason: "NoIdentity",
                    message,
                }),
                Vec::new(),
            )
            .await;
        }
    }

    /// Tries again the resource tenants whose Blueprint was refused.
    async fn retry_resources(self: &Arc<Self>) {
        let retry: Vec<resources::Object> = self
            .tenants
            .lock()
            .await
            .values()
            .filter(|t| t.failed.is_none() && t.error.is_some())
            .filter_map(|t| t.object.clone())
            .collect();
        for object in retry {
            let source = TenantSource::Resource(object.name.clone());
            // Only into an idle lane: a job there (a watch event, perhaps with a newer
            // document than this one) goes first and reports; the next check retries.
            self.enqueue_if_idle(source.clone(), move |fleet| async move {
                fleet.apply_resource(source, object).await;
            });
        }
    }

    /// Re-reads file tenants whose text changed.
    fn reload_files(self: &Arc<Self>) {
        if let Some(path) = self.options.blueprint.clone() {
            self.reload_file(path);
        }
        self.sync_tenant_files();
    }

    /// Queues a check of the file tenant at `path`.
    fn reload_file(self: &Arc<Self>, path: PathBuf) {
        let source = TenantSource::File(path.clone());
        self.enqueue(source.clone(), move |fleet| async move {
            let Ok(text) = source_text(&path) else {
                return;
            };
            let print = fingerprint(&text);
            if let Some(t) = fleet.tenants.lock().await.get(&source)
                && (t.fingerprint == Some(print) || t.failed == Some(print))
            {
                return;
            }
            let loaded = blueprint::load(&path);
            let _ = fleet.apply(source, print, loaded).await;
        });
    }

    /// Adds, reloads and removes the tenants of the `--tenants` directory.
    fn sync_tenant_files(self: &Arc<Self>) {
        let Some(dir) = self.options.tenants.clone() else {
            return;
        };
        let files = match yaml_files(&dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the tenants directory");
                return;
            }
        };
        for file in &files {
            self.reload_file(file.clone());
        }
        // The tenants the directory had, from the lanes (a tenant still loading has one).
        let gone: Vec<TenantSource> = self
            .lanes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|s| match s {
                TenantSource::File(p) => p.parent() == Some(dir.as_path()) && !files.contains(p),
                TenantSource::Resource(_) => false,
            })
            .cloned()
            .collect();
        for source in gone {
            self.enqueue_removal(source);
        }
    }

    /// Queues the removal of `source`'s tenant; its lane goes with it.
    fn enqueue_removal(self: &Arc<Self>, source: TenantSource) {
        self.enqueue(source.clone(), move |fleet| async move {
            fleet.remove(&source).await;
            let mut lanes = fleet.lanes.lock().unwrap_or_else(|p| p.into_inner());
            // The lane goes too, unless a job arrived meanwhile (the source came back).
            let idle = lanes.get(&source).is_some_and(|l| {
                l.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pending
                    .is_none()
            });
            if idle {
                lanes.remove(&source);
            }
        });
    }

    /// Queues what a change of `Blueprint` resources asks for, in the lanes of the
    /// tenants concerned.
    fn resource_event(self: &Arc<Self>, event: resources::Event) {
        match event {
            resources::Event::Apply(object) => {
                let source = TenantSource::Resource(object.name.clone());
                self.enqueue(source.clone(), move |fleet| async move {
                    fleet.apply_resource(source, object).await;
                });
            }
            resources::Event::Delete(name) => {
                self.enqueue_removal(TenantSource::Resource(name));
            }
            resources::Event::Present(names) => {
                let gone: Vec<TenantSource> = self
                    .lanes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .keys()
                    .filter(|s| matches!(s, TenantSource::Resource(n) if !names.contains(n)))
                    .cloned()
                    .collect();
                for source in gone {
                    self.enqueue_removal(source);
                }
            }
        }
    }

    /// Loads a `Blueprint` resource's tenant and reports the outcome in its status.
    async fn apply_resource(&self, source: TenantSource, object: resources::Object) {
        let print = fingerprint(&object.text);
        let before = {
            let tenants = self.tenants.lock().await;
            if let Some(t) = tenants.get(&source)
                && (t.fingerprint == Some(print) || t.failed == Some(print))
            {
                return;
            }
            tenants.get(&source).and_then(|t| t.error.clone())
        };
        let loaded = blueprint::from_str(&object.text, &source.to_string());
        let Some(result) = self.apply(source.clone(), print, loaded).await else {
            return;
        };
        let mut tenants = self.tenants.lock().await;
        // A retried refusal with the same message is already in the status.
        if let Err(refusal) = &result
            && before.as_ref() == Some(&refusal.message)
            && tenants
                .get(&source)
                .is_some_and(|t| t.object.as_ref() == Some(&object))
        {
            return;
        }
        let crds = match tenants.get_mut(&source) {
            Some(t) => {
                t.object = Some(object.clone());
                t.running.keys().cloned().collect()
            }
            None => Vec::new(),
        };
        drop(tenants);
        resources::report(&self.shared.client, &object, result, crds).await;
    }

    /// Starts a check of each tenant's plugin sources ([`PluginSet::poll`]) unless its
    /// last one still runs: a registry that is slow for one tenant delays only that
    /// tenant's next check. A tenant gone stops its check.
    async fn poll_plugins(self: &Arc<Self>, polling: &mut BTreeMap<TenantSource, JoinHandle<()>>) {
        let sets: Vec<(TenantSource, Arc<PluginSet>)> = self
            .tenants
            .lock()
            .await
            .values()
            .map(|t| (t.source.clone(), t.acting.plugins.clone()))
            .collect();
        polling.retain(|source, task| {
            let live = sets.iter().any(|(s, _)| s == source);
            if !live {
                task.abort();
            }
            live && !task.is_finished()
        });
        for (source, set) in sets {
            if polling.contains_key(&source) {
                continue;
            }
            let fleet = self.clone();
            let task = tokio::spawn({
                let source = source.clone();
                async move { fleet.poll_tenant(source, set).await }
            });
            polling.insert(source, task);
        }
    }

    /// Checks the plugin sources of `source`'s tenant once; re-queues every CR of a CRD
    /// whose plugin changed.
    async fn poll_tenant(&self, source: TenantSource, set: Arc<PluginSet>) {
        let changes = set.poll().await;
        if changes.is_empty() {
            return;
        }
        let tenants = self.tenants.lock().await;
        let Some(tenant) = tenants.get(&source) else {
            return;
        };
        for change in &changes {
            if let Change::Swapped { location, .. } = change {
                for (crd, running) in &tenant.running {
                    if running.plugins.contains(location) {
                        tracing::info!(tenant = %source, %crd, plugin = %location,
                            "re-queueing every CR after a plugin reload");
                        let _ = running.requeue.send(());
                    }
                }
            }
        }
        self.publish(tenant);
    }
}

/// A tenant's Blueprint refused for a CRD another tenant has: why, at the CRD's field.
fn claim_refusal(plan: &inrun_reconcilers::assemble::CrdPlan, why: String) -> FleetError {
    FleetError::Claimed(BlueprintError::Invalid {
        problems: vec![blueprint::Problem::new(
            &plan.spec.source.file,
            Some(&plan.spec.kind),
            plan.spec.source.field(),
            why,
        )],
    })
}

/// The CRDs a tenant reserved while it prepares them ([`Fleet::reserve`]), released when
/// dropped: when its load is over, or given up midway.
struct Reserved<'f> {
    fleet: &'f Fleet,
    source: TenantSource,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.fleet
            .reserved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, owner| *owner != self.source);
    }
}

/// A controller taken from its tenant ([`Fleet::retire`]), told to stop, not yet stopped.
struct Retired {
    name: String,
    /// Its CRD is gone from the Blueprint (not merely changed).
    removed: bool,
    running: Running,
}

async fn stop(running: Running) {
    let _ = running.stop.send(true);
    if let Err(e) = running.task.await {
        tracing::warn!(error = %e, "a controller task ended abnormally");
    }
}
