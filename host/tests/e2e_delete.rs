//! End to end on a real kube-apiserver: deletion held and released, `onDelete` retries, the
//! finalizer timeout, children deleted everywhere on release, `finalizers.remove`, the
//! Result's cleanup and requeue, and the safeguard for managed types.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::Duration;

use inrun_testenv::{ControlPlane, TestResult, install_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;
use support::*;

/// A Blueprint with one CRD `kind` in `group`; `crd` is the rest of its entry (indented
/// six spaces) and `runtime` the `spec.runtime` block (indented four).
fn blueprint(group: &str, kind: &str, runtime: &str, crd: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  runtime:
    {runtime}
  crds:
    - group: {group}
      version: v1alpha1
      kind: {kind}
{crd}"#
    )
}

/// A CR of `kind` in `group` with `spec` (YAML flow text).
fn cr(group: &str, kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    )
}

async fn delete_cr(ar: &ApiResource, ns: &str, name: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(client(), ns, ar);
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete cr");
}

fn finalizers(obj: &DynamicObject) -> Vec<String> {
    obj.metadata.finalizers.clone().unwrap_or_default()
}

/// Waits for the CR to be reconciled once (Ready True), so the finalizer is on it.
async fn until_reconciled(ar: &ApiResource, ns: &str, name: &str) -> DynamicObject {
    eventually(&format!("{ns}/{name} to be Ready"), || async {
        let cr = get(ar, Some(ns), name).await?;
        (reconciled(&cr)?.0 == "True").then_some(cr)
    })
    .await
}

