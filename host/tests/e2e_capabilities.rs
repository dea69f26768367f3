//! Plugin capabilities end to end: a constructor granted ConfigMap reads gets them from the
//! host's watch cache and is refused any other kind or namespace; a constructor granted one
//! loopback host reaches it and nothing else. A refusal fails only that CR's reconcile.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use support::*;

/// A CR of `kind` in `group` with `spec` (YAML flow text).
fn cr(group: &str, kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    )
}

/// Creates or updates the ConfigMap `name` in `ns` with `data` and `labels`.
async fn put_config_map(ns: &str, name: &str, data: serde_json::Value, labels: serde_json::Value) {
    let api: Api<ConfigMap> = Api::namespaced(client(), ns);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": data});
    api.patch(
        name,
        &PatchParams::apply("e2e-test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .expect("apply config map");
}

/// The CR's Ready condition once it is False, with its message.
async fn failed_with(ar: &kube::discovery::ApiResource, ns: &str, name: &str) -> String {
    eventually(&format!("{name} to fail"), || async {
        let (status, reason, message) = reconciled(&get(ar, Some(ns), name).await?)?;
        (status == "False" && reason == "ReconcileError").then_some(message)
    })
    .await
}

fn reader_blueprint(group: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e-capabilities}}
spec:
  runtime:
    backoff: {{base: 1s, max: 5s}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Reader
      reconcile:
        default: false
        constructor:
          location: "{location}"
          capabilities:
            cluster:
              read:
                - {{apiVersion: v1, kind: ConfigMap}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
"#,
        location = plugin("inrun_test_reader"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reads_granted_config_maps_and_is_refused_other_kinds_and_namespaces() -> TestResult
{
    let group = unique_group("caps_read");
    let ns = ControlPlane::shared().namespace("caps-read").await?;
    let other = ControlPlane::shared().namespace("caps-other").await?;
    put_config_map(
        &ns,
        "settings",
        json!({"color": "teal"}),
        json!({"app": "caps"}),
    )
    .await;
    put_config_map(&ns, "unrelated", json!({}), json!({"app": "else"})).await;
    put_config_map(&other, "settings", json!({"color": "red"}), json!({})).await;
    let host = Host::start(&reader_blueprint(&group)).await;
    let ar = resource(&group, "Reader");

    // A kind the grant does not list fails that CR, naming the kind.
    apply_cr(
        &ar,
        &ns,
        &cr(
            &group,
            "Reader",
            "secretive",
            "{configMap: settings, key: color, read: {apiVersion: v1, kind: Secret, name: anything}}",
        ),
    )
    .await;
    let note = event(&ns, "secretive", "ReconcileError").await;
    assert!(
        note.contains("reading Secret (v1) is not granted to plugin"),
        "{note}"
    );
    let message = failed_with(&ar, &ns, "secretive").await;
    assert!(message.contains("not granted"), "{message}");

    // So does a namespace besides the CR's own.
    apply_cr(
        &ar,
        &ns,
        &cr(
            &group,
            "Reader",
            "elsewhere",
            &format!("{{configMap: settings, key: color, namespace: {other}}}"),
        ),
    )
    .await;
    let note = event(&ns, "elsewhere", "ReconcileError").await;
    assert!(
        note.contains(&format!(
            "reading ConfigMap (v1) in namespace {other} is not granted"
        )),
        "{note}"
    );

    // A CR of the same CRD that stays within the grant is reconciled: get and list.
    apply_cr(
        &ar,
        &ns,
        &cr(
            &group,
            "Reader",
            "reader",
            "{configMap: settings, key: color, selector: 'app=caps'}",
        ),
    )
    .await;
    let copy = eventually("the child copying the value", || {
        get(configmaps(), Some(&ns), "reader-copy")
    })
    .await;
    assert_eq!(copy.data["data"]["value"], "teal");
    let done = eventually("the reader's status", || async {
        let cr = get(&ar, Some(&ns), "reader").await?;
        (cr.data["status"]["value"] == "teal").then_some(cr)
    })
    .await;
    assert_eq!(done.data["status"]["found"], true);
    assert_eq!(done.data["status"]["matched"], 1, "only app=caps matches");

    // The watch cache follows changes: a later pass sees the new value.
    put_config_map(
        &ns,
        "settings",
        json!({"color": "coral"}),
        json!({"app": "caps"}),
    )
    .await;
    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    let nudges = AtomicU32::new(0);
    eventually("the new value", || async {
        let cr = get(&ar, Some(&ns), "reader").await?;
        if cr.data["status"]["value"] == "coral" {
            return Some(());
        }
        let n = nudges.fetch_add(1, Ordering::Relaxed);
        let poke = json!({"metadata": {"annotations": {"e2e/nudge": n.to_string()}}});
        crs.patch("reader", &PatchParams::default(), &Patch::Merge(&poke))
            .await
            .ok()?;
        None
    })
    .await;
    host.stop().await;
    Ok(())
}

/// Requests one test server saw.
#[derive(Clone, Default)]
struct Hits(Arc<AtomicUsize>);

async fn answer(State(hits): State<Hits>, uri: axum::http::Uri, headers: HeaderMap) -> Response {
    hits.0.fetch_add(1, Ordering::Relaxed);
    match uri.path() {
        "/hello" => {
            let cr = headers
                .get("x-inrun-cr")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?")
                .to_string();
            (
                [(header::CONTENT_TYPE, "text/plain")],
                format!("hello, {cr}"),
            )
                .into_response()
        }
        "/big" => "x".repeat(4096).into_response(),
        "/moved" => (
            StatusCode::FOUND,
            [(header::LOCATION, "http://127.0.0.1:1/elsewhere")],
        )
            .into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A server on 127.0.0.1; its address and what it saw.
async fn server() -> (std::net::SocketAddr, Hits) {
    let hits = Hits::default();
    let app = Router::new().fallback(answer).with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, hits)
}

fn fetcher_blueprint(group: &str, allowed: std::net::SocketAddr) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e-capabilities}}
spec:
  runtime:
    backoff: {{base: 1s, max: 5s}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Fetcher
      reconcile:
        default: false
        constructor:
          location: "{location}"
          capabilities:
            http:
              hosts: ["{allowed}"]
              timeout: 2s
              maxResponseSize: 1Ki
"#,
        location = plugin("inrun_test_fetcher"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reaches_its_granted_host_and_no_other() -> TestResult {
    let group = unique_group("caps_http");
    let ns = ControlPlane::shared().namespace("caps-http").await?;
    let (allowed, _) = server().await;
    let (other, other_hits) = server().await;
    let host = Host::start(&fetcher_blueprint(&group, allowed)).await;
    let ar = resource(&group, "Fetcher");
    let fetch = |name: &str, url: String| cr(&group, "Fetcher", name, &format!("{{url: '{url}'}}"));

    apply_cr(&ar, &ns, &fetch("refused", format!("http://{other}/hello"))).await;
    apply_cr(&ar, &ns, &fetch("big", format!("http://{allowed}/big"))).await;
    apply_cr(&ar, &ns, &fetch("moved", format!("http://{allowed}/moved"))).await;
    apply_cr(
        &ar,
        &ns,
        &fetch("allowed", format!("http://{allowed}/hello")),
    )
    .await;

    let done = eventually("the fetched answer in status", || async {
        let cr = get(&ar, Some(&ns), "allowed").await?;
        (cr.data["status"]["code"] == 200).then_some(cr)
    })
    .await;
    assert_eq!(done.data["status"]["body"], "hello, allowed");
    assert_eq!(done.data["status"]["contentType"], "text/plain");

    // Another loopback port is refused before any connection is made.
    let note = event(&ns, "refused", "ReconcileError").await;
    assert!(
        note.contains(&format!("HTTP to {other} is not granted to plugin")),
        "{note}"
    );
    assert_eq!(
        other_hits.0.load(Ordering::Relaxed),
        0,
        "the other server saw nothing"
    );

    // A body beyond maxResponseSize fails the call; a redirect is returned, not followed.
    let note = event(&ns, "big", "ReconcileError").await;
    assert!(
        note.contains("larger than the grant's maxResponseSize"),
        "{note}"
    );
    let moved = eventually("the redirect in status", || async {
        let cr = get(&ar, Some(&ns), "moved").await?;
        cr.data["status"]["code"].as_u64()
    })
    .await;
    assert_eq!(moved, 302);
    host.stop().await;
    Ok(())
}
