//! A tenant whose plugin lives in a real OCI registry (Debian's `docker-registry` on
//! 127.0.0.1, TLS and htpasswd): the `Blueprint` custom resource names `oci://…:tag`
//! with a pull secret, the host pulls with the Secret's credentials, and moving the tag to
//! a new component re-reconciles every CR on it, with no restart.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use inrun::fleet::{FleetOptions, TenantSource, blueprint_resource};
use inrun::sources::{ComponentMeta, Credentials, SourceOptions, push};
use inrun_testenv::registry::Registry;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, PostParams};
use support::{FleetHost, apply_cr, client, configmaps, eventually, get, resource, unique_group};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_an_oci_tag_reloads_the_plugin_of_a_blueprint_resource() {
    inrun::sources::install_tls_provider();
    let registry = Registry::start_with_auth("team", "s3cret-pass")
        .await
        .expect("registry");
    let creds = Credentials {
        username: "team".into(),
        password: "s3cret-pass".into(),
    };
    let options = SourceOptions {
        insecure_registries: Vec::new(),
        extra_roots: registry.ca_pem.clone().into_iter().collect(),
    };
    let reference = registry.reference("team/stamp:live");
    let read = |name: &str| std::fs::read(support::plugin(name)).expect("plugin");
    let meta = ComponentMeta::default();
    let v1 = push(
        &read("inrun_test_stamp_v1"),
        &reference,
        &meta,
        Some(&creds),
        &options,
    )
    .await
    .expect("push v1");

    // The pull secret, as `kubectl create secret docker-registry` makes it.
    let ns = "default";
    let group = unique_group("oci-reload");
    let secret_name = format!("pull-{}", group.split('.').next().unwrap_or("x"));
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": secret_name},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": creds.to_docker_config(&registry.host)},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");

    // The registry is on loopback: the operator lists its address for Blueprint
    // resources' fetches, as for any of their calls.
    let egress = inrun::egress::Egress::new(std::slice::from_ref(&registry.host), Vec::new())
        .expect("egress list");
    let host = FleetHost::start_with(
        FleetOptions {
            resources: true,
            tenant_egress: Some(egress),
            ..FleetHost::options()
        },
        options.clone(),
    )
    .await;
    let name = format!("{}-oci", group.split('.').next().unwrap_or("x"));
    let doc = serde_json::json!({
        "apiVersion": "inrun.dev/v1alpha1", "kind": "Blueprint",
        "metadata": {"name": name},
        "spec": {"crds": [{
            "group": group, "version": "v1alpha1", "kind": "Pulled",
            "reconcile": {
                "default": false,
                "constructor": {
                    "location": reference,
                    "pullSecret": {"namespace": ns, "name": secret_name},
                },
                "managedResources": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            },
        }]},
    });
    support::apply_blueprint_resource(&name, doc).await;

    let ar = resource(&group, "Pulled");
    apply_cr(
        &ar,
        ns,
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: Pulled\nmetadata: {{ name: p1 }}\nspec: {{}}\n"
        ),
    )
    .await;
    let stamped = |want: &'static str| async move {
        let cm = get(configmaps(), Some(ns), "p1-stamp").await?;
        (cm.data["data"]["version"] == want).then_some(())
    };
    eventually(
        "p1 stamped by v1 pulled with the secret's credentials",
        || stamped("v1"),
    )
    .await;
    let source = TenantSource::Resource(name.clone());
    let view = host.tenant(&source).expect("tenant");
    assert_eq!(view.plugins[0].version, v1);

    // The tag moves to v2: the next source check pulls it and every CR runs on it.
    let v2 = push(
        &read("inrun_test_stamp_v2"),
        &reference,
        &meta,
        Some(&creds),
        &options,
    )
    .await
    .expect("push v2");
    assert_ne!(v1, v2);
    eventually("p1 stamped by v2 after the tag moved", || stamped("v2")).await;
    let view = host.tenant(&source).expect("tenant");
    assert_eq!(view.plugins[0].version, v2);
    assert_eq!(view.plugins[0].reloads, 1);

    let api: Api<DynamicObject> = Api::all_with(client(), &blueprint_resource());
    api.delete(&name, &Default::default())
        .await
        .expect("delete Blueprint");
    host.stop().await;
}
