//! C guests (plugins/c, built by `plugins/c/build.sh` from `make plugins`) against the
//! stock host: the C WebApp constructor and hooks render exactly what the Rust ones do,
//! an abort or an endless loop fails only its own call, and the C WebApp passes an
//! end-to-end scenario on a real kube-apiserver.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use inrun::contract::{Outcome, Request};
use inrun::wasm::{CallError, CallFailure, Engine, EngineSettings, Grants, Limits, Plugin, World};
use inrun_testenv::{ControlPlane, TestResult};
use serde_json::{Value, json};
use support::render::render;
use support::*;

const RUST_WEBAPP: &str = "inrun_plugin_webapp";
const C_WEBAPP: &str = "inrun_plugin_webapp_c";
const RUST_HOOKS: &str = "inrun_plugin_labels_hooks";
const C_HOOKS: &str = "inrun_plugin_hooks_c";

// ------------------------------------------------------------------ inrun render

fn constructor_blueprint(location: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: lang-c}}
spec:
  crds:
    - group: demo.inrun.dev
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor: {{location: "{location}"}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
"#
    )
}

fn hooks_blueprint(location: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: lang-c-hooks}}
spec:
  crds:
    - group: demo.inrun.dev
      version: v1alpha1
      kind: WebApp
      emit:
        status:
          image: "{{{{ .spec.image }}}}"
      reconcile:
        args:
          team: "{{{{ .metadata.labels.team | default('platform') }}}}"
        onReconcile:
          - type: deployment
            fields:
              image: "{{{{ .spec.image }}}}"
              replicas: "{{{{ .spec.replicas | default(1) }}}}"
          - type: service
            fields:
              targetPort: "{{{{ .spec.port | default(8080) }}}}"
          - apiVersion: apps/v1
            kind: Deployment
            metadata:
              name: "{{{{ .metadata.name }}}}-worker"
              labels: {{app: worker}}
            spec:
              selector: {{matchLabels: {{app: worker}}}}
              template:
                metadata: {{labels: {{app: worker}}}}
                spec:
                  containers:
                    - {{name: worker, image: "{{{{ .spec.image }}}}"}}
                    - {{name: log-shipper, image: "busybox:1.36"}}
        hooks:
          - {{location: "{location}", function: add-labels}}
          - {{location: "{location}", function: annotate}}
          - {{location: "{location}", function: add-sidecar}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
"#
    )
}

/// The WebApp CRs both languages render.
const WEBAPPS: &[&str] = &[
    "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {name: shop, namespace: prod}\nspec: {image: 'nginx:1.27'}\n",
    "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {name: shop, namespace: default, labels: {team: payments}}\nspec: {image: 'nginx:1.27', replicas: 3, port: 9000}\n",
    "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {name: api, namespace: team-a}\nspec:\n  image: \"registry.example.com/acme/api:2 \\\"quoted\\\" \\u00e9\\u2603\"\n  replicas: 0\n  port: 65535\n  env: {ZED: last, A: '1', B: \"line\\nbreak\", EMPTY: ''}\n",
    "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {name: empty-env, namespace: default}\nspec: {image: x, env: {}}\n",
];

fn render_both(blueprint: fn(&str) -> String, rust: &str, c: &str, cr: &str) -> (Value, Value) {
    let rust = render(&blueprint(&plugin(rust)), cr, &[])
        .unwrap_or_else(|stderr| panic!("rust render failed: {stderr}\n{cr}"));
    let c = render(&blueprint(&plugin(c)), cr, &[])
        .unwrap_or_else(|stderr| panic!("C render failed: {stderr}\n{cr}"));
    (rust, c)
}

#[test]
fn the_c_webapp_renders_exactly_what_the_rust_webapp_renders() {
    for cr in WEBAPPS {
        let (rust, c) = render_both(constructor_blueprint, RUST_WEBAPP, C_WEBAPP, cr);
        assert_eq!(
            rust["resources"].as_array().map(Vec::len),
            Some(2),
            "{rust}"
        );
        assert_eq!(c, rust, "for {cr}");
    }
}

#[test]
fn the_c_webapp_fails_like_the_rust_webapp_without_an_image() {
    for spec in ["{replicas: 2}", "{image: ''}", "null"] {
        let cr = format!(
            "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {{name: shop, namespace: prod}}\nspec: {spec}\n"
        );
        for name in [RUST_WEBAPP, C_WEBAPP] {
            let stderr = render(&constructor_blueprint(&plugin(name)), &cr, &[])
                .expect_err(&format!("{name} accepted {spec}"));
            assert!(
                stderr.contains("spec.image is required"),
                "{name}: {stderr}"
            );
        }
    }
}

