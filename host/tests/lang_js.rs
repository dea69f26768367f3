//! JavaScript guests (componentize-js, `plugins/js`, `sdk/js`) against the Rust reference
//! plugins: `inrun render` prints the same bytes for the same CRs through the Rust and the
//! JS WebApp constructor and hooks; a thrown exception or an endless loop fails only its
//! own call; and the JS WebApp passes an end-to-end scenario on a real kube-apiserver.
//!
//! The JS components are ~12 MB and compile in seconds (longer in a debug build), so the
//! renders here share one compile cache (under `CARGO_TARGET_TMPDIR`, keyed by digest).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use inrun::contract::{Outcome, Request};
use inrun::wasm::{
    CallFailure, CompileCache, Engine, EngineSettings, Grants, Limits, Plugin, World,
};
use inrun_testenv::{ControlPlane, TestResult};
use serde_json::json;
use support::*;

/// The memory cap the JS test Blueprints grant (the default, 64 MiB, is enough: the
/// componentize-js snapshot starts with a few MiB of linear memory).
const JS_MEMORY: &str = "64Mi";

fn plugin_path(name: &str) -> String {
    plugin(name)
}

/// One compile cache for every render and load in this test binary, kept between runs;
/// entries older than a day (components rebuilt since) are removed once per run, as each
/// compiled JS component is ~24 MB.
fn cache_dir() -> PathBuf {
    static PRUNED: std::sync::Once = std::sync::Once::new();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lang_js-wasm-cache");
    std::fs::create_dir_all(&dir).expect("cache dir");
    PRUNED.call_once(|| {
        let day = Duration::from_secs(24 * 3600);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() > day);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    });
    dir
}

