//! End to end on a real kube-apiserver: `Ready` means ready. No controller-manager runs
//! here, so the tests write a child's status through the status subresource, exactly as
//! its controller would, and the CR follows: `Progressing` naming the child until it is
//! rolled out, then `Ready=True` without any spec change — what `kubectl wait` sees too.
//! A `readyWhen` rule replaces a kind's rules; `inrun render --observed` says the same as
//! the running host for the same inputs.
//!
//! The tests here take turns: the API server's write counters are process-wide.

mod support;

use std::process::{Command, Stdio};

use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::*;

/// One test at a time: the write counts are read from the API server's metrics, which
/// count every test's writes, so no other test may write while one counts.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Blueprint whose `Shop` gets a Deployment of `spec.replicas` and a ConfigMap whose
/// readiness is `ready_when` (if any).
fn blueprint(group: &str, ready_when: Option<&str>) -> String {
    let rule = ready_when
        .map(|r| format!(", readyWhen: {}", json!(r)))
        .unwrap_or_default();
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: ready}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Shop
      reconcile:
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap{rule}}}
          - {{apiVersion: apps/v1, kind: Deployment}}
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-config"}}
            data: {{owner: "{{{{ .metadata.name }}}}"}}
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
            spec:
              replicas: "{{{{ .spec.replicas }}}}"
              selector: {{matchLabels: {{app: "{{{{ .metadata.name }}}}"}}}}
              template:
                metadata: {{labels: {{app: "{{{{ .metadata.name }}}}"}}}}
                spec:
                  containers: [{{name: app, image: "registry.invalid/shop:1"}}]
"#
    )
}

async fn create(ar: &ApiResource, ns: &str, name: &str) -> DynamicObject {
    apply_cr(
        ar,
        ns,
        &json!({"apiVersion": ar.api_version, "kind": ar.kind,
                "metadata": {"name": name}, "spec": {"replicas": 2}})
        .to_string(),
    )
    .await
}