/// `inrun trace` with `args` against the test API server; its output. It runs with the
/// harness's admin kubeconfig on purpose: `inrun trace` is what a person runs with their
/// own `kubectl` credentials, not the host (which runs in these tests as the ServiceAccount
/// `inrun generate rbac` makes).
fn trace(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
        .arg("trace")
        .args(args)
        .arg("--kubeconfig")
        .arg(ControlPlane::shared().kubeconfig())
        .output()
        .expect("inrun trace");
    assert!(
        out.status.success(),
        "inrun trace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_draws_a_cr_with_a_ready_and_a_not_ready_child() -> TestResult {
    let group = unique_group("trace");
    // No controller manager runs here: the Deployment never rolls out.
    let host = Host::start(&blueprint(
        &group,
        "Shop",
        "{}",
        r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-settings"}
            data: {tier: web}
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {name: "{{ .metadata.name }}"}
            spec:
              replicas: 2
              selector: {matchLabels: {app: shop}}
              template:
                metadata: {labels: {app: shop}}
                spec: {containers: [{name: web, image: registry.invalid/web:1}]}
        managedResources: [{apiVersion: v1, kind: ConfigMap}, {apiVersion: apps/v1, kind: Deployment}]
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("trace").await?;
    let ar = resource(&group, "Shop");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Shop", "front", "{}")).await;
    eventually("the CR's Ready condition", || async {
        let cr = get(&ar, Some(&ns), "front").await?;
        reconciled(&cr)
    })
    .await;
    let text = trace(&["shop/front", "-n", &ns]);
    // Golden (the test's namespace written NS, columns compared word by word).
    let expected = "\
NAMESPACE  NAME                           READY  STATUS       MESSAGE
NS         Shop/front                     False  Progressing  Deployment front: 0/2 replicas updated
           │  reconciled by declarative:HASH
NS         ├─ ConfigMap/front-settings    True   Current
NS         └─ Deployment/front            False  InProgress   0/2 replicas updated
";
    let text = text.replace(&ns, "NS");
    // What reconciled it: the declarative block's digest, whatever its bytes.
    let text: String = text
        .lines()
        .map(|l| match l.split_once("declarative:") {
            Some((head, _)) => format!("{head}declarative:HASH\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let aligned = |t: &str| {
        t.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    assert_eq!(aligned(&text), aligned(expected), "\n{text}");
    host.stop().await;
    Ok(())
}

/// Waits for the CR to have a deletion timestamp while still being there.
async fn deleting(ar: &ApiResource, ns: &str, name: &str) -> DynamicObject {
    eventually(&format!("{ns}/{name} to be deleting"), || async {
        get(ar, Some(ns), name)
            .await
            .filter(|cr| cr.metadata.deletion_timestamp.is_some())
    })
    .await
}

async fn gone(ar: &ApiResource, ns: Option<&str>, name: &str) {
    eventually(&format!("{} {name} to be gone", ar.kind), || async {
        get(ar, ns, name).await.is_none().then_some(())
    })
    .await
}

fn cluster_roles() -> ApiResource {
    ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: "ClusterRole".into(),
        plural: "clusterroles".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_is_held_while_a_conditional_requeue_holds_then_released() -> TestResult {
    let group = unique_group("hold");
    let crd = r#"      emit:
        status:
          owner: "{{ .metadata.name }}"
      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-data"}
            data: {owner: "{{ .metadata.name }}"}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
        requeue: {after: 1s, when: "{{ .spec.hold }}"}
"#;
    let host = Host::start(&blueprint(&group, "Holder", "{}", crd)).await;
    let ns = ControlPlane::shared().namespace("hold").await?;
    let ar = resource(&group, "Holder");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Holder", "kept", "{hold: true}")).await;
    until_reconciled(&ar, &ns, "kept").await;
    eventually("the child ConfigMap", || {
        get(configmaps(), Some(&ns), "kept-data")
    })
    .await;

    delete_cr(&ar, &ns, "kept").await;
    event(&ns, "kept", "DeletionBlocked").await;
    let held = eventually("the Ready condition to say Finalizing", || async {
        let cr = get(&ar, Some(&ns), "kept").await?;
        (reconciled(&cr)?.1 == "Finalizing").then_some(cr)
    })
    .await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(finalizers(&held).iter().any(|f| f == "inrun.dev/cleanup"));
    assert_eq!(
        held.data["status"]["owner"], "kept",
        "status written while held keeps the emitted fields"
    );
    assert!(
        get(configmaps(), Some(&ns), "kept-data").await.is_some(),
        "children stay while the deletion is held"
    );

    // A deleting CR's spec can still be changed: the hold ends.
    apply_cr(&ar, &ns, &cr(&group, "Holder", "kept", "{hold: false}")).await;
    gone(&ar, Some(&ns), "kept").await;
    assert!(get(configmaps(), Some(&ns), "kept-data").await.is_none());
    let note = event(&ns, "kept", "Finalized").await;
    assert!(note.contains("1 child"), "{note}");
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_delete_failure_keeps_the_finalizer_and_retries_until_it_renders() -> TestResult {
    let group = unique_group("ondelete");
    let crd = r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-data"}
            data: {owner: "{{ .metadata.name }}"}
        onDelete:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-farewell"}
            data: {note: "{{ .spec.farewell | required('spec.farewell is required to delete') }}"}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
"#;
    let host = Host::start(&blueprint(&group, "Leaver", "{}", crd)).await;
    let ns = ControlPlane::shared().namespace("ondelete").await?;
    let ar = resource(&group, "Leaver");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Leaver", "bye", "{size: 1}")).await;
    until_reconciled(&ar, &ns, "bye").await;

    delete_cr(&ar, &ns, "bye").await;
    let note = event(&ns, "bye", "ReconcileError").await;
    assert!(note.contains("spec.farewell is required"), "{note}");
    let stuck = deleting(&ar, &ns, "bye").await;
    assert!(finalizers(&stuck).iter().any(|f| f == "inrun.dev/cleanup"));
    assert!(get(configmaps(), Some(&ns), "bye-data").await.is_some());

    apply_cr(
        &ar,
        &ns,
        &cr(&group, "Leaver", "bye", "{size: 1, farewell: so long}"),
    )
    .await;
    gone(&ar, Some(&ns), "bye").await;
    event(&ns, "bye", "Finalized").await;
    assert!(
        get(configmaps(), Some(&ns), "bye-data").await.is_none(),
        "owned children are deleted on release"
    );
    let farewell = get(configmaps(), Some(&ns), "bye-farewell")
        .await
        .expect("the onDelete ConfigMap outlives the CR");
    assert_eq!(farewell.data["data"]["note"], "so long");
    assert!(
        farewell
            .metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key("inrun.dev/owner-uid")),
        "onDelete objects are not owned"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_delete_objects_must_pass_the_managed_resources_fence() -> TestResult {
    let group = unique_group("ondeletefence");
    // The namespace comes from the CR, so only the runtime's fence can refuse it.
    let crd = r#"      reconcile:
        onDelete:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-leak", namespace: "{{ .spec.where }}"}
            data: {from: "{{ .metadata.namespace }}"}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
"#;
    let runtime = "finalizers: {timeout: 2s}";
    let host = Host::start(&blueprint(&group, "Fenced", runtime, crd)).await;
    let ns = ControlPlane::shared().namespace("ondeletefence").await?;
    let elsewhere = ControlPlane::shared()
        .namespace("ondeletefence-other")
        .await?;
    let ar = resource(&group, "Fenced");
    served(&ar).await;
    let spec = format!("{{where: {elsewhere}}}");
    apply_cr(&ar, &ns, &cr(&group, "Fenced", "out", &spec)).await;
    until_reconciled(&ar, &ns, "out").await;

    delete_cr(&ar, &ns, "out").await;
    let note = event(&ns, "out", "ReconcileError").await;
    assert!(
        note.contains("not allowed by reconcile.managedResources"),
        "{note}"
    );
    // Only the timeout lets it go; the ConfigMap was never written.
    event(&ns, "out", "FinalizeTimeout").await;
    gone(&ar, Some(&ns), "out").await;
    assert!(
        get(configmaps(), Some(&elsewhere), "out-leak")
            .await
            .is_none()
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_timeout_releases_a_cr_held_forever() -> TestResult {
    let group = unique_group("timeout");
    let crd = r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-data"}
            data: {owner: "{{ .metadata.name }}"}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
        requeue: {after: 1s, when: "{{ true }}"}
"#;
    let runtime = "finalizers: {timeout: 3s}";
    let host = Host::start(&blueprint(&group, "Sticky", runtime, crd)).await;
    let ns = ControlPlane::shared().namespace("timeout").await?;
    let ar = resource(&group, "Sticky");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Sticky", "forever", "{}")).await;
    until_reconciled(&ar, &ns, "forever").await;

    delete_cr(&ar, &ns, "forever").await;
    event(&ns, "forever", "DeletionBlocked").await;
    let note = event(&ns, "forever", "FinalizeTimeout").await;
    assert!(note.contains("3s"), "{note}");
    gone(&ar, Some(&ns), "forever").await;
    event(&ns, "forever", "Finalized").await;
    assert!(get(configmaps(), Some(&ns), "forever-data").await.is_none());
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_deletes_children_in_other_namespaces_and_cluster_scoped_but_not_kept_kinds()
-> TestResult {
    let group = unique_group("everywhere");
    let ns = ControlPlane::shared().namespace("everywhere").await?;
    let other = ControlPlane::shared().namespace("everywhere-other").await?;
    let crd = format!(
        r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-here"}}
            data: {{at: home}}
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-there", namespace: {other}}}
            data: {{at: away}}
          - apiVersion: rbac.authorization.k8s.io/v1
            kind: ClusterRole
            metadata: {{name: "{{{{ .metadata.namespace }}}}-{{{{ .metadata.name }}}}"}}
            rules: []
          - apiVersion: v1
            kind: Secret
            metadata: {{name: "{{{{ .metadata.name }}}}-keep"}}
            stringData: {{token: precious}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap, namespaces: [{other}]}}
          - {{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, clusterScoped: true}}
          - {{apiVersion: v1, kind: Secret}}
        prune:
          keep: [Secret]
"#
    );
    let host = Host::start(&blueprint(&group, "Spread", "{}", &crd)).await;
    let ar = resource(&group, "Spread");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Spread", "wide", "{}")).await;
    until_reconciled(&ar, &ns, "wide").await;
    let role = format!("{ns}-wide");
    for (what, ar, at, name) in [
        (
            "ConfigMap here",
            configmaps(),
            Some(ns.as_str()),
            "wide-here",
        ),
        (
            "ConfigMap in the other namespace",
            configmaps(),
            Some(other.as_str()),
            "wide-there",
        ),
        ("ClusterRole", cluster_roles(), None, role.as_str()),
        ("Secret", secrets(), Some(ns.as_str()), "wide-keep"),
    ] {
        eventually(what, || get(&ar, at, name)).await;
    }

    delete_cr(&ar, &ns, "wide").await;
    gone(&ar, Some(&ns), "wide").await;
    let note = event(&ns, "wide", "Finalized").await;
    assert!(note.contains("3 child"), "{note}");
    assert!(get(configmaps(), Some(&ns), "wide-here").await.is_none());
    assert!(
        get(configmaps(), Some(&other), "wide-there")
            .await
            .is_none()
    );
    assert!(get(cluster_roles(), None, &role).await.is_none());
    assert!(
        get(secrets(), Some(&ns), "wide-keep").await.is_some(),
        "a prune.keep kind is left alone"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_remove_puts_no_finalizer_so_deletion_is_immediate() -> TestResult {
    let group = unique_group("nofinalizer");
    let crd = r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-data"}
            data: {owner: "{{ .metadata.name }}"}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
"#;
    let runtime = "finalizers: {remove: true, names: [example.com/extra]}";
    let host = Host::start(&blueprint(&group, "Loose", runtime, crd)).await;
    let ns = ControlPlane::shared().namespace("nofinalizer").await?;
    let ar = resource(&group, "Loose");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Loose", "free", "{}")).await;
    let cr = until_reconciled(&ar, &ns, "free").await;
    assert_eq!(finalizers(&cr), Vec::<String>::new());
    assert_eq!(
        cr.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("inrun"),
        "the CR was maintained, only without finalizers"
    );

    delete_cr(&ar, &ns, "free").await;
    let after = get(&ar, Some(&ns), "free").await;
    assert!(
        after.is_none(),
        "nothing holds the CR: it is gone as soon as the delete returns: {after:#?}"
    );
    host.stop().await;
    Ok(())
}

fn cleanup_blueprint(group: &str) -> String {
    let crd = format!(
        r#"      reconcile:
        default: false
        constructor: {{location: "{}"}}
"#,
        plugin("inrun_test_cleanup")
    );
    blueprint(group, "Temp", "{}", &crd)
}

fn cleanup_at(obj: &DynamicObject) -> Option<String> {
    obj.metadata
        .annotations
        .as_ref()?
        .get("inrun.dev/cleanup-at")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_cleanup_deletes_the_cr_after_its_grace_period() -> TestResult {
    let group = unique_group("cleanup");
    let host = Host::start(&cleanup_blueprint(&group)).await;
    let ns = ControlPlane::shared().namespace("cleanup").await?;
    let ar = resource(&group, "Temp");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Temp", "brief", "{cleanup: true}")).await;
    let pending = eventually("the cleanup-at annotation", || async {
        cleanup_at(&get(&ar, Some(&ns), "brief").await?)
    })
    .await;
    let at: k8s_openapi::jiff::Timestamp = pending.parse()?;
    let created = get(&ar, Some(&ns), "brief")
        .await
        .and_then(|cr| cr.metadata.creation_timestamp)
        .expect("creation timestamp")
        .0;
    let grace = at.duration_since(created).as_secs();
    assert!((1..=3).contains(&grace), "grace of {grace}s, asked for 2s");

    let note = event(&ns, "brief", "CleanedUp").await;
    assert!(note.contains("grace period"), "{note}");
    gone(&ar, Some(&ns), "brief").await;
    assert!(
        k8s_openapi::jiff::Timestamp::now() >= at,
        "deleted no earlier than the grace period"
    );
    event(&ns, "brief", "Finalized").await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_result_without_cleanup_withdraws_the_pending_one() -> TestResult {
    let group = unique_group("withdraw");
    let host = Host::start(&cleanup_blueprint(&group)).await;
    let ns = ControlPlane::shared().namespace("withdraw").await?;
    let ar = resource(&group, "Temp");
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &cr(&group, "Temp", "stays", "{cleanup: true, graceSeconds: 4}"),
    )
    .await;
    let pending = eventually("the cleanup-at annotation", || async {
        cleanup_at(&get(&ar, Some(&ns), "stays").await?)
    })
    .await;
    let at: k8s_openapi::jiff::Timestamp = pending.parse()?;

    apply_cr(&ar, &ns, &cr(&group, "Temp", "stays", "{cleanup: false}")).await;
    eventually("the cleanup-at annotation to be removed", || async {
        let cr = get(&ar, Some(&ns), "stays").await?;
        cleanup_at(&cr).is_none().then_some(())
    })
    .await;
    // A negative: the CR must outlive the withdrawn deadline. Watch it until two seconds
    // after that deadline (a bounded wait, checked all along).
    let until = at + k8s_openapi::jiff::SignedDuration::from_secs(2);
    while k8s_openapi::jiff::Timestamp::now() < until {
        let cr = get(&ar, Some(&ns), "stays")
            .await
            .expect("the CR outlives its withdrawn cleanup");
        assert!(cr.metadata.deletion_timestamp.is_none());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        events(&ns, "stays")
            .await
            .iter()
            .all(|(r, _)| r != "CleanedUp")
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_requeue_after_runs_the_cr_again_after_success() -> TestResult {
    let group = unique_group("requeue");
    let host = Host::start(&cleanup_blueprint(&group)).await;
    let ns = ControlPlane::shared().namespace("requeue").await?;
    let ar = resource(&group, "Temp");
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &cr(&group, "Temp", "again", "{requeueAfterMs: 500}"),
    )
    .await;
    let first = until_reconciled(&ar, &ns, "again").await;
    // A pass that changes nothing records no event: count the host's passes instead.
    let crd = format!("temps.{group}");
    let start = reconciles(&host.metrics, &crd);
    let more = eventually("three more passes", || async {
        let n = reconciles(&host.metrics, &crd);
        (n >= start + 3).then_some(n)
    })
    .await;
    let now = get(&ar, Some(&ns), "again").await.expect("the CR");
    assert_eq!(
        now.metadata.resource_version,
        first.metadata.resource_version,
        "the CR did not change, so the {} extra passes came from the requeue: {first:#?} {now:#?}",
        more - start
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_after_zero_waits_for_the_requeue_floor() -> TestResult {
    let group = unique_group("requeuefloor");
    let crd = format!(
        "      reconcile:\n        default: false\n        constructor: {{location: \"{}\"}}\n",
        plugin("inrun_test_cleanup")
    );
    let host = Host::start(&blueprint(&group, "Temp", "minRequeue: 2s", &crd)).await;
    let ns = ControlPlane::shared().namespace("requeuefloor").await?;
    let ar = resource(&group, "Temp");
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &cr(&group, "Temp", "storm", "{requeueAfterMs: 0}"),
    )
    .await;
    until_reconciled(&ar, &ns, "storm").await;
    let crd = format!("temps.{group}");
    let pass_after = |n: u64| {
        let metrics = host.metrics.clone();
        let crd = crd.clone();
        async move {
            eventually("the next pass", || async {
                (reconciles(&metrics, &crd) > n).then_some(())
            })
            .await;
            reconciles(&metrics, &crd)
        }
    };
    let n = pass_after(reconciles(&host.metrics, &crd)).await;
    let since = std::time::Instant::now();
    pass_after(n).await;
    // Asked for 0s, the CR waits for the Blueprint's floor (2s) between passes.
    assert!(
        since.elapsed() >= Duration::from_millis(1500),
        "passes {:?} apart",
        since.elapsed()
    );
    host.stop().await;
    Ok(())
}

/// A namespaced CRD `Gadget` in `group`, as JSON.
/// The Gadget type of `group`.
fn gadgets(group: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    }
}

/// Creates someone else's Gadget `theirs` in `namespace`; the API to reach it.
async fn theirs(gadgets: &ApiResource, namespace: &str) -> anyhow::Result<Api<DynamicObject>> {
    let foreign: DynamicObject = serde_json::from_value(json!({
        "apiVersion": gadgets.api_version,
        "kind": "Gadget",
        "metadata": {"name": "theirs"},
        "spec": {"size": 2},
    }))?;
    let api: Api<DynamicObject> = Api::namespaced_with(client(), namespace, gadgets);
    api.create(&PostParams::default(), &foreign).await?;
    Ok(api)
}

fn gadget_crd(group: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_waits_while_foreign_instances_of_a_managed_crd_exist() -> TestResult {
    let group = unique_group("safeguard");
    let gadgets_group = format!("gadgets.{group}");
    let crd_json = gadget_crd(&gadgets_group);
    // The Gadget type must be served before the host starts, since it is a managed kind;
    // the CR then adopts the CRD as its child (`adopt: true`: the host takes over no
    // object it did not create unless told to).
    let crd: CustomResourceDefinition = serde_json::from_value(crd_json.clone())?;
    install_crd(&client(), &crd).await?;
    let crd_yaml = serde_json::to_string(&crd_json)?;
    let blueprint_crd = format!(
        r#"      reconcile:
        onReconcile:
          - {crd_yaml}
          - apiVersion: {gadgets_group}/v1
            kind: Gadget
            metadata: {{name: "{{{{ .metadata.name }}}}-own"}}
            spec: {{size: 1}}
        managedResources:
          - {{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, clusterScoped: true, adopt: true}}
          - {{apiVersion: {gadgets_group}/v1, kind: Gadget}}
"#
    );
    let platform_blueprint = blueprint(&group, "Platform", "{}", &blueprint_crd);
    let host = Host::start(&platform_blueprint).await;
    let ns = ControlPlane::shared().namespace("safeguard").await?;
    let ar = resource(&group, "Platform");
    served(&ar).await;
    let gadgets = gadgets(&gadgets_group);
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    apply_cr(&ar, &ns, &cr(&group, "Platform", "base", "{}")).await;
    let platform = until_reconciled(&ar, &ns, "base").await;
    let uid = platform.metadata.uid.clone().unwrap_or_default();
    let owned_crd = get(&crds, None, &format!("gadgets.{gadgets_group}"))
        .await
        .expect("the CRD");
    assert_eq!(
        owned_crd
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("inrun.dev/owner-uid")),
        Some(&uid)
    );
    eventually("the CR's own Gadget", || {
        get(&gadgets, Some(&ns), "base-own")
    })
    .await;

    // Someone else's Gadget, in another namespace.
    let elsewhere = ControlPlane::shared().namespace("safeguard-user").await?;
    let foreign_api = theirs(&gadgets, &elsewhere).await?;

    delete_cr(&ar, &ns, "base").await;
    let note = event(&ns, "base", "DeletionBlocked").await;
    assert!(note.contains("theirs"), "{note}");
    let blocked = eventually("the Ready condition to say DeletionBlocked", || async {
        let cr = get(&ar, Some(&ns), "base").await?;
        let (status, reason, message) = reconciled(&cr)?;
        (reason == "DeletionBlocked").then_some((status, message))
    })
    .await;
    assert_eq!(blocked.0, "False");
    assert!(
        blocked.1.contains(&format!("{elsewhere}/theirs")),
        "{}",
        blocked.1
    );
    assert!(
        get(&crds, None, &format!("gadgets.{gadgets_group}"))
            .await
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "the CRD stays while a foreign instance exists"
    );
    assert!(get(&gadgets, Some(&ns), "base-own").await.is_some());
    // `inrun trace` shows the held deletion: the CR's whole message, and under the CRD the
    // foreign instance holding it (not the CR's own Gadget). The CRD, cluster-scoped, has
    // no ownerReference: it is a child because the Blueprint manages CRDs.
    let target = format!("platform.{group}/base");
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("blueprint.yaml");
    std::fs::write(&file, &platform_blueprint)?;
    let file = file.display().to_string();
    let without = trace(&[&target, "-n", &ns]);
    assert!(
        !without.contains("CustomResourceDefinition") && without.contains("give --blueprint"),
        "{without}"
    );
    let text = trace(&[&target, "-n", &ns, "--blueprint", &file]);
    assert!(text.contains(&blocked.1), "the message, uncut:\n{text}");
    assert!(
        text.contains(&format!("└─ holds the deletion: Gadget {elsewhere}/theirs")),
        "{text}"
    );
    assert!(!text.contains(&format!("Gadget {ns}/base-own")), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&trace(&[&target, "-n", &ns, "-o", "json", "-b", &file]))?;
    assert_eq!(json["cr"]["status"], "DeletionBlocked", "{json}");
    let kinds: Vec<&str> = json["children"]
        .as_array()
        .expect("children")
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["CustomResourceDefinition", "Gadget"], "{json}");
    assert!(
        events(&ns, "base")
            .await
            .iter()
            .all(|(r, _)| r != "Finalized"),
        "not released yet"
    );

    foreign_api
        .delete("theirs", &DeleteParams::default())
        .await?;
    gone(&ar, Some(&ns), "base").await;
    event(&ns, "base", "Finalized").await;
    gone(&crds, None, &format!("gadgets.{gadgets_group}")).await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_on_delete_child_is_pruned_on_an_update_and_kept_when_its_cr_is_deleted()
-> TestResult {
    let group = unique_group("orphan-on-delete");
    let kind = "Keeper";
    // A string template: the `-extra` ConfigMap only while `spec.extra` is true; both
    // say `orphan-on-delete`; pruning is on.
    let text = blueprint(
        &group,
        kind,
        "{}",
        r#"      reconcile:
        onReconcile:
          - |
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: "{{ .metadata.name }}-data"
              annotations: {inrun.dev/delete-policy: orphan-on-delete}
            data: {a: b}
            {% if .spec.extra %}
            ---
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: "{{ .metadata.name }}-extra"
              annotations: {inrun.dev/delete-policy: orphan-on-delete}
            data: {a: b}
            {% endif %}
        managedResources: [{apiVersion: v1, kind: ConfigMap}]
        prune: {enabled: true}
"#,
    );
    let host = Host::start(&text).await;
    let ns = ControlPlane::shared().namespace("orphan-on-delete").await?;
    let ar = resource(&group, kind);
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, kind, "k", "{extra: true}")).await;
    until_reconciled(&ar, &ns, "k").await;
    for name in ["k-data", "k-extra"] {
        eventually(name, || get(configmaps(), Some(&ns), name)).await;
    }
    // An update that drops `-extra` prunes it: orphan-on-delete keeps only on deletion.
    apply_cr(&ar, &ns, &cr(&group, kind, "k", "{extra: false}")).await;
    gone(&configmaps(), Some(&ns), "k-extra").await;
    // Deleting the CR leaves `-data` in place, no longer owned.
    delete_cr(&ar, &ns, "k").await;
    gone(&ar, Some(&ns), "k").await;
    let kept = get(configmaps(), Some(&ns), "k-data")
        .await
        .expect("the ConfigMap stays");
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert!(
        kept.metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty),
        "no longer owned: {:?}",
        kept.metadata.owner_references
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_instances_of_a_type_named_only_in_managed_types_hold_the_deletion() -> TestResult {
    foreign_instances_hold_the_deletion("managed-types", false).await
}

/// The same with `managedTypes` named by a serve target's block the CR is not served by:
/// children of every block are torn down, so every block's types are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_types_of_another_serve_target_hold_the_deletion_too() -> TestResult {
    foreign_instances_hold_the_deletion("target-types", true).await
}

async fn foreign_instances_hold_the_deletion(name: &str, in_target: bool) -> TestResult {
    let group = unique_group(name);
    let gadgets_group = format!("gadgets.{group}");
    // A type the CR's workload would create at run time: its CRD is not among the CR's
    // children, only named in `managedTypes`.
    let crd: CustomResourceDefinition = serde_json::from_value(gadget_crd(&gadgets_group))?;
    install_crd(&client(), &crd).await?;
    let types = format!("managedTypes:\n          - {{group: \"{gadgets_group}\", kind: Gadget}}");
    let (own, target) = if in_target {
        let target = format!(
            "      serve:\n        targets:\n          - name: gadgets\n            reconcile:\n              onReconcile: []\n              managedResources:\n                - {{apiVersion: v1, kind: ConfigMap}}\n              {}\n",
            types.replace("\n          ", "\n                ")
        );
        (String::new(), target)
    } else {
        (types, String::new())
    };
    let blueprint_crd = format!(
        r#"      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-settings"}}
            data: {{a: b}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
        {own}
{target}"#
    );
    let host = Host::start(&blueprint(&group, "Operator", "{}", &blueprint_crd)).await;
    let ns = ControlPlane::shared().namespace(name).await?;
    let ar = resource(&group, "Operator");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Operator", "op", "{}")).await;
    until_reconciled(&ar, &ns, "op").await;

    // Someone's Gadget, which the operator would serve: the CR's deletion waits for it.
    let gadgets = gadgets(&gadgets_group);
    let elsewhere = ControlPlane::shared()
        .namespace(&format!("{name}-user"))
        .await?;
    let foreign_api = theirs(&gadgets, &elsewhere).await?;

    delete_cr(&ar, &ns, "op").await;
    let note = event(&ns, "op", "DeletionBlocked").await;
    assert!(
        note.contains("Gadget") && note.contains(&format!("{elsewhere}/theirs")),
        "{note}"
    );
    let cr = deleting(&ar, &ns, "op").await;
    assert!(finalizers(&cr).contains(&"inrun.dev/cleanup".to_string()));
    assert!(
        get(configmaps(), Some(&ns), "op-settings")
            .await
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "nothing is deleted while the foreign instance exists"
    );

    // It goes: the deletion proceeds, and the CR with it.
    foreign_api
        .delete("theirs", &DeleteParams::default())
        .await?;
    eventually("the CR to be gone", || async {
        get(&ar, Some(&ns), "op").await.is_none().then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_after_an_apiservice_waits_for_it_to_be_available_and_deletion_removes_it()
-> TestResult {
    let group = unique_group("aggregated");
    let served_group = format!("things.{group}");
    let api_service = format!("v1alpha1.{served_group}");
    // An APIService whose backend does not exist: the API server never marks it Available,
    // so what comes after it waits.
    let blueprint_crd = format!(
        r#"      reconcile:
        onReconcile:
          - apiVersion: apiregistration.k8s.io/v1
            kind: APIService
            metadata: {{name: "{api_service}"}}
            spec:
              group: "{served_group}"
              version: v1alpha1
              service: {{namespace: "{{{{ .metadata.namespace }}}}", name: nowhere, port: 443}}
              groupPriorityMinimum: 1000
              versionPriority: 15
              insecureSkipTLSVerify: true
          - apiVersion: v1
            kind: ConfigMap
            metadata:
              name: "{{{{ .metadata.name }}}}-after"
              annotations: {{inrun.dev/apply-order: "1"}}
            data: {{a: b}}
        managedResources:
          - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, clusterScoped: true}}
          - {{apiVersion: v1, kind: ConfigMap}}
        managedTypes:
          - {{group: "{served_group}", kind: "*"}}
"#
    );
    let host = Host::start(&blueprint(&group, "Gateway", "{}", &blueprint_crd)).await;
    let ns = ControlPlane::shared().namespace("aggregated").await?;
    let ar = resource(&group, "Gateway");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Gateway", "gw", "{}")).await;
    let message = eventually("the CR to wait for the APIService", || async {
        let cr = get(&ar, Some(&ns), "gw").await?;
        let (status, reason, message) = reconciled(&cr)?;
        (status == "False" && reason == "Progressing" && message.contains("APIService"))
            .then_some(message)
    })
    .await;
    assert!(
        message.contains(&api_service) && message.contains("Available"),
        "{message}"
    );
    let services = api_services();
    assert!(get(&services, None, &api_service).await.is_some());
    assert!(
        get(configmaps(), Some(&ns), "gw-after").await.is_none(),
        "nothing of the next wave before the APIService is Available"
    );

    // Deleting: an aggregated API that cannot be asked has no instances to wait for, so
    // the deletion goes ahead and removes the APIService. Asking it through the API server
    // never answers (its backend does not exist): the host gives up on that after a few
    // seconds instead of holding the deletion for as long as the request would last.
    delete_cr(&ar, &ns, "gw").await;
    eventually("the CR to be gone", || async {
        get(&ar, Some(&ns), "gw").await.is_none().then_some(())
    })
    .await;
    eventually("the APIService to be gone", || async {
        get(&services, None, &api_service)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

/// `apiregistration.k8s.io/v1` APIServices.
fn api_services() -> ApiResource {
    ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    }
}

/// What the fake aggregated API answers.
#[derive(Default)]
struct Aggregated {
    /// One foreign Widget is listed.
    foreign: bool,
    /// Discovery answers 200 with a body that is no resource list.
    garbled: bool,
}

/// An HTTPS listener on 127.0.0.1 for `axum::serve`: each connection is accepted and its
/// TLS handshake done before it is handed over.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let handshake = self.acceptor.accept(tcp);
            if let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(5), handshake).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Serves an aggregated API group `group/v1alpha1` with one namespaced kind, Widget, over
/// HTTPS on 127.0.0.1 (the API server proxies to it); returns its port.
async fn aggregated_api(
    group: &str,
    state: std::sync::Arc<std::sync::Mutex<Aggregated>>,
    dir: &std::path::Path,
) -> anyhow::Result<u16> {
    use axum::response::IntoResponse as _;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let certs = inrun_testenv::tls::TestCerts::generate(dir)?;
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from_pem_slice(&certs.cert_pem)?],
        PrivateKeyDer::from_pem_slice(&certs.key_pem)?,
    )?;
    let listener = TlsListener {
        tcp: tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        acceptor: tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)),
    };
    let port = listener.tcp.local_addr()?.port();
    let gv = format!("{group}/v1alpha1");
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let state = state.clone();
        let gv = gv.clone();
        async move {
            let (foreign, garbled) = {
                let s = state.lock().unwrap_or_else(|p| p.into_inner());
                (s.foreign, s.garbled)
            };
            let path = uri.path();
            if path == format!("/apis/{gv}") {
                if garbled {
                    return (axum::http::StatusCode::OK, "this is no resource list")
                        .into_response();
                }
                return axum::Json(json!({
                    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                    "resources": [{"name": "widgets", "singularName": "widget", "namespaced": true,
                                   "kind": "Widget", "verbs": ["get", "list"]}]
                }))
                .into_response();
            }
            if path.starts_with(&format!("/apis/{gv}")) && path.ends_with("/widgets") {
                let items = if foreign {
                    vec![json!({"apiVersion": gv, "kind": "Widget",
                                "metadata": {"name": "w1", "namespace": "team-x"}})]
                } else {
                    Vec::new()
                };
                return axum::Json(json!({"apiVersion": gv, "kind": "WidgetList",
                                         "metadata": {}, "items": items}))
                .into_response();
            }
            (axum::http::StatusCode::NOT_FOUND, "").into_response()
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_available_apiservices_foreign_instances_or_unanswerable_types_hold_the_deletion()
-> TestResult {
    let group = unique_group("served");
    let served_group = format!("widgets.{group}");
    let api_service = format!("v1alpha1.{served_group}");
    let ns = ControlPlane::shared().namespace("served").await?;
    let state = std::sync::Arc::new(std::sync::Mutex::new(Aggregated::default()));
    let dir = tempfile::tempdir()?;
    let port = aggregated_api(&served_group, state.clone(), dir.path()).await?;
    // The API server reaches the backend through a Service; an ExternalName one names
    // loopback (endpoints may not).
    let services_api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client(), &ns);
    services_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "widgets"},
                "spec": {"type": "ExternalName", "externalName": "localhost"}
            }))?,
        )
        .await?;
    let blueprint_crd = format!(
        r#"      reconcile:
        onReconcile:
          - apiVersion: apiregistration.k8s.io/v1
            kind: APIService
            metadata: {{name: "{api_service}"}}
            spec:
              group: "{served_group}"
              version: v1alpha1
              service: {{namespace: "{ns}", name: widgets, port: {port}}}
              groupPriorityMinimum: 1000
              versionPriority: 15
              insecureSkipTLSVerify: true
        managedResources:
          - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, clusterScoped: true}}
        managedTypes:
          - {{group: "{served_group}", kind: "*"}}
"#
    );
    let host = Host::start(&blueprint(&group, "Gateway", "{}", &blueprint_crd)).await;
    let ar = resource(&group, "Gateway");
    served(&ar).await;
    apply_cr(&ar, &ns, &cr(&group, "Gateway", "gw", "{}")).await;
    let services = api_services();
    eventually("the APIService to be Available", || async {
        let s = get(&services, None, &api_service).await?;
        (condition(&s, "Available")?.0 == "True").then_some(())
    })
    .await;
    until_reconciled(&ar, &ns, "gw").await;

    // A foreign Widget exists: the deletion waits, naming it, and nothing is deleted.
    state.lock().unwrap_or_else(|p| p.into_inner()).foreign = true;
    delete_cr(&ar, &ns, "gw").await;
    let (_, _, message) = eventually("the deletion to be blocked", || async {
        let ready = ready(&get(&ar, Some(&ns), "gw").await?)?;
        (ready.1 == "DeletionBlocked").then_some(ready)
    })
    .await;
    assert!(
        message.contains("Widget") && message.contains("team-x/w1"),
        "{message}"
    );
    assert!(get(&services, None, &api_service).await.is_some());

    // Its types cannot be read any more while it stays Available: that holds the deletion
    // too, saying why, rather than counting as no instances.
    {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.foreign = false;
        s.garbled = true;
    }
    let (_, reason, message) = eventually("the deletion to be held unchecked", || async {
        let ready = ready(&get(&ar, Some(&ns), "gw").await?)?;
        (ready.1 != "DeletionBlocked").then_some(ready)
    })
    .await;
    assert_eq!(reason, "DeletionFailed", "{message}");
    assert!(
        message.contains(&format!(
            "APIService {api_service} serves {served_group}/v1alpha1, whose types could not be read"
        )),
        "{message}"
    );
    assert!(get(&services, None, &api_service).await.is_some());
    assert!(get(&ar, Some(&ns), "gw").await.is_some());

    // Answering again with no foreign Widget: the deletion goes ahead.
    state.lock().unwrap_or_else(|p| p.into_inner()).garbled = false;
    eventually("the CR to be gone", || async {
        get(&ar, Some(&ns), "gw").await.is_none().then_some(())
    })
    .await;
    eventually("the APIService to be gone", || async {
        get(&services, None, &api_service)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}
