//! End to end on a real kube-apiserver, counted by the API server itself
//! (`apiserver_request_total`): a new CR costs the finalizer, one apply per child, one
//! status write and one event; a pass that finds everything as desired writes nothing; the
//! host's own writes never wake the CR they were for; a child edited or deleted behind the
//! host's back is restored.
//!
//! The tests here take turns: the API server's counters are process-wide.

mod support;

use inrun_testenv::{ControlPlane, TestResult};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;
use support::*;

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A declarative Blueprint: each CR gets a ConfigMap and a Service.
fn blueprint(group: &str, runtime: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: writes}}
spec:
  runtime:
    workers: 2
{runtime}  crds:
    - group: {group}
      version: v1alpha1
      kind: Pair
      emit:
        status:
          color: "{{{{ .spec.color }}}}"
      reconcile:
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
          - {{apiVersion: v1, kind: Service}}
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
            data: {{color: "{{{{ .spec.color }}}}"}}
          - apiVersion: v1
            kind: Service
            metadata: {{name: "{{{{ .metadata.name }}}}"}}
            spec:
              ports: [{{port: 80, targetPort: 8080}}]
"#
    )
}

/// The resources whose writes a test counts: the CR (and its status), children, events.
fn counted(group: &str) -> Vec<(&str, &'static str)> {
    vec![
        (group, "pairs"),
        ("", "configmaps"),
        ("", "services"),
        ("events.k8s.io", "events"),
        ("", "events"),
    ]
}

async fn create(ar: &ApiResource, ns: &str, name: &str, color: &str) -> DynamicObject {
    apply_cr(
        ar,
        ns,
        &json!({"apiVersion": ar.api_version, "kind": ar.kind,
                "metadata": {"name": name}, "spec": {"color": color}})
        .to_string(),
    )
    .await
}

async fn until_ready(ar: &ApiResource, ns: &str, name: &str, color: &str) -> DynamicObject {
    eventually(&format!("{ns}/{name} Ready with color {color}"), || async {
        let cr = get(ar, Some(ns), name).await?;
        let done = reconciled(&cr)?.0 == "True"
            && cr.data["status"]["color"] == color
            && cr.data["status"]["observedGeneration"] == json!(cr.metadata.generation);
        done.then_some(cr)
    })
    .await
}

