//! Serve targets end to end: CRs of one CRD pick a target by annotation and get that
//! target's reconciler, children and pruning; an unknown target is an Invalid CR. The
//! templates target also makes an `http` external call.

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use inrun_testenv::{ControlPlane, TestResult};
use kube::api::Api;
use serde_json::{Value, json};
use support::*;

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Value>>>);

async fn remote(State(seen): State<Seen>, axum::Json(req): axum::Json<Value>) -> axum::Json<Value> {
    seen.0.lock().expect("lock").push(req.clone());
    let name = req["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    axum::Json(json!({
        "result": "ok",
        "status": {"via": "remote"},
        "resources": [{
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("{name}-svc"), "annotations": {"target": req["target"]}},
            "spec": {"ports": [{"port": 80}]}
        }]
    }))
}

async fn info(headers: HeaderMap, uri: axum::http::Uri) -> axum::Json<Value> {
    let team = headers
        .get("x-team")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("nobody");
    let auth = headers
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let app = uri
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("app=")))
        .unwrap_or_default();
    axum::Json(json!({"greeting": format!("hello {app} from {team}"),
                      "authorized": auth == "Bearer info-token"}))
}

async fn server() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/reconcile", axum::routing::post(remote))
        .route("/info", axum::routing::get(info))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), seen)
}

fn blueprint(group: &str, base: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e-targets}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: App
      reconcile:
        onReconcile:
          - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: "{{{{ .metadata.name }}}}-default"}}}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
      serve:
        targets:
          - name: templates
            reconcile:
              external:
                - name: info
                  http:
                    url: "{base}/info?app={{{{ .metadata.name }}}}"
                    headers: {{X-Team: "{{{{ .spec.team }}}}"}}
                    secretRef: {{name: info, key: token}}
              onReconcile:
                - apiVersion: v1
                  kind: ConfigMap
                  metadata: {{name: "{{{{ .metadata.name }}}}-tpl"}}
                  data:
                    greeting: "{{{{ .external.info.greeting }}}}"
                    target: "{{{{ target }}}}"
                    authorized: "{{% if .external.info.authorized %}}yes{{% else %}}no{{% endif %}}"
                - |
                  {{% if .spec.extra %}}
                  apiVersion: v1
                  kind: ConfigMap
                  metadata: {{name: "{{{{ .metadata.name }}}}-extra"}}
                  {{% endif %}}
              managedResources:
                - {{apiVersion: v1, kind: ConfigMap}}
              prune: {{enabled: true}}
          - name: remote
            reconcile:
              default: false
              remote: {{endpoint: "{base}/reconcile"}}
              managedResources:
                - {{apiVersion: v1, kind: Service}}
              prune: {{enabled: true}}
"#
    )
}

fn app(group: &str, name: &str, target: &str, extra: bool) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: App\nmetadata: {{name: {name}, annotations: {{inrun.dev/target: {target}}}}}\nspec: {{team: payments, extra: {extra}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crs_on_two_targets_get_their_own_reconciler_children_and_pruning() -> TestResult {
    let (base, seen) = server().await;
    let group = unique_group("targets");
    let ns = ControlPlane::shared().namespace("targets").await?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client(), &ns);
    secrets
        .patch(
            "info",
            &kube::api::PatchParams::apply("e2e-test").force(),
            &kube::api::Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "info"}, "stringData": {"token": "info-token"}})),
        )
        .await?;
    let host = Host::start(&blueprint(&group, &base)).await;
    let ar = resource(&group, "App");
    served(&ar).await;

    apply_cr(&ar, &ns, &app(&group, "a", "templates", true)).await;
    apply_cr(&ar, &ns, &app(&group, "b", "remote", false)).await;

    // Templates target: its templates, with the http external call's result.
    let tpl = eventually("a's templates ConfigMap", || {
        get(configmaps(), Some(&ns), "a-tpl")
    })
    .await;
    assert_eq!(tpl.data["data"]["greeting"], "hello a from payments");
    assert_eq!(tpl.data["data"]["target"], "templates");
    assert_eq!(tpl.data["data"]["authorized"], "yes");
    eventually("a's extra ConfigMap", || {
        get(configmaps(), Some(&ns), "a-extra")
    })
    .await;
    // Remote target: the remote reconciler, told its target.
    let svc = eventually("b's Service", || get(services(), Some(&ns), "b-svc")).await;
    assert_eq!(
        svc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("target"))
            .map(String::as_str),
        Some("remote")
    );
    let requests = seen.0.lock().expect("lock").clone();
    assert!(requests.iter().all(|r| r["target"] == "remote"));
    assert!(requests.iter().all(|r| r["key"] == format!("{ns}/b")));
    // Neither got the CRD's own reconcile block, nor the other target's children.
    for missing in ["a-default", "b-default", "b-tpl"] {
        assert!(
            get(configmaps(), Some(&ns), missing).await.is_none(),
            "{missing}"
        );
    }
    assert!(get(services(), Some(&ns), "a-svc").await.is_none());

    // Pruning within the templates target: a child no longer rendered goes.
    apply_cr(&ar, &ns, &app(&group, "a", "templates", false)).await;
    eventually("a's extra ConfigMap to be pruned", || async {
        get(configmaps(), Some(&ns), "a-extra")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // Moving a to the remote target: the Service appears; its ConfigMap stays, because
    // ConfigMaps are not in the remote target's managedResources.
    apply_cr(&ar, &ns, &app(&group, "a", "remote", false)).await;
    eventually("a's Service", || get(services(), Some(&ns), "a-svc")).await;
    // Status is written after pruning in the same pass: once it shows the remote
    // reconciler, that pass's prune is over.
    eventually("a's status from the remote reconciler", || async {
        let cr = get(&ar, Some(&ns), "a").await?;
        (cr.data["status"]["via"] == "remote").then_some(())
    })
    .await;
    assert!(get(configmaps(), Some(&ns), "a-tpl").await.is_some());

    // An unknown target is an Invalid CR.
    apply_cr(&ar, &ns, &app(&group, "c", "nope", false)).await;
    let note = event(&ns, "c", "Invalid").await;
    assert!(note.contains("unknown serve target \"nope\""), "{note}");
    let c = eventually("c's Invalid condition", || async {
        let c = get(&ar, Some(&ns), "c").await?;
        (reconciled(&c)?.1 == "Invalid").then_some(c)
    })
    .await;
    assert!(reconciled(&c).is_some_and(|r| r.2.contains("templates, remote")));
    host.stop().await;
    Ok(())
}
