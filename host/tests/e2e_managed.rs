//! Managed types end to end on a real kube-apiserver (seed 003): a component that ships a
//! CRD, its operator and an instance is applied in waves and torn down in reverse, behind
//! the safeguard for foreign instances; orphaning; the finalizer timeout with foreign
//! instances; children of an earlier serve target deleted at finalize.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use inrun_testenv::{ControlPlane, TestResult};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde_json::json;
use support::*;

fn gizmos(group: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Gizmo".into(),
        plural: "gizmos".into(),
    }
}

/// A CRD `Gizmo` in `group`, as a YAML flow mapping for a template.
fn gizmo_crd(group: &str, annotations: &str) -> String {
    format!(
        r#"{{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {{name: "gizmos.{group}", annotations: {{{annotations}}}}}, spec: {{group: "{group}", scope: Namespaced, names: {{kind: Gizmo, plural: gizmos, singular: gizmo, listKind: GizmoList}}, versions: [{{name: v1, served: true, storage: true, schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}]}}}}"#
    )
}

/// Creates a user's Gizmo `name` through `api` (namespaced), held by `finalizers`.
async fn foreign_gizmo(
    api: &Api<DynamicObject>,
    parts: &str,
    name: &str,
    finalizers: &[&str],
) -> anyhow::Result<()> {
    let gizmo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{parts}/v1"), "kind": "Gizmo",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {},
    }))?;
    api.create(&PostParams::default(), &gizmo).await?;
    Ok(())
}

/// Sets the finalizers of `name` (what an operator does; `null` lets it go).
async fn set_finalizers(
    api: &Api<DynamicObject>,
    name: &str,
    finalizers: serde_json::Value,
) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
    )
    .await?;
    Ok(())
}

fn owner(obj: &DynamicObject) -> Option<String> {
    obj.metadata
        .labels
        .as_ref()?
        .get("inrun.dev/owner-uid")
        .cloned()
}

/// Records the order in which watched objects are deleted.
#[derive(Clone, Default)]
struct Deletions(Arc<Mutex<Vec<String>>>);

