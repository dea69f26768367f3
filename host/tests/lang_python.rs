//! Python guests (componentize-py, `plugins/python`, `sdk/python`): the same WebApp
//! constructor and hooks as the Rust plugins give the same `inrun render` output; an
//! uncaught exception and an endless loop fail only their own call; and the Python
//! WebApp constructor passes an end-to-end scenario on a real kube-apiserver.
//!
//! Python components are ~18 MB and take seconds to compile, so every `inrun render` here
//! shares one compile cache, and the engine tests share one engine.

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use inrun::contract::Request;
use inrun::wasm::{
    CallFailure, CompileCache, Engine, EngineSettings, Grants, Limits, MAKE_AHEAD_OVER, Plugin,
    World,
};
use inrun_testenv::{ControlPlane, TestResult};
use serde_json::{Value, json};
use support::render::{cache_dir, render, returned_error, root};
use support::*;

/// The memory cap these tests give Python guests: the host's default, which the SDK
/// README recommends (the Python WebApp runs in under 16 MiB).
const PYTHON_MEMORY: &str = "64Mi";

fn constructor_blueprint(component: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: conformance}}
spec:
  crds:
    - group: demo.inrun.dev
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor:
          location: "{location}"
          limits: {{deadline: 10s, memory: {PYTHON_MEMORY}}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
"#,
        location = plugin(component)
    )
}

/// The hooks example Blueprint (templates, then three hook functions) with its hooks
/// from `component`.
fn hooks_blueprint(component: &str) -> String {
    let example = std::fs::read_to_string(root().join("deploy/examples/hooks/blueprint.yaml"))
        .expect("hooks example");
    let rust = "../../../plugins/target/wasm32-wasip2/release/inrun_plugin_labels_hooks.wasm";
    assert!(example.contains(rust), "the hooks example moved its plugin");
    let mut blueprint = example.replace(rust, &plugin(component));
    for function in ["add-labels", "annotate", "add-sidecar"] {
        blueprint = blueprint.replace(
            &format!("function: {function} }}"),
            &format!("function: {function}, limits: {{deadline: 10s, memory: {PYTHON_MEMORY}}} }}"),
        );
    }
    blueprint
}

fn webapp(metadata: &str, spec: &str) -> String {
    format!(
        "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {metadata}\nspec: {spec}\n"
    )
}

/// The WebApp CRs both constructors are given: defaults, every field, zero replicas,
/// Unicode in env values and an unknown field.
fn webapps() -> Vec<String> {
    vec![
        webapp("{name: shop, namespace: default}", "{image: 'nginx:1.27'}"),
        webapp(
            "{name: api, namespace: team-a, labels: {team: payments}}",
            "{image: 'registry.example.com/acme/api:2', replicas: 3, port: 9000, env: {B: '2', A: '1', LANG: 'ü'}}",
        ),
        webapp(
            "{name: zero, namespace: default}",
            "{image: busybox, replicas: 0}",
        ),
        webapp(
            "{name: extra, namespace: ns}",
            "{image: x, unknown: [1, 2]}",
        ),
    ]
}

#[test]
fn python_webapp_renders_exactly_what_the_rust_webapp_renders() {
    let rust = constructor_blueprint("inrun_plugin_webapp");
    let python = constructor_blueprint("inrun_plugin_webapp_python");
    for cr in webapps() {
        let want = render(&rust, &cr, &[]).unwrap_or_else(|e| panic!("rust: {e}"));
        let got = render(&python, &cr, &[]).unwrap_or_else(|e| panic!("python: {e}"));
        assert_eq!(got, want, "for {cr}");
        assert_eq!(got["labels"]["demo.inrun.dev/tier"], "web");
        assert_eq!(got["resources"].as_array().map(Vec::len), Some(2));
    }
    // Deleting: both declare nothing.
    let cr = &webapps()[0];
    let want = render(&rust, cr, &["--finalizing"]).expect("rust finalizing");
    let got = render(&python, cr, &["--finalizing"]).expect("python finalizing");
    assert_eq!(got, want);
}

