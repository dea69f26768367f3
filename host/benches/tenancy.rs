//! `make bench`: hot reload and tenant isolation on a real kube-apiserver, one run.
//! Writes the "Reload and tenants" section of BENCHMARKS.md.
//!
//! - From a plugin file replaced on disk to the first child written by the new version,
//!   with sources checked every 100 ms and every 1 s (the wait for the next check is part
//!   of it, as in production).
//! - A tenant's create→Ready latency alone, and beside another tenant whose plugin always
//!   runs out of time: the baseline is the same tenant in the same run.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod common;

use common::{plugin_dir, write_section};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inrun::assemble::{Policy, Services};
use inrun::fleet::{Fleet, FleetOptions};
use inrun::runtime::Shared;
use inrun::secrets::KubeSecrets;
use inrun::wasm::{Engine, EngineSettings};
use inrun_testenv::{ControlPlane, wait_for};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(60);

fn plugin(name: &str) -> PathBuf {
    plugin_dir().join(format!("{name}.wasm"))
}

fn resource(group: &str, kind: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

fn blueprint(name: &str, group: &str, kind: &str, wasm: &str, deadline: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: {name} }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      workers: 2\n      reconcile:\n        default: false\n        constructor: {{ location: {wasm}, limits: {{ deadline: {deadline} }} }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
    )
}

fn replace(path: &Path, from: &Path) {
    let tmp = path.with_extension("swap");
    std::fs::copy(from, &tmp).expect("copy plugin");
    std::fs::rename(&tmp, path).expect("rename plugin");
}

struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), inrun::fleet::FleetError>>,
}

async fn start(options: FleetOptions) -> Running {
    let client = ControlPlane::shared().client();
    // Compiles run as `inrun run` runs them: in a child process of the inrun program.
    let engine = Engine::new(EngineSettings {
        max_instances: 32,
        compiler: Some(inrun::wasm::Compiler {
            program: PathBuf::from(env!("CARGO_BIN_EXE_inrun")),
            timeout: Duration::from_secs(120),
            memory_bytes: inrun::wasm::Compiler::default_memory(),
        }),
        ..EngineSettings::default()
    })
    .expect("engine");
    let services = Services::new(Arc::new(KubeSecrets::new(client.clone())));
    // Tenants that name a ServiceAccount are served as it (the `Accounts::Own` rows); the
    // others act as the host.
    let admin = ControlPlane::shared().admin_config();
    let fleet = Fleet::new(
        Shared::new(client, "bench".into())
            .with_impersonation(admin, inrun::fence::Fence::default()),
        engine,
        services,
        options,
    );
    fleet.load_initial().await.expect("blueprint");
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(fleet.run(rx));
    Running { stop, task }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn options(reload: Duration) -> FleetOptions {
    FleetOptions {
        blueprint: None,
        tenants: None,
        resources: false,
        reload: Some(reload),
        // As `inrun run` has it by default.
        policy: Policy {
            tenant_api_writes: 100,
            ..Policy::default()
        },
        install_crds: true,
        resource_capabilities: false,
        tenant_egress: None,
        default_tenant_service_account: None,
        tenant_identity_namespaces: None,
        on_removal: Default::default(),
    }
}

async fn apply_cr(ar: &ApiResource, name: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ControlPlane::shared().client(), "default", ar);
    let obj = json!({"apiVersion": ar.api_version, "kind": ar.kind,
                     "metadata": {"name": name}, "spec": {}});
    wait_for("the CR to be accepted", WAIT, || async {
        api.patch(
            name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&obj),
        )
        .await
        .ok()
    })
    .await
    .expect("apply CR");
}

async fn stamped(name: &str) -> Option<String> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(ControlPlane::shared().client(), "default");
    let cm = api.get_opt(&format!("{name}-stamp")).await.ok()??;
    cm.data?.get("version").cloned()
}