struct Rendered {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Rendered {
    /// The guest's own message of a failed render (after the plugin's name and digest).
    fn error(&self) -> String {
        assert!(!self.ok, "expected a failure, got {}", self.stdout);
        match self.stderr.split_once(" returned an error: ") {
            Some((_, message)) => message.trim().to_owned(),
            None => self.stderr.trim().to_owned(),
        }
    }
}

fn render(blueprint: &Path, cr: &Path, extra: &[&str]) -> Rendered {
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args(["render", "-o", "json", "-b"])
        .arg(blueprint)
        .arg("-f")
        .arg(cr)
        .args(extra)
        .env("INRUN_CACHE_DIR", cache_dir())
        .env_remove("INRUN_LOG")
        .output()
        .expect("run inrun");
    Rendered {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn constructor_blueprint(location: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: lang-js}}\nspec:\n  crds:\n    - group: demo.inrun.dev\n      version: v1alpha1\n      kind: WebApp\n      reconcile:\n        default: false\n        constructor: {{location: \"{location}\", limits: {{deadline: 10s, memory: {JS_MEMORY}}}}}\n        managedResources:\n          - {{apiVersion: apps/v1, kind: Deployment}}\n          - {{apiVersion: v1, kind: Service}}\n"
    )
}

/// deploy/examples/hooks with its hooks pointing at `location` and its `team` argument
/// replaced by `team` (YAML), each hook with the JS memory cap.
fn hooks_blueprint(location: &str, team: &str) -> String {
    let example = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/hooks/blueprint.yaml"),
    )
    .expect("hooks example");
    let rust_location =
        "../../../plugins/target/wasm32-wasip2/release/inrun_plugin_labels_hooks.wasm";
    assert!(
        example.contains(rust_location),
        "the example moved its plugin"
    );
    let team_line = "team: \"{{ .metadata.labels.team | default('platform') }}\"";
    assert!(example.contains(team_line), "the example changed its args");
    example
        .replace(
            &format!("location: {rust_location},"),
            &format!("location: \"{location}\", limits: {{deadline: 10s, memory: {JS_MEMORY}}},"),
        )
        .replace(team_line, &format!("team: {team}"))
}

const WEBAPP_CRS: &[&str] = &[
    "metadata: {name: shop, namespace: default}\nspec: {image: 'nginx:1.27'}",
    "metadata: {name: shop, namespace: prod, labels: {team: payments}}\nspec: {image: 'nginx:1.27', replicas: 3, port: 9000}",
    "metadata: {name: api, namespace: team-a}\nspec: {image: 'registry.example.com/x/api:2', env: {ZED: last, A_FIRST: '1', mid: 'x y'}, extra: ignored}",
    "metadata: {name: zero, namespace: default}\nspec: {image: busybox, replicas: 0, port: 65535, env: {}}",
    // Non-ASCII strings cross the glue's UTF-8 encoder (sdk/js/componentize.mjs) intact.
    "metadata: {name: uni, namespace: default}\nspec: {image: 'nginx:1.27', env: {GREETING: 'héllo wörld', CJK: '漢字', EMOJI: '😀 ok'}}",
    // Errors: the same message from both languages.
    "metadata: {name: e1, namespace: default}\nspec: {replicas: 2}",
    "metadata: {name: e2, namespace: default}\nspec: {image: ''}",
    "metadata: {name: e3, namespace: default}",
    "metadata: {name: e4, namespace: default}\nspec: {image: x, replicas: many}",
    "metadata: {name: e5, namespace: default}\nspec: {image: x, port: 70000}",
    "metadata: {name: e6, namespace: default}\nspec: {image: x, replicas: -1}",
    "metadata: {name: e7, namespace: default}\nspec: {image: x, replicas: 2.5}",
    "metadata: {name: e8, namespace: default}\nspec: {image: x, env: {A: 1}}",
    "metadata: {name: e9, namespace: default}\nspec: {image: 5}",
    "metadata: {name: e10, namespace: default}\nspec: {image: x, env: null}",
    "metadata: {name: e11, namespace: default}\nspec: just-a-string",
];

fn write_cr(dir: &Path, i: usize, body: &str) -> PathBuf {
    let path = dir.join(format!("cr-{i}.yaml"));
    std::fs::write(
        &path,
        format!("apiVersion: demo.inrun.dev/v1alpha1\nkind: WebApp\n{body}\n"),
    )
    .expect("write cr");
    path
}

/// Renders every CR through both Blueprints and asserts the same bytes (or the same
/// error message) come out. Returns how many renders succeeded.
fn assert_same_renders(rust_bp: &Path, js_bp: &Path, crs: &[PathBuf], extra: &[&str]) -> usize {
    let mut succeeded = 0;
    for cr in crs {
        let rust = render(rust_bp, cr, extra);
        let js = render(js_bp, cr, extra);
        let what = format!("{} {extra:?}", cr.display());
        assert_eq!(
            rust.ok, js.ok,
            "{what}: rust {} / js {}",
            rust.stderr, js.stderr
        );
        if rust.ok {
            assert_eq!(rust.stdout, js.stdout, "{what}: different output");
            let value: serde_json::Value =
                serde_json::from_str(&js.stdout).expect("render prints JSON");
            assert!(value.is_object(), "{what}: {value}");
            succeeded += 1;
        } else {
            assert_eq!(rust.error(), js.error(), "{what}: different errors");
            assert!(
                js.stderr.contains("inrun_plugin_") && js.stderr.lines().count() == 1,
                "{what}: one clear line naming the plugin: {}",
                js.stderr
            );
        }
    }
    succeeded
}

#[test]
fn the_js_webapp_renders_exactly_what_the_rust_webapp_renders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rust_bp = dir.path().join("rust.yaml");
    let js_bp = dir.path().join("js.yaml");
    std::fs::write(
        &rust_bp,
        constructor_blueprint(&plugin_path("inrun_plugin_webapp")),
    )
    .expect("write");
    std::fs::write(
        &js_bp,
        constructor_blueprint(&plugin_path("inrun_plugin_webapp_js")),
    )
    .expect("write");
    let crs: Vec<_> = WEBAPP_CRS
        .iter()
        .enumerate()
        .map(|(i, body)| write_cr(dir.path(), i, body))
        .collect();

