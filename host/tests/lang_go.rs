//! Go guests (plugins/go and sdk/go, built by `plugins/go/build.sh` from `make plugins`
//! with the standard Go toolchain) against the stock host: the Go WebApp constructor and
//! hooks render exactly what the Rust ones do and fail with the same messages, a panic or
//! an endless loop fails only its own call, the SDK's and the examples' `go test` pass
//! natively (and gofmt finds nothing to change), and the Go WebApp passes an end-to-end scenario on a real kube-apiserver.
//!
//! Go components are ~3.5 MB and take seconds to compile in a debug build, so every
//! `inrun render` here shares one compile cache, and the engine tests share one engine.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use inrun::contract::{Outcome, Request};
use inrun::wasm::{
    CallError, CallFailure, CompileCache, Engine, EngineSettings, Grants, Limits, Plugin, World,
};
use inrun_testenv::{ControlPlane, TestResult};
use serde_json::json;
use support::render::{cache_dir, render, returned_error, root};
use support::*;

const RUST_WEBAPP: &str = "inrun_plugin_webapp";
const GO_WEBAPP: &str = "inrun_plugin_webapp_go";
const RUST_HOOKS: &str = "inrun_plugin_labels_hooks";
const GO_HOOKS: &str = "inrun_plugin_hooks_go";

fn constructor_blueprint(location: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: lang-go}}
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

/// The hooks example Blueprint (templates, then the three hook functions) with its hooks
/// from `location`.
fn hooks_blueprint(location: &str) -> String {
    let example = std::fs::read_to_string(root().join("deploy/examples/hooks/blueprint.yaml"))
        .expect("hooks example");
    let rust = "../../../plugins/target/wasm32-wasip2/release/inrun_plugin_labels_hooks.wasm";
    assert!(example.contains(rust), "the hooks example moved its plugin");
    example.replace(rust, location)
}

fn webapp(metadata: &str, spec: &str) -> String {
    format!(
        "apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\nmetadata: {metadata}\nspec: {spec}\n"
    )
}

/// The WebApp CRs both languages render: defaults, every field, zero replicas and the
/// largest port, quotes and Unicode, an empty env, an unknown field.
fn webapps() -> Vec<String> {
    vec![
        webapp("{name: shop, namespace: prod}", "{image: 'nginx:1.27'}"),
        webapp(
            "{name: shop, namespace: default, labels: {team: payments}}",
            "{image: 'nginx:1.27', replicas: 3, port: 9000}",
        ),
        webapp(
            "{name: api, namespace: team-a}",
            "\n  image: \"registry.example.com/acme/api:2 \\\"quoted\\\" \\u00e9\\u2603 <&>\"\n  replicas: 0\n  port: 65535\n  env: {ZED: last, A: '1', B: \"line\\nbreak\", EMPTY: '', LANG: 'ü'}",
        ),
        webapp(
            "{name: empty-env, namespace: default}",
            "{image: x, env: {}}",
        ),
        webapp(
            "{name: extra, namespace: ns}",
            "{image: x, unknown: [1, 2]}",
        ),
        // serde reads a struct from a sequence too, field by field.
        webapp("{name: seq, namespace: ns}", "[x, 2]"),
    ]
}

#[test]
fn the_go_webapp_renders_exactly_what_the_rust_webapp_renders() {
    let rust = constructor_blueprint(&plugin(RUST_WEBAPP));
    let go = constructor_blueprint(&plugin(GO_WEBAPP));
    for cr in webapps() {
        let want = render(&rust, &cr, &[]).unwrap_or_else(|e| panic!("rust: {e}"));
        let got = render(&go, &cr, &[]).unwrap_or_else(|e| panic!("go: {e}"));
        assert_eq!(
            want["resources"].as_array().map(Vec::len),
            Some(2),
            "{want}"
        );
        assert_eq!(got, want, "for {cr}");
    }
    // Deleting: both declare nothing.
    let cr = &webapps()[0];
    let want = render(&rust, cr, &["--finalizing"]).expect("rust finalizing");
    let got = render(&go, cr, &["--finalizing"]).expect("go finalizing");
    assert_eq!(got, want);
}