/// Waits until the CR's `Ready` condition is `status` with `reason`; returns the CR.
async fn until(
    ar: &ApiResource,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> DynamicObject {
    eventually(
        &format!("{ns}/{name} Ready={status} ({reason})"),
        || async {
            let cr = get(ar, Some(ns), name).await?;
            let (s, r, _) = ready(&cr)?;
            (s == status && r == reason).then_some(cr)
        },
    )
    .await
}

fn counted(group: &str) -> Vec<(&str, &'static str)> {
    vec![
        (group, "shops"),
        ("", "configmaps"),
        ("apps", "deployments"),
        ("events.k8s.io", "events"),
        ("", "events"),
    ]
}

#[tokio::test]
async fn a_cr_is_ready_only_once_its_deployment_is_available_and_kubectl_wait_agrees() -> TestResult
{
    let _turn = TURN.lock().await;
    let group = unique_group("deployment-ready");
    let crd = format!("shops.{group}");
    let ar = resource(&group, "Shop");
    let host = Host::start(&blueprint(&group, None)).await;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("ready").await?;
    served(&ar).await;
    create(&ar, &ns, "shop").await;

    // Applied, but nothing runs yet: reconciled, not ready, and why.
    let cr = until(&ar, &ns, "shop", "False", "Progressing").await;
    assert_eq!(
        reconciled(&cr).map(|r| (r.0, r.1)),
        Some(("True".into(), "Reconciled".into()))
    );
    assert_eq!(
        ready(&cr).expect("Ready").2,
        "Deployment shop: 0/2 replicas updated"
    );
    assert_eq!(
        cr.data["status"]["resources"],
        json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "shop-config", "state": "Current"},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop", "state": "InProgress",
             "message": "0/2 replicas updated"}
        ])
    );
    for c in cr.data["status"]["conditions"]
        .as_array()
        .expect("conditions")
    {
        assert_eq!(c["observedGeneration"], 1, "{c}");
    }

    // `kubectl wait` started now must not return before the Deployment is available.
    let mut wait = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .args(["wait", "--for=condition=Ready", "--timeout=120s", "-n", &ns])
        .arg(format!("{crd}/shop"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;

    // Rolled out, none available: still Progressing, with the new reason in the message.
    roll_out(&ns, "shop", 0).await;
    eventually("the message to follow the Deployment", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        (ready(&cr)?.2 == "Deployment shop: 0/2 replicas available").then_some(())
    })
    .await;
    assert!(
        wait.try_wait()?.is_none(),
        "kubectl wait returned while the Deployment was unavailable"
    );

    // Available: Ready without any spec change, for one status write and one event.
    let reconciles_before = reconciles(&host.metrics, &crd);
    let before = apiserver_writes().await;
    roll_out(&ns, "shop", 2).await;
    let cr = until(&ar, &ns, "shop", "True", "Ready").await;
    assert_eq!(ready(&cr).expect("Ready").2, "all 2 resource(s) ready");
    assert_eq!(cr.metadata.generation, Some(1), "no spec change");
    assert_eq!(cr.data["status"]["resources"][1]["state"], "Current");
    let note = event(&ns, "shop", "Ready").await;
    assert_eq!(note, "all 2 resource(s) ready");
    let out = wait.wait_with_output()?;
    assert!(
        out.status.success(),
        "kubectl wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("the pass the rollout woke to end", || async {
        (reconciles(&host.metrics, &crd) > reconciles_before).then_some(())
    })
    .await;
    let after = apiserver_writes().await;
    let writes = writes_between(&before, &after, &counted(&group));
    assert_writes(
        &writes,
        &[
            // The test's, as the Deployment's controller.
            ("PATCH deployments/status", 1),
            // The host's: the status, and the event saying so. No child is written again.
            ("APPLY shops/status", 1),
            ("POST events", 1),
        ],
    )
    .await;
    assert_eq!(
        reconciles(&host.metrics, &crd) - reconciles_before,
        1,
        "one pass for the child's change"
    );

    // A pod lost: the CR follows back to Progressing.
    roll_out(&ns, "shop", 1).await;
    let cr = until(&ar, &ns, "shop", "False", "Progressing").await;
    assert_eq!(
        ready(&cr).expect("Ready").2,
        "Deployment shop: 1/2 replicas available"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_ready_when_rule_decides_for_its_kind_and_render_agrees_with_the_host() -> TestResult {
    let _turn = TURN.lock().await;
    let group = unique_group("ready-when");
    let ar = resource(&group, "Shop");
    let text = blueprint(&group, Some("{{ .data.phase == 'Running' }}"));
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("ready-when").await?;
    served(&ar).await;
    create(&ar, &ns, "shop").await;
    roll_out_when_there(&ns, "shop").await;

    // The Deployment is available; the ConfigMap's rule is what holds the CR back. (The
    // ConfigMap is the first child, so `Ready` names it even while the host has not yet
    // seen the roll-out: wait for the Deployment's own state too.)
    let cr = eventually("the ConfigMap to be named", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        let deployment_current = cr.data["status"]["resources"]
            .as_array()?
            .iter()
            .any(|r| r["kind"] == "Deployment" && r["state"] == "Current");
        (deployment_current
            && ready(&cr)?
                .2
                .starts_with("ConfigMap shop-config: readyWhen"))
        .then_some(cr)
    })
    .await;
    assert_eq!(ready(&cr).expect("Ready").0, "False");
    agree(&text, &cr, &ns).await;

    // Someone (here the test, as another field manager) sets the phase the rule reads.
    let configs: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client(), &ns);
    configs
        .patch(
            "shop-config",
            &PatchParams::apply("e2e-phase"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "shop-config"}, "data": {"phase": "Running"}})),
        )
        .await?;
    let cr = until(&ar, &ns, "shop", "True", "Ready").await;
    agree(&text, &cr, &ns).await;
    host.stop().await;
    Ok(())
}