#[test]
fn the_c_hooks_render_exactly_what_the_rust_hooks_render() {
    for cr in WEBAPPS {
        let (rust, c) = render_both(hooks_blueprint, RUST_HOOKS, C_HOOKS, cr);
        let deployment = &rust["resources"][0];
        assert!(
            deployment["metadata"]["labels"]["demo.inrun.dev/team"].is_string(),
            "{rust}"
        );
        assert_eq!(c, rust, "for {cr}");
    }
}

/// The SDK's JSON reader/writer, compiled natively with sanitizers (`sdk/c/test/run.sh`).
#[test]
fn the_c_sdk_json_code_passes_its_native_tests() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sdk/c/test/run.sh");
    let out = Command::new(&script)
        .output()
        .expect("run sdk/c/test/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

// ------------------------------------------------------------- the engine directly

fn plugin_path(name: &str) -> PathBuf {
    PathBuf::from(plugin(name))
}

fn engine() -> Engine {
    Engine::new(EngineSettings::default()).expect("engine")
}

fn load(engine: &Engine, name: &str) -> Plugin {
    engine
        .load_file(&plugin_path(name))
        .unwrap_or_else(|e| panic!("loading {name}: {e:?}"))
}

fn reconcile_now(plugin: &Plugin, req: &Request, limits: &Limits) -> Result<Outcome, CallError> {
    futures::executor::block_on(plugin.reconcile(req, limits, &Grants::default()))
}

fn webapp_request() -> Request {
    Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "shop", "namespace": "team-a", "uid": "u1"},
               "spec": {"image": "nginx:1.27", "replicas": 3, "port": 8080}}),
        json!({}),
    )
}

fn short(deadline_ms: u64) -> Limits {
    Limits {
        deadline: Duration::from_millis(deadline_ms),
        ..Limits::default()
    }
}

#[test]
fn the_c_components_load_as_their_worlds() {
    let engine = engine();
    assert_eq!(load(&engine, C_WEBAPP).world(), World::Reconciler);
    let hooks = load(&engine, C_HOOKS);
    assert_eq!(hooks.world(), World::Hooks);
    assert_eq!(
        hooks.info().functions,
        ["add-labels", "annotate", "add-sidecar"]
    );
}

#[test]
fn the_c_webapp_returns_its_error_message() {
    let engine = engine();
    let webapp = load(&engine, C_WEBAPP);
    let mut req = webapp_request();
    req.object["spec"] = json!({"image": "x", "replicas": "many"});
    let err = reconcile_now(&webapp, &req, &Limits::default()).unwrap_err();
    assert!(matches!(err.failure, CallFailure::Returned(_)), "{err:?}");
    assert!(
        inrun::errors::chain(&err).contains("spec.replicas: expected an integer"),
        "{err}"
    );
    // A CR that is not a JSON object has no spec.
    req.object = json!("not an object");
    let out = reconcile_now(&webapp, &req, &Limits::default());
    assert!(out.is_err(), "{out:?}");
}

#[test]
fn an_abort_in_c_is_a_trap_that_fails_only_its_call() {
    let engine = engine();
    let abort = load(&engine, "inrun_test_abort_c");
    let err = reconcile_now(&abort, &webapp_request(), &Limits::default()).unwrap_err();
    assert!(matches!(err.failure, CallFailure::Trap { .. }), "{err:?}");
    let webapp = load(&engine, C_WEBAPP);
    reconcile_now(&webapp, &webapp_request(), &Limits::default())
        .expect("a normal call right after");
    let again = reconcile_now(&abort, &webapp_request(), &Limits::default()).unwrap_err();
    assert!(
        matches!(again.failure, CallFailure::Trap { .. }),
        "{again:?}"
    );
}

#[test]
fn an_endless_loop_in_c_hits_its_deadline_and_the_next_call_works() {
    let engine = engine();
    let spin = load(&engine, "inrun_test_spin_c");
    let webapp = load(&engine, C_WEBAPP);
    let started = Instant::now();
    let err = reconcile_now(&spin, &webapp_request(), &short(300)).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err.failure, CallFailure::Deadline(_)), "{err:?}");
    assert!(
        inrun::errors::chain(&err).contains("exceeded its 0.3s deadline"),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(300),
        "interrupted early: {took:?}"
    );
    reconcile_now(&webapp, &webapp_request(), &Limits::default())
        .expect("a normal call right after");
    let again = reconcile_now(&spin, &webapp_request(), &short(100)).unwrap_err();
    assert!(
        matches!(again.failure, CallFailure::Deadline(_)),
        "{again:?}"
    );
}