    assert_eq!(assert_same_renders(&rust_bp, &js_bp, &crs, &[]), 5);
    // Deleting: both declare nothing.
    assert_eq!(
        assert_same_renders(&rust_bp, &js_bp, &crs[..2], &["--finalizing"]),
        2
    );

    // And the JS output is the WebApp answer, not merely two equal mistakes.
    let out = render(&js_bp, &crs[2], &[]);
    let value: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(value["reconciler"], "constructor");
    assert_eq!(value["resources"][0]["kind"], "Deployment");
    assert_eq!(
        value["resources"][0]["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "A_FIRST", "value": "1"}, {"name": "ZED", "value": "last"}, {"name": "mid", "value": "x y"}])
    );
    assert_eq!(value["status"]["url"], "http://api.team-a.svc:80");
    assert_eq!(value["labels"]["demo.inrun.dev/tier"], "web");
}

#[test]
fn the_js_hooks_render_exactly_what_the_rust_hooks_render() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crs: Vec<_> = [
        "metadata: {name: shop, namespace: default, labels: {team: payments}}\nspec: {image: 'nginx:1.27', replicas: 2, port: 8080}",
        "metadata: {name: plain, namespace: prod}\nspec: {image: busybox}",
    ]
    .iter()
    .enumerate()
    .map(|(i, body)| write_cr(dir.path(), i, body))
    .collect();
    let rust_hooks = plugin_path("inrun_plugin_labels_hooks");
    let js_hooks = plugin_path("inrun_plugin_hooks_js");

    for (team, successes) in [
        ("\"{{ .metadata.labels.team | default('platform') }}\"", 2),
        ("null", 2),
        ("7", 0),
    ] {
        let rust_bp = dir.path().join("rust.yaml");
        let js_bp = dir.path().join("js.yaml");
        std::fs::write(&rust_bp, hooks_blueprint(&rust_hooks, team)).expect("write");
        std::fs::write(&js_bp, hooks_blueprint(&js_hooks, team)).expect("write");
        assert_eq!(
            assert_same_renders(&rust_bp, &js_bp, &crs, &[]),
            successes,
            "team: {team}"
        );
        if successes == 0 {
            let err = render(&js_bp, &crs[0], &[]).error();
            assert_eq!(
                err,
                "args.team: invalid type: integer `7`, expected a string"
            );
        }
    }

    let js_bp = dir.path().join("js.yaml");
    std::fs::write(
        &js_bp,
        hooks_blueprint(
            &js_hooks,
            "\"{{ .metadata.labels.team | default('platform') }}\"",
        ),
    )
    .expect("write");
    let out: serde_json::Value =
        serde_json::from_str(&render(&js_bp, &crs[0], &[]).stdout).expect("json");
    let deployment = &out["resources"][0];
    assert_eq!(
        deployment["metadata"]["labels"]["demo.inrun.dev/team"],
        "payments"
    );
    assert_eq!(
        deployment["metadata"]["annotations"]["demo.inrun.dev/rendered-by"],
        "hooks"
    );
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 2, "{containers:?}");
    assert_eq!(
        containers[1],
        json!({"name": "log-shipper", "image": "busybox:1.36"})
    );
    assert_eq!(out["labels"]["demo.inrun.dev/team"], "payments");
}

// ---------------------------------------------------------------------------------------
// Failures are contained

fn engine() -> Engine {
    Engine::new(EngineSettings {
        cache: Some(CompileCache::new(cache_dir()).expect("cache")),
        max_instances: 8,
        ..EngineSettings::default()
    })
    .expect("engine")
}

fn load(engine: &Engine, name: &str) -> Plugin {
    engine
        .load_file(Path::new(&plugin_path(name)))
        .unwrap_or_else(|e| panic!("loading {name}: {e:?}"))
}

fn webapp_request() -> Request {
    Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "shop", "namespace": "team-a", "uid": "u1"},
               "spec": {"image": "nginx:1.27", "replicas": 3, "port": 8080}}),
        json!({}),
    )
}

fn limits(deadline: Duration) -> Limits {
    Limits {
        deadline,
        ..Limits::default()
    }
}

