//! End to end on a real kube-apiserver: children created, owned, labelled, and put back.

mod support;

use inrun_testenv::{ControlPlane, TestResult};
use support::*;

fn constructor_blueprint(group: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e}}
spec:
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor: {{location: "{webapp}"}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: v1, kind: Service}}
"#,
        webapp = plugin("inrun_plugin_webapp")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constructor_children_are_created_owned_and_the_cr_becomes_ready() -> TestResult {
    let group = unique_group("children");
    let host = Host::start(&constructor_blueprint(&group)).await;
    let ns = ControlPlane::shared().namespace("children").await?;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    let created = std::time::Instant::now();
    let cr = apply_cr(&ar, &ns, "apiVersion: GROUP/v1alpha1\nkind: WebApp\nmetadata: {name: shop}\nspec: {image: 'nginx:1.27', replicas: 2}\n".replace("GROUP", &group).as_str()).await;
    let uid = cr.metadata.uid.clone().unwrap_or_default();

    let deployment = eventually("the Deployment", || get(deployments(), Some(&ns), "shop")).await;
    assert_eq!(
        deployment
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("inrun.dev/owner-uid")),
        Some(&uid)
    );
    let owner = &deployment
        .metadata
        .owner_references
        .as_ref()
        .expect("owner references")[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (uid.as_str(), Some(true))
    );
    assert_eq!(deployment.data["spec"]["replicas"], 2);
    eventually("the Service", || get(services(), Some(&ns), "shop")).await;

    let ready_cr = eventually("the CR to be Ready", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        (reconciled(&cr)?.0 == "True").then_some(cr)
    })
    .await;
    // Reported, not asserted: speed is for benchmarks, not tests.
    eprintln!("create → children + Ready: {:?}", created.elapsed());
    assert_eq!(ready_cr.data["status"]["image"], "nginx:1.27");
    assert_eq!(ready_cr.data["status"]["observedGeneration"], 1);
    assert!(
        ready_cr
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "inrun.dev/cleanup"))
    );
    event(&ns, "shop", "Reconciled").await;

    // A child edited by hand is put back.
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client(), &ns, &deployments());
    api.patch(
        "shop",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"replicas": 7}})),
    )
    .await?;
    eventually("the Deployment's replicas to be put back to 2", || async {
        let d = get(deployments(), Some(&ns), "shop").await?;
        (d.data["spec"]["replicas"] == 2).then_some(())
    })
    .await;
    host.stop().await;
    Ok(())
}
