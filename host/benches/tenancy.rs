//! `make bench`: hot reload and tenant isolation on a real kube-apiserver, one run.
//! Writes the "Reload and tenants" section of BENCHMARKS.md.
//!
//! - From a plugin file replaced on disk to the first child written by the new version,
//!   with sources checked every 100 ms and every 1 s (the wait for the next check is part
//!   of it, as in production).
//! - A tenant's create→Ready latency alone, and beside another tenant whose plugin always
//!   runs out of time: the baseline is the same tenant in the same run.

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
    let engine = Engine::new(EngineSettings {
        max_instances: 32,
        ..EngineSettings::default()
    })
    .expect("engine");
    let services = Services::new(Arc::new(KubeSecrets::new(client.clone())));
    let fleet = Fleet::new(
        Shared::new(client, "bench".into()),
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
        policy: Policy::default(),
        install_crds: true,
        resource_capabilities: false,
        tenant_egress: None,
        default_tenant_service_account: None,
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
    apply_cr(&ar, "one").await;
    wait_for("v1", WAIT, || async {
        (stamped("one").await.as_deref() == Some("v1")).then_some(())
    })
    .await
    .expect("v1");
    let mut times = Vec::new();
    for i in 0..swaps {
        let (from, want) = if i % 2 == 0 { (&v2, "v2") } else { (&v1, "v1") };
        let started = Instant::now();
        replace(&wasm, from);
        wait_for(want, WAIT, || async {
            (stamped("one").await.as_deref() == Some(want)).then_some(())
        })
        .await
        .expect("new version");
        times.push(started.elapsed());
    }
    host.stop().await;
    median(times)
}

async fn create_to_ready(ar: &ApiResource, prefix: &str, count: usize) -> Duration {
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
    median(times)
}

async fn isolation(count: usize) -> (Duration, Duration) {
    let group_a = format!("spin-{}.bench.inrun.dev", std::process::id());
    let group_b = format!("quick-{}.bench.inrun.dev", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    let stamp = plugin("inrun_test_stamp_v1").display().to_string();
    let spin = plugin("inrun_test_spin").display().to_string();
    std::fs::write(
        dir.path().join("b.yaml"),
        blueprint("team-b", &group_b, "Quick", &stamp, "2s"),
    )
    .expect("write b");
    let host = start(FleetOptions {
        tenants: Some(dir.path().to_path_buf()),
        ..options(Duration::from_millis(100))
    })
    .await;
    let quick = resource(&group_b, "Quick");
    create_to_ready(&quick, "warm", 2).await;
    let alone = create_to_ready(&quick, "alone", count).await;
    std::fs::write(
        dir.path().join("a.yaml"),
        blueprint("team-a", &group_a, "Spinner", &spin, "1s"),
    )
    .expect("write a");
    let spinner = resource(&group_a, "Spinner");
    for i in 0..8 {
        apply_cr(&spinner, &format!("spin-{i}")).await;
    }
    let beside = create_to_ready(&quick, "beside", count).await;
    host.stop().await;
    (alone, beside)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let swaps = 6;
    let (fast, slow, (alone, beside)) = runtime.block_on(async {
        let fast = reload_latency(Duration::from_millis(100), 0, swaps).await;
        let slow = reload_latency(Duration::from_secs(1), 1, swaps).await;
        (fast, slow, isolation(10).await)
    });
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
         Tenant B (the `stamp` constructor) create→Ready latency, median of 10 CRs created one after \
         another; beside it, tenant A's 8 CRs call a plugin that spins until its 1 s deadline on \
         every reconcile and retry.\n\n\
         | tenant B | median create→Ready |\n|---|---|\n\
         | alone | {} |\n| beside tenant A's always-timing-out plugin | {} |\n",
        ms(fast),
        ms(slow),
        ms(alone),
        ms(beside)
    );
    println!("{section}");
    write_section("tenancy", &section);
}