#[test]
fn python_webapp_fails_with_the_rust_webapps_messages() {
    let rust = constructor_blueprint("inrun_plugin_webapp");
    let python = constructor_blueprint("inrun_plugin_webapp_python");
    let bad = [
        ("{replicas: 2}", "spec.image is required"),
        ("{image: ''}", "spec.image is required"),
        ("null", "spec.image is required"),
        (
            "{image: x, replicas: many}",
            "spec: invalid type: string \"many\", expected u32",
        ),
        (
            "{image: x, port: 70000}",
            "spec: invalid value: integer `70000`, expected u16",
        ),
        (
            "{image: x, env: {A: 1}}",
            "spec: invalid type: integer `1`, expected a string",
        ),
        (
            "{image: 7}",
            "spec: invalid type: integer `7`, expected a string",
        ),
    ];
    for (spec, message) in bad {
        let cr = webapp("{name: shop, namespace: default}", spec);
        let want = render(&rust, &cr, &[]).expect_err("rust accepted a bad spec");
        let got = render(&python, &cr, &[]).expect_err("python accepted a bad spec");
        assert_eq!(
            returned_error(&got),
            returned_error(&want),
            "for spec {spec}"
        );
        assert_eq!(returned_error(&got), message, "for spec {spec}");
    }
}

#[test]
fn python_hooks_render_exactly_what_the_rust_hooks_render() {
    let rust = hooks_blueprint("inrun_plugin_labels_hooks");
    let python = hooks_blueprint("inrun_plugin_hooks_python");
    let example =
        std::fs::read_to_string(root().join("deploy/examples/hooks/webapp.yaml")).expect("cr");
    let crs = [
        example,
        webapp(
            "{name: plain, namespace: default}",
            "{image: 'nginx:1.27', port: 9090}",
        ),
    ];
    for cr in &crs {
        let want = render(&rust, cr, &[]).unwrap_or_else(|e| panic!("rust: {e}"));
        let got = render(&python, cr, &[]).unwrap_or_else(|e| panic!("python: {e}"));
        assert_eq!(got, want, "for {cr}");
        assert_eq!(got["reconciler"], "hooks");
        let containers = &got["resources"][0]["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[1]["name"], "log-shipper", "{got}");
        assert_eq!(
            got["resources"][1]["metadata"]["annotations"]["demo.inrun.dev/rendered-by"],
            "hooks"
        );
    }
    let plain = render(&python, &crs[1], &[]).expect("python");
    assert_eq!(plain["labels"]["demo.inrun.dev/team"], "platform");
}

// ---------------------------------------------------------------------------------------
// Failures are contained: the engine directly, so "the next call" is on the same plugin.

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Engine::new(EngineSettings {
            cache: Some(CompileCache::new(cache_dir()).expect("cache")),
            ..EngineSettings::default()
        })
        .expect("engine")
    })
}

fn load(name: &str) -> Plugin {
    engine()
        .load_file(Path::new(&plugin(name)))
        .unwrap_or_else(|e| panic!("loading {name}: {e:?}"))
}

fn limits(deadline_ms: u64) -> Limits {
    Limits {
        deadline: Duration::from_millis(deadline_ms),
        ..Limits::default()
    }
}

fn request(spec: Value) -> Request {
    Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "shop", "namespace": "team-a"}, "spec": spec}),
        json!({}),
    )
}

fn reconcile(
    plugin: &Plugin,
    req: &Request,
    limits: &Limits,
) -> Result<inrun::contract::Outcome, inrun::wasm::CallError> {
    futures::executor::block_on(plugin.reconcile(req, limits, &Grants::default()))
}

#[test]
fn an_uncaught_exception_fails_only_its_call_with_the_exception_text() {
    let raise = load("inrun_test_raise_python");
    assert_eq!(raise.world(), World::Reconciler);
    let err = reconcile(&raise, &request(json!({"image": "x"})), &limits(5000)).unwrap_err();
    assert!(matches!(err.failure, CallFailure::Returned(_)), "{err:?}");
    let text = inrun::errors::chain(&err);
    assert!(
        text.starts_with("plugin inrun_test_raise_python@sha256:"),
        "{text}"
    );
    assert!(
        text.contains(
            "reconcile raised ValueError: the python guest gave up on team-a/shop (at failing.py:"
        ),
        "{text}"
    );
    // The same plugin answers the next call.
    let out = reconcile(&raise, &request(json!({"fine": true})), &limits(5000))
        .expect("the next call works");
    assert_eq!(out.status.expect("status")["fine"], true);
}

