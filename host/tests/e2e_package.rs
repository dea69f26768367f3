//! Infrastructure packages end to end (seed 002) on a real kube-apiserver: the Rust test
//! package `inrun_test_infra` manages "things" held by a small HTTP service in this test,
//! reached through the `http` capability. Converge once, drift, matching-but-unready,
//! interval and reconcile-request checks, suspend, a spec edit during a converge, Retain
//! and Delete, prevent-destroy, retry delays from recorded call times, and no package
//! text in status.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get as route_get;
use axum::{Json, Router};
use futures::StreamExt;
use inrun_testenv::{ControlPlane, TestResult};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use support::*;

/// One thing on the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Thing {
    size: i64,
    ready: bool,
}

/// A call the backend answered: when, the method, the host's event header, and the
/// credential it carried (`authorization`).
#[derive(Debug, Clone)]
struct Call {
    at: Instant,
    method: &'static str,
    event: String,
    authorization: Option<String>,
    /// The custom resource type the package was told it serves, as the Rust test guest
    /// sends it (`group/version/plural/kind`).
    resource: Option<String>,
}

#[derive(Default)]
struct Inner {
    things: HashMap<String, Thing>,
    calls: Vec<Call>,
    /// Whether a thing is ready once converged.
    unready_after_put: bool,
    /// Answer every PUT with a 500 and this body.
    fail_put: Option<String>,
    /// Hold every PUT until the test releases it.
    hold_put: bool,
}

/// The fake infrastructure service.
#[derive(Clone, Default)]
struct Backend {
    inner: Arc<Mutex<Inner>>,
    put_started: Arc<tokio::sync::Notify>,
    put_release: Arc<tokio::sync::Notify>,
}

impl Backend {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note(&self, method: &'static str, headers: &HeaderMap) {
        let event = headers
            .get("x-inrun-event")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        self.lock().calls.push(Call {
            at: Instant::now(),
            method,
            event,
            authorization: header("authorization"),
            resource: header("x-inrun-resource"),
        });
    }

    fn calls(&self, method: &str) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// The calls of `method` the host made for `event`.
    fn calls_for(&self, method: &str, event: &str) -> Vec<Call> {
        self.calls(method)
            .into_iter()
            .filter(|c| c.event == event)
            .collect()
    }

    fn thing(&self, id: &str) -> Option<Thing> {
        self.lock().things.get(id).copied()
    }

    fn set(&self, id: &str, thing: Thing) {
        self.lock().things.insert(id.to_string(), thing);
    }

    async fn start(&self) -> u16 {
        let app = Router::new()
            .route(
                "/things/{id}",
                route_get(observe).put(converge).delete(remove),
            )
            .with_state(self.clone());
        serve(app).await
    }
}

async fn observe(
    State(b): State<Backend>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> (StatusCode, Json<Value>) {
    b.note("GET", &headers);
    match b.thing(&id) {
        Some(t) => (
            StatusCode::OK,
            Json(json!({"size": t.size, "ready": t.ready})),
        ),
        None => (StatusCode::NOT_FOUND, Json(json!({}))),
    }
}

async fn converge(
    State(b): State<Backend>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, String) {
    b.note("PUT", &headers);
    let hold = b.lock().hold_put;
    if hold {
        b.put_started.notify_one();
        b.put_release.notified().await;
    }
    let mut inner = b.lock();
    if let Some(text) = inner.fail_put.clone() {
        return (StatusCode::INTERNAL_SERVER_ERROR, text);
    }
    let ready = !inner.unready_after_put;
    inner.things.insert(
        id,
        Thing {
            size: body["size"].as_i64().unwrap_or_default(),
            ready,
        },
    );
    (StatusCode::OK, String::new())
}

async fn remove(
    State(b): State<Backend>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    b.note("DELETE", &headers);
    match b.lock().things.remove(&id) {
        Some(_) => StatusCode::OK,
        None => StatusCode::NOT_FOUND,
    }
}

/// CR versions seen: (generation, Ready status, Ready's observedGeneration,
/// status.observedGeneration).
type Seen = Arc<Mutex<Vec<(i64, String, i64, i64)>>>;

fn blueprint(group: &str, port: u16) -> String {
    blueprint_for("inrun_test_infra", group, port)
}

/// The Blueprint serving Things with the package component `component`.
fn blueprint_for(component: &str, group: &str, port: u16) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Thing
      reconcile:
        default: false
        package:
          location: "{plugin}"
          capabilities:
            http: {{hosts: ["127.0.0.1:{port}"]}}
"#,
        plugin = plugin(component)
    )
}