/// `inrun render` of the CR `cr` as the server has it, with its children as the server has
/// them (`--observed`), prints the conditions and child states the running host wrote.
async fn agree(blueprint: &str, cr: &DynamicObject, ns: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bp = dir.path().join("blueprint.yaml");
    std::fs::write(&bp, blueprint).expect("write blueprint");
    let cr_file = dir.path().join("cr.json");
    // Without the status the host wrote: render must come to it on its own.
    let mut given = serde_json::to_value(cr).expect("cr");
    given.as_object_mut().expect("object").remove("status");
    std::fs::write(&cr_file, given.to_string()).expect("write cr");
    // Typed objects serialize with their apiVersion and kind, as `kubectl get -o json`.
    let mut observed: Vec<Value> = Vec::new();
    let deployments: Api<Deployment> = Api::namespaced(client(), ns);
    for d in deployments
        .list(&Default::default())
        .await
        .expect("list")
        .items
    {
        observed.push(serde_json::to_value(d).expect("object"));
    }
    let configs: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client(), ns);
    for c in configs.list(&Default::default()).await.expect("list").items {
        observed.push(serde_json::to_value(c).expect("object"));
    }
    let observed_file = dir.path().join("observed.json");
    std::fs::write(
        &observed_file,
        json!({"apiVersion": "v1", "kind": "List", "items": observed}).to_string(),
    )
    .expect("write observed");
    let cache = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args(["render", "-o", "json", "-b"])
        .arg(&bp)
        .arg("-f")
        .arg(&cr_file)
        .arg("--observed")
        .arg(&observed_file)
        .env("INRUN_CACHE_DIR", cache.path())
        .output()
        .expect("run inrun render");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: Value = serde_json::from_slice(&out.stdout).expect("render prints JSON");
    let strip = |conditions: &Value| -> Vec<Value> {
        conditions
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"], "message": c["message"]}))
            .collect()
    };
    assert_eq!(
        strip(&rendered["conditions"]),
        strip(&cr.data["status"]["conditions"]),
        "render and run disagree on the conditions"
    );
    assert_eq!(
        rendered["status"]["resources"], cr.data["status"]["resources"],
        "render and run disagree on the children's states"
    );
}

/// A constructor Blueprint whose `Report` CRs are reconciled by the plugin `wasm`.
fn reporter_blueprint(group: &str, wasm: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: reporter}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Report
      reconcile:
        default: false
        constructor: {{location: "{wasm}"}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
"#
    )
}

/// A plugin's own condition and event reach the CR, as `kubectl get` and `kubectl describe`
/// show them; the host's `Ready` cannot be spoofed; an unchanged pass records no event again.
async fn a_plugin_reports_a_condition_and_an_event(plugin_name: &str) -> TestResult {
    let _turn = TURN.lock().await;
    let group = unique_group(&format!("reporter-{}", plugin_name.replace('_', "-")));
    let ar = resource(&group, "Report");
    let host = Host::start(&reporter_blueprint(&group, &plugin(plugin_name))).await;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("reporter").await?;
    served(&ar).await;
    let body = |size: i64| {
        json!({"apiVersion": ar.api_version, "kind": "Report",
               "metadata": {"name": "r"}, "spec": {"size": size, "spoof": true}})
        .to_string()
    };
    apply_cr(&ar, &ns, &body(3)).await;
    let cr = eventually("the Sized condition", || async {
        let cr = get(&ar, Some(&ns), "r").await?;
        condition(&cr, "Sized")
            .filter(|c| c.0 == "True")
            .map(|_| cr)
    })
    .await;
    assert_eq!(
        condition(&cr, "Sized"),
        Some(("True".into(), "SizeSet".into(), "size is 3".into()))
    );
    let sized = cr.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Sized").cloned())
        .expect("Sized");
    assert_eq!(sized["observedGeneration"], 1);
    assert!(sized["lastTransitionTime"].is_string());
    // Ready stays the host's: the ConfigMap is current, the pass succeeded.
    assert_eq!(
        ready(&cr).map(|r| (r.0, r.1)),
        Some(("True".into(), "Ready".into()))
    );
    assert_eq!(event(&ns, "r", "Resized").await, "size 3");

    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cp.kubeconfig())
            .args(["-n", &ns])
            .args(args)
            .output()
            .expect("kubectl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let crd = format!("reports.{group}");
    let shown = kubectl(&[
        "get",
        &format!("{crd}/r"),
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Sized\")].reason}",
    ]);
    assert_eq!(shown, "SizeSet");
    let described = kubectl(&["describe", &format!("{crd}/r")]);
    assert!(
        described.contains("Resized") && described.contains("size 3"),
        "{described}"
    );

    // A pass that comes to the same outcome (a label woke it) records no event again.
    let crd_name = format!("reports.{group}");
    let passes = reconciles(&host.metrics, &crd_name);
    let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    api.patch(
        "r",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"e2e.inrun.dev/poke": "1"}}})),
    )
    .await?;
    eventually("the label's pass", || async {
        (reconciles(&host.metrics, &crd_name) > passes).then_some(())
    })
    .await;
    assert_eq!(event_count(&ns, "r", "Resized").await, 1);

    // An edit: the condition follows, and the new event is recorded.
    apply_cr(&ar, &ns, &body(5)).await;
    eventually("the condition to follow the edit", || async {
        let cr = get(&ar, Some(&ns), "r").await?;
        (condition(&cr, "Sized")?.2 == "size is 5").then_some(())
    })
    .await;
    eventually("the second event", || async {
        events(&ns, "r")
            .await
            .iter()
            .any(|(r, n)| r == "Resized" && n == "size 5")
            .then_some(())
    })
    .await;
    assert_eq!(event_count(&ns, "r", "Resized").await, 2);
    host.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_rust_plugin_reports_a_condition_and_an_event() -> TestResult {
    a_plugin_reports_a_condition_and_an_event("inrun_test_reporter").await
}