async fn ready(ar: &ApiResource, name: &str) -> Option<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ControlPlane::shared().client(), "default", ar);
    let obj = api.get_opt(name).await.ok()??;
    obj.data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
        .then_some(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

/// Swaps the plugin `swaps` times and returns the median time from each swap to the
/// child written by the new version.
async fn reload_latency(reload: Duration, run: usize, swaps: usize) -> Duration {
    let group = format!("reload-{run}-{}.bench.inrun.dev", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = dir.path().join("stamp.wasm");
    let (v1, v2) = (plugin("inrun_test_stamp_v1"), plugin("inrun_test_stamp_v2"));
    replace(&wasm, &v1);
    let file = dir.path().join("blueprint.yaml");
    std::fs::write(
        &file,
        blueprint("bench", &group, "Stamped", "./stamp.wasm", "2s"),
    )
    .expect("write");
    let host = start(FleetOptions {
        blueprint: Some(file),
        ..options(reload)
    })
    .await;
    let ar = resource(&group, "Stamped");
    // A name of its own: the ConfigMap of an earlier run's CR is that CR's, not this one's.
    let name = format!("reload-{run}");
    apply_cr(&ar, &name).await;
    wait_for("v1", WAIT, || async {
        (stamped(&name).await.as_deref() == Some("v1")).then_some(())
    })
    .await
    .expect("v1");
    let mut times = Vec::new();
    for i in 0..swaps {
        let (from, want) = if i % 2 == 0 { (&v2, "v2") } else { (&v1, "v1") };
        let started = Instant::now();
        replace(&wasm, from);
        wait_for(want, WAIT, || async {
            (stamped(&name).await.as_deref() == Some(want)).then_some(())
        })
        .await
        .expect("new version");
        times.push(started.elapsed());
    }
    host.stop().await;
    median(times)
}

/// Create→Ready of `count` CRs of `ar`, one after another.
async fn create_to_ready(ar: &ApiResource, prefix: &str, count: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let started = Instant::now();
        apply_cr(ar, &name).await;
        wait_for("Ready", WAIT, || ready(ar, &name))
            .await
            .expect("Ready");
        times.push(started.elapsed());
    }
    times
}

/// The median and the 99th percentile (with fewer than 100 samples: the largest).
fn summary(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    let p99 = times[((times.len() * 99).div_ceil(100)).saturating_sub(1)];
    (times[times.len() / 2], p99)
}

/// A hostile tenant A: its Blueprint (for its group) and what is done to it while B is
/// measured.
struct Hostile {
    row: &'static str,
    kind: &'static str,
    blueprint: fn(&str) -> String,
    crs: usize,
    /// CR edits per second, spread over its CRs (0: none).
    edits_per_second: u32,
    /// A's Blueprint after its `n`th rewrite, when the file is rewritten every second (a
    /// compile each time).
    recompile: Option<fn(&str, u64) -> String>,
    /// Whether the host serves A's kind; unserved, the kind's CRD is installed by hand and
    /// its edits load only the API server: what the shared API server costs B, apart from
    /// the host.
    served: bool,
    /// Whom the tenants act as, and whether flow control keeps them apart.
    accounts: Accounts,
}

/// Whom the tenants (and A's edits) act as at the API server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Accounts {
    /// As the host, the harness's admin (tenant files that name no ServiceAccount), A's
    /// edits too: `system:masters`, exempt from API Priority and Fairness.
    Host,
    /// Each tenant as its own ServiceAccount (in [`IDS`]), which the host impersonates, and
    /// A's edits made as A's; with `apf`, under what `inrun generate apf
    /// --tenant-identity-namespaces` writes for that namespace, else under the cluster's
    /// suggested `service-accounts` schema.
    Own {
        /// Whether the generated flow-control objects are applied during the row.
        apf: bool,
    },
}

/// The namespace of the tenants' ServiceAccounts in [`Accounts::Own`] rows.
const IDS: &str = "bench-tenant-ids";

fn with_crd(group: &str, kind: &str, workers: u32, reconcile: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: team-a }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      workers: {workers}\n      reconcile:\n{reconcile}        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
    )
}

fn constructor(wasm: &str, limits: &str) -> String {
    format!(
        "        default: false\n        constructor: {{ location: {}, limits: {{ {limits} }} }}\n",
        plugin(wasm).display()
    )
}

/// Every hostile tenant, in the order of the table's rows.
fn hostile_tenants() -> Vec<Hostile> {
    let mut all = greedy_plugins();
    all.extend(floods());
    all
}