impl Deletions {
    /// Watches `name` of `ar` (in `ns`) and notes its deletion as `label`; returns once the
    /// watch has listed.
    async fn watch(&self, ar: &ApiResource, ns: Option<&str>, name: &str, label: &str) {
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client(), ns, ar),
            None => Api::all_with(client(), ar),
        };
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
        let log = self.0.clone();
        let label = label.to_string();
        tokio::spawn(async move {
            let mut listed = Some(listed_tx);
            let mut events = std::pin::pin!(watcher(api, config));
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Delete(_)) => {
                        log.lock().expect("log").push(label.clone());
                        return;
                    }
                    _ => {}
                }
            }
        });
        listed_rx.await.expect("the watch lists");
    }

    fn order(&self) -> Vec<String> {
        self.0.lock().expect("log").clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_ships_its_crd_operator_and_instance_in_waves_and_tears_down_in_reverse()
-> TestResult {
    let group = unique_group("component");
    let parts = format!("parts.{group}");
    // Gizmo is not served when the host starts: its CRD is one of the Result's children.
    let blueprint = component_blueprint(&group, &parts, "");
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("component").await?;
    let ar = resource(&group, "Component");
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: Component\nmetadata: {{name: base}}\nspec: {{}}\n"
        ),
    )
    .await;

    // The instance goes in last, once what it may depend on is ready: its CRD Established,
    // and its operator's Deployment available.
    let gizmo = gizmos(&parts);
    let message = eventually("the Component to wait for its operator", || async {
        let cr = get(&ar, Some(&ns), "base").await?;
        let (status, _, message) = reconciled(&cr)?;
        (status == "False" && message.contains("before the managed instances")).then_some(message)
    })
    .await;
    assert!(
        message.contains("base-operator") && message.contains("replicas"),
        "names the Deployment and what it waits for: {message}"
    );
    assert!(
        get(&gizmo, Some(&ns), "base-own").await.is_none(),
        "no instance before its operator is ready"
    );
    roll_out(&ns, "base-operator", 2).await;
    let cr = eventually("the Component to be Ready", || async {
        let cr = get(&ar, Some(&ns), "base").await?;
        (reconciled(&cr)?.0 == "True").then_some(cr)
    })
    .await;
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let own = get(&gizmo, Some(&ns), "base-own")
        .await
        .expect("the instance, applied once its CRD was Established");
    assert_eq!(owner(&own), Some(uid.clone()));
    let crd_name = format!("gizmos.{parts}");
    let crd = get(&crds(), None, &crd_name).await.expect("the CRD");
    assert_eq!(owner(&crd), Some(uid.clone()));
    assert!(
        get(&deployments(), Some(&ns), "base-operator")
            .await
            .is_some()
    );
    let errors: Vec<_> = events(&ns, "base")
        .await
        .into_iter()
        .filter(|(r, _)| r == "ReconcileError")
        .collect();
    assert!(errors.is_empty(), "no failed first apply: {errors:?}");

    let gizmos_here: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &gizmo);

    // A user's instance, held by a finalizer, in another namespace.
    let elsewhere = ControlPlane::shared().namespace("component-user").await?;
    let theirs_api: Api<DynamicObject> = Api::namespaced_with(client(), &elsewhere, &gizmo);
    foreign_gizmo(&theirs_api, &parts, "theirs", &["example.com/operator"]).await?;
    // The operator would hold our own instance the same way.
    set_finalizers(&gizmos_here, "base-own", json!(["example.com/operator"])).await?;

    let order = Deletions::default();
    order.watch(&gizmo, Some(&ns), "base-own", "Gizmo").await;
    order
        .watch(&deployments(), Some(&ns), "base-operator", "Deployment")
        .await;
    order.watch(&crds(), None, &crd_name, "CRD").await;

    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    crs.delete("base", &DeleteParams::default()).await?;
    let note = event(&ns, "base", "DeletionBlocked").await;
    assert!(
        note.contains(&format!("Gizmo (1: {elsewhere}/theirs)")),
        "{note}"
    );
    let (status, message) = eventually("Ready to say DeletionBlocked", || async {
        let cr = get(&ar, Some(&ns), "base").await?;
        let (status, reason, message) = reconciled(&cr)?;
        (reason == "DeletionBlocked").then_some((status, message))
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!("{elsewhere}/theirs")),
        "{message}"
    );
    for (what, obj) in [
        ("the CRD", get(&crds(), None, &crd_name).await),
        (
            "the operator",
            get(&deployments(), Some(&ns), "base-operator").await,
        ),
        ("the own instance", get(&gizmo, Some(&ns), "base-own").await),
    ] {
        assert!(
            obj.is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
            "{what} is not deleted while a foreign instance exists"
        );
    }

    // The user lets go of theirs: the first wave (instances) starts, and waits for the
    // operator's finalizer on the own instance before the operator goes.
    set_finalizers(&theirs_api, "theirs", json!(null)).await?;
    theirs_api
        .delete("theirs", &DeleteParams::default())
        .await?;
    let message = eventually("the CR to wait for the instance wave", || async {
        let cr = get(&ar, Some(&ns), "base").await?;
        let (_, reason, message) = reconciled(&cr)?;
        (reason == "Finalizing" && message.contains("base-own")).then_some(message)
    })
    .await;
    assert!(message.contains("before the next wave"), "{message}");
    assert!(
        get(&gizmo, Some(&ns), "base-own")
            .await
            .is_some_and(|g| g.metadata.deletion_timestamp.is_some()),
        "the own instance is being deleted"
    );
    assert!(
        get(&deployments(), Some(&ns), "base-operator")
            .await
            .is_some(),
        "the operator stays while the instance it serves is there"
    );
    set_finalizers(&gizmos_here, "base-own", json!(null)).await?;

    eventually("the Component to be gone", || async {
        get(&ar, Some(&ns), "base").await.is_none().then_some(())
    })
    .await;
    event(&ns, "base", "Finalized").await;
    eventually("the CRD to be gone", || async {
        get(&crds(), None, &crd_name).await.is_none().then_some(())
    })
    .await;
    let order = eventually("three deletions", || async {
        let o = order.order();
        (o.len() == 3).then_some(o)
    })
    .await;
    assert_eq!(order, ["Gizmo", "Deployment", "CRD"]);
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_the_result_stops_returning_is_not_pruned_under_foreign_instances() -> TestResult {
    let group = unique_group("shrink");
    let parts = format!("parts.{group}");
    let blueprint = component_blueprint(&group, &parts, "        prune: {enabled: true}\n");
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("shrink").await?;
    let ar = resource(&group, "Component");
    served(&ar).await;
    let component = |ship: bool| {
        format!(
            "apiVersion: {group}/v1alpha1\nkind: Component\nmetadata: {{name: shrink}}\nspec: {{ship: {ship}}}\n"
        )
    };
    apply_cr(&ar, &ns, &component(true)).await;
    roll_out_when_there(&ns, "shrink-operator").await;
    let gizmo = gizmos(&parts);
    served(&gizmo).await;
    eventually("the instance", || get(&gizmo, Some(&ns), "shrink-own")).await;
    let elsewhere = ControlPlane::shared().namespace("shrink-user").await?;
    let theirs_api: Api<DynamicObject> = Api::namespaced_with(client(), &elsewhere, &gizmo);
    foreign_gizmo(&theirs_api, &parts, "theirs", &[]).await?;

    apply_cr(&ar, &ns, &component(false)).await;
    let note = event(&ns, "shrink", "DeletionBlocked").await;
    let crd_name = format!("gizmos.{parts}");
    assert!(
        note.contains(&format!("not pruning CustomResourceDefinition {crd_name}"))
            && note.contains(&format!("{elsewhere}/theirs")),
        "{note}"
    );
    eventually("the own instance to be pruned", || async {
        get(&gizmo, Some(&ns), "shrink-own")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        get(&crds(), None, &crd_name)
            .await
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "the CRD stays under a foreign instance"
    );
    theirs_api
        .delete("theirs", &DeleteParams::default())
        .await?;
    eventually("the CRD to be pruned once the instance is gone", || async {
        get(&crds(), None, &crd_name).await.is_none().then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_kind_that_is_not_served_is_still_refused_at_start_up() -> TestResult {
    let group = unique_group("typo");
    let blueprint = format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Typo
      reconcile:
        managedResources:
          - {{apiVersion: apps/v1, kind: Deploymnet}}
"#
    );
    let error = Host::start(&blueprint).await.refused().await;
    let text = inrun::errors::chain(&error);
    assert!(
        text.contains("crd Typo: spec.crds[0].reconcile.managedResources[0]")
            && text.contains("does not serve kind Deploymnet in apiVersion apps/v1"),
        "{text}"
    );
    Ok(())
}

/// A declarative Blueprint whose CRs get a Gizmo CRD in `parts` and a ConfigMap, both with
/// `annotations` (a YAML flow mapping's inside), and `runtime`.
fn crd_and_configmap(group: &str, parts: &str, annotations: &str, runtime: &str) -> String {
    let crd = gizmo_crd(parts, annotations);
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  runtime: {runtime}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Kit
      reconcile:
        onReconcile:
          - {crd}
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-kit", annotations: {{{annotations}}}}}
            data: {{a: "1"}}
        managedResources:
          - {{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, clusterScoped: true}}
          - {{apiVersion: v1, kind: ConfigMap}}
        managedTypes: [{{group: "{parts}", kind: Gizmo}}]
"#
    )
}

/// Starts `blueprint`, creates a Kit `name`, waits for it to be Ready and for a foreign
/// Gizmo in another namespace; returns the host, the namespace, the Kit's uid and the
/// foreign Gizmo's namespace.
async fn kit_with_a_foreign_gizmo(
    blueprint: &str,
    group: &str,
    parts: &str,
    name: &str,
) -> anyhow::Result<(Host, String, String, String)> {
    let host = Host::start(blueprint).await;
    let ns = ControlPlane::shared().namespace("kit").await?;
    let ar = resource(group, "Kit");
    served(&ar).await;
    apply_cr(
        &ar,
        &ns,
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: Kit\nmetadata: {{name: {name}}}\nspec: {{}}\n"
        ),
    )
    .await;
    let cr = eventually("the Kit to be Ready", || async {
        let cr = get(&ar, Some(&ns), name).await?;
        (reconciled(&cr)?.0 == "True").then_some(cr)
    })
    .await;
    let gizmo = gizmos(parts);
    served(&gizmo).await;
    let elsewhere = ControlPlane::shared().namespace("kit-user").await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client(), &elsewhere, &gizmo);
    foreign_gizmo(&api, parts, "theirs", &[]).await?;
    Ok((host, ns, cr.metadata.uid.unwrap_or_default(), elsewhere))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_children_survive_deletion_unowned_and_lift_the_safeguard() -> TestResult {
    let group = unique_group("orphan");
    let parts = format!("parts.{group}");
    let blueprint = crd_and_configmap(&group, &parts, "inrun.dev/delete-policy: orphan", "{}");
    let (host, ns, _, _) = kit_with_a_foreign_gizmo(&blueprint, &group, &parts, "left").await?;
    let ar = resource(&group, "Kit");
    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    crs.delete("left", &DeleteParams::default()).await?;
    eventually("the Kit to be gone", || async {
        get(&ar, Some(&ns), "left").await.is_none().then_some(())
    })
    .await;
    let note = event(&ns, "left", "Finalized").await;
    assert!(note.contains("left 2 in place"), "{note}");
    assert!(
        events(&ns, "left")
            .await
            .iter()
            .all(|(r, _)| r != "DeletionBlocked"),
        "nothing is deleted, so nothing is guarded"
    );
    let crd = get(&crds(), None, &format!("gizmos.{parts}"))
        .await
        .expect("the CRD stays");
    let cm = get(&configmaps(), Some(&ns), "left-kit")
        .await
        .expect("the ConfigMap stays");
    for obj in [&crd, &cm] {
        assert!(obj.metadata.deletion_timestamp.is_none());
        assert_eq!(owner(obj), None, "no longer owned");
    }
    assert!(
        cm.metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty),
        "the owner reference is gone: {:?}",
        cm.metadata.owner_references
    );
    host.stop().await;
    let crd_api: Api<DynamicObject> = Api::all_with(client(), &crds());
    crd_api
        .delete(&format!("gizmos.{parts}"), &DeleteParams::default())
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_timeout_releases_the_cr_but_leaves_a_crd_with_foreign_instances()
-> TestResult {
    let group = unique_group("timeout-guard");
    let parts = format!("parts.{group}");
    let blueprint = crd_and_configmap(&group, &parts, "", "{finalizers: {timeout: 4s}}");
    let (host, ns, _, elsewhere) =
        kit_with_a_foreign_gizmo(&blueprint, &group, &parts, "late").await?;
    let ar = resource(&group, "Kit");
    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    crs.delete("late", &DeleteParams::default()).await?;
    event(&ns, "late", "DeletionBlocked").await;
    eventually("the Kit to be released", || async {
        get(&ar, Some(&ns), "late").await.is_none().then_some(())
    })
    .await;
    let note = event(&ns, "late", "FinalizeTimeout").await;
    assert!(
        note.contains(&format!("CustomResourceDefinition gizmos.{parts}"))
            && note.contains(&format!("{elsewhere}/theirs")),
        "{note}"
    );
    let crd = get(&crds(), None, &format!("gizmos.{parts}"))
        .await
        .expect("the CRD under a user's instance stays");
    assert!(crd.metadata.deletion_timestamp.is_none());
    assert_eq!(owner(&crd), None);
    assert!(
        get(&gizmos(&parts), Some(&elsewhere), "theirs")
            .await
            .is_some()
    );
    eventually("the ConfigMap to be deleted", || async {
        get(&configmaps(), Some(&ns), "late-kit")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    host.stop().await;
    let crd_api: Api<DynamicObject> = Api::all_with(client(), &crds());
    crd_api
        .delete(&format!("gizmos.{parts}"), &DeleteParams::default())
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_of_an_earlier_serve_target_are_deleted_at_finalize() -> TestResult {
    let group = unique_group("moved");
    let blueprint = format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: Mover
      serve:
        targets:
          - name: first
            reconcile:
              onReconcile:
                - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: "{{{{ .metadata.name }}}}-first"}}, data: {{a: "1"}}}}
              managedResources:
                - {{apiVersion: v1, kind: ConfigMap}}
          - name: second
            reconcile:
              onReconcile:
                - {{apiVersion: v1, kind: Secret, metadata: {{name: "{{{{ .metadata.name }}}}-second"}}, stringData: {{a: "1"}}}}
              managedResources:
                - {{apiVersion: v1, kind: Secret}}
"#
    );
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("moved").await?;
    let ar = resource(&group, "Mover");
    served(&ar).await;
    let cr = |target: &str| {
        format!(
            "apiVersion: {group}/v1alpha1\nkind: Mover\nmetadata: {{name: mover, annotations: {{inrun.dev/target: {target}}}}}\nspec: {{}}\n"
        )
    };
    apply_cr(&ar, &ns, &cr("first")).await;
    eventually("the first target's ConfigMap", || {
        get(configmaps(), Some(&ns), "mover-first")
    })
    .await;
    apply_cr(&ar, &ns, &cr("second")).await;
    let secrets = secrets();
    eventually("the second target's Secret", || {
        get(&secrets, Some(&ns), "mover-second")
    })
    .await;
    assert!(
        get(&configmaps(), Some(&ns), "mover-first").await.is_some(),
        "the second target does not manage ConfigMaps, so it does not prune them"
    );
    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    crs.delete("mover", &DeleteParams::default()).await?;
    eventually("the Mover to be gone", || async {
        get(&ar, Some(&ns), "mover").await.is_none().then_some(())
    })
    .await;
    let note = event(&ns, "mover", "Finalized").await;
    assert!(note.contains("deleted 2 child object(s)"), "{note}");
    assert!(get(&configmaps(), Some(&ns), "mover-first").await.is_none());
    assert!(get(&secrets, Some(&ns), "mover-second").await.is_none());
    host.stop().await;
    Ok(())
}