#[test]
fn the_go_webapp_fails_with_the_rust_webapps_messages() {
    let rust = constructor_blueprint(&plugin(RUST_WEBAPP));
    let go = constructor_blueprint(&plugin(GO_WEBAPP));
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
            "{image: x, replicas: -1}",
            "spec: invalid value: integer `-1`, expected u32",
        ),
        (
            "{image: x, replicas: 2.5}",
            "spec: invalid type: floating point `2.5`, expected u32",
        ),
        (
            "{image: x, env: {A: 1}}",
            "spec: invalid type: integer `1`, expected a string",
        ),
        (
            "{image: x, env: [A]}",
            "spec: invalid type: sequence, expected a map",
        ),
        (
            "{image: 7}",
            "spec: invalid type: integer `7`, expected a string",
        ),
        ("[7]", "spec: invalid type: integer `7`, expected a string"),
    ];
    for (spec, message) in bad {
        let cr = webapp("{name: shop, namespace: prod}", spec);
        let want = render(&rust, &cr, &[]).expect_err("rust accepted a bad spec");
        let got = render(&go, &cr, &[]).expect_err("go accepted a bad spec");
        assert_eq!(
            returned_error(&got),
            returned_error(&want),
            "for spec {spec}"
        );
        assert_eq!(returned_error(&got), message, "for spec {spec}");
    }
}

#[test]
fn the_go_hooks_render_exactly_what_the_rust_hooks_render() {
    let rust = hooks_blueprint(&plugin(RUST_HOOKS));
    let go = hooks_blueprint(&plugin(GO_HOOKS));
    let example =
        std::fs::read_to_string(root().join("deploy/examples/hooks/webapp.yaml")).expect("cr");
    // The hooks example's templates read .spec.image: every WebApp whose spec is a map.
    let mut crs: Vec<String> = webapps()
        .into_iter()
        .filter(|cr| !cr.ends_with("spec: [x, 2]\n"))
        .collect();
    crs.push(example);
    for cr in &crs {
        let want = render(&rust, cr, &[]).unwrap_or_else(|e| panic!("rust: {e}"));
        let got = render(&go, cr, &[]).unwrap_or_else(|e| panic!("go: {e}"));
        assert_eq!(got["reconciler"], "hooks");
        assert!(
            want["resources"][0]["metadata"]["labels"]["demo.inrun.dev/team"].is_string(),
            "{want}"
        );
        assert_eq!(got, want, "for {cr}");
    }
}

/// `go test` in `dir` (the SDK, or an example plugin), natively: its output.
fn go_test(dir: &Path) -> String {
    let out = Command::new("go")
        .args(["test", "-count=1", "./..."])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run go test in {}: {e}", dir.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "go test in {}:\n{text}",
        dir.display()
    );
    text
}

#[test]
fn the_go_sdk_and_the_go_examples_pass_their_native_tests() {
    let sdk = go_test(&root().join("sdk/go"));
    for package in ["inrun.dev/sdk/inrun", "inrun.dev/sdk/infra"] {
        assert!(sdk.contains(&format!("ok  \t{package}")), "{sdk}");
    }
    for (dir, package) in [
        ("plugins/go/webapp", "inrun.dev/plugins/webapp"),
        ("plugins/go/hooks", "inrun.dev/plugins/hooks"),
    ] {
        let out = go_test(&root().join(dir));
        assert!(out.contains(&format!("ok  \t{package}")), "{out}");
    }
    // And every Go file, the glue and the scaffold's templates included, is gofmt's.
    let out = Command::new("gofmt")
        .args(["-l", "sdk/go", "plugins/go", "host/src/scaffold/files/go"])
        .current_dir(root())
        .output()
        .expect("run gofmt");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "not gofmt-formatted"
    );
}

// ------------------------------------------------------------- the engine directly

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

/// Runs `call` to completion on a Tokio runtime, as the host does: the Go runtime calls
/// WASI clocks (a panic sleeps before it exits), which need one.
fn block_on<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(call)
}

