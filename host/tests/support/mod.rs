//! Shared pieces of the end-to-end tests: an Inrun host running in-process against the
//! harness's real kube-apiserver, unique CRD groups per test, and readers for the
//! objects and events a test asserts on.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use inrun::assemble::{Assembly, Policy, Services};
use inrun::fleet::{Fleet, FleetError, FleetOptions, TenantSource, TenantView};
use inrun::runtime::{RunError, RunOptions, Shared, WatchCache};
use inrun::secrets::KubeSecrets;
use inrun::sources::SourceOptions;
use inrun::wasm::{Engine, EngineSettings};
use inrun_testenv::{ControlPlane, wait_for};

pub mod faults;
pub mod identity;
pub mod plan;
pub mod render;
pub mod ring;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a test waits for the host to act.
pub const WAIT: Duration = Duration::from_secs(30);

/// A running host; stop it (or drop it) at the end of the test.
pub struct Host {
    /// What the host's controllers record.
    pub metrics: Arc<inrun::metrics::Metrics>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), RunError>>>,
    forbidden_expected: bool,
    /// The host's write fence: closed when the test crashes the host.
    fence: inrun::fence::Fence,
    _dir: tempfile::TempDir,
}

/// Whom a test's host acts as.
pub enum Run {
    /// A ServiceAccount bound to what `inrun generate rbac` prints with these flags.
    Generated(inrun::generate::rbac::RbacOptions),
    /// A ServiceAccount a test bound itself (the generated RBAC with a permission taken
    /// away, say).
    Bound(Box<identity::Identity>),
    /// The harness's admin (`system:masters`); `why` says why this test needs it.
    Admin {
        /// Why the generated RBAC will not do.
        why: &'static str,
    },
}

impl Run {
    /// The client configuration of a host serving `blueprints`, acting as this says.
    async fn config(self, blueprints: &[inrun::blueprint::Blueprint]) -> kube::Config {
        match self {
            Run::Generated(options) => identity::Identity::for_blueprints(blueprints, &options)
                .await
                .config(),
            Run::Bound(identity) => identity.config(),
            Run::Admin { why } => {
                assert!(!why.is_empty(), "say why the host runs as the admin");
                ControlPlane::shared().admin_config()
            }
        }
    }
}

/// A client from `config` whose requests are counted into `metrics`
/// (`rest_client_requests_total`), as `inrun run` builds its own.
pub fn counted_client(config: kube::Config, metrics: &inrun::metrics::Metrics) -> Client {
    inrun::fence::client(config, &counting_fence(metrics)).expect("client")
}

/// An open fence counting requests into `metrics`.
fn counting_fence(metrics: &inrun::metrics::Metrics) -> inrun::fence::Fence {
    inrun::fence::Fence::default().counting(metrics.count_requests("apiserver"))
}

/// Fails the test when the host recording into `metrics` was refused (403) and the test
/// did not expect it.
fn assert_no_forbidden(metrics: &inrun::metrics::Metrics, expected: bool) {
    let refused = identity::forbidden(metrics);
    if refused > 0 && !expected && !std::thread::panicking() {
        panic!(
            "the API server refused {refused} of the host's requests (403): the generated RBAC \
             lacks something the host does (see the host's log), or call expect_forbidden()"
        );
    }
}

impl Host {
    /// Starts a host for `blueprint` (YAML text) with `--install-crds`, as production runs
    /// it: a ServiceAccount bound to what `inrun generate rbac --install-crds` prints.
    pub async fn start(blueprint: &str) -> Host {
        Self::start_with(blueprint, Run::Generated(identity::Identity::options())).await
    }