/// A Blueprint whose Gadgets return only a CRD (Gizmos in `parts`), the one kind they
/// manage, as a user writes it: the Gizmo type named in `managedTypes`.
fn crd_only(group: &str, parts: &str, runtime: &str) -> String {
    let crd = gizmo_crd(parts, "");
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  runtime: {runtime}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Gadget
      reconcile:
        onReconcile:
          - {crd}
        managedResources:
          - {{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, clusterScoped: true}}
        managedTypes: [{{group: "{parts}", kind: "*"}}]
"#
    )
}

/// Creates the Gadget `name` in `ns` and waits until it is reconciled.
async fn gadget(group: &str, ns: &str, name: &str) {
    let ar = resource(group, "Gadget");
    apply_cr(
        &ar,
        ns,
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: Gadget\nmetadata: {{name: {name}}}\nspec: {{}}\n"
        ),
    )
    .await;
    eventually("the Gadget to be reconciled", || async {
        let cr = get(&ar, Some(ns), name).await?;
        (reconciled(&cr)?.0 == "True").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cr_that_shipped_a_crd_is_deleted_under_the_generated_rbac() -> TestResult {
    let group = unique_group("shipped-crd");
    let parts = format!("parts.{group}");
    // The host holds exactly what `inrun generate rbac --install-crds` grants.
    let host = Host::start(&crd_only(&group, &parts, "{}")).await;
    let ns = ControlPlane::shared().namespace("shipped").await?;
    gadget(&group, &ns, "g").await;
    get(&crds(), None, &format!("gizmos.{parts}"))
        .await
        .expect("the CRD child");
    let ar = resource(&group, "Gadget");
    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    crs.delete("g", &DeleteParams::default()).await?;
    eventually("the Gadget to be gone", || async {
        get(&ar, Some(&ns), "g").await.is_none().then_some(())
    })
    .await;
    event(&ns, "g", "Finalized").await;
    eventually("the CRD to be deleted", || async {
        get(&crds(), None, &format!("gizmos.{parts}"))
            .await
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_the_host_may_not_finish_says_why_and_is_released_at_the_timeout() -> TestResult
{
    let group = unique_group("unlistable");
    let parts = format!("parts.{group}");
    let text = crd_only(&group, &parts, "{finalizers: {timeout: 6s}}");
    let blueprint = inrun::blueprint::from_str(&text, "blueprint.yaml")?;
    let options = identity::Identity::options();
    let mut docs = inrun::generate::rbac::manifests(&blueprint, &options);
    let granted = inrun::generate::rbac::required(&blueprint, &options);
    let bound = identity::Identity::bound(&options, &docs, &granted).await;
    let mut host = Host::start_with(&text, Run::Bound(Box::new(bound.clone()))).await;
    host.expect_forbidden();
    let ns = ControlPlane::shared().namespace("unlistable").await?;
    gadget(&group, &ns, "stuck").await;
    // Then the operator takes away the listing of Gizmos the deletion safeguard needs
    // (the host checked it at start-up: it starts only with every permission).
    let role = docs
        .iter_mut()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == options.name.as_str())
        .expect("the host's ClusterRole");
    let rules = role["rules"].as_array_mut().expect("rules");
    let before = rules.len();
    rules.retain(|r| r["apiGroups"] != json!([parts]));
    assert_eq!(rules.len(), before - 1, "one rule lists Gizmos");
    apply_all(&docs).await;
    let listing: Vec<_> = granted.into_iter().filter(|p| p.group == parts).collect();
    let as_host = ControlPlane::shared().client_with_token(&bound.token);
    eventually("the listing to be refused", || async {
        inrun::runtime::access::check(&as_host, None, &listing)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    let ar = resource(&group, "Gadget");
    let crs: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &ar);
    crs.delete("stuck", &DeleteParams::default()).await?;
    // Within one pass, on the CR: why, and what is missing.
    let (ready, reconciled_now) = eventually("the reason on the CR", || async {
        let cr = get(&ar, Some(&ns), "stuck").await?;
        let ready = ready(&cr)?;
        (ready.1 == "Forbidden").then(|| (ready, reconciled(&cr)))
    })
    .await;
    assert_eq!(ready.0, "False");
    assert!(
        ready.2.contains("listing instances of Gizmo") && ready.2.contains("forbidden"),
        "{ready:?}"
    );
    let reconciled_now = reconciled_now.expect("a Reconciled condition");
    assert_eq!(
        (reconciled_now.0.as_str(), reconciled_now.1.as_str()),
        ("False", "Forbidden")
    );
    let note = event(&ns, "stuck", "DeletionFailed").await;
    assert!(note.contains("gizmos"), "{note}");
    // Released at the timeout, the CRD it could not check left in place.
    eventually("the Gadget to be released", || async {
        get(&ar, Some(&ns), "stuck").await.is_none().then_some(())
    })
    .await;
    let note = event(&ns, "stuck", "FinalizeTimeout").await;
    assert!(
        note.contains(&format!("CustomResourceDefinition gizmos.{parts}"))
            && note.contains("could not be checked"),
        "{note}"
    );
    assert_eq!(
        event_count(&ns, "stuck", "DeletionFailed").await,
        1,
        "one event per distinct cause"
    );
    let crd = get(&crds(), None, &format!("gizmos.{parts}"))
        .await
        .expect("the unchecked CRD stays");
    assert!(crd.metadata.deletion_timestamp.is_none());
    assert_eq!(owner(&crd), None, "no longer owned");
    host.stop().await;
    let crd_api: Api<DynamicObject> = Api::all_with(client(), &crds());
    crd_api
        .delete(&format!("gizmos.{parts}"), &DeleteParams::default())
        .await?;
    Ok(())
}