fn reconcile(plugin: &Plugin, limits: &Limits) -> Result<Outcome, inrun::wasm::CallError> {
    futures::executor::block_on(plugin.reconcile(&webapp_request(), limits, &Grants::default()))
}

#[test]
fn a_thrown_exception_fails_only_its_call_with_the_exception_text() {
    let engine = engine();
    let throw = load(&engine, "inrun_test_throw_js");
    let webapp = load(&engine, "inrun_plugin_webapp_js");
    assert_eq!(throw.world(), World::Reconciler);
    let generous = limits(Duration::from_secs(10));

    let err = reconcile(&throw, &generous).unwrap_err();
    assert!(matches!(err.failure, CallFailure::Returned(_)), "{err:?}");
    let text = inrun::errors::chain(&err);
    assert!(
        text.starts_with("plugin inrun_test_throw_js@sha256:"),
        "{text}"
    );
    assert!(
        text.contains("RangeError: inrun_test_throw_js threw on purpose for team-a/shop"),
        "{text}"
    );

    let out = reconcile(&webapp, &generous).expect("a normal call right after");
    assert_eq!(out.resources.len(), 2);
    assert!(reconcile(&throw, &generous).is_err(), "and it throws again");
}

#[test]
fn an_endless_loop_hits_its_deadline_and_the_next_call_works() {
    let engine = engine();
    let spin = load(&engine, "inrun_test_spin_js");
    let webapp = load(&engine, "inrun_plugin_webapp_js");

    let started = Instant::now();
    let err = reconcile(&spin, &limits(Duration::from_millis(300))).unwrap_err();
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

    let out = reconcile(&webapp, &limits(Duration::from_secs(10))).expect("a normal call");
    assert_eq!(out.status.expect("status")["replicas"], 3);
    let again = reconcile(&spin, &limits(Duration::from_millis(100))).unwrap_err();
    assert!(
        matches!(again.failure, CallFailure::Deadline(_)),
        "{again:?}"
    );
}

#[test]
fn hook_functions_are_listed_and_an_unknown_one_is_refused() {
    let engine = engine();
    let hooks = load(&engine, "inrun_plugin_hooks_js");
    assert_eq!(hooks.world(), World::Hooks);
    assert_eq!(
        hooks.info().functions,
        ["add-labels", "annotate", "add-sidecar"]
    );
    let err = futures::executor::block_on(hooks.call_hook(
        "nope",
        &webapp_request(),
        &Outcome::default(),
        &limits(Duration::from_secs(10)),
        &Grants::default(),
    ))
    .unwrap_err();
    assert!(
        inrun::errors::chain(&err).contains(
            "unknown hook function `nope`; this plugin has: add-labels, annotate, add-sidecar"
        ),
        "{err}"
    );
}

/// Size, cold compile, cached load and instantiate+call median of the JS WebApp, printed
/// (`cargo test -p inrun --test lang_js -- --nocapture`). A debug test build compiles
/// and runs far slower than `inrun` built for release; numbers here are for comparison
/// between languages in the same build, never asserted.
#[test]
fn webapp_js_costs_are_reported() {
    let path = plugin_path("inrun_plugin_webapp_js");
    let size = std::fs::metadata(&path).expect("size").len();

    let cold = Engine::new(EngineSettings {
        max_instances: 4,
        ..EngineSettings::default()
    })
    .expect("engine");
    let t = Instant::now();
    let webapp = load(&cold, "inrun_plugin_webapp_js");
    let compile = t.elapsed();

    let t = Instant::now();
    let _cached = load(&engine(), "inrun_plugin_webapp_js");
    let cached_first = t.elapsed();
    let t = Instant::now();
    let _cached = load(&engine(), "inrun_plugin_webapp_js");
    let cached = t.elapsed();

    let generous = limits(Duration::from_secs(10));
    for _ in 0..3 {
        reconcile(&webapp, &generous).expect("warm-up");
    }
    let mut samples: Vec<Duration> = (0..30)
        .map(|_| {
            let t = Instant::now();
            reconcile(&webapp, &generous).expect("call");
            t.elapsed()
        })
        .collect();
    samples.sort();
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "lang_js ({profile} build): inrun_plugin_webapp_js {:.1} MB; cold compile {:.1} s; \
         cached load {:.0} ms (first, may compile) / {:.1} ms; instantiate+call median {:.2} ms, p90 {:.2} ms",
        size as f64 / 1e6,
        compile.as_secs_f64(),
        cached_first.as_secs_f64() * 1e3,
        cached.as_secs_f64() * 1e3,
        samples[samples.len() / 2].as_secs_f64() * 1e3,
        samples[samples.len() * 9 / 10].as_secs_f64() * 1e3,
    );
}

