//! API Priority and Fairness for tenants, on a real kube-apiserver (flow control is on by
//! default there): with the objects `inrun generate apf` writes, what the host does while
//! impersonating a tenant's ServiceAccount is classified under the tenants' FlowSchema (the
//! API server classifies after impersonation) and what it does as itself under the host's,
//! as the API server's own metrics count them.

mod support;

use inrun::fleet::{FleetOptions, blueprint_resource};
use inrun::generate::apf::{self, ApfOptions};
use inrun::sources::SourceOptions;
use kube::api::{Api, DynamicObject};
use support::{FleetHost, Run, apply_all, apply_cr, client, configmaps, eventually, get};

/// `apiserver_flowcontrol_dispatched_requests_total` by FlowSchema, and
/// `apiserver_flowcontrol_nominal_limit_seats` by priority level, from the API server's
/// `/metrics` (as the admin, whose own requests are exempt and counted under `exempt`).
async fn flow_metrics() -> (
    std::collections::BTreeMap<String, f64>,
    std::collections::BTreeMap<String, f64>,
) {
    let request = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client()
        .request_text(request)
        .await
        .expect("apiserver /metrics");
    let mut dispatched = std::collections::BTreeMap::new();
    let mut seats = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        let n: f64 = value.trim().parse().unwrap_or_default();
        match name {
            "apiserver_flowcontrol_dispatched_requests_total" => {
                if let Some(schema) = label("flow_schema") {
                    *dispatched.entry(schema).or_insert(0.0) += n;
                }
            }
            "apiserver_flowcontrol_nominal_limit_seats" => {
                if let Some(level) = label("priority_level") {
                    seats.insert(level, n);
                }
            }
            _ => {}
        }
    }
    (dispatched, seats)
}

/// A Blueprint resource whose CRs each get a ConfigMap.
fn declarative(group: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: x }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: Flowing\n      reconcile:\n        onReconcile:\n          - apiVersion: v1\n            kind: ConfigMap\n            metadata: {{ name: '{{{{ .metadata.name }}}}-flowing' }}\n            data: {{ owner: flowing }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_host_does_as_a_tenant_is_classified_as_that_tenant_and_the_rest_as_the_host() {
    // The host serves Blueprint resources, each acting as its own ServiceAccount of the
    // namespace kept for tenants' identities, under the RBAC `inrun generate rbac` prints.
    let options = FleetOptions {
        resources: true,
        ..FleetHost::options()
    };
    let rbac = FleetHost::rbac_options(&options, &[]);
    // Flow control is the cluster operator's, as RBAC is: the harness's admin applies what
    // `inrun generate apf -n NS --service-account SA --default-tenant-service-account
    // PATTERN` prints, before the host starts.
    let apf_options = ApfOptions {
        name: "e2e-apf".into(),
        namespace: rbac.namespace.clone(),
        service_account: rbac.service_account.clone(),
        tenant_accounts: options.default_tenant_service_account.clone(),
        ..ApfOptions::default()
    };
    apply_all(&apf::manifests(&apf_options).expect("apf")).await;
    let (host_schema, tenants_schema) = apf::names(&apf_options.name);
    // The API server acts on a FlowSchema once its configuration controller has read it
    // and found its level: it then marks it not dangling.
    let schemas: Api<DynamicObject> = Api::all_with(
        client(),
        &kube::discovery::ApiResource {
            group: "flowcontrol.apiserver.k8s.io".into(),
            version: "v1".into(),
            api_version: apf::API_VERSION.into(),
            kind: "FlowSchema".into(),
            plural: "flowschemas".into(),
        },
    );
    for name in [&host_schema, &tenants_schema] {
        eventually(&format!("FlowSchema {name} in use"), || async {
            let fs = schemas.get_opt(name).await.ok()??;
            fs.data
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Dangling" && c["status"] == "False")
                .then_some(())
        })
        .await;
    }
    // The host's level has more seats than all tenants together.
    let (before, seats) = flow_metrics().await;
    let (host_seats, tenant_seats) = (
        seats.get(&host_schema).copied().unwrap_or_default(),
        seats.get(&tenants_schema).copied().unwrap_or_default(),
    );
    assert!(
        host_seats > tenant_seats && tenant_seats > 0.0,
        "nominal seats: {seats:?}"
    );
    let tenant_requests = |m: &std::collections::BTreeMap<String, f64>| {
        m.get(&tenants_schema).copied().unwrap_or_default()
    };

    let host = FleetHost::start_as(options, SourceOptions::default(), Run::Generated(rbac)).await;
    let group = support::unique_group("apf");
    let name = format!("{}-t", group.split('.').next().unwrap_or("apf"));
    let doc = serde_yaml_ng::from_str(&declarative(&group)).expect("yaml");
    support::apply_blueprint_resource(&name, doc).await;
    let api: Api<DynamicObject> = Api::all_with(client(), &blueprint_resource());
    eventually("the tenant to serve", || async {
        let obj = api.get_opt(&name).await.ok()??;
        obj.data
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Accepted" && c["reason"] == "Serving")
            .then_some(())
    })
    .await;
    let flowing = support::resource(&group, "Flowing");
    apply_cr(
        &flowing,
        "default",
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: Flowing\nmetadata: {{ name: f1 }}\nspec: {{}}\n"
        ),
    )
    .await;
    eventually("f1's ConfigMap, written as the tenant", || {
        get(configmaps(), Some("default"), "f1-flowing")
    })
    .await;

    // Only the host impersonates the tenants' ServiceAccounts here, and only it runs as
    // its own: what it did as the tenant (the CRD, the watches, the ConfigMap, the CR's
    // finalizer and status) counts under the tenants' schema, the rest under the host's.
    let (after, _) = flow_metrics().await;
    assert!(
        tenant_requests(&after) > tenant_requests(&before),
        "no request under {tenants_schema}: before {before:?}, after {after:?}"
    );
    assert!(
        after.get(&host_schema).copied().unwrap_or_default() > 0.0,
        "no request under {host_schema}: {after:?}"
    );
    // Nothing of the host's, as itself or as the tenant, fell to the cluster's default
    // for ServiceAccounts (where it all goes without these objects).
    assert_eq!(
        after.get("service-accounts"),
        before.get("service-accounts"),
        "before {before:?}, after {after:?}"
    );
    host.stop().await;
}