/// Plugins that take all one call may: its time, its memory, and a compile each time.
fn greedy_plugins() -> Vec<Hostile> {
    vec![
        Hostile {
            row: "spinning plugin (1 s deadline), its 8 CRs edited every 0.5 s",
            kind: "Spinner",
            blueprint: |g| {
                with_crd(
                    g,
                    "Spinner",
                    8,
                    &constructor("inrun_test_spin", "deadline: 1s"),
                )
            },
            crs: 8,
            edits_per_second: 16,
            recompile: None,
            served: true,
            accounts: Accounts::Host,
        },
        Hostile {
            row: "memory hog (256 MiB cap), its 8 CRs edited every 0.5 s",
            kind: "Hog",
            blueprint: |g| {
                with_crd(
                    g,
                    "Hog",
                    8,
                    &constructor("inrun_test_hog", "memory: 256Mi, deadline: 2s"),
                )
            },
            crs: 8,
            edits_per_second: 16,
            recompile: None,
            served: true,
            accounts: Accounts::Host,
        },
        Hostile {
            row: "a 19 MB Python plugin compiled anew every second",
            kind: "Snake",
            blueprint: |g| {
                with_crd(
                    g,
                    "Snake",
                    2,
                    &constructor("inrun_test_reporter_python", "deadline: 2s"),
                )
            },
            crs: 1,
            edits_per_second: 0,
            recompile: Some(|g, n| {
                let python = ["inrun_test_reporter_python", "inrun_test_spin_python"];
                with_crd(
                    g,
                    "Snake",
                    2,
                    &constructor(python[(n % 2) as usize], "deadline: 2s"),
                )
            }),
            served: true,
            accounts: Accounts::Host,
        },
        Hostile {
            row: "outcomes of 16 MB (1,000 ConfigMaps of 16 KiB, its output cap raised to 16Mi), its 8 CRs edited every 0.5 s",
            kind: "Hoard",
            blueprint: |g| {
                with_crd(
                    g,
                    "Hoard",
                    8,
                    &format!(
                        "        args: {{ mode: sized, count: 1000, size: 16384 }}\n{}",
                        constructor(
                            "inrun_test_hostile",
                            "outputSize: 16Mi, resources: 1000, memory: 128Mi, deadline: 5s"
                        )
                    ),
                )
            },
            crs: 8,
            edits_per_second: 16,
            recompile: None,
            served: true,
            accounts: Accounts::Host,
        },
        Hostile {
            row: "a new plugin of 400 bytes every second, whose memory images span 256 MiB",
            kind: "Bomb",
            blueprint: |g| {
                with_crd(
                    g,
                    "Bomb",
                    2,
                    &constructor("inrun_test_stamp_v1", "deadline: 2s"),
                )
            },
            crs: 1,
            edits_per_second: 0,
            recompile: Some(|g, n| {
                let path = std::env::temp_dir()
                    .join(format!("inrun-bench-bomb-{}-{n}.wasm", std::process::id()));
                std::fs::write(&path, compile_bomb(n)).expect("write a bomb");
                with_crd(
                    g,
                    "Bomb",
                    2,
                    &format!(
                        "        default: false\n        constructor: {{ location: {} }}\n",
                        path.display()
                    ),
                )
            }),
            served: true,
            accounts: Accounts::Host,
        },
    ]
}

/// A component of a few hundred bytes whose four memory images (one a core module), kept
/// whole, would take 256 MiB once compiled; `n` makes its bytes (and digest) its own.
fn compile_bomb(n: u64) -> Vec<u8> {
    let body: String = (0..4)
        .map(|i| {
            format!(
                "(core module $m{i} (memory 1024) (data (i32.const 0) \"{n}\") (data (i32.const 67108863) \"b\"))\n(core instance (instantiate $m{i}))\n"
            )
        })
        .collect();
    wat::parse_str(format!("(component {body})")).expect("component text")
}

/// The write storm: 50 CRs of a kind the host serves (a ConfigMap each), edited 1,000
/// times a second in all.
fn write_storm() -> Hostile {
    Hostile {
        row: "write storm: 50 CRs edited 1,000 times a second in all",
        kind: "Stormy",
        blueprint: |g| {
            with_crd(
                g,
                "Stormy",
                16,
                "        onReconcile:\n          - apiVersion: v1\n            kind: ConfigMap\n            metadata: { name: '{{ .metadata.name }}-storm' }\n            data: { n: '{{ .spec.n }}' }\n",
            )
        },
        crs: 50,
        edits_per_second: 1000,
        recompile: None,
        served: true,
        accounts: Accounts::Host,
    }
}

