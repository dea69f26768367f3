//! What the fleet holds: its options, its tenants (where each comes from, whom it acts as,
//! what it serves, how its last load went) and each tenant's lane of jobs. The behaviour
//! is in the files named for each concern (`supervisor.rs`, `load.rs`, `lanes.rs`, …), which
//! take these types and the crate's common imports from here.

pub(crate) use std::collections::{BTreeMap, BTreeSet};
pub(crate) use std::hash::{DefaultHasher, Hash, Hasher};
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::time::Duration;

pub(crate) use serde::Serialize;
pub(crate) use tokio::sync::{mpsc, watch};
pub(crate) use tokio::task::JoinHandle;

pub(crate) use inrun_blueprint::{
    self as blueprint, Blueprint, BlueprintError, CrdSpec, RuntimeSpec, ServiceAccountRef,
};
pub(crate) use inrun_reconcilers::assemble::{Assembly, BuildContext, Policy, Services};
pub(crate) use inrun_reconcilers::plugins::{Change, PluginSet, SlotStatus};
pub(crate) use inrun_reconcilers::sources::Location;
pub(crate) use inrun_runtime::impersonation::IdentityError;
pub(crate) use inrun_runtime::{self as runtime, RunError, Shared};
pub(crate) use inrun_wasm::Engine;

pub(crate) use crate::resources::Refusal;
pub(crate) use crate::{release, resources};

/// The longest a Blueprint resource's package call may take, whatever
/// `--max-package-deadline` says: thirty minutes.
pub(crate) const TENANT_PACKAGE_CEILING: Duration = Duration::from_secs(30 * 60);

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
    /// Its CRDs' rollouts under way or ended since they started, each shown where it
    /// stands when the view is read ([`TenantView::rollout_views`]).
    #[serde(
        serialize_with = "serialize_rollouts",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub rollouts: Vec<Arc<inrun_runtime::rollout::Rollout>>,
}

fn serialize_rollouts<S: serde::Serializer>(
    rollouts: &[Arc<inrun_runtime::rollout::Rollout>],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize as _;
    rollouts
        .iter()
        .map(|r| r.view())
        .collect::<Vec<_>>()
        .serialize(s)
}

impl TenantView {
    /// Where each of its rollouts stands now.
    pub fn rollout_views(&self) -> Vec<inrun_runtime::rollout::RolloutView> {
        self.rollouts.iter().map(|r| r.view()).collect()
    }
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

pub(crate) struct Running {
    pub(crate) spec: CrdSpec,
    pub(crate) runtime: RuntimeSpec,
    pub(crate) identity: Option<ServiceAccountRef>,
    pub(crate) plugins: BTreeSet<String>,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) requeue: mpsc::UnboundedSender<()>,
    pub(crate) task: JoinHandle<()>,
    /// The rollout it carries, when it started as one.
    pub(crate) rollout: Option<Arc<inrun_runtime::rollout::Rollout>>,
    /// The kinds its CRs may own, as its start found them.
    pub(crate) kinds: inrun_runtime::CrdKinds,
}

/// Whom a tenant acts as, and the clients that do: the host's own, or its ServiceAccount's.
#[derive(Clone)]
pub(crate) struct Acting {
    pub(crate) identity: Option<ServiceAccountRef>,
    /// The share its Blueprint asked for (`spec.runtime.budget`).
    pub(crate) budget: inrun_blueprint::BudgetSpec,
    pub(crate) shared: Shared,
    pub(crate) services: Services,
    /// Plugin slots, whose pull secrets are read as this identity.
    pub(crate) plugins: Arc<PluginSet>,
}

pub(crate) struct Tenant {
    pub(crate) source: TenantSource,
    pub(crate) policy: Policy,
    /// The identity its serving Blueprint acts as.
    pub(crate) acting: Acting,
    /// The identity a refused Blueprint asked for, kept so a retry reuses its clients and
    /// plugin slots (fetched and compiled once) instead of building them again.
    pub(crate) candidate: Option<Acting>,
    /// Hash of the source's text (file contents, or the resource's spec).
    pub(crate) fingerprint: Option<u64>,
    /// A fingerprint that failed, so it is not retried until the source changes.
    pub(crate) failed: Option<u64>,
    pub(crate) assembly: Option<Arc<Assembly>>,
    pub(crate) running: BTreeMap<String, Running>,
    pub(crate) error: Option<String>,
    pub(crate) reloads: u64,
    /// The last document of a resource tenant, to retry a refused one.
    pub(crate) object: Option<resources::Object>,
    /// Rollouts of controllers retired to be started again (their CRD changed): the next
    /// controller of the CRD carries them on, or rolls its new version out from the same
    /// version before.
    pub(crate) carried: BTreeMap<String, Arc<inrun_runtime::rollout::Rollout>>,
}

/// Every tenant of one host and the supervisor that keeps them current.
pub struct Fleet {
    pub(crate) shared: Shared,
    pub(crate) engine: Engine,
    pub(crate) services: Services,
    pub(crate) options: FleetOptions,
    pub(crate) tenants: tokio::sync::Mutex<BTreeMap<TenantSource, Tenant>>,
    /// CRDs a tenant prepares (installs) outside the tenants lock, by name: no other
    /// tenant may claim them meanwhile.
    pub(crate) reserved: Mutex<BTreeMap<String, TenantSource>>,
    pub(crate) views: Mutex<BTreeMap<TenantSource, TenantView>>,
    /// One lane per tenant: its loads and removals run one at a time, in order, each as
    /// its own task, so one tenant's slow source never holds up another's.
    pub(crate) lanes: Mutex<BTreeMap<TenantSource, Arc<Mutex<Lane>>>>,
    /// The tasks of those lanes, awaited at shutdown.
    pub(crate) jobs: Mutex<Vec<JoinHandle<()>>>,
    /// Turns true at shutdown: loads in flight give up, none starts controllers.
    pub(crate) closing: watch::Sender<bool>,
    /// The status each `Blueprint` resource should have, by name: written by the replica
    /// that leads (under sharding), and again by whichever comes to lead.
    pub(crate) statuses: Mutex<BTreeMap<String, resources::Status>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The locations (as the plugin slots name them) each CRD of `blueprint` calls.
pub(crate) fn plugin_locations(blueprint: &Blueprint) -> BTreeMap<String, BTreeSet<String>> {
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

/// A job of one tenant's lane.
pub(crate) type Job = Box<
    dyn FnOnce(Arc<Fleet>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send,
>;

/// One tenant's jobs: one runs at a time, and of those waiting only the newest is kept
/// (it sees the newest state: a reload queued every tick while a fetch hangs is one job).
#[derive(Default)]
pub(crate) struct Lane {
    /// The job to run next.
    pub(crate) pending: Option<Job>,
    /// Whether a task is draining the lane.
    pub(crate) draining: bool,
}
