//! Remote reconcilers end to end: a small axum server in the test is the reconciler; the
//! host runs against the real kube-apiserver. Also `render` with a remote reconciler.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

const TOKEN: &str = "tok-3f9a1c-first";
const ROTATED: &str = "tok-77d02e-second";

/// One call: the Authorization header and the JSON body.
type Call = (Option<String>, Value);

/// What the server saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Call>>>);

impl Seen {
    fn calls(&self) -> Vec<Call> {
        self.0.lock().expect("lock").clone()
    }

    /// The calls made for the CR `name`.
    fn for_cr(&self, name: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|(_, b)| b["object"]["metadata"]["name"] == name)
            .collect()
    }
}

/// Answers by the CR's name: failure modes for the names below, a Result otherwise.
async fn reconcile(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let auth = headers
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    seen.0.lock().expect("lock").push((auth, req.clone()));
    let name = req["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match name.as_str() {
        "status500" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "database exploded\nat line 2",
        )
            .into_response(),
        "notjson" => (StatusCode::OK, "<html>hello</html>").into_response(),
        "shape" => axum::Json(json!({"result": "ok", "resources": "nope"})).into_response(),
        "unknown" => axum::Json(json!({"result": "perhaps"})).into_response(),
        "error" => axum::Json(json!({"result": "error", "error": "quota exceeded for team"}))
            .into_response(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            axum::Json(json!({"result": "ok"})).into_response()
        }
        _ => {
            let children = req["children"]["ConfigMap"]
                .as_object()
                .map_or(0, |m| m.len());
            axum::Json(json!({
                "result": "ok",
                "resources": [{
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{name}-config")},
                    "data": {"image": req["args"]["image"], "finalizing": req["finalizing"].to_string()}
                }],
                "status": {"phase": "Ready", "childrenSeen": children},
                "labels": {"served-by": "remote"},
            }))
            .into_response()
        }
    }
}

/// Starts the reconciler on 127.0.0.1; returns its base URL and what it sees.
async fn server() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/reconcile", axum::routing::post(reconcile))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/reconcile"), seen)
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    l.local_addr().expect("addr").port()
}

fn blueprint(group: &str, endpoint: &str, refused: u16) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e-remote}}
spec:
  runtime:
    backoff: {{base: 1s, max: 5s}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        remote:
          endpoint: "{endpoint}"
          timeout: 1s
          auth: {{secretRef: {{name: remote-auth, key: token}}}}
        args: {{image: "{{{{ .spec.image }}}}"}}
        request:
          object: {{exclude: [.metadata.managedFields, .status]}}
          children: true
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
    - group: {group}
      version: v1alpha1
      kind: Refused
      reconcile:
        default: false
        remote: {{endpoint: "http://127.0.0.1:{refused}/reconcile", timeout: 2s}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
"#
    )
}

async fn put_token(ns: &str, token: &str) -> TestResult {
    let api: Api<Secret> = Api::namespaced(client(), ns);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "remote-auth"}, "stringData": {"token": token}});
    api.patch(
        "remote-auth",
        &PatchParams::apply("e2e-test").force(),
        &Patch::Apply(&secret),
    )
    .await?;
    Ok(())
}