fn hook_now(
    plugin: &Plugin,
    function: &str,
    req: &Request,
    current: &Outcome,
) -> Result<Outcome, CallError> {
    futures::executor::block_on(plugin.call_hook(
        function,
        req,
        current,
        &Limits::default(),
        &Grants::default(),
    ))
}

/// An outcome with every field set, full objects beside an intent, and keys to keep.
fn rendered_outcome() -> Outcome {
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("kept".to_owned(), "yes".to_owned());
    let mut annotations = std::collections::BTreeMap::new();
    annotations.insert("note".to_owned(), "a \"quoted\" \u{e9} value".to_owned());
    Outcome {
        status: json!({"phase": "Rendered", "ratio": 0.25, "n": -3})
            .as_object()
            .cloned(),
        resources: vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "shop", "labels": {"app": "shop"}},
                   "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": "not a map"}),
            json!({"type": "deployment", "fields": {"image": "nginx", "big": 12345678901234567890_u64}}),
        ],
        labels,
        annotations,
        requeue: true,
        requeue_after: Some(Duration::from_millis(1500)),
        cleanup: Some(inrun::contract::Cleanup {
            after: Duration::from_secs(30),
        }),
        ..Outcome::default()
    }
}

#[test]
fn the_c_hooks_transform_an_outcome_exactly_like_the_rust_hooks() {
    let engine = engine();
    let rust = load(&engine, RUST_HOOKS);
    let c = load(&engine, C_HOOKS);
    for args in [
        json!({"team": "payments"}),
        json!({}),
        json!({"team": null}),
    ] {
        let req = Request::for_object(
            json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": "shop", "namespace": "prod"}}),
            args,
        );
        for function in ["add-labels", "annotate", "add-sidecar"] {
            let want = hook_now(&rust, function, &req, &rendered_outcome()).expect("rust hook");
            let got = hook_now(&c, function, &req, &rendered_outcome()).expect("C hook");
            assert_eq!(got, want, "{function} with {}", req.args);
            // Applied twice: still the same (the sidecar is added once).
            let want = hook_now(&rust, function, &req, &want).expect("rust hook");
            let got = hook_now(&c, function, &req, &got).expect("C hook");
            assert_eq!(got, want, "{function} twice");
        }
    }
    let bad = Request::for_object(json!({}), json!({"team": 7}));
    for hooks in [&rust, &c] {
        let err = hook_now(hooks, "add-labels", &bad, &Outcome::default()).unwrap_err();
        assert!(inrun::errors::chain(&err).contains("args.team: "), "{err}");
    }
}

/// Not a benchmark (numbers from a debug test build are only indicative): prints the
/// median of a fresh instantiate + one reconcile for the C and Rust webapps, and sizes.
/// Run with `cargo test -p inrun --test lang_c -- --nocapture timing`.
#[test]
fn timing_of_the_c_webapp_instantiate_and_call() {
    let engine = engine();
    let req = webapp_request();
    for name in [C_WEBAPP, RUST_WEBAPP] {
        let size = std::fs::metadata(plugin_path(name))
            .map(|m| m.len())
            .unwrap_or(0);
        let started = Instant::now();
        let plugin = load(&engine, name);
        let load_time = started.elapsed();
        let mut times: Vec<Duration> = (0..200)
            .map(|_| {
                let t = Instant::now();
                reconcile_now(&plugin, &req, &Limits::default()).expect("reconcile");
                t.elapsed()
            })
            .collect();
        times.sort();
        eprintln!(
            "{name}: {size} bytes, load (compile) {load_time:?}, instantiate+call median {:?}",
            times[times.len() / 2]
        );
    }
}

// ------------------------------------------------------------------ end to end

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_webapp_creates_its_children_and_the_cr_becomes_ready() -> TestResult {
    let group = unique_group("lang-c");
    let blueprint = constructor_blueprint(&plugin(C_WEBAPP)).replace("demo.inrun.dev", &group);
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("lang-c").await?;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    let cr = apply_cr(
        &ar,
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: shop}}\nspec: {{image: 'nginx:1.27', replicas: 2, env: {{B: '2', A: '1'}}}}\n"),
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
    assert_eq!(deployment.data["spec"]["replicas"], 2);
    assert_eq!(
        deployment.data["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    );
    webapp_reconciled(&ar, &ns, "nginx:1.27", Some(2)).await;
    host.stop().await;
    Ok(())
}
