//! End to end on a real kube-apiserver: the steps of one pass — children from templates
//! and hooks, prune, failed reconciles, the gate, the `managedResources` fence, reserved
//! and dropped labels, requeue, validation, a failing plugin beside a healthy one, and
//! events as `kubectl describe` shows them.

mod support;

use std::time::Duration;

use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::*;

/// The plugins a Blueprint may name as `@name@`.
const PLUGINS: [&str; 5] = [
    "inrun_plugin_webapp",
    "inrun_plugin_labels_hooks",
    "inrun_test_panic",
    "inrun_test_forbidden",
    "inrun_test_metadata",
];

/// A Blueprint with `crds` (YAML list items, indented four spaces) where `GROUP` is the
/// test's group and `@plugin@` a built plugin's path.
fn blueprint(group: &str, crds: &str) -> String {
    let mut text = format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: e2e}}\nspec:\n  crds:\n{crds}"
    )
    .replace("GROUP", group);
    for name in PLUGINS {
        let placeholder = format!("@{name}@");
        if text.contains(&placeholder) {
            text = text.replace(&placeholder, &plugin(name));
        }
    }
    text
}

/// Applies a CR of `ar` from `body` (its `metadata` and `spec`).
async fn put(ar: &ApiResource, ns: &str, mut body: Value) -> DynamicObject {
    body["apiVersion"] = json!(ar.api_version);
    body["kind"] = json!(ar.kind);
    apply_cr(ar, ns, &body.to_string()).await
}

/// Waits until the CR's `Ready` condition has `status` and `reason` for `generation`.
async fn until_ready(
    ar: &ApiResource,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
    generation: i64,
) -> DynamicObject {
    eventually(
        &format!("{ns}/{name} to be Ready={status} ({reason}) at generation {generation}"),
        || async {
            let cr = get(ar, Some(ns), name).await?;
            let (s, r, _) = reconciled(&cr)?;
            let seen = cr.data.pointer("/status/observedGeneration")?.as_i64()?;
            (s == status && r == reason && seen == generation).then_some(cr)
        },
    )
    .await
}

fn label<'o>(obj: &'o DynamicObject, key: &str) -> Option<&'o str> {
    obj.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'o>(obj: &'o DynamicObject, key: &str) -> Option<&'o str> {
    obj.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Asserts that `child` is owned by `cr`: the owner label and a controller reference.