    /// Starts a host for `blueprint` acting as `run` says.
    pub async fn start_with(blueprint: &str, run: Run) -> Host {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("blueprint.yaml");
        std::fs::write(&path, blueprint).expect("write blueprint");
        let metrics = Arc::new(inrun::metrics::Metrics::default());
        let parsed = inrun::blueprint::load(&path).unwrap_or_else(|e| panic!("blueprint: {e}"));
        let config = run.config(&[parsed]).await;
        let fence = counting_fence(&metrics);
        let client = inrun::fence::client(config, &fence).expect("client");
        // Plugin loads and calls are recorded with the rest, as with `inrun run`.
        let engine = Engine::new(EngineSettings {
            max_instances: 16,
            observer: metrics.clone(),
            ..EngineSettings::default()
        })
        .expect("engine");
        // Secrets come from the API server, as with `inrun run`.
        let services = Services::new(Arc::new(KubeSecrets::new(client.clone())))
            .with_cluster(Arc::new(WatchCache::new(client.clone())));
        let assembly = Arc::new(
            Assembly::load_with(&path, &engine, &services)
                .await
                .unwrap_or_else(|e| panic!("blueprint: {e}")),
        );
        let (tx, rx) = watch::channel(false);
        let options = RunOptions {
            install_crds: true,
            instance: "e2e".into(),
            metrics: metrics.clone(),
            // Where the generated RBAC grants the host its Leases.
            lock_namespace: Some(identity::NAMESPACE.into()),
        };
        let task = tokio::spawn(inrun::runtime::run(assembly, client, options, rx));
        Host {
            metrics,
            shutdown: tx,
            task: Some(task),
            forbidden_expected: false,
            fence,
            _dir: dir,
        }
    }

    /// Crashes the host, as a SIGKILL would as far as the API server can tell: from now on
    /// none of its writes, in flight or new, reaches the API server, and it stops without
    /// finishing anything.
    pub async fn crash(mut self) {
        self.fence.close();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// The test expects the API server to refuse some of the host's requests (403): they
    /// no longer fail it.
    pub fn expect_forbidden(&mut self) {
        self.forbidden_expected = true;
    }

    /// Asks the host to stop and waits until reconciles in flight have finished.
    /// Waits for the host to give up starting; returns why.
    pub async fn refused(mut self) -> RunError {
        let task = self.task.take().expect("a running host");
        match tokio::time::timeout(WAIT, task).await {
            Ok(Ok(Err(e))) => e,
            other => panic!("the host was not refused: {other:?}"),
        }
    }

    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(WAIT, task).await {
                Ok(Ok(Ok(()))) => {}
                other => panic!("host did not stop cleanly: {other:?}"),
            }
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        assert_no_forbidden(&self.metrics, self.forbidden_expected);
    }
}

/// A host serving tenants through a [`Fleet`]: Blueprint files and plugins reload.
pub struct FleetHost {
    /// The fleet, to read tenant views from.
    pub fleet: Arc<Fleet>,
    /// What the fleet and its engine record.
    pub metrics: Arc<inrun::metrics::Metrics>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), FleetError>>>,
    forbidden_expected: bool,
}

impl Drop for FleetHost {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        assert_no_forbidden(&self.metrics, self.forbidden_expected);
    }
}

impl FleetHost {
    /// Starts a fleet with `options`.
    pub async fn start(options: FleetOptions) -> FleetHost {
        Self::start_with(options, SourceOptions::default()).await
    }

    /// Starts a fleet with `options`, fetching plugins with `sources` (a test registry's
    /// CA, say), as production runs it: a ServiceAccount bound to what `inrun generate
    /// rbac` prints for the fleet's flags (`--blueprint-resources`, `--install-crds`,
    /// `--impersonate` of the default tenant identity, and the `--blueprint` file's needs).
    pub async fn start_with(options: FleetOptions, sources: SourceOptions) -> FleetHost {
        Self::start_serving(options, sources, &[]).await
    }