/// Makes a change that starts exactly one pass and writes nothing (a label only the test
/// reads), then waits until the host has finished `n` passes of the CRD. Watch events come
/// in order, so every pass the host's own earlier writes could have started is counted by
/// then.
async fn barrier(
    host: &Host,
    ar: &ApiResource,
    ns: &str,
    name: &str,
    crd: &str,
    n: u64,
    mark: &str,
) {
    let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, ar);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"e2e.inrun.dev/mark": mark}}})),
    )
    .await
    .expect("mark the CR");
    eventually(&format!("{n} passes of {crd}"), || async {
        (reconciles(&host.metrics, crd) >= n).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_new_cr_costs_one_write_per_change_and_the_hosts_writes_never_wake_it() -> TestResult {
    let _turn = TURN.lock().await;
    // A pass that fails (the API server refusing a request under load: a 429, a timeout)
    // is retried, and its retry legitimately costs a `ReconcileError` event and a pass of
    // its own: such an attempt says nothing of the steady cost. It is told, and counted
    // again with a new host and CRD; the counts are asserted on an attempt without a
    // failed pass.
    for attempt in 1..=3 {
        let group = unique_group("new-cr-writes");
        let crd = format!("pairs.{group}");
        let ar = resource(&group, "Pair");
        let host = Host::start(&blueprint(&group, "")).await;
        let ns = ControlPlane::shared().namespace("writes").await?;
        served(&ar).await;
        let before = apiserver_writes().await;
        create(&ar, &ns, "one", "blue").await;
        until_ready(&ar, &ns, "one", "blue").await;
        // One pass for the new CR; the barrier's is the second. Had the host's finalizer,
        // child, status or event writes woken the CR, their passes would come first.
        barrier(&host, &ar, &ns, "one", &crd, 2, "a").await;
        let after = apiserver_writes().await;
        if host.metrics.reconciles(&crd, "error") > 0 {
            let events = all_events().await;
            eprintln!(
                "attempt {attempt}: a pass failed, so its writes are not the steady cost; the cluster's events: {events:#?}"
            );
            host.stop().await;
            continue;
        }
        assert_eq!(
            reconciles(&host.metrics, &crd),
            2,
            "the host's own writes started passes"
        );
        let writes = writes_between(&before, &after, &counted(&group));
        // "APPLY pairs" = the test's create + the host's finalizer.
        assert_writes(
            &writes,
            &[
                // The test's own: the CR's creation and the barrier's label.
                ("APPLY pairs", 2),
                ("PATCH pairs", 1),
                // The host's: status once, each child once, one event.
                ("APPLY pairs/status", 1),
                ("APPLY configmaps", 1),
                ("APPLY services", 1),
                ("POST events", 1),
            ],
        )
        .await;
        host.stop().await;
        return Ok(());
    }
    panic!("a pass failed in each of three attempts: the host's log says why");
}

#[tokio::test]
async fn a_component_costs_one_apply_per_child_and_a_status_per_wave_it_waits_for() -> TestResult {
    let _turn = TURN.lock().await;
    let group = unique_group("component-writes");
    let parts = format!("parts.{group}");
    let crd = format!("components.{group}");
    let ar = resource(&group, "Component");
    let host = Host::start(&component_blueprint(&group, &parts, "")).await;
    let ns = ControlPlane::shared().namespace("component-writes").await?;
    served(&ar).await;
    let before = apiserver_writes().await;
    apply_cr(
        &ar,
        &ns,
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: Component\nmetadata: {{name: kit}}\nspec: {{}}\n"
        ),
    )
    .await;
    // The instance waits for its operator, rolled out here as its controller would.
    eventually("the Component to wait for its operator", || async {
        let cr = get(&ar, Some(&ns), "kit").await?;
        reconciled(&cr)?
            .2
            .contains("before the managed instances")
            .then_some(())
    })
    .await;
    roll_out(&ns, "kit-operator", 2).await;
    eventually("the Component to be Ready", || async {
        let cr = get(&ar, Some(&ns), "kit").await?;
        (reconciled(&cr)?.0 == "True").then_some(())
    })
    .await;
    let passes = reconciles(&host.metrics, &crd);
    barrier(&host, &ar, &ns, "kit", &crd, passes + 1, "a").await;
    let after = apiserver_writes().await;
    let writes = writes_between(
        &before,
        &after,
        &[
            (group.as_str(), "components"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("apps", "deployments"),
            (parts.as_str(), "gizmos"),
            ("events.k8s.io", "events"),
            ("", "events"),
        ],
    );
    eprintln!("a component's writes: {writes:?}");
    let count = |key: &str| writes.get(key).copied().unwrap_or_default();
    // Each child once; the CR's create (the test's) and the finalizer; the barrier's label.
    for (key, n) in [
        ("APPLY customresourcedefinitions", 1),
        ("APPLY deployments", 1),
        ("APPLY gizmos", 1),
        ("APPLY components", 2),
        ("PATCH components", 1),
        ("POST events", 1),
    ] {
        assert_eq!(count(key), n, "{key}: {writes:?}");
    }
    // Ready once, and Progressing for each wait (the operator to be ready, and maybe the
    // CRD to be Established and the new type to be discovered): two to four status writes.
    let status = count("APPLY components/status");
    assert!((2..=4).contains(&status), "{writes:?}");
    host.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_resync_that_finds_everything_as_desired_writes_nothing() -> TestResult {
    let _turn = TURN.lock().await;
    let group = unique_group("noop-resync");
    let crd = format!("pairs.{group}");
    let ar = resource(&group, "Pair");
    let host = Host::start(&blueprint(&group, "    resync: 1s\n")).await;
    let ns = ControlPlane::shared().namespace("resync").await?;
    served(&ar).await;
    create(&ar, &ns, "quiet", "green").await;
    until_ready(&ar, &ns, "quiet", "green").await;
    let passes = reconciles(&host.metrics, &crd);
    let before = apiserver_writes().await;
    eventually("three resyncs", || async {
        (reconciles(&host.metrics, &crd) >= passes + 3).then_some(())
    })
    .await;
    let after = apiserver_writes().await;
    let writes = writes_between(&before, &after, &counted(&group));
    assert!(writes.is_empty(), "a no-op resync wrote {writes:?}");
    host.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_child_edited_or_deleted_behind_the_hosts_back_is_restored() -> TestResult {
    let _turn = TURN.lock().await;
    let group = unique_group("drift");
    let ar = resource(&group, "Pair");
    let host = Host::start(&blueprint(&group, "")).await;
    let ns = ControlPlane::shared().namespace("drift").await?;
    served(&ar).await;
    create(&ar, &ns, "web", "red").await;
    until_ready(&ar, &ns, "web", "red").await;
    let cms: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &configmaps());
    cms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"color": "hacked"}})),
    )
    .await?;
    eventually("the edited ConfigMap restored", || async {
        let cm = get(configmaps(), Some(&ns), "web").await?;
        (cm.data["data"]["color"] == "red").then_some(())
    })
    .await;
    let services: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &services());
    services.delete("web", &DeleteParams::default()).await?;
    let recreated = eventually("the deleted Service recreated", || async {
        get(support::services(), Some(&ns), "web").await
    })
    .await;
    assert_eq!(recreated.data["spec"]["ports"][0]["port"], 80);
    host.stop().await;
    Ok(())
}