/// Tenants that load what every tenant shares: the API server with writes (on a kind the
/// host serves, and on one it does not; then with each tenant its own ServiceAccount,
/// without and with flow control), the logs, and the template engine.
fn floods() -> Vec<Hostile> {
    vec![
        write_storm(),
        Hostile {
            row: "the same write storm on a kind no host serves (the API server's share)",
            kind: "Unserved",
            blueprint: |_| String::new(),
            crs: 50,
            edits_per_second: 1000,
            recompile: None,
            served: false,
            accounts: Accounts::Host,
        },
        Hostile {
            row: "write storm, each tenant its own ServiceAccount (A's edits as A's)",
            accounts: Accounts::Own { apf: false },
            ..write_storm()
        },
        Hostile {
            row: "write storm, each tenant its own ServiceAccount, under `inrun generate apf`",
            accounts: Accounts::Own { apf: true },
            ..write_storm()
        },
        Hostile {
            row: "log flood: a chatty plugin (7 lines a call), its 20 CRs edited 100 times a second",
            kind: "Chatty",
            blueprint: |g| {
                with_crd(
                    g,
                    "Chatty",
                    8,
                    &constructor("inrun_test_chatty", "deadline: 2s"),
                )
            },
            crs: 20,
            edits_per_second: 100,
            recompile: None,
            served: true,
            accounts: Accounts::Host,
        },
        Hostile {
            row: "template that burns all its fuel, its 8 CRs edited every 0.5 s",
            kind: "Burner",
            blueprint: |g| {
                with_crd(
                    g,
                    "Burner",
                    8,
                    "        onReconcile:\n          - \"{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}\"\n",
                )
            },
            crs: 8,
            edits_per_second: 16,
            recompile: None,
            served: true,
            accounts: Accounts::Host,
        },
    ]
}

/// Edits A's CRs with `client` at `per_second` in all (spread over 8 concurrent editors)
/// until stopped; returns how many edits the API server took.
async fn edit(
    client: kube::Client,
    ar: ApiResource,
    prefix: String,
    crs: usize,
    per_second: u32,
    stop: watch::Receiver<bool>,
) -> u64 {
    let editors = 8.min(crs);
    let mut tasks = Vec::new();
    for e in 0..editors {
        let (ar, prefix, mut stop) = (ar.clone(), prefix.clone(), stop.clone());
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
            let period = Duration::from_secs_f64(editors as f64 / f64::from(per_second));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut n, mut done) = (0u64, 0u64);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.changed() => return done,
                }
                let name = format!("{prefix}-{}", (e + n as usize * editors) % crs);
                n += 1;
                let patch = json!({"spec": {"n": n}});
                if api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    done += 1;
                }
            }
        }));
    }
    let _ = stop;
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total
}

/// Rewrites A's Blueprint file every second, to what `rewrite` makes of the rewrite's
/// number.
async fn recompile(
    file: PathBuf,
    group: String,
    rewrite: fn(&str, u64) -> String,
    mut stop: watch::Receiver<bool>,
) -> u64 {
    let mut flips = 0u64;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return flips,
        }
        flips += 1;
        let text = rewrite(&group, flips);
        let tmp = file.with_extension("swap");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, &file).expect("rename");
    }
}