fn reconcile_now(plugin: &Plugin, req: &Request, limits: &Limits) -> Result<Outcome, CallError> {
    block_on(plugin.reconcile(req, limits, &Grants::default()))
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
fn the_go_components_load_as_their_worlds() {
    assert_eq!(load(GO_WEBAPP).world(), World::Reconciler);
    let hooks = load(GO_HOOKS);
    assert_eq!(hooks.world(), World::Hooks);
    assert_eq!(
        hooks.info().functions,
        ["add-labels", "annotate", "add-sidecar"]
    );
    assert_eq!(load("inrun_test_infra_go").world(), World::Package);
}

#[test]
fn the_go_webapp_returns_its_error_message() {
    let webapp = load(GO_WEBAPP);
    let mut req = webapp_request();
    req.object["spec"] = json!({"image": "x", "replicas": "many"});
    let err = reconcile_now(&webapp, &req, &Limits::default()).unwrap_err();
    assert!(matches!(err.failure, CallFailure::Returned(_)), "{err:?}");
    assert!(
        inrun::errors::chain(&err).contains("spec: invalid type: string \"many\", expected u32"),
        "{err}"
    );
    // A CR that is not a JSON object is refused by the SDK.
    req.object = json!("not an object");
    let err = reconcile_now(&webapp, &req, &Limits::default()).unwrap_err();
    assert!(
        inrun::errors::chain(&err).contains("request.object is not a JSON object"),
        "{err}"
    );
}

#[test]
fn a_panic_in_go_is_a_trap_that_fails_only_its_call() {
    let panics = load("inrun_test_panic_go");
    let err = reconcile_now(&panics, &webapp_request(), &Limits::default()).unwrap_err();
    let CallFailure::Trap { stderr, .. } = &err.failure else {
        panic!("not a trap: {err:?}");
    };
    assert_eq!(
        stderr.as_deref(),
        Some("panic: assignment to entry in nil map"),
        "{err}"
    );
    let webapp = load(GO_WEBAPP);
    reconcile_now(&webapp, &webapp_request(), &Limits::default())
        .expect("a normal call right after");
    let again = reconcile_now(&panics, &webapp_request(), &Limits::default()).unwrap_err();
    assert!(
        matches!(again.failure, CallFailure::Trap { .. }),
        "{again:?}"
    );
}

#[test]
fn an_endless_loop_in_go_hits_its_deadline_and_the_next_call_works() {
    let spin = load("inrun_test_spin_go");
    let webapp = load(GO_WEBAPP);
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
    assert!(
        took < Duration::from_secs(3),
        "deadline fired late: {took:?}"
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
    block_on(plugin.call_hook(
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
    annotations.insert("note".to_owned(), "a \"quoted\" \u{e9} <value>".to_owned());
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
fn the_go_hooks_transform_an_outcome_exactly_like_the_rust_hooks() {
    let rust = load(RUST_HOOKS);
    let go = load(GO_HOOKS);
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
            let got = hook_now(&go, function, &req, &rendered_outcome()).expect("go hook");
            assert_eq!(got, want, "{function} with {}", req.args);
            // Applied twice: still the same (the sidecar is added once).
            let want = hook_now(&rust, function, &req, &want).expect("rust hook");
            let got = hook_now(&go, function, &req, &got).expect("go hook");
            assert_eq!(got, want, "{function} twice");
        }
    }
    let bad = Request::for_object(json!({}), json!({"team": 7}));
    for hooks in [&rust, &go] {
        let err = hook_now(hooks, "add-labels", &bad, &Outcome::default()).unwrap_err();
        assert!(
            inrun::errors::chain(&err)
                .contains("args.team: invalid type: integer `7`, expected a string"),
            "{err}"
        );
    }
}

#[test]
fn the_go_reporter_sets_a_condition_and_an_event_through_the_0_2_0_contract() {
    let reporter = load("inrun_test_reporter_go");
    let mut req = webapp_request();
    req.object["spec"] = json!({"size": 2});
    let out = reconcile_now(&reporter, &req, &Limits::default()).expect("reconcile");
    assert_eq!(out.resources[0]["metadata"]["name"], "shop-report");
    assert_eq!(out.resources[0]["data"]["size"], "2");
    let condition = &out.conditions[0];
    assert_eq!(
        (
            condition.kind.as_str(),
            condition.truth(),
            condition.reason.as_str()
        ),
        ("Sized", Some(true), "SizeSet")
    );
    assert_eq!(out.events[0].reason, "Resized");
    assert!(!out.events[0].is_warning());
}

/// Not a benchmark (numbers from a debug test build are only indicative): prints the
/// median of a fresh instantiate + one reconcile for the Go and Rust webapps, and sizes.
/// Run with `cargo test -p inrun --test lang_go -- --nocapture timing`.
#[test]
fn timing_of_the_go_webapp_instantiate_and_call() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let req = webapp_request();
    for name in [GO_WEBAPP, RUST_WEBAPP] {
        let path = PathBuf::from(plugin(name));
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let started = Instant::now();
        let plugin = engine
            .load_file(&path)
            .unwrap_or_else(|e| panic!("loading {name}: {e:?}"));
        let load_time = started.elapsed();
        let mut times: Vec<Duration> = (0..50)
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
async fn the_go_webapp_creates_its_children_and_the_cr_becomes_ready() -> TestResult {
    let group = unique_group("lang-go");
    let blueprint = constructor_blueprint(&plugin(GO_WEBAPP)).replace("demo.inrun.dev", &group);
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("lang-go").await?;
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

    // A spec the Go guest rejects fails the reconcile with its message.
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