    /// [`FleetHost::start_with`], the generated RBAC also covering `later`: Blueprints the
    /// test writes as tenant files after the start (an operator regenerates the RBAC when
    /// it adds a tenant file: file tenants act as the host).
    pub async fn start_serving(
        options: FleetOptions,
        sources: SourceOptions,
        later: &[String],
    ) -> FleetHost {
        let rbac = Self::rbac_options(&options, &[]);
        if options.default_tenant_service_account == Some(tenant_accounts()) {
            // Its Role is in that namespace.
            ensure_tenant_accounts(&ControlPlane::shared().client()).await;
        }
        let mut blueprints = file_tenants(&options);
        blueprints.extend(later.iter().map(|text| {
            inrun::blueprint::from_str(text, "later.yaml")
                .unwrap_or_else(|e| panic!("a later Blueprint: {e}"))
        }));
        let identity = identity::Identity::for_blueprints(&blueprints, &rbac).await;
        Self::start_as(options, sources, Run::Bound(Box::new(identity))).await
    }

    /// The flags `inrun generate rbac` is given for a fleet run with `options`, the host
    /// also impersonating `tenants`.
    pub fn rbac_options(
        options: &FleetOptions,
        tenants: &[inrun::blueprint::ServiceAccountRef],
    ) -> inrun::generate::rbac::RbacOptions {
        let mut rbac = identity::Identity::options();
        rbac.install_crds = options.install_crds;
        rbac.blueprint_resources = options.resources;
        rbac.impersonate = tenants.to_vec();
        rbac.tenant_accounts = options.default_tenant_service_account.clone();
        rbac
    }

    /// [`FleetHost::start_serving`] with no sources, its package identity locks kept under
    /// `locks` (`--shared-identity-boundary`, `--identity-lock-duration`, the cap).
    pub async fn start_locking(
        options: FleetOptions,
        later: &[String],
        locks: inrun::runtime::locks::LockPolicy,
    ) -> FleetHost {
        let rbac = Self::rbac_options(&options, &[]);
        if options.default_tenant_service_account == Some(tenant_accounts()) {
            ensure_tenant_accounts(&ControlPlane::shared().client()).await;
        }
        let mut blueprints = file_tenants(&options);
        blueprints.extend(later.iter().map(|text| {
            inrun::blueprint::from_str(text, "later.yaml")
                .unwrap_or_else(|e| panic!("a later Blueprint: {e}"))
        }));
        let identity = identity::Identity::for_blueprints(&blueprints, &rbac).await;
        let run = Run::Bound(Box::new(identity));
        Self::start_locked(options, SourceOptions::default(), run, locks).await
    }

    /// Starts a fleet with `options` and `sources`, acting as `run` says.
    pub async fn start_as(options: FleetOptions, sources: SourceOptions, run: Run) -> FleetHost {
        let locks = inrun::runtime::locks::LockPolicy::default();
        Self::start_locked(options, sources, run, locks).await
    }

    /// [`FleetHost::start_as`], its identity locks kept under `locks`.
    async fn start_locked(
        options: FleetOptions,
        sources: SourceOptions,
        run: Run,
        locks: inrun::runtime::locks::LockPolicy,
    ) -> FleetHost {
        let metrics = Arc::new(inrun::metrics::Metrics::default());
        let engine = Engine::new(EngineSettings {
            max_instances: 16,
            observer: metrics.clone(),
            ..EngineSettings::default()
        })
        .expect("engine");
        let admin = ControlPlane::shared().client();
        if options.default_tenant_service_account == Some(tenant_accounts()) {
            ensure_tenant_accounts(&admin).await;
        }
        let config = run.config(&file_tenants(&options)).await;
        let fence = counting_fence(&metrics);
        let client = inrun::fence::client(config.clone(), &fence).expect("client");
        inrun::sources::install_tls_provider();
        let services = Services::with_sources(Arc::new(KubeSecrets::new(client.clone())), sources)
            .expect("plugin sources")
            .with_cluster(Arc::new(WatchCache::new(client.clone())));
        let fleet = Fleet::new(
            Shared::new(client, "e2e".into())
                .with_metrics(metrics.clone())
                .with_locks_under(identity::NAMESPACE, locks)
                .with_impersonation(config, fence),
            engine,
            services,
            options,
        );
        fleet
            .load_initial()
            .await
            .unwrap_or_else(|e| panic!("blueprint: {e}"));
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(fleet.clone().run(rx));
        FleetHost {
            fleet,
            metrics,
            shutdown: tx,
            task: Some(task),
            forbidden_expected: false,
        }
    }

