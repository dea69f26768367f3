//! Smoke tests of the harness: the API server it starts serves CRDs with a status
//! subresource, server-side apply, watches and finalizers to kube-rs and to kubectl, and
//! really enforces RBAC.

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use inrun_testenv::{
    ControlPlane, DEFAULT_TIMEOUT, TestResult, UNPRIVILEGED_USER, install_crd, wait_for,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

const API_VERSION: &str = "smoke.inrun.dev/v1";
const FIELD_MANAGER: &str = "inrun-smoke";

fn widget_crd() -> anyhow::Result<CustomResourceDefinition> {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.smoke.inrun.dev" },
        "spec": {
            "group": "smoke.inrun.dev",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList" },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": { "type": "object", "properties": {
                            "size": { "type": "integer" },
                            "color": { "type": "string" },
                        }},
                        "status": { "type": "object", "properties": {
                            "phase": { "type": "string" },
                        }},
                    },
                }},
            }],
        },
    });
    serde_json::from_value(crd).context("the Widget CRD literal")
}

fn widget_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("smoke.inrun.dev", "v1", "Widget");
    ApiResource::from_gvk_with_plural(&gvk, "widgets")
}

/// Installs the Widget CRD (idempotent, so every test may) and returns the Widget API of
/// a fresh namespace of this test's own.
async fn widgets(client: &Client, prefix: &str) -> anyhow::Result<(String, Api<DynamicObject>)> {
    install_crd(client, &widget_crd()?).await?;
    let namespace = ControlPlane::shared().namespace(prefix).await?;
    let api = Api::namespaced_with(client.clone(), &namespace, &widget_resource());
    Ok((namespace, api))
}

fn widget(name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    let object = json!({
        "apiVersion": API_VERSION,
        "kind": "Widget",
        "metadata": { "name": name },
        "spec": spec,
    });
    serde_json::from_value(object).context("a Widget literal")
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

#[tokio::test]
async fn a_crd_is_established_and_its_status_is_written_only_through_the_subresource() -> TestResult
{
    let client = ControlPlane::shared().client();
    let established = install_crd(&client, &widget_crd()?).await?;
    let conditions = established
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True"),
        "install_crd returned before Established: {conditions:?}"
    );

    let (_, api) = widgets(&client, "status").await?;
    api.create(&PostParams::default(), &widget("w", json!({ "size": 1 }))?)
        .await?;
    let status =
        json!({ "apiVersion": API_VERSION, "kind": "Widget", "status": { "phase": "Ready" } });
    api.patch_status(
        "w",
        &PatchParams::apply(FIELD_MANAGER),
        &Patch::Apply(&status),
    )
    .await?;
    // With a status subresource the main endpoint ignores status.
    let ignored =
        json!({ "apiVersion": API_VERSION, "kind": "Widget", "status": { "phase": "Ignored" } });
    api.patch(
        "w",
        &PatchParams::apply(FIELD_MANAGER),
        &Patch::Apply(&ignored),
    )
    .await?;

    let stored = api.get("w").await?;
    assert!(
        stored.data["status"]["phase"] == "Ready",
        "status is {}",
        stored.data["status"]
    );
    Ok(())
}

