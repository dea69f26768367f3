//! `inrun render` and `inrun run` are one pass: the same CR, rendered offline and
//! reconciled by the running host on a real kube-apiserver, gives the same resources,
//! status, labels and annotations — for every reconciler kind, each behind a serve target.

mod support;

use std::sync::Arc;

use axum::Router;
use inrun::assemble::{Assembly, Services};
use inrun::render::{RenderInput, render};
use inrun::secrets::KubeSecrets;
use inrun::wasm::{Engine, EngineSettings};
use inrun_testenv::{ControlPlane, TestResult};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::*;

/// A remote reconciler: one ConfigMap, a status field, a label.
async fn remote(axum::Json(req): axum::Json<Value>) -> axum::Json<Value> {
    let name = req["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    axum::Json(json!({
        "result": "ok",
        "status": {"remote": "yes", "target": req["target"]},
        "labels": {"example.com/via": "remote"},
        "resources": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-remote")},
            "data": {"image": req["object"]["spec"]["image"]}
        }]
    }))
}

async fn endpoint() -> String {
    let app = Router::new().route("/reconcile", axum::routing::post(remote));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/reconcile")
}

/// Declarative by default; `hooks`, `constructor` and `remote` serve targets.
fn blueprint(group: &str, endpoint: &str) -> String {
    let templates = r#"
        onReconcile:
          - type: deployment
            fields:
              image: "{{ .spec.image }}"
              replicas: "{{ .spec.replicas | default(1) }}"
          - type: service
            fields:
              targetPort: 8080
        managedResources:
          - {apiVersion: apps/v1, kind: Deployment}
          - {apiVersion: v1, kind: Service}"#;
    let indented = templates.replace("\n        ", "\n              ");
    let hooks = plugin("inrun_plugin_labels_hooks");
    let webapp = plugin("inrun_plugin_webapp");
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: parity}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      emit:
        status:
          image: "{{{{ .spec.image }}}}"
          servedBy: "{{{{ target }}}}"
      reconcile:{templates}
      serve:
        targets:
          - name: hooks
            reconcile:{indented}
              hooks:
                - {{location: {hooks}, function: add-labels}}
                - {{location: {hooks}, function: annotate}}
          - name: constructor
            reconcile:
              default: false
              constructor: {{location: {webapp}}}
              managedResources:
                - {{apiVersion: apps/v1, kind: Deployment}}
                - {{apiVersion: v1, kind: Service}}
          - name: remote
            reconcile:
              default: false
              remote: {{endpoint: "{endpoint}"}}
              managedResources:
                - {{apiVersion: v1, kind: ConfigMap}}
"#
    )
}

/// Whether every field of `want` is in `have` with the same value (objects compared key by
/// key; the server adds defaults, owner labels and references, managed fields).
fn within(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| within(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| within(a, b))
        }
        (Value::Number(w), Value::String(h)) | (Value::String(h), Value::Number(w)) => {
            w.to_string() == *h
        }
        _ => want == have,
    }
}

fn resource_of(r: &Value) -> ApiResource {
    let api_version = r["apiVersion"].as_str().unwrap_or_default();
    let kind = r["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

#[tokio::test]
async fn render_and_run_agree_for_every_reconciler_kind_and_serve_target() -> TestResult {
    let group = unique_group("parity");
    let ar = resource(&group, "WebApp");
    let text = blueprint(&group, &endpoint().await);
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("parity").await?;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blueprint.yaml");
    std::fs::write(&path, &text)?;
    let engine = Engine::new(EngineSettings {
        pooling: false,
        ..EngineSettings::default()
    })?;
    let services = Services::new(Arc::new(KubeSecrets::new(client())));
    let assembly = Assembly::load_with(&path, &engine, &services).await?;

    for target in ["", "hooks", "constructor", "remote"] {
        let name = if target.is_empty() {
            "plain".to_string()
        } else {
            target.to_string()
        };
        let mut cr = json!({
            "apiVersion": ar.api_version, "kind": "WebApp",
            "metadata": {"name": name, "namespace": ns, "labels": {"team": "shop"}},
            "spec": {"image": "nginx:1.27", "replicas": 2}
        });
        if !target.is_empty() {
            cr["metadata"]["annotations"] = json!({"inrun.dev/target": target});
        }
        let input = RenderInput {
            object: cr.clone(),
            observed: None,
            now: None,
        };
        let mut offline = render(&assembly, input, None, false).await?;
        // Offline the Deployment is not observed (its state Unknown); children's states as
        // the host judges them are compared in e2e_ready, with `--observed`.
        offline.status.remove("resources");
        assert!(!offline.resources.is_empty(), "{target}: nothing rendered");
        apply_cr(&ar, &ns, &cr.to_string()).await;
        let live = eventually(&format!("{name} Ready"), || async {
            let live = get(&ar, Some(&ns), &name).await?;
            (reconciled(&live)?.0 == "True").then_some(live)
        })
        .await;
        let live = serde_json::to_value(&live)?;

        let status = Value::Object(offline.status.clone());
        assert!(
            within(&status, &live["status"]),
            "{target}: status\nrender: {status}\nrun: {}",
            live["status"]
        );
        assert_eq!(
            offline.status.get("servedBy"),
            live["status"].get("servedBy"),
            "{target}: emit.status sees the target in both"
        );
        for (k, v) in &offline.labels {
            assert_eq!(
                live["metadata"]["labels"][k],
                json!(v),
                "{target}: label {k}"
            );
        }
        for (k, v) in &offline.annotations {
            assert_eq!(
                live["metadata"]["annotations"][k],
                json!(v),
                "{target}: annotation {k}"
            );
        }
        for r in &offline.resources {
            let child_name = r["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let child = get(resource_of(r), Some(&ns), &child_name)
                .await
                .unwrap_or_else(|| panic!("{target}: {} {child_name} was not applied", r["kind"]));
            let child = serde_json::to_value(&child)?;
            assert!(
                within(r, &child),
                "{target}: {child_name}\nrender: {r}\nrun: {child}"
            );
        }
    }
    host.stop().await;
    Ok(())
}