    /// The test expects the API server to refuse some of the host's or its tenants'
    /// requests (403): they no longer fail it.
    pub fn expect_forbidden(&mut self) {
        self.forbidden_expected = true;
    }

    /// Options with nothing to serve yet, `--install-crds`, sources checked every 100ms.
    pub fn options() -> FleetOptions {
        FleetOptions {
            blueprint: None,
            tenants: None,
            resources: false,
            reload: Some(Duration::from_millis(100)),
            policy: Policy::default(),
            install_crds: true,
            resource_capabilities: false,
            tenant_egress: None,
            default_tenant_service_account: Some(tenant_accounts()),
            tenant_identity_namespaces: None,
            on_removal: Default::default(),
        }
    }

    /// The view of the tenant read from `source`, if it exists.
    pub fn tenant(&self, source: &TenantSource) -> Option<TenantView> {
        self.fleet.views().into_iter().find(|v| &v.source == source)
    }

    /// Asks the fleet to stop and waits until its controllers have stopped.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(WAIT, task).await {
                Ok(Ok(Ok(()))) => {}
                other => panic!("fleet did not stop cleanly: {other:?}"),
            }
        }
    }
}

/// The Blueprints a fleet run with `options` serves from files as the host itself: the
/// `--blueprint` file and every Blueprint in the `--tenants` directory that loads.
fn file_tenants(options: &FleetOptions) -> Vec<inrun::blueprint::Blueprint> {
    let mut out: Vec<_> = options
        .blueprint
        .iter()
        .map(|path| inrun::blueprint::load(path).unwrap_or_else(|e| panic!("blueprint: {e}")))
        .collect();
    if let Some(dir) = &options.tenants
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for entry in entries.flatten() {
            let path = entry.path();
            let yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
            // A tenant that does not load runs nothing: it needs no grant.
            if yaml && let Ok(all) = inrun::blueprint::load_all(&path) {
                out.extend(all);
            }
        }
    }
    out
}

/// Writes `bytes` to `path` the way a deploy tool replaces a file: a temporary file in
/// the same directory renamed over it.
pub fn replace_file(path: &std::path::Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp-replace");
    std::fs::write(&tmp, bytes).expect("write replacement");
    std::fs::rename(&tmp, path).expect("rename replacement");
}

/// A CRD group no other test uses, so each test's CRD and controller are its own.
pub fn unique_group(test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!(
        "{}-{n}-{}.e2e.inrun.dev",
        test.replace('_', "-"),
        std::process::id()
    )
}