#[test]
fn an_endless_loop_exceeds_its_deadline_and_the_next_call_works() {
    let spin = load("inrun_test_spin_python");
    // Warm up: the first call pays for lazy initialisation.
    reconcile(&spin, &request(json!({"fine": true})), &limits(5000)).expect("warm-up");
    let started = Instant::now();
    let err = reconcile(&spin, &request(json!({"image": "x"})), &limits(500)).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err.failure, CallFailure::Deadline(_)), "{err:?}");
    assert!(
        inrun::errors::chain(&err).contains("exceeded its 0.5s deadline"),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(500),
        "interrupted early: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "deadline fired late: {took:?}"
    );
    let out = reconcile(&spin, &request(json!({"fine": true})), &limits(5000))
        .expect("the next call works");
    assert_eq!(out.status.expect("status")["fine"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_python_plugins_next_instance_is_made_ahead_and_serves_the_next_call() {
    // An engine of its own with the default settings: no other test takes its instances.
    let engine = Engine::new(EngineSettings {
        cache: Some(CompileCache::new(cache_dir()).expect("cache")),
        ..EngineSettings::default()
    })
    .expect("engine");
    let plugin = engine
        .load_file(Path::new(&plugin("inrun_plugin_webapp_python")))
        .expect("load");
    let (req, limits, grants) = (
        request(json!({"image": "nginx:1.27", "replicas": 2})),
        limits(10_000),
        Grants::default(),
    );
    let call = || plugin.reconcile(&req, &limits, &grants);
    let first = call().await.expect("first call");
    assert!(
        plugin.instantiation_time() >= MAKE_AHEAD_OVER,
        "componentize-py's modules take {:?} to instantiate",
        plugin.instantiation_time()
    );
    eventually("the next instance made", || async {
        plugin.ready_ahead().then_some(())
    })
    .await;
    let second = call().await.expect("second call");
    assert_eq!(plugin.calls_made_ahead(), 1);
    assert_eq!(
        serde_json::to_value(&second.resources).expect("json"),
        serde_json::to_value(&first.resources).expect("json"),
        "the same CR, the same children (what a made instance keeps: host/tests/reuse.rs)"
    );
    assert_eq!(second.status, first.status);
}

// ---------------------------------------------------------------------------------------
// End to end on a real kube-apiserver.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_webapp_children_are_created_owned_and_the_cr_becomes_ready() -> TestResult {
    let group = unique_group("python-webapp");
    let blueprint = format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor:
          location: "{webapp}"
          limits: {{deadline: 10s, memory: {PYTHON_MEMORY}}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
"#,
        webapp = plugin("inrun_plugin_webapp_python")
    );
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("python-webapp").await?;
    let ar = resource(&group, "WebApp");
    let cr = apply_cr(
        &ar,
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: shop}}\nspec: {{image: 'nginx:1.27', replicas: 2, env: {{MODE: python}}}}\n"),
    )
    .await;
    let uid = cr.metadata.uid.clone().unwrap_or_default();

    let deployment = eventually("the Deployment", || get(deployments(), Some(&ns), "shop")).await;
    assert_eq!(
        deployment
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("inrun.dev/owner-uid")),
        Some(&uid)
    );
    let owner = &deployment
        .metadata
        .owner_references
        .as_ref()
        .expect("owner references")[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (uid.as_str(), Some(true))
    );
    assert_eq!(deployment.data["spec"]["replicas"], 2);
    assert_eq!(
        deployment.data["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "MODE", "value": "python"}])
    );
    webapp_reconciled(&ar, &ns, "nginx:1.27", Some(2)).await;

    // A child edited by hand is put back.
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client(), &ns, &deployments());
    api.patch(
        "shop",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"replicas": 7}})),
    )
    .await?;
    eventually("the Deployment's replicas to be put back to 2", || async {
        let d = get(deployments(), Some(&ns), "shop").await?;
        (d.data["spec"]["replicas"] == 2).then_some(())
    })
    .await;

    // A spec the Python guest rejects fails the reconcile with its message.
    apply_cr(
        &ar,
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: broken}}\nspec: {{replicas: 1}}\n"),
    )
    .await;
    let note = event(&ns, "broken", "ReconcileError").await;
    assert!(note.contains("spec.image is required"), "{note}");
    host.stop().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The SDK's own unit tests, under the machine's CPython (no component needed).

#[test]
fn the_python_sdk_unit_tests_pass_natively() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .args(["-B", "-m", "unittest", "-q", "test_inrun_sdk"])
        .current_dir(root().join("sdk/python"))
        .output()
        .unwrap_or_else(|e| panic!("run {python} (needed by plugins/python/build.sh too): {e}"));
    assert!(
        out.status.success(),
        "sdk/python unit tests failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
