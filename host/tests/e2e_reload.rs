//! Hot reload on a real kube-apiserver: a plugin file replaced while CRs exist takes over
//! without a restart (a broken replacement leaves the old version serving and says so),
//! and a Blueprint file edited to add, break or drop CRDs is applied or refused live.

mod support;

use std::path::Path;

use inrun::fleet::{FleetOptions, TenantSource};
use serde_json::Value;
use support::{
    FleetHost, apply_cr, configmaps, eventually, get, plugin, reconciled, replace_file, resource,
    unique_group,
};

fn stamp_blueprint(name: &str, group: &str, kinds: &[&str]) -> String {
    let mut text = format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: {name} }}\nspec:\n  crds:\n"
    );
    for kind in kinds {
        text.push_str(&format!(
            "    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      reconcile:\n        default: false\n        constructor: {{ location: ./stamp.wasm }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
        ));
    }
    text
}

fn copy_plugin(name: &str, to: &Path) {
    replace_file(to, &std::fs::read(plugin(name)).expect("read plugin"));
}

/// The `data.version` of the ConfigMap the stamp plugin declared for `cr`.
async fn stamped(ns: &str, cr: &str) -> Option<String> {
    let cm = get(configmaps(), Some(ns), &format!("{cr}-stamp")).await?;
    cm.data["data"]["version"].as_str().map(str::to_string)
}

async fn wait_stamped(ns: &str, cr: &str, version: &str) {
    eventually(&format!("{ns}/{cr} stamped {version}"), || async {
        (stamped(ns, cr).await.as_deref() == Some(version)).then_some(())
    })
    .await;
}