/// A Thing CR named `name` with `spec` (a YAML flow mapping's inside) and `config`.
fn thing_cr(group: &str, name: &str, spec: &str, port: u16, config: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: Thing\nmetadata: {{name: {name}}}\nspec: {{{spec}, config: {{endpoint: \"http://127.0.0.1:{port}\", {config}}}}}\n"
    )
}

/// The CR's condition `kind` as (status, reason, message, observedGeneration).
fn condition(cr: &DynamicObject, kind: &str) -> Option<(String, String, String, i64)> {
    let c = cr.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?
        .clone();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((
        text("status"),
        text("reason"),
        text("message"),
        c["observedGeneration"].as_i64().unwrap_or_default(),
    ))
}

async fn wait_reason(ar: &ApiResource, ns: &str, name: &str, reason: &str) -> DynamicObject {
    eventually(&format!("{ns}/{name} to show {reason}"), || async {
        let cr = get(ar, Some(ns), name).await?;
        (condition(&cr, "Ready")?.1 == reason).then_some(cr)
    })
    .await
}

async fn wait_ready(ar: &ApiResource, ns: &str, name: &str) -> DynamicObject {
    eventually(&format!("{ns}/{name} to be Ready"), || async {
        let cr = get(ar, Some(ns), name).await?;
        let ready = condition(&cr, "Ready")?;
        (ready.0 == "True" && Some(ready.3) == cr.metadata.generation).then_some(cr)
    })
    .await
}

async fn patch_cr(ar: &ApiResource, ns: &str, name: &str, patch: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, ar);
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch cr");
}

/// Deletes the CR `name` and waits until it is gone (its finalizer removed).
async fn delete_and_wait(ar: &ApiResource, ns: &str, name: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, ar);
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete cr");
    eventually(&format!("{ns}/{name} to be gone"), || async {
        get(ar, Some(ns), name).await.is_none().then_some(())
    })
    .await;
}

fn finalizers(cr: &DynamicObject) -> Vec<String> {
    cr.metadata.finalizers.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_converges_once_then_follows_drift_and_readiness_without_converging_again()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-drift");
    let host = Host::start(&blueprint(&group, port)).await;
    let ns = ControlPlane::shared().namespace("pkg-drift").await?;
    let ar = resource(&group, "Thing");
    let plural = ("things".to_string(), group.clone());
    served(&ar).await;

    let before = apiserver_writes().await;
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "one", "reconcileInterval: 1h", port, "size: 2"),
    )
    .await;
    let cr = wait_ready(&ar, &ns, "one").await;
    let after = apiserver_writes().await;
    let id = format!("{ns}--one");
    assert_eq!(
        backend.thing(&id),
        Some(Thing {
            size: 2,
            ready: true
        })
    );
    assert_eq!(backend.calls("PUT").len(), 1, "converged once");
    // Every call is told the custom resource type it serves, as the Blueprint declares it.
    let told: BTreeSet<_> = backend
        .lock()
        .calls
        .iter()
        .map(|c| c.resource.clone())
        .collect();
    assert_eq!(
        told,
        [Some(format!("{group}/v1alpha1/things/Thing"))].into(),
        "the package's resource descriptor"
    );
    assert_eq!(finalizers(&cr), ["inrun.dev/infrastructure"]);
    let status = &cr.data["status"];
    assert_eq!(status["profile"], json!(id));
    assert_eq!(
        status["boundary"],
        json!(format!("http://127.0.0.1:{port}"))
    );
    assert_eq!(status["identity"].as_str().map(str::len), Some(64));
    assert_eq!(
        condition(&cr, "Reconciling").map(|c| c.0),
        Some("False".into())
    );
    // The host's writes for a new CR, as the API server counted them: the finalizer, the
    // identity with Reconciling, and Ready (the test's own apply is the other APPLY).
    let writes = writes_between(&before, &after, &[(&plural.1, &plural.0)]);
    assert_eq!(
        writes,
        [
            ("APPLY things".to_string(), 2),
            ("APPLY things/status".to_string(), 2)
        ]
        .into(),
        "writes per new CR"
    );
    // One pass: the host's own writes wake nothing.
    let crd = format!("things.{group}");
    assert_eq!(reconciles(&host.metrics, &crd), 1, "reconciles per new CR");
    println!("package CR: 1 reconcile, {writes:?} (one APPLY things is the test's create)");

    // `kubectl get` (a client no one here wrote) shows the generated columns.
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(ControlPlane::shared().kubeconfig())
        .args(["get", &format!("things.{group}"), "-n", &ns, "--no-headers"])
        .output()?;
    let row = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        fields.get(..3),
        Some(&["one", "True", "Ready"][..]),
        "{row}"
    );

    // Drift behind its back: a changed annotation asks for an early check, which converges.
    backend.set(
        &id,
        Thing {
            size: 7,
            ready: true,
        },
    );
    patch_cr(
        &ar,
        &ns,
        "one",
        json!({"metadata": {"annotations": {"inrun.dev/reconcile-request": "1"}}}),
    )
    .await;
    eventually("the drift to be converged", || async {
        (backend.thing(&id)?.size == 2).then_some(())
    })
    .await;
    let puts = backend.calls("PUT");
    assert_eq!(puts.len(), 2);
    assert_eq!(puts[1].event, "requested");
    let cr = eventually("the request to be acknowledged", || async {
        let cr = get(&ar, Some(&ns), "one").await?;
        (cr.data["status"]["lastHandledReconcileAt"] == "1").then_some(cr)
    })
    .await;
    assert_eq!(condition(&cr, "Ready").map(|c| c.0), Some("True".into()));

    // Matching but not ready: observed again with the retry delay, never converged again.
    backend.set(
        &id,
        Thing {
            size: 2,
            ready: false,
        },
    );
    patch_cr(
        &ar,
        &ns,
        "one",
        json!({"metadata": {"annotations": {"inrun.dev/reconcile-request": "2"}}}),
    )
    .await;
    let cr = wait_reason(&ar, &ns, "one", "Progressing").await;
    assert_eq!(
        condition(&cr, "Ready").map(|c| c.2),
        Some("the infrastructure matches the spec but is not ready yet".into())
    );
    let retries = eventually("three re-observations", || async {
        let gets = backend.calls_for("GET", "retry");
        (gets.len() >= 3).then_some(gets)
    })
    .await;
    assert_eq!(
        backend.calls("PUT").len(),
        2,
        "no converge while it matches"
    );
    // Between retries: 2 s, then 4 s (the first retry came after 1 s; each doubles).
    let gaps: Vec<f64> = retries
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_secs_f64())
        .collect();
    // Delays never run short, so each gap is at least its delay; the first one's upper
    // bound rules out a constant delay.
    assert!(
        (1.8..3.5).contains(&gaps[0]) && gaps[1] >= 3.6,
        "retry gaps {gaps:?}"
    );
    backend.set(
        &id,
        Thing {
            size: 2,
            ready: true,
        },
    );
    wait_reason(&ar, &ns, "one", "Ready").await;
    assert_eq!(backend.calls("PUT").len(), 2);

    // Retain (the default): deleting the CR removes the finalizer and calls nothing.
    delete_and_wait(&ar, &ns, "one").await;
    assert!(backend.calls("DELETE").is_empty());
    assert!(backend.thing(&id).is_some(), "retained");
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interval_checks_again_and_suspend_stops_converging_but_not_deletion() -> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-suspend");
    let host = Host::start(&blueprint(&group, port)).await;
    let ns = ControlPlane::shared().namespace("pkg-suspend").await?;
    let ar = resource(&group, "Thing");
    let spec = |suspend: bool| {
        thing_cr(
            &group,
            "two",
            &format!("reconcileInterval: 1500ms, deletionPolicy: Delete, suspend: {suspend}"),
            port,
            "size: 3",
        )
    };
    apply_cr(&ar, &ns, &spec(false)).await;
    wait_ready(&ar, &ns, "two").await;
    let id = format!("{ns}--two");

    // The interval: checked again without any change.
    let checks = eventually("two interval checks", || async {
        let gets = backend.calls_for("GET", "interval");
        (gets.len() >= 2).then_some(gets)
    })
    .await;
    let gap = (checks[1].at - checks[0].at).as_secs_f64();
    assert!((1.3..4.0).contains(&gap), "interval gap {gap}");

    // Suspended: drift is seen and not converged.
    apply_cr(&ar, &ns, &spec(true)).await;
    backend.set(
        &id,
        Thing {
            size: 9,
            ready: true,
        },
    );
    let cr = wait_reason(&ar, &ns, "two", "Suspended").await;
    assert_eq!(condition(&cr, "Ready").map(|c| c.0), Some("False".into()));
    let puts = backend.calls("PUT").len();
    let seen = backend.calls("GET").len();
    eventually("another check while suspended", || async {
        (backend.calls("GET").len() > seen + 1).then_some(())
    })
    .await;
    assert_eq!(backend.calls("PUT").len(), puts, "suspended: no converge");

    // prevent-destroy refuses the deletion with a condition; nothing is deleted.
    patch_cr(
        &ar,
        &ns,
        "two",
        json!({"metadata": {"annotations": {"inrun.dev/prevent-destroy": "true"}}}),
    )
    .await;
    let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    api.delete("two", &DeleteParams::default()).await?;
    let cr = wait_reason(&ar, &ns, "two", "DestroyPrevented").await;
    assert!(cr.metadata.deletion_timestamp.is_some());
    event(&ns, "two", "DeletionBlocked").await;
    assert!(backend.calls("DELETE").is_empty());
    assert!(backend.thing(&id).is_some());

    // Without it, Delete runs the package's delete although the CR is suspended, and the
    // finalizer goes once the thing is observed gone.
    patch_cr(
        &ar,
        &ns,
        "two",
        json!({"metadata": {"annotations": {"inrun.dev/prevent-destroy": null}}}),
    )
    .await;
    eventually("the CR to be gone", || async {
        get(&ar, Some(&ns), "two").await.is_none().then_some(())
    })
    .await;
    assert_eq!(backend.calls("DELETE").len(), 1);
    assert_eq!(backend.calls("DELETE")[0].event, "deleting");
    assert!(backend.thing(&id).is_none());
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_retry_with_doubling_delays_reset_by_an_edit_and_status_never_holds_package_text()
-> TestResult {
    let backend = Backend::default();
    backend.lock().fail_put = Some("backend-secret-error-text".into());
    let port = backend.start().await;
    let group = unique_group("pkg-retry");
    let host = Host::start(&blueprint(&group, port)).await;
    let ns = ControlPlane::shared().namespace("pkg-retry").await?;
    let ar = resource(&group, "Thing");
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "three", "reconcileInterval: 1h", port, "size: 1"),
    )
    .await;
    let cr = wait_reason(&ar, &ns, "three", "ConvergeFailed").await;
    let puts = eventually("four failed converges", || async {
        let puts = backend.calls("PUT");
        (puts.len() >= 4).then_some(puts)
    })
    .await;
    let gaps: Vec<f64> = puts
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_secs_f64())
        .collect();
    // 1 s, 2 s, 4 s, with room for the pass itself.
    // Each gap is at least its delay; the first one's upper bound rules out a constant.
    assert!(
        (0.9..2.5).contains(&gaps[0]) && gaps[1] >= 1.8 && gaps[2] >= 3.6,
        "retry gaps {gaps:?}"
    );
    let text = serde_json::to_string(&cr.data["status"])?;
    assert!(!text.contains("backend-secret"), "status: {text}");
    for (_, note) in events(&ns, "three").await {
        assert!(!note.contains("backend-secret"), "event: {note}");
    }

    // An edit of the desired state resets the delay: the next converge comes at once.
    backend.lock().fail_put = None;
    let edited = Instant::now();
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "three", "reconcileInterval: 1h", port, "size: 4"),
    )
    .await;
    wait_ready(&ar, &ns, "three").await;
    let last = backend.calls("PUT").last().cloned().expect("a put");
    assert!(
        last.at - edited < Duration::from_secs(3),
        "converged {:?} after the edit",
        last.at - edited
    );

    // Bad values get a generic condition; the package's validation details stay in the log.
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "three", "reconcileInterval: 1h", port, "size: -3"),
    )
    .await;
    let cr = wait_reason(&ar, &ns, "three", "ValidationFailed").await;
    let text = serde_json::to_string(&cr.data["status"])?;
    assert!(!text.contains("secret-validation-detail"), "status: {text}");
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "three", "reconcileInterval: 5x", port, "size: 4"),
    )
    .await;
    let cr = eventually("the bad interval to be refused", || async {
        let cr = get(&ar, Some(&ns), "three").await?;
        let ready = condition(&cr, "Ready")?;
        (ready.1 == "ValidationFailed" && Some(ready.3) == cr.metadata.generation).then_some(cr)
    })
    .await;
    let note = event(&ns, "three", "Invalid").await;
    assert!(note.contains("ValidationFailed"), "{note}");
    assert!(
        events(&ns, "three")
            .await
            .iter()
            .any(|(_, n)| n.contains("spec.reconcileInterval")),
        "the host's own check names the field"
    );
    assert_eq!(condition(&cr, "Ready").map(|c| c.0), Some("False".into()));
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_edit_during_a_converge_never_lets_the_stale_result_mark_the_new_generation_ready()
-> TestResult {
    let backend = Backend::default();
    backend.lock().hold_put = true;
    let port = backend.start().await;
    let group = unique_group("pkg-stale");
    let host = Host::start(&blueprint(&group, port)).await;
    let ns = ControlPlane::shared().namespace("pkg-stale").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;

    // Every version of the CR the API server serves, as (generation, Ready status,
    // Ready's observedGeneration, status.observedGeneration).
    let seen: Seen = Arc::default();
    let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    let watch = {
        let seen = seen.clone();
        let api = api.clone();
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Apply(cr) | watcher::Event::InitApply(cr) = event
                    && let Some(ready) = condition(&cr, "Ready")
                {
                    seen.lock().unwrap_or_else(|p| p.into_inner()).push((
                        cr.metadata.generation.unwrap_or_default(),
                        ready.0,
                        ready.3,
                        cr.data["status"]["observedGeneration"]
                            .as_i64()
                            .unwrap_or_default(),
                    ));
                }
            }
        })
    };

    let started = backend.put_started.notified();
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "four", "reconcileInterval: 1h", port, "size: 1"),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(60), started).await?;
    // The converge of generation 1 is under way: the spec changes.
    backend.lock().hold_put = false;
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "four", "reconcileInterval: 1h", port, "size: 5"),
    )
    .await;
    backend.put_release.notify_one();
    let cr = wait_ready(&ar, &ns, "four").await;
    assert_eq!(cr.metadata.generation, Some(2));
    assert_eq!(
        backend.thing(&format!("{ns}--four")).map(|t| t.size),
        Some(5)
    );
    assert_eq!(backend.calls("PUT").len(), 2);
    watch.abort();
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (generation, ready, ready_gen, status_gen) in &seen {
        if ready == "True" {
            assert_eq!(
                (ready_gen, status_gen),
                (generation, generation),
                "a Ready status that acknowledges another generation: {seen:?}"
            );
        }
    }
    assert!(
        seen.iter().all(|(g, r, ..)| !(*g == 1 && r == "True")),
        "the stale converge of generation 1 was never shown as ready: {seen:?}"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_package_converges_and_deletes_through_the_same_contract() -> TestResult {
    same_contract("inrun_plugin_bucket_python", "py").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_package_converges_and_deletes_through_the_same_contract() -> TestResult {
    same_contract("inrun_test_infra_js", "js").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_package_converges_and_deletes_through_the_same_contract() -> TestResult {
    same_contract("inrun_test_infra_c", "c").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_package_converges_and_deletes_through_the_same_contract() -> TestResult {
    same_contract("inrun_test_infra_go", "go").await
}

/// The package `component` (another language's) converges a Thing `name`, refuses a spec
/// its validation refuses with a generic reason, and deletes what it created.
async fn same_contract(component: &str, name: &str) -> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group(&format!("pkg-{name}"));
    let host = Host::start(&blueprint_for(component, &group, port)).await;
    let ns = ControlPlane::shared()
        .namespace(&format!("pkg-{name}"))
        .await?;
    let ar = resource(&group, "Thing");
    let spec = "reconcileInterval: 1h, deletionPolicy: Delete";
    apply_cr(&ar, &ns, &thing_cr(&group, name, spec, port, "size: 3")).await;
    let cr = wait_ready(&ar, &ns, name).await;
    let id = format!("{ns}--{name}");
    assert_eq!(
        backend.thing(&id),
        Some(Thing {
            size: 3,
            ready: true
        })
    );
    assert_eq!(backend.calls("PUT").len(), 1);
    assert_eq!(backend.calls("PUT")[0].event, "changed");
    assert_eq!(cr.data["status"]["profile"], json!(id));

    // The package's own validation: a generic reason, no detail.
    apply_cr(&ar, &ns, &thing_cr(&group, name, spec, port, "size: 0")).await;
    let cr = wait_reason(&ar, &ns, name, "ValidationFailed").await;
    let text = serde_json::to_string(&cr.data["status"])?;
    assert!(!text.contains("config.size"), "status: {text}");

    delete_and_wait(&ar, &ns, name).await;
    assert_eq!(backend.calls("DELETE").len(), 1);
    assert!(backend.thing(&id).is_none());
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_package_call_in_flight_and_does_not_cancel_it() -> TestResult {
    let backend = Backend::default();
    backend.lock().hold_put = true;
    let port = backend.start().await;
    let group = unique_group("pkg-shutdown");
    let host = Host::start(&blueprint(&group, port)).await;
    let ns = ControlPlane::shared().namespace("pkg-shutdown").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    let started = backend.put_started.notified();
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "five", "reconcileInterval: 1h", port, "size: 2"),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(60), started).await?;

    // Asked to stop while the converge runs: the host waits for it.
    let mut stopping = tokio::spawn(host.stop());
    let early = tokio::time::timeout(Duration::from_secs(2), &mut stopping).await;
    assert!(
        early.is_err(),
        "the host stopped with a package call in flight"
    );
    backend.put_release.notify_one();
    tokio::time::timeout(Duration::from_secs(60), stopping).await??;
    assert_eq!(
        backend.thing(&format!("{ns}--five")).map(|t| t.size),
        Some(2),
        "the converge ran to its end"
    );
    // The host took the converge's answer and finished the pass before it stopped: it
    // observed again and stored Ready. A host that stopped slowly for another reason, or
    // cancelled the call, would have left the CR without it.
    let cr = Api::<DynamicObject>::namespaced_with(client(), &ns, &ar)
        .get("five")
        .await?;
    assert_eq!(
        condition(&cr, "Ready").map(|c| (c.0, c.3)),
        Some(("True".into(), 1)),
        "the pass in flight ran to its end before the host stopped: {:?}",
        cr.data["status"]
    );
    assert_eq!(
        backend.calls("PUT").len(),
        1,
        "converged once, never retried"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_crashed_mid_converge_is_recovered_by_the_next_from_what_the_cr_stores() -> TestResult
{
    let backend = Backend::default();
    backend.lock().hold_put = true;
    let port = backend.start().await;
    let group = unique_group("pkg-crash");
    let text = blueprint(&group, port);
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("pkg-crash").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    let started = backend.put_started.notified();
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "six", "reconcileInterval: 1h", port, "size: 3"),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(60), started).await?;
    // The identity was stored before the converge began; the host dies inside the call.
    let api = Api::<DynamicObject>::namespaced_with(client(), &ns, &ar);
    let before = api.get("six").await?;
    let identity = before.data["status"]["identity"].clone();
    assert_eq!(identity.as_str().map(str::len), Some(64), "{before:?}");
    assert_eq!(
        condition(&before, "Reconciling").map(|c| c.0),
        Some("True".into())
    );
    host.crash().await;
    assert!(
        backend.thing(&format!("{ns}--six")).is_none(),
        "never converged"
    );

    // The next host knows the work only from the CR: it observes, converges once, and
    // finishes with the identity the first one stored.
    backend.lock().hold_put = false;
    let host = Host::start(&text).await;
    let cr = wait_ready(&ar, &ns, "six").await;
    assert_eq!(
        backend.thing(&format!("{ns}--six")).map(|t| t.size),
        Some(3)
    );
    assert_eq!(cr.data["status"]["identity"], identity, "the same identity");
    assert_eq!(
        backend.calls("PUT").len(),
        2,
        "the crashed converge and the one that finished it"
    );
    // A restart with nothing to do observes and converges nothing.
    let gets = backend.calls("GET").len();
    host.stop().await;
    let host = Host::start(&text).await;
    let crd = format!("things.{group}");
    eventually("the next host's pass on the CR to end", || async {
        (reconciles(&host.metrics, &crd) >= 1).then_some(())
    })
    .await;
    assert!(backend.calls("GET").len() > gets, "the next host observed");
    let cr = wait_ready(&ar, &ns, "six").await;
    assert_eq!(
        backend.calls("PUT").len(),
        2,
        "no converge after a clean restart"
    );
    assert_eq!(cr.data["status"]["identity"], identity);
    host.stop().await;
    backend.put_release.notify_one();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_status_schema_keeps_what_the_package_steps_store_in_status() -> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-typed");
    // The Blueprint types its status (a `phase` of its own): the generated CRD keeps the
    // host's fields and the package's stored identity beside it.
    let text = blueprint(&group, port).replace(
        "      kind: Thing\n",
        "      kind: Thing\n      schema: {type: object, properties: {spec: {type: object, x-kubernetes-preserve-unknown-fields: true}, status: {type: object, properties: {phase: {type: string}}}}}\n",
    );
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("pkg-typed").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    let before = apiserver_writes().await;
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "one", "reconcileInterval: 1h", port, "size: 1"),
    )
    .await;
    let cr = wait_ready(&ar, &ns, "one").await;
    let after = apiserver_writes().await;
    let status = &cr.data["status"];
    assert_eq!(status["profile"], json!(format!("{ns}--one")));
    assert_eq!(
        status["boundary"],
        json!(format!("http://127.0.0.1:{port}"))
    );
    assert_eq!(
        status["identity"].as_str().map(str::len),
        Some(64),
        "{status}"
    );
    assert_eq!(backend.calls("PUT").len(), 1, "converged once");
    // Nothing pruned, so nothing written again: the same writes as with an open status.
    let writes = writes_between(&before, &after, &[(&group, "things")]);
    assert_eq!(
        writes,
        [
            ("APPLY things".to_string(), 2),
            ("APPLY things/status".to_string(), 2)
        ]
        .into(),
        "writes per new CR"
    );
    assert_eq!(reconciles(&host.metrics, &format!("things.{group}")), 1);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_cr_is_gated_and_checked_by_namespace_and_rules_before_any_call() -> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-rules");
    let allowed = ControlPlane::shared().namespace("pkg-rules").await?;
    let other = ControlPlane::shared().namespace("pkg-elsewhere").await?;
    // Served only in `allowed`; held until `spec.go`; `spec.config.size` under 10.
    let text = blueprint(&group, port).replace(
        "      kind: Thing\n",
        &format!(
            "      kind: Thing\n      namespaces: {{include: [{allowed}]}}\n      preReconcile: [{{name: go, when: \"{{{{ .spec.go }}}}\", message: waiting for go}}]\n      validation: [{{rule: \"{{{{ .spec.config.size < 10 }}}}\", message: size must be under 10}}]\n"
        ),
    );
    let host = Host::start(&text).await;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    // In a namespace the CRD does not serve: Invalid, and the backend never hears of it.
    apply_cr(
        &ar,
        &other,
        &thing_cr(&group, "away", "go: true", port, "size: 1"),
    )
    .await;
    let cr = wait_reason(&ar, &other, "away", "Invalid").await;
    let (_, _, message, _) = condition(&cr, "Ready").expect("Ready");
    assert!(message.contains(&other), "{message}");
    // Held by the gate until `go`, then converged.
    apply_cr(
        &ar,
        &allowed,
        &thing_cr(&group, "held", "go: false", port, "size: 1"),
    )
    .await;
    let cr = wait_reason(&ar, &allowed, "held", "Gated").await;
    assert_eq!(condition(&cr, "Ready").expect("Ready").2, "waiting for go");
    // Breaking a validation rule: Invalid with the rule's message.
    apply_cr(
        &ar,
        &allowed,
        &thing_cr(&group, "big", "go: true", port, "size: 20"),
    )
    .await;
    let cr = wait_reason(&ar, &allowed, "big", "Invalid").await;
    assert!(
        condition(&cr, "Ready")
            .expect("Ready")
            .2
            .contains("size must be under 10"),
        "{:?}",
        condition(&cr, "Ready")
    );
    assert!(
        backend.calls("PUT").is_empty() && backend.calls("GET").is_empty(),
        "no call for a CR held back"
    );
    patch_cr(&ar, &allowed, "held", json!({"spec": {"go": true}})).await;
    wait_ready(&ar, &allowed, "held").await;
    assert_eq!(
        backend.calls("PUT").len(),
        1,
        "converged once, once let through"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_package_cr_deletes_what_was_created_not_what_its_spec_names_now() -> TestResult
{
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-moved");
    let host = Host::start(&blueprint(&group, port)).await;
    let ns = ControlPlane::shared().namespace("pkg-moved").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    let spec = "deletionPolicy: Delete";
    apply_cr(&ar, &ns, &thing_cr(&group, "one", spec, port, "size: 1")).await;
    wait_ready(&ar, &ns, "one").await;
    // The spec now names another backend (its boundary): refused, nothing converged there.
    let moved = thing_cr(&group, "one", spec, port + 1, "size: 1");
    apply_cr(&ar, &ns, &moved).await;
    wait_reason(&ar, &ns, "one", "IdentityChanged").await;
    // Deleted so: nothing is deleted anywhere, the CR says why and stays.
    let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    api.delete("one", &DeleteParams::default()).await?;
    let note = event(&ns, "one", "DeletionBlocked").await;
    assert!(note.contains("its boundary changed"), "{note}");
    assert!(backend.calls("DELETE").is_empty(), "nothing deleted");
    assert!(
        get(&ar, Some(&ns), "one").await.is_some(),
        "held by its finalizer"
    );
    // Restored: what was created is deleted, and the CR goes.
    apply_cr(&ar, &ns, &thing_cr(&group, "one", spec, port, "size: 1")).await;
    eventually("the CR to be gone", || async {
        get(&ar, Some(&ns), "one").await.is_none().then_some(())
    })
    .await;
    assert_eq!(backend.calls("DELETE").len(), 1);
    assert_eq!(backend.thing(&format!("{ns}--one")), None);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_finalizer_timeout_a_held_package_cr_is_released_and_its_infrastructure_kept()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-timeout");
    let text = blueprint(&group, port).replace(
        "spec:\n  crds:\n",
        "spec:\n  runtime: {finalizers: {timeout: 4s}}\n  crds:\n",
    );
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("pkg-timeout").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "kept", "deletionPolicy: Delete", port, "size: 1"),
    )
    .await;
    wait_ready(&ar, &ns, "kept").await;
    patch_cr(
        &ar,
        &ns,
        "kept",
        json!({"metadata": {"annotations": {"inrun.dev/prevent-destroy": "true"}}}),
    )
    .await;
    let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    api.delete("kept", &DeleteParams::default()).await?;
    // Held by prevent-destroy, then released at the timeout: nothing deleted.
    wait_reason(&ar, &ns, "kept", "DestroyPrevented").await;
    eventually("the CR to be released", || async {
        get(&ar, Some(&ns), "kept").await.is_none().then_some(())
    })
    .await;
    let note = event(&ns, "kept", "FinalizeTimeout").await;
    assert!(note.contains("left in place"), "{note}");
    assert!(backend.calls("DELETE").is_empty());
    assert!(
        backend.thing(&format!("{ns}--kept")).is_some(),
        "the infrastructure stays"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_crs_naming_one_thing_have_one_owner_and_the_other_takes_over_once_it_is_gone()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-lock");
    let host = Host::start(&blueprint(&group, port)).await;
    let ns = ControlPlane::shared().namespace("pkg-lock").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    // Both name the profile `shared`: the same thing on the backend.
    let shared = |name: &str, size: u8| {
        thing_cr(
            &group,
            name,
            "reconcileInterval: 1s",
            port,
            &format!("size: {size}, profile: shared"),
        )
    };
    apply_cr(&ar, &ns, &shared("first", 1)).await;
    let first = wait_ready(&ar, &ns, "first").await;
    apply_cr(&ar, &ns, &shared("second", 3)).await;
    let second = wait_reason(&ar, &ns, "second", "IdentityConflict").await;
    let note = event(&ns, "second", "Invalid").await;
    assert!(
        note.contains(&format!(
            "IdentityConflict: Thing {ns}/first already manages"
        )),
        "{note}"
    );
    // The second made no call that could change the thing, and holds nothing.
    assert!(finalizers(&second).is_empty(), "{second:?}");
    assert!(
        second.data["status"].get("identity").is_none(),
        "{second:?}"
    );
    assert_eq!(
        backend.calls("PUT").len(),
        1,
        "converged once, by the first"
    );
    assert_eq!(backend.thing("shared").map(|t| t.size), Some(1));
    // The lock is a Lease in the host's namespace, held by the first.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client(), support::identity::NAMESPACE);
    let held: Vec<_> = leases
        .list(&kube::api::ListParams::default().labels("inrun.dev/lock=package-identity"))
        .await?
        .items
        .into_iter()
        .filter(|l| {
            l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                == first.metadata.uid.as_deref()
        })
        .collect();
    assert_eq!(held.len(), 1, "one Lease held by the first");

    // The first goes (deletionPolicy Retain: the thing stays): its claim goes with it, and
    // the second, at its next check, claims the thing and converges it.
    delete_and_wait(&ar, &ns, "first").await;
    wait_ready(&ar, &ns, "second").await;
    assert_eq!(backend.thing("shared").map(|t| t.size), Some(3));
    let lease = leases
        .get(&held[0].metadata.name.clone().unwrap_or_default())
        .await?;
    let second = get(&ar, Some(&ns), "second").await.expect("second");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        second.metadata.uid
    );

    // The second goes while no host runs (its finalizer removed by hand): its Lease stays,
    // naming a CR that is gone. After a restart, a third CR naming the thing takes it over;
    // a fourth is refused, the lock having outlived the host that took it.
    host.stop().await;
    patch_cr(
        &ar,
        &ns,
        "second",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    delete_and_wait(&ar, &ns, "second").await;
    let host = Host::start(&blueprint(&group, port)).await;
    apply_cr(&ar, &ns, &shared("third", 2)).await;
    let third = wait_ready(&ar, &ns, "third").await;
    assert_eq!(backend.thing("shared").map(|t| t.size), Some(2));
    let lease = leases
        .get(&held[0].metadata.name.clone().unwrap_or_default())
        .await?;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        third.metadata.uid
    );
    apply_cr(&ar, &ns, &shared("fourth", 4)).await;
    wait_reason(&ar, &ns, "fourth", "IdentityConflict").await;
    assert_eq!(backend.thing("shared").map(|t| t.size), Some(2));
    for name in ["third", "fourth"] {
        delete_and_wait(&ar, &ns, name).await;
    }
    eventually("the Lease to go with its holder", || async {
        leases
            .get_opt(&held[0].metadata.name.clone().unwrap_or_default())
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_reads_the_credentials_the_blueprint_grants_in_its_crs_namespace_and_no_other()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-creds");
    // Granted: key `token` of the Secret `backend` in the CR's namespace; nothing else.
    let text = blueprint(&group, port).replace(
        "            http: {hosts:",
        "            credentials: [{secret: backend, keys: [token]}]\n            http: {hosts:",
    );
    assert!(text.contains("credentials"), "{text}");
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("pkg-creds").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client(), &ns);
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "backend"},
        "stringData": {"token": "s3cr3t-t0ken", "admin": "root-password"},
    }))?;
    secrets.create(&Default::default(), &secret).await?;

    apply_cr(
        &ar,
        &ns,
        &thing_cr(
            &group,
            "granted",
            "reconcileInterval: 1h",
            port,
            "size: 1, token: {secret: backend, key: token}",
        ),
    )
    .await;
    wait_ready(&ar, &ns, "granted").await;
    let puts = backend.calls("PUT");
    assert_eq!(puts.len(), 1);
    assert_eq!(
        puts[0].authorization.as_deref(),
        Some("Bearer s3cr3t-t0ken"),
        "the package sent the credential it read"
    );

    // A key the Blueprint does not grant: the step fails, and neither value nor key
    // reaches the CR.
    apply_cr(
        &ar,
        &ns,
        &thing_cr(
            &group,
            "greedy",
            "reconcileInterval: 1h",
            port,
            "size: 1, token: {secret: backend, key: admin}",
        ),
    )
    .await;
    let cr = wait_reason(&ar, &ns, "greedy", "ObserveFailed").await;
    let shown = serde_json::to_string(&cr.data["status"])?;
    assert!(
        !shown.contains("root-password") && !shown.contains("s3cr3t"),
        "{shown}"
    );
    for (_, note) in events(&ns, "greedy").await {
        assert!(!note.contains("root-password"), "{note}");
    }
    assert!(
        backend
            .calls("GET")
            .iter()
            .all(|c| c.authorization.as_deref() != Some("Bearer root-password")),
        "an ungranted key never reached the backend"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blueprints_package_deadline_is_the_calls_deadline() -> TestResult {
    let backend = Backend::default();
    backend.lock().hold_put = true;
    let port = backend.start().await;
    let group = unique_group("pkg-deadline");
    let text = blueprint(&group, port).replace(
        "        package:\n",
        "        package:\n          limits: {deadline: 2s}\n",
    );
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("pkg-deadline").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &thing_cr(&group, "seven", "reconcileInterval: 1h", port, "size: 1"),
    )
    .await;
    // The converge the backend never answers is cut at the Blueprint's 2 s, not the 30 s
    // a package call gets by default.
    let cr = wait_reason(&ar, &ns, "seven", "ConvergeFailed").await;
    // The CR says what stopped the call: the host's words, not the package's.
    assert_eq!(
        condition(&cr, "Ready").map(|c| c.2),
        Some(
            "converging the infrastructure failed: the call ran past its deadline of 2s (package.limits.deadline)"
                .into()
        )
    );
    let metrics = host.metrics.render();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("inrun_plugin_calls_total{")
                && l.contains("outcome=\"deadline\"")),
        "a converge cut at its deadline: {metrics}"
    );
    // The call lasted the Blueprint's 2 s: one call falls between the histogram's 1 s and
    // 2.5 s bounds (the default deadline would have let it run 30 s).
    let count = |le: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("inrun_plugin_call_duration_seconds_bucket{")
                    && l.contains(&format!("le=\"{le}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(count("2.5") - count("1.0"), 1.0, "{metrics}");
    host.stop().await;
    backend.put_release.notify_waiters();
    Ok(())
}

/// The Blueprint of the tenant `name` (a file of a `--tenants` directory) serving Things of
/// `group` with the test package.
fn tenant_blueprint(name: &str, group: &str, port: u16) -> String {
    blueprint(group, port).replace(
        "metadata: {name: e2e}",
        &format!("metadata: {{name: {name}}}"),
    )
}

/// The package identity Leases in the host's namespace.
fn leases() -> Api<k8s_openapi::api::coordination::v1::Lease> {
    Api::namespaced(client(), support::identity::NAMESPACE)
}

/// The identity Lease `cr` holds, if one does.
async fn held_by(cr: &DynamicObject) -> Option<k8s_openapi::api::coordination::v1::Lease> {
    leases()
        .list(&kube::api::ListParams::default().labels("inrun.dev/lock=package-identity"))
        .await
        .ok()?
        .items
        .into_iter()
        .find(|l| {
            l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == cr.metadata.uid.as_deref()
        })
}

/// A Thing CR `name` of `group` naming the backend thing `shared` at `size`.
fn shared_thing(group: &str, name: &str, port: u16, size: u8) -> String {
    thing_cr(
        group,
        name,
        "reconcileInterval: 1s",
        port,
        &format!("size: {size}, profile: shared"),
    )
}

/// Removes every finalizer of the CRs (`ar`, `name`) and deletes them.
async fn tidy(crs: &[(&ApiResource, &str)], ns: &str) {
    for (ar, name) in crs {
        patch_cr(ar, ns, name, json!({"metadata": {"finalizers": null}})).await;
        delete_and_wait(ar, ns, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_package_cannot_claim_what_anothers_names_and_a_removed_tenants_locks_go()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let (group_a, group_b) = (unique_group("lock-a"), unique_group("lock-b"));
    let dir = tempfile::tempdir()?;
    let (file_a, file_b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    std::fs::write(&file_a, tenant_blueprint("team-a", &group_a, port))?;
    std::fs::write(&file_b, tenant_blueprint("team-b", &group_b, port))?;
    // Each tenant may hold one lock.
    let locks = inrun::runtime::locks::LockPolicy {
        max_per_tenant: 1,
        ..Default::default()
    };
    let options = inrun::fleet::FleetOptions {
        tenants: Some(dir.path().to_path_buf()),
        ..FleetHost::options()
    };
    let host = FleetHost::start_locking(options, &[], locks).await;
    let ns = ControlPlane::shared().namespace("lock-tenants").await?;
    let (a, b) = (resource(&group_a, "Thing"), resource(&group_b, "Thing"));
    served(&a).await;
    served(&b).await;

    // A's package and B's name the same thing (one boundary, one state): A claims it
    // first, and B is not blocked by A's claim.
    apply_cr(&a, &ns, &shared_thing(&group_a, "a-one", port, 1)).await;
    let a_one = wait_ready(&a, &ns, "a-one").await;
    apply_cr(&b, &ns, &shared_thing(&group_b, "b-one", port, 1)).await;
    let b_one = wait_ready(&b, &ns, "b-one").await;
    let (lease_a, lease_b) = (
        held_by(&a_one).await.expect("A's Lease"),
        held_by(&b_one).await.expect("B's Lease"),
    );
    let name_a = lease_a.metadata.name.clone().unwrap_or_default();
    assert_ne!(Some(&name_a), lease_b.metadata.name.as_ref(), "a lock each");
    assert_eq!(
        lease_a.annotations().get("inrun.dev/tenant"),
        Some(&file_a.display().to_string())
    );
    assert!(
        lease_a.labels()["inrun.dev/lock-tenant"].starts_with("h-"),
        "{:?}",
        lease_a.labels()
    );
    assert!(
        lease_a
            .spec
            .as_ref()
            .is_some_and(|s| s.renew_time.is_some() && s.lease_duration_seconds == Some(900)),
        "{lease_a:?}"
    );

    // Past its tenant's cap a CR claims nothing, and says why.
    apply_cr(
        &a,
        &ns,
        &thing_cr(
            &group_a,
            "a-two",
            "reconcileInterval: 1s",
            port,
            "size: 2, profile: other",
        ),
    )
    .await;
    let (status, reason, message, _) = eventually("a-two to fail on the cap", || async {
        let cr = get(&a, Some(&ns), "a-two").await?;
        condition(&cr, "Ready").filter(|c| c.2.contains("--max-tenant-identity-locks"))
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "BudgetExceeded"),
        "{message}"
    );
    assert!(message.contains("hold 1 identity locks"), "{message}");
    assert_eq!(backend.thing("other"), None, "nothing was created for it");

    // Tenant A removed: its CRs are released, and its Lease with them; B's stays.
    std::fs::remove_file(&file_a)?;
    eventually("A's Lease to go with its tenant", || async {
        leases()
            .get_opt(&name_a)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually("a-one to be released", || async {
        let cr = get(&a, Some(&ns), "a-one").await?;
        finalizers(&cr).is_empty().then_some(())
    })
    .await;
    assert_eq!(
        held_by(&b_one).await.and_then(|l| l.metadata.name),
        lease_b.metadata.name,
        "B holds its own"
    );
    wait_ready(&b, &ns, "b-one").await;
    // B's CR goes (Retain): its Lease with it.
    let name_b = lease_b.metadata.name.clone().unwrap_or_default();
    delete_and_wait(&b, &ns, "b-one").await;
    eventually("B's Lease to go with its CR", || async {
        leases()
            .get_opt(&name_b)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    tidy(&[(&a, "a-one"), (&a, "a-two")], &ns).await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boundary_the_operator_shares_has_one_owner_among_its_tenants_and_an_unrenewed_lock_is_taken_over()
-> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let groups: Vec<String> = ["share-a", "share-b", "share-c"]
        .iter()
        .map(|g| unique_group(g))
        .collect();
    let dir = tempfile::tempdir()?;
    let files: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|t| dir.path().join(format!("{t}.yaml")))
        .collect();
    for ((file, group), name) in files
        .iter()
        .zip(&groups)
        .zip(["team-a", "team-b", "team-c"])
    {
        std::fs::write(file, tenant_blueprint(name, group, port))?;
    }
    // The operator shares the backend between A and B (not C); Leases last 3 s unrenewed.
    let boundary = format!("http://127.0.0.1:{port}");
    let duration = Duration::from_secs(3);
    let locks = inrun::runtime::locks::LockPolicy {
        shared: vec![
            format!("{boundary}={},{}", files[0].display(), files[1].display())
                .parse()
                .expect("a shared boundary"),
        ],
        duration,
        ..Default::default()
    };
    let options = inrun::fleet::FleetOptions {
        tenants: Some(dir.path().to_path_buf()),
        on_removal: inrun::fleet::release::OnRemoval::Keep,
        ..FleetHost::options()
    };
    let host = FleetHost::start_locking(options, &[], locks).await;
    let ns = ControlPlane::shared().namespace("lock-shared").await?;
    let ars: Vec<ApiResource> = groups.iter().map(|g| resource(g, "Thing")).collect();
    for ar in &ars {
        served(ar).await;
    }
    let (a, b, c) = (&ars[0], &ars[1], &ars[2]);

    // A claims the thing; B, sharing the boundary, is refused while A holds it, and told
    // nothing of A's CR; C, not listed, is refused outright.
    apply_cr(a, &ns, &shared_thing(&groups[0], "a-one", port, 1)).await;
    let a_one = wait_ready(a, &ns, "a-one").await;
    let lease = held_by(&a_one).await.expect("A's Lease");
    let name = lease.metadata.name.clone().unwrap_or_default();
    let identity = a_one.data["status"]["identity"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        name,
        inrun::runtime::locks::lease_name(None, &boundary, identity),
        "host-wide"
    );
    apply_cr(b, &ns, &shared_thing(&groups[1], "b-one", port, 2)).await;
    wait_reason(b, &ns, "b-one", "IdentityConflict").await;
    let note = event(&ns, "b-one", "Invalid").await;
    assert!(
        note.contains("IdentityConflict: a CR of another tenant already manages"),
        "{note}"
    );
    apply_cr(c, &ns, &shared_thing(&groups[2], "c-one", port, 3)).await;
    wait_reason(c, &ns, "c-one", "IdentityConflict").await;
    let note = event(&ns, "c-one", "Invalid").await;
    assert!(
        note.contains("shares this boundary only among the tenants it lists"),
        "{note}"
    );

    // While A is served its host renews the Lease (every second), so B stays refused for
    // longer than the Lease's duration.
    let renewed = |l: &k8s_openapi::api::coordination::v1::Lease| {
        l.spec.as_ref().and_then(|s| s.renew_time.clone())
    };
    let mut seen = vec![renewed(&lease)];
    while seen.len() < 5 {
        let next = eventually("a renewal", || async {
            let now = renewed(&leases().get(&name).await.ok()?);
            (!seen.contains(&now)).then_some(now)
        })
        .await;
        seen.push(next);
    }
    let b_one = get(b, Some(&ns), "b-one").await.expect("b-one");
    assert_eq!(
        condition(&b_one, "Ready").map(|c| c.1).as_deref(),
        Some("IdentityConflict")
    );
    assert_eq!(
        held_by(&a_one).await.and_then(|l| l.metadata.name),
        Some(name.clone())
    );
    assert_eq!(backend.thing("shared").map(|t| t.size), Some(1));

    // A's tenant removed, its CRs kept (`--on-tenant-removal keep`): its Lease stays, no
    // longer renewed. B cannot read A's CR; it takes the Lease over once it has stood
    // unrenewed for its duration, not before, and converges the thing.
    std::fs::remove_file(&files[0])?;
    let source = inrun::fleet::TenantSource::File(files[0].clone());
    eventually("tenant A to go", || async {
        host.tenant(&source).is_none().then_some(())
    })
    .await;
    let last = renewed(&leases().get(&name).await?).expect("a renewal");
    let b_one = wait_ready(b, &ns, "b-one").await;
    let taken = leases().get(&name).await?;
    let spec = taken.spec.clone().unwrap_or_default();
    assert_eq!(spec.holder_identity, b_one.metadata.uid);
    let acquired = spec.acquire_time.expect("acquired").0;
    assert!(
        acquired.duration_since(last.0) >= k8s_openapi::jiff::SignedDuration::from_secs(3),
        "taken over at {acquired}, its last renewal at {}",
        last.0
    );
    assert_eq!(backend.thing("shared").map(|t| t.size), Some(2));
    let c_one = get(c, Some(&ns), "c-one").await.expect("c-one");
    assert_eq!(
        condition(&c_one, "Ready").map(|c| c.1).as_deref(),
        Some("IdentityConflict"),
        "C is still refused"
    );
    // B's CR goes while its host runs: the Lease with it.
    delete_and_wait(b, &ns, "b-one").await;
    eventually("the Lease to go with B's CR", || async {
        leases().get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    tidy(&[(a, "a-one"), (c, "c-one")], &ns).await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_only_observes_a_package_and_names_the_crs_it_would_converge() -> TestResult {
    let backend = Backend::default();
    let port = backend.start().await;
    let group = unique_group("pkg-plan");
    let text = blueprint(&group, port);
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("pkg-plan").await?;
    let ar = resource(&group, "Thing");
    served(&ar).await;
    for (name, size) in [("same", 2), ("drifted", 3)] {
        let config = format!("size: {size}");
        let cr = thing_cr(&group, name, "reconcileInterval: 1h", port, &config);
        apply_cr(&ar, &ns, &cr).await;
    }
    for name in ["same", "drifted"] {
        wait_ready(&ar, &ns, name).await;
    }
    host.stop().await;
    // Someone resizes one thing behind the host's back.
    backend.set(
        &format!("{ns}--drifted"),
        Thing {
            size: 9,
            ready: true,
        },
    );
    let (puts, deletes) = (backend.calls("PUT").len(), backend.calls("DELETE").len());
    let gets = backend.calls("GET").len();

    // The plan, as the ServiceAccount `inrun generate rbac` makes for the Blueprint, of
    // the CRD whatever the change (there is none: this is the drift a plan shows).
    let dir = tempfile::tempdir()?;
    let current = dir.path().join("current.yaml");
    std::fs::write(&current, &text)?;
    let identity = support::identity::Identity::for_blueprints(
        &[inrun::blueprint::load(&current)?],
        &support::identity::Identity::options(),
    )
    .await;
    let kubeconfig = identity.kubeconfig(dir.path());
    let path = current.to_str().unwrap_or_default();
    let crd = format!("things.{group}");
    let args = [
        "--current",
        path,
        "--blueprint",
        path,
        "--crd",
        &crd,
        "-n",
        &ns,
    ];
    let (code, report) = support::plan::run(&kubeconfig, &args);
    assert_eq!(code, 2, "{report:#?}");
    let same = support::plan::of(&report, "same");
    assert_eq!(same["verdict"], "unchanged", "{same:#}");
    let drifted = support::plan::of(&report, "drifted");
    assert_eq!(drifted["verdict"], "changes", "{drifted:#}");
    assert_eq!(drifted["wouldRun"], json!(["converge"]), "{drifted:#}");
    // Observed only: each CR's thing read (by both versions), nothing changed on it.
    assert_eq!(
        backend.calls("PUT").len(),
        puts,
        "a plan converged something"
    );
    assert_eq!(
        backend.calls("DELETE").len(),
        deletes,
        "a plan deleted something"
    );
    assert!(
        backend.calls("GET").len() >= gets + 2,
        "each thing observed"
    );
    assert_eq!(
        backend.thing(&format!("{ns}--drifted")).map(|t| t.size),
        Some(9),
        "the drifted thing as it was"
    );
    Ok(())
}