/// Installs `ar`'s CRD (an open schema) as the harness's admin, for no host to serve,
/// and waits until its CRs may be created.
async fn install_crd(ar: &ApiResource) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(ControlPlane::shared().client());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", ar.plural, ar.group)},
        "spec": {
            "group": ar.group,
            "names": {"kind": ar.kind, "plural": ar.plural, "singular": ar.kind.to_lowercase()},
            "scope": "Namespaced",
            "versions": [{
                "name": ar.version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))
    .expect("CRD");
    crds.create(&kube::api::PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let api: Api<DynamicObject> =
        Api::namespaced_with(ControlPlane::shared().client(), "default", ar);
    wait_for(
        "the unserved CRD to be served by the API server",
        WAIT,
        || async { api.list(&Default::default()).await.ok().map(|_| ()) },
    )
    .await
    .expect("CRD established");
}

/// One row: B measured alone, then beside hostile A, on a host serving both as file
/// tenants. Returns B's (median, p99) alone and beside, and what A was driven at.
async fn isolation(
    hostile: &Hostile,
    run: usize,
    count: usize,
) -> ((Duration, Duration), (Duration, Duration), String) {
    let id = std::process::id();
    let group_a = format!("a{run}-{id}.bench.inrun.dev");
    let group_b = format!("b{run}-{id}.bench.inrun.dev");
    let dir = tempfile::tempdir().expect("tempdir");
    let stamp = plugin("inrun_test_stamp_v1").display().to_string();
    accounts::prepare(hostile.accounts).await;
    std::fs::write(
        dir.path().join("b.yaml"),
        accounts::acting(
            &blueprint("team-b", &group_b, "Quick", &stamp, "2s"),
            hostile.accounts,
            "team-b",
        ),
    )
    .expect("write b");
    let host = start(FleetOptions {
        tenants: Some(dir.path().to_path_buf()),
        ..options(Duration::from_millis(100))
    })
    .await;
    let quick = resource(&group_b, "Quick");
    // Names of this row's own: what an earlier row's CRs made is theirs, not these CRs'.
    let b = |what: &str| format!("r{run}-{what}");
    let a_prefix = format!("r{run}-a");
    create_to_ready(&quick, &b("warm"), 2).await;
    let alone = summary(create_to_ready(&quick, &b("alone"), count).await);

    let a_file = dir.path().join("a.yaml");
    let ar = resource(&group_a, hostile.kind);
    if hostile.served {
        let text = (hostile.blueprint)(&group_a);
        let text = accounts::acting(&text, hostile.accounts, "team-a");
        std::fs::write(&a_file, text).expect("write a");
    } else {
        install_crd(&ar).await;
    }
    for i in 0..hostile.crs {
        apply_cr(&ar, &format!("{a_prefix}-{i}")).await;
    }
    if hostile.served {
        // A is at work once its first CR has a Ready condition, whatever it says.
        wait_for("tenant A at work", WAIT, || async {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ControlPlane::shared().client(), "default", &ar);
            let obj = api.get_opt(&format!("{a_prefix}-0")).await.ok()??;
            obj.data
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready")
                .then_some(())
        })
        .await
        .expect("A at work");
    }
    let (stop, rx) = watch::channel(false);
    let started = Instant::now();
    let editing = (hostile.edits_per_second > 0).then(|| {
        tokio::spawn(edit(
            accounts::editor(hostile.accounts),
            ar.clone(),
            a_prefix.clone(),
            hostile.crs,
            hostile.edits_per_second,
            rx.clone(),
        ))
    });
    let flipping = hostile.recompile.map(|rewrite| {
        tokio::spawn(recompile(
            a_file.clone(),
            group_a.clone(),
            rewrite,
            rx.clone(),
        ))
    });
    let beside = summary(create_to_ready(&quick, &b("beside"), count).await);
    let _ = stop.send(true);
    let took = started.elapsed().as_secs_f64();
    let mut driven = String::new();
    if let Some(t) = editing {
        let edits = t.await.unwrap_or(0);
        driven = format!("{:.0} edits/s", edits as f64 / took);
    }
    if let Some(t) = flipping {
        let flips = t.await.unwrap_or(0);
        driven = format!("{flips} plugin changes");
    }
    host.stop().await;
    accounts::finish(hostile.accounts).await;
    (alone, beside, driven)
}