fn cr(kind: &str, group: &str, name: &str, extra: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{ name: {name} }}\nspec: {{ note: \"{extra}\" }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_plugin_takes_over_without_a_restart_and_a_broken_one_is_refused() {
    let group = unique_group("plugin-reload");
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = dir.path().join("stamp.wasm");
    copy_plugin("inrun_test_stamp_v1", &wasm);
    let file = dir.path().join("blueprint.yaml");
    std::fs::write(&file, stamp_blueprint("reload", &group, &["Stamped"])).expect("write");
    let host = FleetHost::start(FleetOptions {
        blueprint: Some(file.clone()),
        ..FleetHost::options()
    })
    .await;
    let source = TenantSource::File(file.clone());
    let ar = resource(&group, "Stamped");
    let ns = "default";
    apply_cr(&ar, ns, &cr("Stamped", &group, "first", "a")).await;
    apply_cr(&ar, ns, &cr("Stamped", &group, "second", "a")).await;
    wait_stamped(ns, "first", "v1").await;
    wait_stamped(ns, "second", "v1").await;
    let before = host.tenant(&source).expect("tenant").plugins[0].clone();
    assert_eq!(before.reloads, 0);

    // A new version: every existing CR is reconciled again on it, with no change to the CRs.
    copy_plugin("inrun_test_stamp_v2", &wasm);
    wait_stamped(ns, "first", "v2").await;
    wait_stamped(ns, "second", "v2").await;
    let cr_status = eventually("the status from v2", || async {
        let obj = get(&ar, Some(ns), "first").await?;
        (obj.data["status"]["version"] == "v2").then_some(obj)
    })
    .await;
    assert_eq!(reconciled(&cr_status).map(|r| r.0), Some("True".into()));
    let after = host.tenant(&source).expect("tenant").plugins[0].clone();
    assert_eq!(after.reloads, 1);
    assert_ne!(after.digest, before.digest);
    assert!(after.last_error.is_none());

    // A broken replacement: the old version keeps serving, and the refusal is reported.
    let failures_before = host.metrics.plugin_reloads(false);
    replace_file(&wasm, b"\0asm but not really a component");
    let refused = eventually("the broken version to be refused", || async {
        host.tenant(&source)?.plugins[0].last_error.clone()
    })
    .await;
    assert!(refused.contains("stamp"), "names the plugin: {refused}");
    assert!(host.metrics.plugin_reloads(false) > failures_before);
    let view = host.tenant(&source).expect("tenant").plugins[0].clone();
    assert_eq!(view.digest, after.digest, "v2 still serves");
    apply_cr(&ar, ns, &cr("Stamped", &group, "third", "b")).await;
    wait_stamped(ns, "third", "v2").await;

    // Fixing the file again is picked up: a failed version is not stuck.
    copy_plugin("inrun_test_stamp_v1", &wasm);
    wait_stamped(ns, "third", "v1").await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_blueprint_adds_breaks_and_drops_crds_without_a_restart() {
    let group = unique_group("blueprint-reload");
    let dir = tempfile::tempdir().expect("tempdir");
    copy_plugin("inrun_test_stamp_v1", &dir.path().join("stamp.wasm"));
    let file = dir.path().join("blueprint.yaml");
    std::fs::write(&file, stamp_blueprint("edit", &group, &["Alpha"])).expect("write");
    // The edit adds Beta: the operator's RBAC for the host covers it already.
    let host = FleetHost::start_serving(
        FleetOptions {
            blueprint: Some(file.clone()),
            ..FleetHost::options()
        },
        inrun::sources::SourceOptions::default(),
        &[stamp_blueprint("edit", &group, &["Alpha", "Beta"])],
    )
    .await;
    let source = TenantSource::File(file.clone());
    let alpha = resource(&group, "Alpha");
    let beta = resource(&group, "Beta");
    let ns = "default";
    apply_cr(&alpha, ns, &cr("Alpha", &group, "a1", "")).await;
    wait_stamped(ns, "a1", "v1").await;

    // A CRD added to the file: installed and served.
    replace_file(
        &file,
        stamp_blueprint("edit", &group, &["Alpha", "Beta"]).as_bytes(),
    );
    apply_cr(&beta, ns, &cr("Beta", &group, "b1", "")).await;
    wait_stamped(ns, "b1", "v1").await;
    let view = host.tenant(&source).expect("tenant");
    assert_eq!(view.crds.len(), 2, "{view:?}");
    assert_eq!(view.reloads, 1);

    // A broken edit: refused with the file, CRD and field named; both CRDs keep serving.
    let broken = stamp_blueprint("edit", &group, &["Alpha", "Beta"]).replace(
        "version: v1alpha1\n      kind: Beta",
        "version: v1alpha1\n      kind: beta",
    );
    replace_file(&file, broken.as_bytes());
    let error = eventually("the broken Blueprint to be refused", || async {
        host.tenant(&source)?.error
    })
    .await;
    assert!(error.contains("blueprint.yaml"), "names the file: {error}");
    assert!(
        error.contains("spec.crds[1].kind"),
        "names the field: {error}"
    );
    apply_cr(&beta, ns, &cr("Beta", &group, "b2", "")).await;
    wait_stamped(ns, "b2", "v1").await;

    // Alpha removed: its controller stops (its CRD and CRs stay); Beta keeps serving.
    replace_file(&file, stamp_blueprint("edit", &group, &["Beta"]).as_bytes());
    let view = eventually("Alpha's controller to stop", || async {
        let v = host.tenant(&source)?;
        (v.crds.len() == 1 && v.error.is_none()).then_some(v)
    })
    .await;
    assert!(view.crds[0].starts_with("betas."), "{view:?}");
    assert!(get(&alpha, Some(ns), "a1").await.is_some(), "CRs stay");
    apply_cr(&beta, ns, &cr("Beta", &group, "b3", "")).await;
    wait_stamped(ns, "b3", "v1").await;
    let cr: Value =
        serde_json::to_value(get(&alpha, Some(ns), "a1").await.expect("a1")).expect("json");
    assert_eq!(cr["status"]["version"], "v1");
    host.stop().await;
}