#[tokio::test]
async fn a_python_plugin_reports_a_condition_and_an_event() -> TestResult {
    a_plugin_reports_a_condition_and_an_event("inrun_test_reporter_python").await
}

#[tokio::test]
async fn a_remote_reconciler_reports_conditions_and_events_in_its_result() -> TestResult {
    let _turn = TURN.lock().await;
    let group = unique_group("remote-report");
    let ar = resource(&group, "Report");
    let app = axum::Router::new().route(
        "/reconcile",
        axum::routing::post(|| async {
            axum::Json(json!({
                "result": "ok",
                "resources": [],
                "conditions": [{"type": "Linked", "status": "False", "reason": "NotFound",
                                "message": "no upstream yet"}],
                "events": [{"type": "Warning", "reason": "UpstreamMissing", "message": "no upstream"}],
            }))
        }),
    );
    let port = serve(app).await;
    let text = format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: remote-report}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Report
      reconcile:
        default: false
        remote: {{endpoint: "http://127.0.0.1:{port}/reconcile", timeout: 2s}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
"#
    );
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("remote-report").await?;
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &json!({"apiVersion": ar.api_version, "kind": "Report", "metadata": {"name": "r"}})
            .to_string(),
    )
    .await;
    let cr = eventually("the Linked condition", || async {
        let cr = get(&ar, Some(&ns), "r").await?;
        condition(&cr, "Linked").map(|_| cr)
    })
    .await;
    assert_eq!(
        condition(&cr, "Linked"),
        Some(("False".into(), "NotFound".into(), "no upstream yet".into()))
    );
    let warning = eventually("the Warning event", || async {
        event_objects(&ns, "r", "UpstreamMissing").await.pop()
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.note.as_deref(), Some("no upstream"));
    host.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_c_plugin_reports_a_condition_and_an_event() -> TestResult {
    a_plugin_reports_a_condition_and_an_event("inrun_test_reporter_c").await
}

#[tokio::test]
async fn a_go_plugin_reports_a_condition_and_an_event() -> TestResult {
    a_plugin_reports_a_condition_and_an_event("inrun_test_reporter_go").await
}

#[tokio::test]
async fn a_later_apply_wave_waits_until_the_deployment_of_an_earlier_one_is_available() -> TestResult
{
    let _turn = TURN.lock().await;
    let group = unique_group("wave-ready");
    // The ConfigMap is declared to come after the Deployment (apply wave 1).
    let text = blueprint(&group, None).replace(
        "            metadata: {name: \"{{ .metadata.name }}-config\"}",
        "            metadata: {name: \"{{ .metadata.name }}-config\", annotations: {inrun.dev/apply-order: \"1\"}}",
    );
    assert!(text.contains("apply-order"), "{text}");
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("wave-ready").await?;
    let ar = resource(&group, "Shop");
    served(&ar).await;
    create(&ar, &ns, "shop").await;

    let cr = until(&ar, &ns, "shop", "False", "Progressing").await;
    let message = eventually("the CR to wait for the Deployment", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        let message = ready(&cr)?.2;
        message.contains("before apply wave 1").then_some(message)
    })
    .await;
    assert_eq!(
        message,
        format!(
            "waiting for Deployment {ns}/shop to be ready before apply wave 1: 0/2 replicas updated"
        )
    );
    assert_eq!(cr.metadata.generation, Some(1));
    assert!(
        get(configmaps(), Some(&ns), "shop-config").await.is_none(),
        "nothing of wave 1 before wave 0 is ready"
    );

    // Available: the next pass (woken by the Deployment's change) applies wave 1.
    roll_out(&ns, "shop", 2).await;
    let cr = until(&ar, &ns, "shop", "True", "Ready").await;
    assert_eq!(ready(&cr).expect("Ready").2, "all 2 resource(s) ready");
    assert!(get(configmaps(), Some(&ns), "shop-config").await.is_some());
    host.stop().await;
    Ok(())
}