fn main() {
    // Log lines are formatted as in production, and thrown away (kept on stderr with
    // INRUN_BENCH_LOG=1).
    let keep = std::env::var_os("INRUN_BENCH_LOG").is_some();
    tracing_subscriber::fmt()
        .with_writer(move || -> Box<dyn std::io::Write> {
            if keep {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::sink())
            }
        })
        .with_env_filter("info")
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let swaps = 6;
    let count = 30;
    let (fast, slow, rows) = runtime.block_on(async {
        // INRUN_BENCH_ONLY=<words> runs only the isolation rows naming them (for a look
        // at one; BENCHMARKS.md is then left alone).
        let only = std::env::var("INRUN_BENCH_ONLY").ok();
        if let Some(only) = &only {
            for (run, hostile) in hostile_tenants().iter().enumerate() {
                if hostile.row.contains(only.as_str()) {
                    let (alone, beside, driven) = isolation(hostile, run, count).await;
                    eprintln!(
                        "{}: alone {alone:?}, beside {beside:?} ({driven})",
                        hostile.row
                    );
                }
            }
            std::process::exit(0);
        }
        let fast = reload_latency(Duration::from_millis(100), 0, swaps).await;
        let slow = reload_latency(Duration::from_secs(1), 1, swaps).await;
        let mut rows = Vec::new();
        for (run, hostile) in hostile_tenants().iter().enumerate() {
            let (alone, beside, driven) = isolation(hostile, run, count).await;
            eprintln!(
                "{}: alone {alone:?}, beside {beside:?} ({driven})",
                hostile.row
            );
            rows.push((hostile.row, alone, beside, driven));
        }
        (fast, slow, rows)
    });
    let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64();
    let table: String = rows
        .iter()
        .map(|(row, (am, ap), (bm, bp), driven)| {
            format!(
                "| {row} | {} · {} | {} · {} | {:.2}× | {:.2}× | {} |\n",
                ms(*am),
                ms(*ap),
                ms(*bm),
                ms(*bp),
                ratio(*am, *bm),
                ratio(*ap, *bp),
                if driven.is_empty() {
                    "–"
                } else {
                    driven.as_str()
                }
            )
        })
        .collect();
    let section = format!(
        "## Reload and tenants\n\n\
         `cargo bench -p inrun --bench tenancy`, against the test harness's kube-apiserver and etcd, one run.\n\n\
         ### Plugin file change → first reconcile on the new version\n\n\
         The `stamp` constructor's file is replaced (rename over it) while a CR exists; timed until the \
         ConfigMap the new version declares is in the API server: the wait for the next source \
         check, fetch + compile, swap, re-queue of every CR, reconcile and apply. Median of {swaps} swaps (v1↔v2). \
         Each swap follows right after the host saw the previous version, so it waits close to a full interval for the \
         next check; the engine here has no disk cache, so every swap compiles (a replaced version leaves the \
         engine's memory).\n\n\
         | source check interval | median |\n|---|---|\n\
         | 100 ms | {} |\n| 1 s | {} |\n\n\
         ### Tenant isolation\n\n\
         Tenant B (the `stamp` constructor) create→Ready latency of {count} CRs created one after another, \
         alone and then beside a hostile tenant A, on one host serving both as tenant files with the engine's \
         default budgets (guest code on half the cores, each tenant's guests capped at half of that, a quarter of the pool, of guest memory \
         and of the host memory replies take per tenant); \
         a fresh host per row, so each row's \"alone\" is its own baseline. The API server and etcd share the \
         machine's 2 cores with the host and the bench. Goal: B's median within 1.25× and p99 within 2× of alone. \
         The row \"on a kind no host serves\" is the write storm with no host watching it (its CRD installed by hand): \
         what B pays for sharing the API server and etcd with the storm, apart from anything the host does. \
         Except in the two rows \"write storm, each tenant its own ServiceAccount\", the tenants act as the host (the harness's \
         admin) and A's edits are the admin's, exempt from the API server's flow control; in those two the host \
         impersonates each tenant's ServiceAccount and A's edits are made as A's, first under the cluster's suggested \
         flow control (`service-accounts`), then under what `inrun generate apf` writes (a level for the tenants, \
         a flow each).\n\n\
         | tenant A | B alone: median · p99 | B beside A: median · p99 | median × | p99 × | A driven at |\n\
         |---|---|---|---|---|---|\n{table}",
        ms(fast),
        ms(slow),
    );
    println!("{section}");
    write_section("tenancy", &section);
}

/// The tenants' identities and the flow control of the [`Accounts::Own`] rows.
mod accounts {
    use super::{Accounts, IDS, WAIT};
    use inrun::blueprint::ServiceAccountRef;
    use inrun::generate::apf::{self, ApfOptions};
    use inrun_testenv::{ControlPlane, wait_for};
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use serde_json::{Value, json};