/// The path of a built plugin (`make plugins`).
pub fn plugin(name: &str) -> String {
    let dir = std::env::var_os("INRUN_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/target/wasm32-wasip2/release")
        });
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make plugins`",
        path.display()
    );
    path.display().to_string()
}

/// The ApiResource of a test CRD.
pub fn resource(group: &str, kind: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// An admin client.
pub fn client() -> Client {
    ControlPlane::shared().client()
}

/// Applies a CR (server-side apply, field manager `e2e-test`) from YAML text, once its
/// CRD is served (the host installs it; discovery can lag behind Established).
pub async fn apply_cr(ar: &ApiResource, ns: &str, yaml: &str) -> DynamicObject {
    served(ar).await;
    let obj: Value = serde_yaml_ng::from_str(yaml).expect("cr yaml");
    let name = obj["metadata"]["name"].as_str().expect("name").to_string();
    let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, ar);
    api.patch(
        &name,
        &PatchParams::apply("e2e-test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .expect("apply cr")
}

/// Polls until `get` returns Some, or panics naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, get: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for(what, WAIT, get)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Events recorded on the object `name` in `ns`, as (reason, note).
pub async fn events(ns: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client(), ns);
    let list = api.list(&ListParams::default()).await.expect("list events");
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Waits for an event with `reason` on `name`, returning its note.
pub async fn event(ns: &str, name: &str, reason: &str) -> String {
    eventually(&format!("a {reason} event on {ns}/{name}"), || async {
        events(ns, name)
            .await
            .into_iter()
            .find(|(r, _)| r == reason)
            .map(|(_, n)| n)
    })
    .await
}

/// Gets an object of `ar` if it exists.
pub async fn get(
    ar: impl std::borrow::Borrow<ApiResource>,
    ns: Option<&str>,
    name: &str,
) -> Option<DynamicObject> {
    let ar = ar.borrow();
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client(), ns, ar),
        None => Api::all_with(client(), ar),
    };
    api.get_opt(name).await.expect("get")
}

/// apps/v1 Deployment.
pub fn deployments() -> ApiResource {
    ApiResource {
        group: "apps".into(),
        version: "v1".into(),
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        plural: "deployments".into(),
    }
}

/// v1 ConfigMap.
pub fn configmaps() -> ApiResource {
    ApiResource {
        group: "".into(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

/// A Blueprint whose Components get the `component` guest's CRD (of Gizmos in `parts`),
/// operator and instance; `extra` is more of the reconcile block (indented eight).
pub fn component_blueprint(group: &str, parts: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Component
      reconcile:
        default: false
        constructor: {{location: "{plugin}"}}
        args: {{group: "{parts}"}}
        managedResources:
          - {{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, clusterScoped: true}}
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: {parts}/v1, kind: Gizmo}}
{extra}"#,
        plugin = plugin("inrun_test_component")
    )
}

/// v1 Secret.
pub fn secrets() -> ApiResource {
    ApiResource {
        group: "".into(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Secret".into(),
        plural: "secrets".into(),
    }
}

/// apiextensions.k8s.io/v1 CustomResourceDefinition.
pub fn crds() -> ApiResource {
    ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    }
}

/// v1 Service.
pub fn services() -> ApiResource {
    ApiResource {
        group: "".into(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Service".into(),
        plural: "services".into(),
    }
}

/// The CR's `Reconciled` condition (the last pass's outcome), if any:
/// (status, reason, message).
pub fn reconciled(obj: &DynamicObject) -> Option<(String, String, String)> {
    condition(obj, "Reconciled")
}

/// The CR's `Ready` condition (the pass succeeded and every child is ready), if any.
pub fn ready(obj: &DynamicObject) -> Option<(String, String, String)> {
    condition(obj, "Ready")
}

/// The CR's condition `kind`, if any: (status, reason, message).
pub fn condition(obj: &DynamicObject, kind: &str) -> Option<(String, String, String)> {
    let c = obj
        .data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Waits until the API server serves `ar` (the host installs CRDs as it starts).
pub async fn served(ar: &ApiResource) {
    eventually(&format!("{} to be served", ar.api_version), || async {
        let api: Api<DynamicObject> = Api::all_with(client(), ar);
        api.list(&ListParams::default().limit(1))
            .await
            .ok()
            .map(|_| ())
    })
    .await
}

/// The Event objects with `reason` recorded on the object `name` in `ns`.
pub async fn event_objects(ns: &str, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client(), ns);
    let list = api.list(&ListParams::default()).await.expect("list events");
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// How many times an event with `reason` was recorded on `name` in `ns`: repeats are
/// aggregated into a series, so this adds up the series counts.
pub async fn event_count(ns: &str, name: &str, reason: &str) -> i32 {
    event_objects(ns, name, reason)
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// Waits until the WebApp `shop` in `ns` is reconciled the way the webapp example does it
/// in every language: its Service (port 80 → 8080), `Reconciled=True` with `Ready=False`
/// naming the Deployment (no controller rolls it out on the test API server), the status (image,
/// `replicas` when given, url), the tier label on the CR, and a `Reconciled` event.
/// Returns the CR.
pub async fn webapp_reconciled(
    ar: &ApiResource,
    ns: &str,
    image: &str,
    replicas: Option<i64>,
) -> DynamicObject {
    let service = eventually("the Service", || get(services(), Some(ns), "shop")).await;
    assert_eq!(service.data["spec"]["ports"][0]["targetPort"], 8080);
    let cr = eventually("the CR to be reconciled", || async {
        let cr = get(ar, Some(ns), "shop").await?;
        (reconciled(&cr)?.0 == "True").then_some(cr)
    })
    .await;
    let (status, reason, message) = ready(&cr).expect("a Ready condition");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Progressing"));
    assert!(message.starts_with("Deployment shop: "), "{message}");
    assert_eq!(cr.data["status"]["image"], image);
    if let Some(n) = replicas {
        assert_eq!(cr.data["status"]["replicas"], n);
    }
    assert_eq!(cr.data["status"]["url"], format!("http://shop.{ns}.svc:80"));
    let tier = cr
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("demo.inrun.dev/tier"));
    assert_eq!(tier.map(String::as_str), Some("web"));
    event(ns, "shop", "Reconciled").await;
    cr
}

/// One series of `apiserver_request_total` for a write (verb POST, PUT, PATCH, APPLY,
/// DELETE or DELETECOLLECTION).
pub struct WriteRequests {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Whether the requests were dry runs (`dryRun=All`: nothing stored).
    pub dry_run: bool,
    pub count: f64,
}

/// Every write series the API server counts, as it counts them.
pub async fn apiserver_write_requests() -> Vec<WriteRequests> {
    let request = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client()
        .request_text(request)
        .await
        .expect("apiserver /metrics");
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((labels, value)) = line
            .strip_prefix("apiserver_request_total{")
            .and_then(|rest| rest.rsplit_once("} "))
        else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let verb = label("verb");
        if ![
            "POST",
            "PUT",
            "PATCH",
            "APPLY",
            "DELETE",
            "DELETECOLLECTION",
        ]
        .contains(&verb.as_str())
        {
            continue;
        }
        out.push(WriteRequests {
            verb,
            group: label("group"),
            resource: label("resource"),
            subresource: label("subresource"),
            dry_run: !label("dry_run").is_empty(),
            count: value.trim().parse().unwrap_or_default(),
        });
    }
    out
}

/// The API server's own count of write requests (`apiserver_request_total` with verb
/// POST, PUT, PATCH, APPLY, DELETE or DELETECOLLECTION), by (verb, group, resource,
/// subresource).
pub async fn apiserver_writes() -> std::collections::BTreeMap<(String, String, String, String), f64>
{
    let mut writes = std::collections::BTreeMap::new();
    for w in apiserver_write_requests().await {
        *writes
            .entry((w.verb, w.group, w.resource, w.subresource))
            .or_insert(0.0) += w.count;
    }
    writes
}

/// Asserts that `writes` (from [`writes_between`]) are `expected`; a mismatch lists the
/// cluster's events, to tell which write was extra and whose.
pub async fn assert_writes(
    writes: &std::collections::BTreeMap<String, u64>,
    expected: &[(&str, u64)],
) {
    let expected: std::collections::BTreeMap<String, u64> =
        expected.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    if *writes != expected {
        let events = all_events().await;
        panic!("writes {writes:?}, expected {expected:?}; events: {events:#?}");
    }
}

/// Every event in the cluster, one line each (when, namespace, reason, what it regards,
/// the note, who reported it): for a failed write count to say which event was extra.
pub async fn all_events() -> Vec<String> {
    let api: Api<Event> = Api::all(client());
    let mut out: Vec<String> = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let regarding = e.regarding.unwrap_or_default();
            format!(
                "{:?} {}/{} {} on {}/{} {:?} by {:?}/{:?} series {:?}",
                e.event_time.map(|t| t.0),
                e.metadata.namespace.unwrap_or_default(),
                e.metadata.name.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.reporting_controller,
                e.reporting_instance,
                e.series.map(|s| s.count),
            )
        })
        .collect();
    out.sort();
    out
}

/// Writes counted between two [`apiserver_writes`] readings, for `resources` only
/// (`(group, resource)`), as "VERB resource[/subresource]" → count; zero rows left out.
pub fn writes_between(
    before: &std::collections::BTreeMap<(String, String, String, String), f64>,
    after: &std::collections::BTreeMap<(String, String, String, String), f64>,
    resources: &[(&str, &str)],
) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for (key, n) in after {
        let (verb, group, resource, sub) = key;
        if !resources.iter().any(|(g, r)| g == group && r == resource) {
            continue;
        }
        let delta = n - before.get(key).copied().unwrap_or_default();
        if delta > 0.0 {
            let name = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            *out.entry(name).or_insert(0) += delta as u64;
        }
    }
    out
}

/// How many passes of the CRD `crd` (`plural.group`) the host recording into `m` has
/// finished.
pub fn reconciles(m: &inrun::metrics::Metrics, crd: &str) -> u64 {
    inrun::metrics::ReconcileResult::ALL
        .iter()
        .map(|r| m.reconciles(crd, r.as_str()))
        .sum()
}

/// Where the ServiceAccounts of Blueprint resources that name none live in tests that are
/// not about identity, one a Blueprint (`--default-tenant-service-account`): bound, as a
/// group, to `cluster-admin`, so they may do what the host may. Not the host's own
/// namespace ([`identity::NAMESPACE`]): its ServiceAccounts run under generated RBAC.
pub const TENANTS_NAMESPACE: &str = "inrun-e2e-tenants";

/// `inrun-e2e-tenants/{name}`: each Blueprint resource's own ServiceAccount.
pub fn tenant_accounts() -> inrun::blueprint::AccountPattern {
    inrun::blueprint::AccountPattern::parse(&format!("{TENANTS_NAMESPACE}/{{name}}"))
        .expect("pattern")
}

/// Creates [`TENANTS_NAMESPACE`] and binds its ServiceAccounts to `cluster-admin` (server-side
/// apply: idempotent).
async fn ensure_tenant_accounts(client: &Client) {
    let params = PatchParams::apply("inrun-e2e").force();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            TENANTS_NAMESPACE,
            &params,
            &Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANTS_NAMESPACE}})),
        )
        .await
        .expect("the tenants' namespace");
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .patch(
            "inrun-e2e-tenants-admin",
            &params,
            &Patch::Apply(serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "inrun-e2e-tenants-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": format!("system:serviceaccounts:{TENANTS_NAMESPACE}")}],
            })),
        )
        .await
        .expect("the tenants' binding");
}

/// Server-side applies the Blueprint resource `doc` as `name`, as it is (no ServiceAccount
/// made for it); what the API server holds then.
pub async fn put_blueprint_resource(name: &str, mut doc: Value) -> DynamicObject {
    let blueprints = inrun::fleet::blueprint_resource();
    served(&blueprints).await;
    doc["metadata"]["name"] = name.into();
    let api: Api<DynamicObject> = Api::all_with(client(), &blueprints);
    api.patch(
        name,
        &PatchParams::apply("e2e-test").force(),
        &Patch::Apply(&doc),
    )
    .await
    .expect("apply Blueprint")
}

/// Server-side applies the Blueprint resource `doc` as `name`. One that names no
/// `spec.serviceAccount` acts as its own in [`TENANTS_NAMESPACE`] (on a fleet with
/// [`FleetHost::options`]'s default): that ServiceAccount is created admitting it by uid,
/// and, when a fleet serves Blueprint resources, this waits until the fleet has read that
/// consent (its verdict no longer "no identity" for that ServiceAccount).
pub async fn apply_blueprint_resource(name: &str, doc: Value) {
    let names_one = !doc["spec"]["serviceAccount"].is_null();
    let applied = put_blueprint_resource(name, doc).await;
    if names_one {
        return;
    }
    let uid = applied.metadata.uid.expect("uid");
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client(), TENANTS_NAMESPACE);
    let sa = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": TENANTS_NAMESPACE,
            "annotations": {inrun::runtime::impersonation::ADMITS: format!("{name}={uid}")}},
    });
    if accounts
        .patch(
            name,
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(&sa),
        )
        .await
        .is_err()
    {
        // No fleet with the default here (its namespace was never made): nothing to admit.
        return;
    }
    let derived = format!("{TENANTS_NAMESPACE}/{name}");
    let api: Api<DynamicObject> = Api::all_with(client(), &inrun::fleet::blueprint_resource());
    eventually(&format!("Blueprint {name} to be admitted"), || async {
        let obj = api.get_opt(name).await.ok()??;
        let conditions = obj.data.pointer("/status/conditions")?.as_array()?.clone();
        let accepted = conditions.iter().find(|c| c["type"] == "Accepted")?;
        let waiting = accepted["reason"] == "NoIdentity"
            && accepted["message"]
                .as_str()
                .is_some_and(|m| m.contains(&derived));
        (!waiting).then_some(())
    })
    .await;
}

/// Server-side applies manifests as the admin.
pub async fn apply_all(docs: &[Value]) {
    apply_all_with(&client(), docs).await;
}

/// Server-side applies manifests with `client`.
pub async fn apply_all_with(client: &Client, docs: &[Value]) {
    for doc in docs {
        let gvk = kube::core::GroupVersionKind::try_from(
            &serde_json::from_value::<kube::api::TypeMeta>(doc.clone()).expect("type meta"),
        )
        .expect("gvk");
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .expect("discovery");
        let name = doc["metadata"]["name"].as_str().expect("name");
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), ns, &ar)
            }
            _ => Api::all_with(client.clone(), &ar),
        };
        api.patch(
            name,
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(doc),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {} {name}: {e}", gvk.kind));
    }
}

/// Serves `app` on a free port of 127.0.0.1 for the rest of the test; returns the port.
pub async fn serve(app: axum::Router) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// Runs `kubectl` against the harness's API server as the admin, with `input` on its
/// standard input.
pub fn kubectl(args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(ControlPlane::shared().kubeconfig())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kubectl");
    let mut stdin = child.stdin.take().expect("kubectl stdin");
    stdin
        .write_all(input.as_bytes())
        .expect("writing to kubectl");
    drop(stdin);
    child.wait_with_output().expect("kubectl")
}

/// Writes the Deployment's status as its controller would (there is none on the test
/// control plane): the replicas its spec asks for, `available` of them up.
pub async fn roll_out(ns: &str, name: &str, available: i64) {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client(), ns);
    let deployment = api.get(name).await.expect("the Deployment");
    // Every replica the spec asks for is created and updated (no more: an extra one would
    // be an old replica pending termination), `available` of them up.
    let want = i64::from(
        deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(1),
    );
    let up = available.min(want);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {
            "observedGeneration": deployment.metadata.generation, "replicas": want,
            "updatedReplicas": want, "readyReplicas": up, "availableReplicas": up}})),
    )
    .await
    .expect("write the Deployment's status");
}

/// Rolls the Deployment `name` out once the host has created it.
pub async fn roll_out_when_there(ns: &str, name: &str) {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client(), ns);
    eventually("the Deployment", || async { api.get_opt(name).await.ok()? }).await;
    roll_out(ns, name, 2).await;
}