fn assert_owned(child: &DynamicObject, cr: &DynamicObject) {
    let uid = cr.metadata.uid.as_deref().expect("cr uid");
    assert_eq!(label(child, "inrun.dev/owner-uid"), Some(uid));
    let owners = child
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    assert!(
        owners.iter().any(|o| o.uid == uid
            && o.controller == Some(true)
            && o.kind
                == cr
                    .types
                    .as_ref()
                    .map(|t| t.kind.as_str())
                    .unwrap_or_default()),
        "{:?} is not controlled by the CR: {owners:?}",
        child.metadata.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarative_templates_create_owned_children_and_emit_status() -> TestResult {
    let group = unique_group("declarative");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: WebApp
      emit:
        status:
          image: "{{ .spec.image }}"
          url: "http://{{ .metadata.name }}.{{ .metadata.namespace }}.svc"
      reconcile:
        args:
          replicas: "{{ .spec.replicas | default(1) }}"
        onCreate:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: "{{ .metadata.name }}-seed"}
            data: {image: "{{ .spec.image }}"}
        onReconcile:
          - type: deployment
            fields: {image: "{{ .spec.image }}", replicas: "{{ .args.replicas }}", port: 8080}
          - type: service
            fields: {port: 80, targetPort: 8080}
        managedResources:
          - {apiVersion: apps/v1, kind: Deployment}
          - {apiVersion: v1, kind: Service}
          - {apiVersion: v1, kind: ConfigMap}
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("declarative").await?;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "shop"}, "spec": {"image": "nginx:1.27", "replicas": 2}}),
    )
    .await;

    let cr = until_ready(&ar, &ns, "shop", "True", "Reconciled", 1).await;
    assert_eq!(cr.data["status"]["image"], "nginx:1.27");
    assert_eq!(cr.data["status"]["url"], format!("http://shop.{ns}.svc"));
    assert_eq!(label(&cr, "app.kubernetes.io/managed-by"), Some("inrun"));
    assert!(
        cr.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "inrun.dev/cleanup")
    );
    let deployment = get(deployments(), Some(&ns), "shop")
        .await
        .expect("Deployment");
    assert_owned(&deployment, &cr);
    assert_eq!(deployment.data["spec"]["replicas"], 2);
    assert_owned(
        &get(services(), Some(&ns), "shop").await.expect("Service"),
        &cr,
    );
    let seed = get(configmaps(), Some(&ns), "shop-seed")
        .await
        .expect("seed ConfigMap");
    assert_owned(&seed, &cr);
    assert_eq!(seed.data["data"]["image"], "nginx:1.27");
    event(&ns, "shop", "Reconciled").await;

    // onCreate is create-only: a new spec updates the Deployment and the status, never
    // the seed, which keeps what it was created with.
    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "shop"}, "spec": {"image": "nginx:1.28", "replicas": 3}}),
    )
    .await;
    let cr = until_ready(&ar, &ns, "shop", "True", "Reconciled", 2).await;
    assert_eq!(cr.data["status"]["image"], "nginx:1.28");
    let deployment = get(deployments(), Some(&ns), "shop")
        .await
        .expect("Deployment");
    assert_eq!(deployment.data["spec"]["replicas"], 3);
    let seed = get(configmaps(), Some(&ns), "shop-seed")
        .await
        .expect("seed ConfigMap");
    assert_eq!(seed.data["data"]["image"], "nginx:1.27");
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_output_shows_on_the_children_and_the_cr() -> TestResult {
    let group = unique_group("hooks");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: WebApp
      reconcile:
        args:
          team: "{{ .metadata.labels.team | default('platform') }}"
        onReconcile:
          - type: deployment
            fields: {image: "{{ .spec.image }}", port: 8080}
          - type: service
            fields: {targetPort: 8080}
        hooks:
          - {location: "@inrun_plugin_labels_hooks@", function: add-labels}
          - {location: "@inrun_plugin_labels_hooks@", function: annotate}
          - {location: "@inrun_plugin_labels_hooks@", function: add-sidecar}
        managedResources:
          - {apiVersion: apps/v1, kind: Deployment}
          - {apiVersion: v1, kind: Service}
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("hooks").await?;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    put(&ar, &ns, json!({"metadata": {"name": "shop", "labels": {"team": "payments"}}, "spec": {"image": "nginx:1.27"}})).await;

    let cr = until_ready(&ar, &ns, "shop", "True", "Reconciled", 1).await;
    assert_eq!(label(&cr, "demo.inrun.dev/team"), Some("payments"));
    let deployment = get(deployments(), Some(&ns), "shop")
        .await
        .expect("Deployment");
    assert_owned(&deployment, &cr);
    assert_eq!(label(&deployment, "demo.inrun.dev/team"), Some("payments"));
    assert_eq!(
        annotation(&deployment, "demo.inrun.dev/rendered-by"),
        Some("hooks")
    );
    let containers = deployment.data["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    let names: Vec<_> = containers.iter().map(|c| c["name"].as_str()).collect();
    assert_eq!(names, [Some("shop"), Some("log-shipper")]);
    assert_eq!(containers[1]["image"], "busybox:1.36");
    let service = get(services(), Some(&ns), "shop").await.expect("Service");
    assert_eq!(label(&service, "demo.inrun.dev/team"), Some("payments"));
    assert_eq!(
        annotation(&service, "demo.inrun.dev/rendered-by"),
        Some("hooks")
    );
    host.stop().await;
    Ok(())
}

/// A documents template whose extra children render only while `spec.extra` is true.
const PRUNE_CRD: &str = r#"    - group: GROUP
      version: v1alpha1
      kind: Site
      emit:
        status:
          note: "{{ .spec.note }}"
      reconcile:
        onReconcile:
          - |
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: {{ .metadata.name }}-main
            data:
              must: "{{ .spec.must | required('spec.must is required') }}"
            {% if .spec.extra %}
            ---
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: {{ .metadata.name }}-extra
            ---
            apiVersion: v1
            kind: Service
            metadata:
              name: {{ .metadata.name }}-extra
            spec:
              ports: [{port: 80}]
            ---
            apiVersion: v1
            kind: Secret
            metadata:
              name: {{ .metadata.name }}-keep
            stringData: {k: v}
            {% endif %}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
          - {apiVersion: v1, kind: Service}
          - {apiVersion: v1, kind: Secret}
        prune:
          enabled: true
          keep: [Secret]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_child_is_pruned_but_kept_kinds_and_foreign_objects_stay() -> TestResult {
    let group = unique_group("prune");
    let host = Host::start(&blueprint(&group, PRUNE_CRD)).await;
    let ns = ControlPlane::shared().namespace("prune").await?;
    let ar = resource(&group, "Site");
    served(&ar).await;
    let cr = put(
        &ar,
        &ns,
        json!({"metadata": {"name": "blog"}, "spec": {"must": "x", "extra": true}}),
    )
    .await;
    until_ready(&ar, &ns, "blog", "True", "Reconciled", 1).await;
    for (ar, name) in [
        (configmaps(), "blog-main"),
        (configmaps(), "blog-extra"),
        (services(), "blog-extra"),
        (secrets(), "blog-keep"),
    ] {
        assert!(get(&ar, Some(&ns), name).await.is_some(), "{name}");
    }
    // Someone else's ConfigMap that carries the owner label was not applied by the host.
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "blog-foreign", "labels": {"inrun.dev/owner-uid": uid}}});
    Api::<DynamicObject>::namespaced_with(client(), &ns, &configmaps())
        .patch(
            "blog-foreign",
            &PatchParams::apply("e2e-test"),
            &Patch::Apply(&foreign),
        )
        .await?;

    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "blog"}, "spec": {"must": "x", "extra": false}}),
    )
    .await;
    until_ready(&ar, &ns, "blog", "True", "Reconciled", 2).await;
    assert!(get(configmaps(), Some(&ns), "blog-extra").await.is_none());
    assert!(get(services(), Some(&ns), "blog-extra").await.is_none());
    let kept = get(secrets(), Some(&ns), "blog-keep")
        .await
        .expect("kept Secret");
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert!(get(configmaps(), Some(&ns), "blog-main").await.is_some());
    assert!(get(configmaps(), Some(&ns), "blog-foreign").await.is_some());
    let pruned: Vec<String> = events(&ns, "blog")
        .await
        .into_iter()
        .filter(|(r, _)| r == "Pruned")
        .map(|(_, n)| n)
        .collect();
    for child in [
        format!("ConfigMap {ns}/blog-extra"),
        format!("Service {ns}/blog-extra"),
    ] {
        assert!(
            pruned.iter().any(|n| n.contains(&child)),
            "no Pruned event names {child}: {pruned:?}"
        );
    }
    assert!(
        !pruned
            .iter()
            .any(|n| n.contains("blog-keep") || n.contains("blog-foreign")),
        "{pruned:?}"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reconcile_prunes_nothing_and_still_writes_status() -> TestResult {
    let group = unique_group("failed");
    let host = Host::start(&blueprint(&group, PRUNE_CRD)).await;
    let ns = ControlPlane::shared().namespace("failed").await?;
    let ar = resource(&group, "Site");
    served(&ar).await;
    put(&ar, &ns, json!({"metadata": {"name": "blog"}, "spec": {"must": "x", "extra": true, "note": "first"}})).await;
    until_ready(&ar, &ns, "blog", "True", "Reconciled", 1).await;

    // Without spec.must the template fails: the extra children, no longer rendered, stay.
    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "blog"}, "spec": {"extra": false, "note": "second"}}),
    )
    .await;
    let cr = until_ready(&ar, &ns, "blog", "False", "ReconcileError", 2).await;
    assert_eq!(cr.data["status"]["note"], "second");
    let (_, _, message) = reconciled(&cr).expect("Ready");
    assert!(message.contains("spec.must is required"), "{message}");
    let note = event(&ns, "blog", "ReconcileError").await;
    assert!(note.contains("spec.must is required"), "{note}");
    for (ar, name) in [
        (configmaps(), "blog-main"),
        (configmaps(), "blog-extra"),
        (services(), "blog-extra"),
    ] {
        let child = get(&ar, Some(&ns), name).await;
        assert!(
            child.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
            "{name} was pruned after a failed reconcile"
        );
    }
    assert!(
        !events(&ns, "blog").await.iter().any(|(r, _)| r == "Pruned"),
        "nothing is pruned"
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_cr_waits_then_runs_when_its_gate_opens() -> TestResult {
    let group = unique_group("gated");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: App
      preReconcile:
        - name: database
          when: "{{ .spec.databaseReady == true }}"
          message: waiting for the database
      reconcile:
        onReconcile:
          - type: configmap
            fields: {data: {ready: "yes"}}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("gated").await?;
    let ar = resource(&group, "App");
    served(&ar).await;
    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "api"}, "spec": {"databaseReady": false}}),
    )
    .await;

    let cr = until_ready(&ar, &ns, "api", "False", "Gated", 1).await;
    assert_eq!(
        reconciled(&cr).expect("Ready").2,
        "waiting for the database"
    );
    assert_eq!(event(&ns, "api", "Gated").await, "waiting for the database");
    assert!(get(configmaps(), Some(&ns), "api").await.is_none());
    assert!(
        !events(&ns, "api")
            .await
            .iter()
            .any(|(r, _)| r == "ReconcileError"),
        "a gated CR is not a failure"
    );

    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "api"}, "spec": {"databaseReady": true}}),
    )
    .await;
    let cr = until_ready(&ar, &ns, "api", "True", "Reconciled", 2).await;
    assert_owned(
        &get(configmaps(), Some(&ns), "api")
            .await
            .expect("ConfigMap"),
        &cr,
    );
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_outside_managed_resources_is_refused_and_nothing_is_written() -> TestResult {
    let group = unique_group("forbidden");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: Escalator
      reconcile:
        default: false
        constructor: {location: "@inrun_test_forbidden@"}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("forbidden").await?;
    let ar = resource(&group, "Escalator");
    served(&ar).await;
    let name = format!("{ns}-up");
    put(&ar, &ns, json!({"metadata": {"name": name}, "spec": {}})).await;

    let note = event(&ns, &name, "ReconcileError").await;
    assert!(note.contains("ClusterRoleBinding"), "{note}");
    assert!(note.contains("managedResources"), "{note}");
    let cr = until_ready(&ar, &ns, &name, "False", "ReconcileError", 1).await;
    assert!(
        reconciled(&cr)
            .expect("Ready")
            .2
            .contains("ClusterRoleBinding")
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(client());
    assert!(
        bindings
            .get_opt(&format!("{name}-cluster-admin"))
            .await?
            .is_none(),
        "the ClusterRoleBinding was written"
    );
    host.stop().await;
    Ok(())
}

/// A CRD reconciled by the metadata test guest, which sets on the CR the labels and
/// annotations that `spec.labels` and `spec.annotations` name.
const METADATA_CRD: &str = r#"    - group: GROUP
      version: v1alpha1
      kind: Tagged
      reconcile:
        default: false
        constructor: {location: "@inrun_test_metadata@"}
        args:
          labels: "{{ .spec.labels }}"
          annotations: "{{ .spec.annotations }}"
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_label_from_a_reconciler_is_refused() -> TestResult {
    let group = unique_group("reserved");
    let host = Host::start(&blueprint(&group, METADATA_CRD)).await;
    let ns = ControlPlane::shared().namespace("reserved").await?;
    let ar = resource(&group, "Tagged");
    served(&ar).await;
    let cr = put(
        &ar,
        &ns,
        json!({"metadata": {"name": "sneaky"},
        "spec": {"labels": {"inrun.dev/owner-uid": "forged", "example.com/tier": "web"}}}),
    )
    .await;

    let note = event(&ns, "sneaky", "ReconcileError").await;
    assert!(
        note.contains("inrun.dev/owner-uid") && note.contains("reserved"),
        "{note}"
    );
    let cr_now = until_ready(&ar, &ns, "sneaky", "False", "ReconcileError", 1).await;
    assert_eq!(label(&cr_now, "inrun.dev/owner-uid"), None);
    assert_eq!(
        label(&cr_now, "example.com/tier"),
        None,
        "nothing of the Result is written"
    );
    assert!(get(configmaps(), Some(&ns), "sneaky-meta").await.is_none());
    assert_eq!(cr_now.metadata.uid, cr.metadata.uid);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_dropped_from_the_result_is_removed_from_the_cr() -> TestResult {
    let group = unique_group("labels");
    let host = Host::start(&blueprint(&group, METADATA_CRD)).await;
    let ns = ControlPlane::shared().namespace("labels").await?;
    let ar = resource(&group, "Tagged");
    served(&ar).await;
    put(&ar, &ns, json!({"metadata": {"name": "web", "labels": {"owner": "me"}},
        "spec": {"labels": {"example.com/tier": "web"}, "annotations": {"example.com/note": "one"}}}))
    .await;
    let cr = until_ready(&ar, &ns, "web", "True", "Reconciled", 1).await;
    assert_eq!(label(&cr, "example.com/tier"), Some("web"));
    assert_eq!(annotation(&cr, "example.com/note"), Some("one"));

    // The Result now names another label and no annotation: the old keys go, the user's
    // own label and the host's managed label stay.
    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "web", "labels": {"owner": "me"}},
        "spec": {"labels": {"example.com/stage": "prod"}}}),
    )
    .await;
    let cr = until_ready(&ar, &ns, "web", "True", "Reconciled", 2).await;
    assert_eq!(label(&cr, "example.com/tier"), None);
    assert_eq!(annotation(&cr, "example.com/note"), None);
    assert_eq!(label(&cr, "example.com/stage"), Some("prod"));
    assert_eq!(label(&cr, "owner"), Some("me"));
    assert_eq!(label(&cr, "app.kubernetes.io/managed-by"), Some("inrun"));
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_requeue_runs_the_pass_again_until_its_condition_is_false() -> TestResult {
    let group = unique_group("requeue");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: Counter
      emit:
        status:
          passes: "{{ (.status.passes | default(0)) + 1 }}"
      reconcile:
        onReconcile:
          - type: configmap
            fields: {data: {a: b}}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
        requeue:
          after: 1s
          when: "{{ .status.passes < .spec.upTo }}"
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("requeue").await?;
    let ar = resource(&group, "Counter");
    served(&ar).await;
    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "tick"}, "spec": {"upTo": 4}}),
    )
    .await;

    let passes = |ar: ApiResource, ns: String| async move {
        let cr = get(&ar, Some(&ns), "tick").await?;
        cr.data.pointer("/status/passes")?.as_i64()
    };
    eventually("four passes with nothing else changing the CR", || async {
        (passes(ar.clone(), ns.clone()).await? >= 4).then_some(())
    })
    .await;
    // The condition is false from the fourth pass on: no fifth pass within several
    // requeue periods.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < deadline {
        assert_eq!(passes(ar.clone(), ns.clone()).await, Some(4));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cr_breaking_a_validation_rule_is_invalid_until_fixed() -> TestResult {
    let group = unique_group("invalid");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: WebApp
      validation:
        - rule: "{{ .spec.replicas | default(1) <= 10 }}"
          message: spec.replicas must be at most 10
      reconcile:
        onReconcile:
          - type: deployment
            fields: {image: nginx, replicas: "{{ .spec.replicas | default(1) }}"}
        managedResources:
          - {apiVersion: apps/v1, kind: Deployment}
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("invalid").await?;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "big"}, "spec": {"replicas": 20}}),
    )
    .await;

    let cr = until_ready(&ar, &ns, "big", "False", "Invalid", 1).await;
    assert!(
        reconciled(&cr)
            .expect("Ready")
            .2
            .contains("spec.replicas must be at most 10")
    );
    let note = event(&ns, "big", "Invalid").await;
    assert!(note.contains("spec.replicas must be at most 10"), "{note}");
    assert!(get(deployments(), Some(&ns), "big").await.is_none());

    put(
        &ar,
        &ns,
        json!({"metadata": {"name": "big"}, "spec": {"replicas": 2}}),
    )
    .await;
    let cr = until_ready(&ar, &ns, "big", "True", "Reconciled", 2).await;
    let deployment = get(deployments(), Some(&ns), "big")
        .await
        .expect("Deployment");
    assert_owned(&deployment, &cr);
    assert_eq!(deployment.data["spec"]["replicas"], 2);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_plugin_fails_its_own_crd_while_another_keeps_reconciling() -> TestResult {
    let group = unique_group("isolation");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: Broken
      reconcile:
        default: false
        constructor: {location: "@inrun_test_panic@"}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
    - group: GROUP
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor: {location: "@inrun_plugin_webapp@"}
        managedResources:
          - {apiVersion: apps/v1, kind: Deployment}
          - {apiVersion: v1, kind: Service}
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("isolation").await?;
    let broken = resource(&group, "Broken");
    let webapp = resource(&group, "WebApp");
    served(&broken).await;
    served(&webapp).await;
    put(
        &broken,
        &ns,
        json!({"metadata": {"name": "boom"}, "spec": {}}),
    )
    .await;
    put(
        &webapp,
        &ns,
        json!({"metadata": {"name": "shop"}, "spec": {"image": "nginx:1.27"}}),
    )
    .await;

    let note = event(&ns, "boom", "ReconcileError").await;
    assert!(note.contains("trapped"), "{note}");
    let cr = until_ready(&webapp, &ns, "shop", "True", "Reconciled", 1).await;
    assert_owned(
        &get(deployments(), Some(&ns), "shop")
            .await
            .expect("Deployment"),
        &cr,
    );
    assert!(get(services(), Some(&ns), "shop").await.is_some());
    // The broken CR keeps failing (retried with backoff, one aggregated event).
    until_ready(&broken, &ns, "boom", "False", "ReconcileError", 1).await;
    eventually("the ReconcileError event to repeat as a series", || async {
        let errors = event_objects(&ns, "boom", "ReconcileError").await;
        let count = errors.first()?.series.as_ref()?.count;
        (errors.len() == 1 && count >= 2).then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_visible_through_kubectl_describe() -> TestResult {
    let group = unique_group("describe");
    let host = Host::start(&blueprint(
        &group,
        r#"    - group: GROUP
      version: v1alpha1
      kind: App
      reconcile:
        onReconcile:
          - type: configmap
            fields: {data: {a: b}}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
"#,
    ))
    .await;
    let ns = ControlPlane::shared().namespace("describe").await?;
    let ar = resource(&group, "App");
    served(&ar).await;
    put(&ar, &ns, json!({"metadata": {"name": "api"}, "spec": {}})).await;
    event(&ns, "api", "Reconciled").await;

    let kubeconfig = ControlPlane::shared().kubeconfig().to_path_buf();
    let described = eventually("kubectl describe to show the Reconciled event", || async {
        let out = tokio::process::Command::new("/usr/bin/kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["describe", &format!("apps.{group}"), "api", "-n", &ns])
            .output()
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("Reconciled").then_some(text)
    })
    .await;
    let events_section = described
        .split_once("Events:")
        .map(|(_, e)| e)
        .unwrap_or_default();
    assert!(events_section.contains("Reconciled"), "{described}");
    assert!(events_section.contains("inrun"), "{described}");
    host.stop().await;
    Ok(())
}

/// A kind whose template names a ConfigMap `<name>-cfg`, managed with `entry` (the rest
/// of its `managedResources` item).
fn adopt_crd(kind: &str, entry: &str) -> String {
    format!(
        r#"    - group: GROUP
      version: v1alpha1
      kind: {kind}
      reconcile:
        onReconcile:
          - |
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: {{{{ .metadata.name }}}}-cfg
            data:
              by: inrun
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap{entry}}}
        prune: {{enabled: true}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_the_cr_does_not_own_is_not_taken_over_unless_its_kind_says_adopt() -> TestResult
{
    let group = unique_group("adopt");
    // `Taker` must not take over an existing ConfigMap, `Adopter` may (`adopt: true`).
    let crds = adopt_crd("Taker", "") + &adopt_crd("Adopter", ", adopt: true");
    let host = Host::start(&blueprint(&group, &crds)).await;
    let ns = ControlPlane::shared().namespace("adopt").await?;
    let (taker, adopter) = (resource(&group, "Taker"), resource(&group, "Adopter"));
    served(&taker).await;
    served(&adopter).await;
    let cms = Api::<DynamicObject>::namespaced_with(client(), &ns, &configmaps());
    for name in ["theirs-cfg", "welcome-cfg"] {
        let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"by": "someone"}});
        cms.patch(
            name,
            &PatchParams::apply("e2e-test"),
            &Patch::Apply(&theirs),
        )
        .await?;
    }

    // Without `adopt`, the CR fails with `Conflict` and the object stays as it was.
    put(
        &taker,
        &ns,
        json!({"metadata": {"name": "theirs"}, "spec": {}}),
    )
    .await;
    let cr = until_ready(&taker, &ns, "theirs", "False", "Conflict", 1).await;
    let (_, _, message) = reconciled(&cr).expect("Ready");
    assert!(
        message.contains("already exists and is not this CR's") && message.contains("adopt"),
        "{message}"
    );
    let untouched = get(configmaps(), Some(&ns), "theirs-cfg")
        .await
        .expect("the ConfigMap");
    assert_eq!(untouched.data["data"]["by"], "someone");
    assert_eq!(label(&untouched, "inrun.dev/owner-uid"), None);
    let said = events(&ns, "theirs").await;
    assert!(
        said.iter()
            .any(|(r, n)| r == "ReconcileError" && n.contains("theirs-cfg")),
        "{said:?}"
    );
    // Deleting the CR releases it without deleting what was never its own.
    Api::<DynamicObject>::namespaced_with(client(), &ns, &taker)
        .delete("theirs", &Default::default())
        .await?;
    eventually("the Taker CR to be gone", || async {
        get(&taker, Some(&ns), "theirs")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(get(configmaps(), Some(&ns), "theirs-cfg").await.is_some());

    // With `adopt: true`, the existing object becomes the CR's child.
    put(
        &adopter,
        &ns,
        json!({"metadata": {"name": "welcome"}, "spec": {}}),
    )
    .await;
    let cr = until_ready(&adopter, &ns, "welcome", "True", "Reconciled", 1).await;
    let adopted = get(configmaps(), Some(&ns), "welcome-cfg")
        .await
        .expect("the ConfigMap");
    assert_eq!(adopted.data["data"]["by"], "inrun");
    assert_owned(&adopted, &cr);
    host.stop().await;
    Ok(())
}