// ---------------------------------------------------------------------------------------
// End to end

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_webapp_reconciles_a_webapp_on_a_real_api_server() -> TestResult {
    let group = unique_group("lang-js");
    let blueprint = format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e-js}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor: {{location: "{webapp}", limits: {{deadline: 10s, memory: {JS_MEMORY}}}}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
        prune:
          enabled: true
"#,
        webapp = plugin_path("inrun_plugin_webapp_js")
    );
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("lang-js").await?;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    let cr_yaml = |replicas: u32| {
        format!(
            "apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: shop}}\nspec: {{image: 'nginx:1.27', replicas: {replicas}, env: {{MODE: prod}}}}\n"
        )
    };
    let cr = apply_cr(&ar, &ns, &cr_yaml(2)).await;
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
    let container = &deployment.data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.27");
    assert_eq!(container["env"], json!([{"name": "MODE", "value": "prod"}]));
    webapp_reconciled(&ar, &ns, "nginx:1.27", None).await;

    // An edit reaches the child; a spec the reconciler rejects is reported, not applied.
    apply_cr(&ar, &ns, &cr_yaml(4)).await;
    eventually("the Deployment to follow the edit", || async {
        let d = get(deployments(), Some(&ns), "shop").await?;
        (d.data["spec"]["replicas"] == 4).then_some(())
    })
    .await;
    apply_cr(
        &ar,
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: shop}}\nspec: {{image: '', replicas: 5}}\n"),
    )
    .await;
    let note = event(&ns, "shop", "ReconcileError").await;
    assert!(note.contains("spec.image is required"), "{note}");
    assert_eq!(
        get(deployments(), Some(&ns), "shop")
            .await
            .expect("kept")
            .data["spec"]["replicas"],
        4
    );

    // Deleting the CR deletes its children.
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(client(), &ns, &ar);
    api.delete("shop", &kube::api::DeleteParams::default())
        .await?;
    eventually("the CR and its Deployment to be gone", || async {
        let gone = get(&ar, Some(&ns), "shop").await.is_none()
            && get(deployments(), Some(&ns), "shop").await.is_none();
        gone.then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The SDK's own unit tests (Node.js, no component)

#[test]
fn the_sdk_unit_tests_pass_under_node() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // The pinned componentize-js, whose generated glue componentize.test.mjs rewrites.
    let toolchain = Command::new(root.join("plugins/js/toolchain.sh"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run plugins/js/toolchain.sh");
    assert!(
        toolchain.status.success(),
        "plugins/js/toolchain.sh: {}",
        String::from_utf8_lossy(&toolchain.stderr)
    );
    let componentize_js = PathBuf::from(String::from_utf8_lossy(&toolchain.stdout).trim())
        .join("node_modules/@bytecodealliance/componentize-js");
    let out = Command::new("node")
        .current_dir(&root)
        .args([
            "--import",
            "./sdk/js/testing/register.mjs",
            "--test",
            "sdk/js/test/",
        ])
        .env("INRUN_TEST_QUIET", "1")
        .env("INRUN_COMPONENTIZE_JS", componentize_js)
        .output()
        .expect("run node (Node.js 18+ is needed for the JavaScript guests)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node --test sdk/js/test/ failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
    assert!(stdout.contains("# skipped 0"), "{stdout}");
}