    fn account(tenant: &str) -> ServiceAccountRef {
        ServiceAccountRef {
            namespace: IDS.into(),
            name: tenant.into(),
        }
    }

    /// The Blueprint `text`, acting as the tenant's own ServiceAccount in `Own` rows.
    pub fn acting(text: &str, accounts: Accounts, tenant: &str) -> String {
        match accounts {
            Accounts::Host => text.to_string(),
            Accounts::Own { .. } => text.replacen(
                "spec:\n",
                &format!("spec:\n  serviceAccount: {{ namespace: {IDS}, name: {tenant} }}\n"),
                1,
            ),
        }
    }

    /// The client A's edits are made with: the admin's, or one acting as A's
    /// ServiceAccount (as a tenant's own tooling would), so that flow control classifies
    /// them as A's.
    pub fn editor(accounts: Accounts) -> kube::Client {
        let cp = ControlPlane::shared();
        match accounts {
            Accounts::Host => cp.client(),
            Accounts::Own { .. } => {
                let mut config = cp.admin_config();
                config.auth_info.impersonate = Some(account("team-a").username());
                kube::Client::try_from(config).expect("client")
            }
        }
    }

    /// What `inrun generate apf --name bench --tenant-identity-namespaces IDS` prints. Its
    /// host level names the default `inrun-system/inrun`, which nothing here runs as: the
    /// bench's host is the admin (exempt), and what it does as a tenant is the tenant's.
    fn flow_control() -> Vec<Value> {
        apf::manifests(&ApfOptions {
            name: "bench".into(),
            tenant_identity_namespaces: vec![IDS.into()],
            ..ApfOptions::default()
        })
        .expect("apf")
    }

    /// Before an `Own` row: the tenants' namespace and ServiceAccounts, bound to
    /// `cluster-admin` (the rows measure how the API server is shared, not RBAC); with
    /// `apf`, the flow-control objects, applied as the admin (they are the cluster
    /// operator's), once the API server uses them.
    pub async fn prepare(accounts: Accounts) {
        let Accounts::Own { apf } = accounts else {
            return;
        };
        let mut docs = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": IDS}}),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": IDS},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": format!("system:serviceaccounts:{IDS}")}],
            }),
        ];
        for tenant in ["team-a", "team-b"] {
            docs.push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": tenant, "namespace": IDS}}));
        }
        if apf {
            docs.extend(flow_control());
        }
        for doc in &docs {
            api(doc)
                .await
                .patch(
                    doc["metadata"]["name"].as_str().expect("name"),
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(doc),
                )
                .await
                .expect("apply");
        }
        if apf {
            let schema = flow_control()
                .into_iter()
                .rfind(|d| d["kind"] == "FlowSchema")
                .expect("the tenants' FlowSchema");
            let schemas = api(&schema).await;
            let name = schema["metadata"]["name"].as_str().expect("name");
            // The API server marks a FlowSchema it acts on as not dangling.
            wait_for("the tenants' FlowSchema in use", WAIT, || async {
                let fs = schemas.get_opt(name).await.ok()??;
                fs.data
                    .pointer("/status/conditions")?
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Dangling" && c["status"] == "False")
                    .then_some(())
            })
            .await
            .expect("flow control in use");
        }
    }

    /// After an `apf` row: the flow-control objects go, so later rows run without them.
    pub async fn finish(accounts: Accounts) {
        if accounts != (Accounts::Own { apf: true }) {
            return;
        }
        for doc in flow_control().iter().rev() {
            let name = doc["metadata"]["name"].as_str().expect("name");
            let _ = api(doc).await.delete(name, &Default::default()).await;
        }
    }

    /// The admin's API for `doc`'s kind (in its namespace, if it names one).
    async fn api(doc: &Value) -> Api<DynamicObject> {
        let client = ControlPlane::shared().client();
        let types: kube::api::TypeMeta = serde_json::from_value(doc.clone()).expect("type");
        let gvk = kube::core::GroupVersionKind::try_from(&types).expect("gvk");
        let (ar, _) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .expect("discovery");
        match doc["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client, ns, &ar),
            None => Api::all_with(client, &ar),
        }
    }
}