fn cr(group: &str, kind: &str, name: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {{image: 'nginx:1.27'}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_reconciler_gets_the_documented_request_and_its_result_is_applied() -> TestResult {
    let group = unique_group("remote_ok");
    let (endpoint, seen) = server().await;
    let ns = ControlPlane::shared().namespace("remote-ok").await?;
    put_token(&ns, TOKEN).await?;
    let host = Host::start(&blueprint(&group, &endpoint, closed_port().await)).await;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "WebApp", "shop")).await;

    // The Result is applied: the child, the CR's status and labels.
    let cm = eventually("the ConfigMap", || {
        get(configmaps(), Some(&ns), "shop-config")
    })
    .await;
    assert_eq!(cm.data["data"]["image"], "nginx:1.27");
    assert!(
        cm.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("inrun.dev/owner-uid"))
    );
    // The host's own apply starts no pass; the next change to the CR does, and that pass
    // sees the child in `children`.
    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    crs.patch(
        "shop",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {"e2e.inrun.dev/poke": "1"}}})),
    )
    .await?;
    let cr_obj = eventually("the CR to see its child", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        (cr.data["status"]["childrenSeen"] == 1).then_some(cr)
    })
    .await;
    assert_eq!(cr_obj.data["status"]["phase"], "Ready");
    assert_eq!(
        cr_obj
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("served-by"))
            .map(String::as_str),
        Some("remote")
    );

    // The body: exactly the documented keys, the excluded paths gone, the token sent.
    let calls = seen.for_cr("shop");
    let (auth, first) = calls.first().expect("a call").clone();
    assert_eq!(auth.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
    let keys: Vec<&str> = first
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["key", "apiVersion", "kind", "object", "args", "children"]
    );
    assert_eq!(first["key"], format!("{ns}/shop"));
    assert_eq!(first["apiVersion"], format!("{group}/v1alpha1"));
    assert_eq!(first["kind"], "WebApp");
    assert_eq!(first["args"], json!({"image": "nginx:1.27"}));
    assert!(first["object"]["metadata"].get("managedFields").is_none());
    assert!(first["object"].get("status").is_none());
    assert_eq!(first["object"]["spec"]["image"], "nginx:1.27");
    let with_child = calls
        .iter()
        .map(|(_, b)| b)
        .find(|b| b["children"]["ConfigMap"]["shop-config"].is_object())
        .expect("a call that carries the child");
    let child = &with_child["children"]["ConfigMap"]["shop-config"];
    assert_eq!(child["data"]["image"], "nginx:1.27");
    assert!(child["metadata"].get("managedFields").is_none());

    // A rotated token is read again: keep nudging the CR (an annotation each poll) until a
    // call carries the new token, however long the host's secret cache holds the old one.
    put_token(&ns, ROTATED).await?;
    apply_cr(
        &ar,
        &ns,
        &cr(&group, "WebApp", "shop").replace("nginx:1.27", "nginx:1.28"),
    )
    .await;
    let crs: Api<kube::api::DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    let nudges = std::sync::atomic::AtomicU32::new(0);
    eventually("a call with the rotated token", || async {
        let rotated = seen.for_cr("shop").iter().any(|(a, b)| {
            a.as_deref() == Some(format!("Bearer {ROTATED}").as_str())
                && b["args"]["image"] == "nginx:1.28"
        });
        if !rotated {
            let n = nudges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let poke = json!({"metadata": {"annotations": {"e2e/nudge": n.to_string()}}});
            crs.patch(
                "shop",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&poke),
            )
            .await
            .ok()?;
        }
        rotated.then_some(())
    })
    .await;

    // Deletion: the reconciler is asked with `finalizing: true`, then the CR goes.
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    api.delete("shop", &DeleteParams::default()).await?;
    eventually("a finalizing call", || async {
        seen.for_cr("shop")
            .iter()
            .any(|(_, b)| b["finalizing"] == true)
            .then_some(())
    })
    .await;
    eventually("the CR to be gone", || async {
        get(&ar, Some(&ns), "shop").await.is_none().then_some(())
    })
    .await;
    eventually("the child to be deleted", || async {
        get(configmaps(), Some(&ns), "shop-config")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_remote_failure_is_a_reconcile_error_and_the_host_keeps_going() -> TestResult {
    let group = unique_group("remote_fail");
    let (endpoint, _seen) = server().await;
    let ns = ControlPlane::shared().namespace("remote-fail").await?;
    put_token(&ns, TOKEN).await?;
    let host = Host::start(&blueprint(&group, &endpoint, closed_port().await)).await;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    served(&resource(&group, "Refused")).await;
    let expected = [
        (
            "status500",
            "answered HTTP 500: database exploded at line 2",
        ),
        (
            "notjson",
            "replied with something that is not JSON: <html>hello</html>",
        ),
        ("shape", "replied with a malformed Result"),
        ("unknown", "unknown result \"perhaps\""),
        ("error", "reported an error: quota exceeded for team"),
        ("slow", "did not answer within 1s"),
    ];
    for (name, _) in expected {
        apply_cr(&ar, &ns, &cr(&group, "WebApp", name)).await;
    }
    apply_cr(
        &resource(&group, "Refused"),
        &ns,
        &cr(&group, "Refused", "refused"),
    )
    .await;
    for (name, text) in expected {
        let note = event(&ns, name, "ReconcileError").await;
        assert!(note.contains(text), "{name}: {note:?} lacks {text:?}");
        assert!(!note.contains(TOKEN), "{name}: the token leaked: {note}");
    }
    let note = event(&ns, "refused", "ReconcileError").await;
    assert!(
        note.contains("cannot connect to remote reconciler"),
        "{note}"
    );

    // The status says why, without the token; and a good CR is still served.
    let failed = get(&ar, Some(&ns), "error").await.expect("cr");
    let (status, reason, message) = reconciled(&failed).expect("Ready condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ReconcileError")
    );
    assert!(message.contains("quota exceeded") && !message.contains(TOKEN));
    apply_cr(&ar, &ns, &cr(&group, "WebApp", "fine")).await;
    eventually("the good CR's child", || {
        get(configmaps(), Some(&ns), "fine-config")
    })
    .await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_calls_a_remote_reconciler_with_a_secret_from_the_command_line() -> TestResult {
    let (endpoint, seen) = server().await;
    let dir = tempfile::tempdir()?;
    let bp = dir.path().join("blueprint.yaml");
    std::fs::write(&bp, blueprint("render.e2e.inrun.dev", &endpoint, 1))?;
    let obj = dir.path().join("cr.yaml");
    std::fs::write(
        &obj,
        cr("render.e2e.inrun.dev", "WebApp", "shop").replace(
            "metadata: {name: shop}",
            "metadata: {name: shop, namespace: team-a}",
        ),
    )?;
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
            .args(["render", "-b"])
            .arg(&bp)
            .arg("-f")
            .arg(&obj)
            .args(["-o", "json"])
            .args(extra)
            .env("INRUN_CACHE_DIR", dir.path().join("cache"))
            .output()
            .expect("run inrun");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = run(&["--secret", &format!("team-a/remote-auth/token={TOKEN}")]);
    assert!(ok, "render failed: {stderr}");
    let out: Value = serde_json::from_str(&stdout)?;
    assert_eq!(out["reconciler"], "remote");
    assert_eq!(out["resources"][0]["metadata"]["name"], "shop-config");
    assert_eq!(out["status"]["phase"], "Ready");
    assert_eq!(
        seen.calls()[0].0.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );

    // Without the secret, render says which one to pass.
    let (ok, _, stderr) = run(&[]);
    assert!(!ok);
    assert!(
        stderr.contains("--secret team-a/remote-auth/token=VALUE"),
        "{stderr}"
    );
    Ok(())
}

/// A remote reconciler that holds every call until released, counting per kind the calls in
/// flight (and the most at once) and per CR the calls made.
#[derive(Clone)]
struct Turnstile {
    counts: Arc<Mutex<Counts>>,
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

#[derive(Default)]
struct Counts {
    in_flight: std::collections::HashMap<String, usize>,
    most: std::collections::HashMap<String, usize>,
    calls: std::collections::HashMap<String, usize>,
}

impl Turnstile {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }

    fn in_flight(&self, kind: &str) -> usize {
        self.counts().in_flight.get(kind).copied().unwrap_or(0)
    }

    fn calls(&self, name: &str) -> usize {
        self.counts().calls.get(name).copied().unwrap_or(0)
    }
}

async fn turnstile_call(State(t): State<Turnstile>, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or_default();
    let kind = req["object"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = req["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    {
        let mut c = t.counts();
        let now = {
            let n = c.in_flight.entry(kind.clone()).or_default();
            *n += 1;
            *n
        };
        let most = c.most.entry(kind.clone()).or_default();
        *most = (*most).max(now);
        *c.calls.entry(name).or_default() += 1;
    }
    let mut held = t.held.subscribe();
    let _ = held.wait_for(|h| !*h).await;
    *t.counts().in_flight.entry(kind).or_default() -= 1;
    axum::Json(json!({"result": "ok"})).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_bound_the_calls_in_flight_and_changes_to_a_queued_cr_make_one_pass() -> TestResult
{
    let turnstile = Turnstile {
        counts: Arc::default(),
        held: Arc::new(tokio::sync::watch::channel(true).0),
    };
    let port = serve(
        Router::new()
            .route("/reconcile", axum::routing::post(turnstile_call))
            .with_state(turnstile.clone()),
    )
    .await;
    let group = unique_group("workers");
    let crd = |kind: &str, workers: u32| {
        format!(
            r#"    - group: {group}
      version: v1alpha1
      kind: {kind}
      workers: {workers}
      reconcile:
        default: false
        remote: {{endpoint: "http://127.0.0.1:{port}/reconcile", timeout: 60s}}
"#
        )
    };
    let text = format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: e2e-workers}}\nspec:\n  crds:\n{}{}",
        crd("Pool", 2),
        crd("Line", 1)
    );
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("workers").await?;
    let (pool, line) = (resource(&group, "Pool"), resource(&group, "Line"));
    served(&pool).await;
    served(&line).await;
    let cr = |kind: &str, name: &str, value: u32| {
        format!(
            "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {{value: {value}}}\n"
        )
    };

    // Four CRs of a CRD with two workers: two calls run, two wait for a worker.
    for i in 0..4 {
        apply_cr(&pool, &ns, &cr("Pool", &format!("p{i}"), 0)).await;
    }
    eventually("two calls in flight", || async {
        (turnstile.in_flight("Pool") == 2).then_some(())
    })
    .await;
    // A CR of another CRD is served meanwhile: workers are per CRD.
    apply_cr(&line, &ns, &cr("Line", "first", 0)).await;
    eventually("the other CRD's call", || async {
        (turnstile.in_flight("Line") == 1).then_some(())
    })
    .await;
    // While its only worker is held, a second Line CR is queued and changed five times.
    apply_cr(&line, &ns, &cr("Line", "second", 0)).await;
    for value in 1..=5 {
        apply_cr(&line, &ns, &cr("Line", "second", value)).await;
    }
    let queued = get(&line, Some(&ns), "second").await.expect("second");
    assert_eq!(queued.metadata.generation, Some(6));
    assert_eq!(turnstile.calls("second"), 0, "queued behind the held call");
    turnstile.hold(false);

    for i in 0..4 {
        let name = format!("p{i}");
        eventually("every Pool CR reconciled", || async {
            (ready(&get(&pool, Some(&ns), &name).await?)?.0 == "True").then_some(())
        })
        .await;
    }
    assert_eq!(
        turnstile.counts().most.get("Pool").copied(),
        Some(2),
        "never more calls at once than workers"
    );
    // The queued CR: one pass, on its last generation.
    eventually("the queued CR reconciled on its last spec", || async {
        let cr = get(&line, Some(&ns), "second").await?;
        let observed = cr.data["status"]["observedGeneration"].as_i64();
        (observed == Some(6)).then_some(())
    })
    .await;
    let crd_name = format!("lines.{group}");
    eventually("both Line passes to end", || async {
        (reconciles(&host.metrics, &crd_name) >= 2).then_some(())
    })
    .await;
    assert_eq!(
        turnstile.calls("second"),
        1,
        "five changes to a queued CR make one pass"
    );
    assert_eq!(reconciles(&host.metrics, &crd_name), 2);
    assert_eq!(turnstile.counts().most.get("Line").copied(), Some(1));
    host.stop().await;
    Ok(())
}