#[tokio::test]
async fn a_cr_is_created_applied_watched_and_deleted() -> TestResult {
    let client = ControlPlane::shared().client();
    let (_, api) = widgets(&client, "lifecycle").await?;
    let version = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .context("a list has a resourceVersion")?;
    let mut events = api
        .watch(&WatchParams::default().fields("metadata.name=w"), &version)
        .await?
        .boxed();

    api.create(
        &PostParams::default(),
        &widget("w", json!({ "color": "red" }))?,
    )
    .await?;
    let applied = json!({
        "apiVersion": API_VERSION,
        "kind": "Widget",
        "metadata": { "name": "w" },
        "spec": { "size": 3 },
    });
    let patched = api
        .patch(
            "w",
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&applied),
        )
        .await?;
    assert!(
        patched.data["spec"] == json!({ "color": "red", "size": 3 }),
        "apply should add size and keep color: {}",
        patched.data["spec"]
    );
    let managers: Vec<_> = patched
        .managed_fields()
        .iter()
        .filter_map(|m| Some((m.manager.clone()?, m.operation.clone()?)))
        .collect();
    assert!(
        managers.contains(&(FIELD_MANAGER.to_owned(), "Apply".to_owned())),
        "managed fields: {managers:?}"
    );
    api.delete("w", &DeleteParams::default()).await?;

    let mut seen = Vec::new();
    let watched = tokio::time::timeout(DEFAULT_TIMEOUT, async {
        while let Some(event) = events.next().await {
            match event? {
                WatchEvent::Added(o) => seen.push(("Added", o.data["spec"].clone())),
                WatchEvent::Modified(o) => seen.push(("Modified", o.data["spec"].clone())),
                WatchEvent::Deleted(o) => {
                    seen.push(("Deleted", o.data["spec"].clone()));
                    return Ok(());
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => bail!("watch error: {e:?}"),
            }
        }
        bail!("the watch ended early")
    })
    .await;
    watched.with_context(|| format!("no Deleted event in time; saw {seen:?}"))??;
    assert!(
        seen.first() == Some(&("Added", json!({ "color": "red" })))
            && seen.contains(&("Modified", json!({ "color": "red", "size": 3 }))),
        "events: {seen:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_finalizer_holds_a_deletion_until_it_is_removed() -> TestResult {
    let client = ControlPlane::shared().client();
    let (_, api) = widgets(&client, "finalizer").await?;
    let mut held = widget("w", json!({ "size": 1 }))?;
    held.metadata.finalizers = Some(vec!["smoke.inrun.dev/hold".to_owned()]);
    api.create(&PostParams::default(), &held).await?;

    let deleted = api.delete("w", &DeleteParams::default()).await?;
    assert!(
        deleted.is_left(),
        "delete should return the object it only marked"
    );
    let marked = api.get("w").await?;
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "a deleted object with a finalizer stays, marked for deletion"
    );

    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await?;
    wait_for("the widget to be gone", DEFAULT_TIMEOUT, || async {
        match api.get("w").await {
            Err(err) if is_status(&err, 404) => Some(()),
            _ => None,
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn kubectl_lists_the_cr_through_the_written_kubeconfig() -> TestResult {
    let control_plane = ControlPlane::shared();
    let client = control_plane.client();
    let (namespace, api) = widgets(&client, "kubectl").await?;
    api.create(
        &PostParams::default(),
        &widget("seen-by-kubectl", json!({ "size": 1 }))?,
    )
    .await?;

    let kubectl = |args: &[&str]| {
        let mut command = tokio::process::Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(control_plane.kubeconfig())
            .arg("--cache-dir")
            .arg(control_plane.dir().join("kubectl-cache"))
            .args(args);
        command
    };
    let listed = kubectl(&[
        "get",
        "widgets.smoke.inrun.dev",
        "-n",
        &namespace,
        "-o",
        "name",
    ])
    .output()
    .await
    .context("running kubectl")?;
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && stdout.trim() == "widget.smoke.inrun.dev/seen-by-kubectl",
        "kubectl get: {}\nstdout: {stdout}\nstderr: {}",
        listed.status,
        String::from_utf8_lossy(&listed.stderr)
    );

    let version = kubectl(&["version", "-o", "json"]).output().await?;
    let version: Value =
        serde_json::from_slice(&version.stdout).context("kubectl version -o json")?;
    assert!(
        version["serverVersion"]["gitVersion"] == "v1.36.3",
        "the server reports {}",
        version["serverVersion"]
    );
    Ok(())
}

#[tokio::test]
async fn a_token_without_rbac_grants_is_refused() -> TestResult {
    let control_plane = ControlPlane::shared();
    let (namespace, admin_widgets) = widgets(&control_plane.client(), "rbac").await?;
    admin_widgets.list(&ListParams::default()).await?;

    let unprivileged = control_plane.unprivileged_client();
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(unprivileged.clone(), &namespace, &widget_resource());
    let pods: Api<Pod> = Api::namespaced(unprivileged, &namespace);
    for refused in [
        widgets.list(&ListParams::default()).await.err(),
        pods.list(&ListParams::default()).await.err(),
    ] {
        let err = refused.context("the unprivileged user could list")?;
        // 403, not 401: the token is known, and it is the authorizer that says no.
        assert!(is_status(&err, 403), "expected 403 Forbidden, got {err}");
        assert!(err.to_string().contains(UNPRIVILEGED_USER), "{err}");
    }
    Ok(())
}
