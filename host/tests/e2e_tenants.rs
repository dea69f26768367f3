//! Several tenants in one host, on a real kube-apiserver: each Blueprint file of a
//! directory and each `Blueprint` custom resource is a tenant with its own CRDs, plugins
//! and workers. A tenant whose plugin always runs out of time does not hold up another's
//! CRs; a Blueprint claiming a CRD another tenant serves is refused, and the first keeps
//! serving.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::{Duration, Instant};

use inrun::fleet::{FleetOptions, TenantSource, blueprint_resource};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use support::{
    FleetHost, apply_all, apply_cr, client, configmaps, eventually, get, plugin, reconciled,
    resource, unique_group,
};

/// Held by each test that serves `Blueprint` resources: a fleet serves every such resource
/// in the cluster, so two at once would serve each other's tenants.
static RESOURCE_TENANTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tenant(name: &str, group: &str, kind: &str, wasm: &str, deadline: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: {name} }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      workers: 2\n      reconcile:\n        default: false\n        constructor: {{ location: {wasm}, limits: {{ deadline: {deadline} }} }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
    )
}

fn cr(group: &str, kind: &str, name: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{ name: {name} }}\nspec: {{}}\n"
    )
}

/// Creates `count` CRs of `ar` one after another and returns the median time from the
/// create call to `Ready=True`.
async fn median_ready(ar: &ApiResource, group: &str, prefix: &str, count: usize) -> Duration {
    let mut times = Vec::new();
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let started = Instant::now();
        apply_cr(ar, "default", &cr(group, &ar.kind, &name)).await;
        eventually(&format!("{name} Ready"), || async {
            let obj = get(ar, Some("default"), &name).await?;
            (reconciled(&obj)?.0 == "True").then_some(())
        })
        .await;
        times.push(started.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_plugin_always_times_out_does_not_hold_up_another() {
    let group_a = unique_group("tenant-spin");
    let group_b = unique_group("tenant-ok");
    let dir = tempfile::tempdir().expect("tempdir");
    let spin = plugin("inrun_test_spin");
    let stamp = plugin("inrun_test_stamp_v1");
    std::fs::write(
        dir.path().join("b.yaml"),
        tenant("team-b", &group_b, "Quick", &stamp, "2s"),
    )
    .expect("write b");
    // Tenant A's file comes later: the operator's RBAC for the host covers it already.
    let host = FleetHost::start_serving(
        FleetOptions {
            tenants: Some(dir.path().to_path_buf()),
            ..FleetHost::options()
        },
        inrun::sources::SourceOptions::default(),
        &[tenant("team-a", &group_a, "Spinner", &spin, "500ms")],
    )
    .await;
    let quick = resource(&group_b, "Quick");
    // Warm-up: the CRD is served and the plugin compiled.
    median_ready(&quick, &group_b, "warm", 1).await;
    let alone = median_ready(&quick, &group_b, "alone", 5).await;

    // Tenant A arrives as a new file: its plugin spins until its 500ms deadline, always.
    std::fs::write(
        dir.path().join("a.yaml"),
        tenant("team-a", &group_a, "Spinner", &spin, "500ms"),
    )
    .expect("write a");
    let spinner = resource(&group_a, "Spinner");
    for i in 0..6 {
        apply_cr(
            &spinner,
            "default",
            &cr(&group_a, "Spinner", &format!("spin-{i}")),
        )
        .await;
    }
    eventually("tenant A's CRs to fail on the deadline", || async {
        let obj = get(&spinner, Some("default"), "spin-0").await?;
        let (status, _, message) = reconciled(&obj)?;
        (status == "False" && message.contains("deadline")).then_some(())
    })
    .await;
    let beside = median_ready(&quick, &group_b, "beside", 5).await;
    eprintln!(
        "tenant B create→Ready median: {:.0} ms alone, {:.0} ms beside tenant A's always-timing-out plugin",
        alone.as_secs_f64() * 1e3,
        beside.as_secs_f64() * 1e3
    );
    // B is never stuck behind A's deadlines: each of B's CRs becomes Ready well within
    // one of A's retries, whatever A does.
    assert!(
        beside < alone + Duration::from_secs(2),
        "B slowed from {alone:?} to {beside:?}"
    );
    let a_view = host
        .tenant(&TenantSource::File(dir.path().join("a.yaml")))
        .expect("tenant A");
    assert_eq!(a_view.name.as_deref(), Some("team-a"));
    assert!(a_view.error.is_none());
    // Each tenant's plugin series carry its name; A's controller counted its failures.
    let (tenant_a, tenant_b) = (
        TenantSource::File(dir.path().join("a.yaml")).to_string(),
        TenantSource::File(dir.path().join("b.yaml")).to_string(),
    );
    let spinners = format!("controller=\"spinners.{group_a}\"");
    let text = host.metrics.render();
    for series in [
        format!(
            "inrun_plugin_deadline_hits_total{{tenant=\"{tenant_a}\",plugin=\"inrun_test_spin\"}}"
        ),
        format!(
            "inrun_plugin_calls_total{{tenant=\"{tenant_b}\",plugin=\"inrun_test_stamp_v1\",outcome=\"ok\"}}"
        ),
        format!("controller_runtime_reconcile_errors_total{{{spinners}}}"),
    ] {
        let count = text
            .lines()
            .find_map(|l| l.strip_prefix(&series)?.trim().parse::<f64>().ok());
        assert!(count.is_some_and(|c| c >= 1.0), "{series} in {text}");
    }

    // A tenant file removed: its controllers stop, B keeps serving.
    std::fs::remove_file(dir.path().join("a.yaml")).expect("remove a");
    eventually("tenant A to go", || async {
        host.tenant(&TenantSource::File(dir.path().join("a.yaml")))
            .is_none()
            .then_some(())
    })
    .await;
    // Its series go once its controllers have stopped: nothing of A is exported.
    let quote = |v: &str| format!("\"{v}\"");
    eventually("tenant A's series to go", || async {
        let text = host.metrics.render();
        (!text.contains(&quote(&tenant_a)) && !text.contains(&spinners)).then_some(())
    })
    .await;
    median_ready(&quick, &group_b, "after", 1).await;
    let text = host.metrics.render();
    assert!(
        text.contains(&format!("tenant={}", quote(&tenant_b))),
        "{text}"
    );
    host.stop().await;
}

async fn apply_blueprint(name: &str, text: &str) {
    let doc: serde_json::Value = serde_yaml_ng::from_str(text).expect("yaml");
    support::apply_blueprint_resource(name, doc).await;
}

/// Waits until the Blueprint resource `name` is accepted, and checks it says `Serving`.
async fn serving(what: &str, name: &str) {
    let (status, reason, message) = eventually(what, || async {
        accepted(name)
            .await
            .filter(|(status, _, _)| status == "True")
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Serving"),
        "{message}"
    );
}

/// The `Accepted` condition of a Blueprint resource: (status, reason, message).
async fn accepted(name: &str) -> Option<(String, String, String)> {
    let obj = get(blueprint_resource(), None, name).await?;
    let c = obj
        .data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Accepted")?
        .clone();
    Some((
        c["status"].as_str()?.into(),
        c["reason"].as_str()?.into(),
        c["message"].as_str()?.into(),
    ))
}

fn declarative(group: &str, kind: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: x }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      reconcile:\n        onReconcile:\n          - apiVersion: v1\n            kind: ConfigMap\n            metadata: {{ name: '{{{{ .metadata.name }}}}-declared' }}\n            data: {{ owner: '{kind}' }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blueprint_resources_are_tenants_and_a_claimed_crd_is_refused() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let group = unique_group("tenant-claim");
    let other = unique_group("tenant-cr");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("first.yaml");
    std::fs::write(&file, declarative(&group, "Owned")).expect("write");
    let host = FleetHost::start(FleetOptions {
        tenants: Some(dir.path().to_path_buf()),
        resources: true,
        ..FleetHost::options()
    })
    .await;
    let owned = resource(&group, "Owned");
    apply_cr(&owned, "default", &cr(&group, "Owned", "o1")).await;
    eventually("o1's ConfigMap", || {
        get(configmaps(), Some("default"), "o1-declared")
    })
    .await;

    // A Blueprint resource of its own: accepted, its CRD installed and served.
    let tenant_cr = format!("{}-ok", group.split('.').next().unwrap_or("t"));
    apply_blueprint(&tenant_cr, &declarative(&other, "Fresh")).await;
    let (status, reason, _) =
        eventually("the Blueprint to be accepted", || accepted(&tenant_cr)).await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Serving"));
    let fresh = resource(&other, "Fresh");
    apply_cr(&fresh, "default", &cr(&other, "Fresh", "f1")).await;
    let cm = eventually("f1's ConfigMap", || {
        get(configmaps(), Some("default"), "f1-declared")
    })
    .await;
    assert_eq!(cm.data["data"]["owner"], "Fresh");

    // A Blueprint resource claiming the file tenant's CRD: refused, the file tenant serves on.
    let thief = format!("{}-thief", group.split('.').next().unwrap_or("t"));
    apply_blueprint(&thief, &declarative(&group, "Owned")).await;
    let (status, reason, message) =
        eventually("the claim to be refused", || accepted(&thief)).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "CrdConflict"));
    assert!(message.contains(&format!("owneds.{group}")), "{message}");
    assert!(
        message.contains("first.yaml"),
        "names the serving tenant: {message}"
    );
    apply_cr(&owned, "default", &cr(&group, "Owned", "o2")).await;
    eventually("o2's ConfigMap", || {
        get(configmaps(), Some("default"), "o2-declared")
    })
    .await;

    // A Blueprint resource may not name a plugin file on the host's disk, nor grant its
    // plugins capabilities or adopt objects it did not create unless the operator allows it.
    let local = format!("{}-local", group.split('.').next().unwrap_or("t"));
    let greedy = tenant(
        "x",
        &unique_group("tenant-local"),
        "Local",
        &plugin("inrun_test_stamp_v1"),
        "1s",
    )
    .replace(
        "limits: { deadline: 1s } }",
        "limits: { deadline: 1s }, capabilities: { cluster: { read: [ { apiVersion: v1, kind: Secret, namespaces: ['*'] } ] } } }",
    )
    .replace(
        "managedResources: [ { apiVersion: v1, kind: ConfigMap } ]",
        "managedResources: [ { apiVersion: v1, kind: ConfigMap, adopt: true } ]\n        external: [ { name: db, postgres: { secretRef: { namespace: kube-system, name: db, key: url }, query: 'select 1' } } ]",
    );
    assert!(
        greedy.contains("kind: Secret") && greedy.contains("adopt: true"),
        "{greedy}"
    );
    apply_blueprint(&local, &greedy).await;
    let (status, _, message) =
        eventually("the local path to be refused", || accepted(&local)).await;
    assert_eq!(status, "False");
    assert!(message.contains("local path"), "{message}");
    assert!(
        message.contains(
            "reconcile.constructor.capabilities: this Blueprint may not grant capabilities"
        ),
        "{message}"
    );
    assert!(
        message.contains(
            "reconcile.managedResources[0].adopt: this Blueprint may not adopt objects it did not create"
        ),
        "{message}"
    );
    assert!(
        message.contains(
            "reconcile.external[0].postgres.secretRef.namespace: a Blueprint resource reads Secrets only in the CR's own namespace"
        ),
        "{message}"
    );

    // Deleting a Blueprint resource retires its tenant.
    let api: Api<DynamicObject> = Api::all_with(client(), &blueprint_resource());
    for name in [&tenant_cr, &thief, &local] {
        api.delete(name, &Default::default())
            .await
            .expect("delete Blueprint");
    }
    eventually("the resource tenants to go", || async {
        host.fleet
            .views()
            .iter()
            .all(|v| !matches!(v.source, TenantSource::Resource(_)))
            .then_some(())
    })
    .await;
    host.stop().await;
}

/// A remote reconciler on 127.0.0.1 that answers every CR with one ConfigMap; its port.
async fn remote_reconciler() -> u16 {
    let app = axum::Router::new().route(
        "/reconcile",
        axum::routing::post(|body: axum::Json<serde_json::Value>| async move {
            let name = body["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("x")
                .to_string();
            axum::Json(serde_json::json!({
                "result": "ok",
                "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": format!("{name}-remote")}}],
            }))
        }),
    );
    support::serve(app).await
}

fn remote_tenant(group: &str, kind: &str, endpoint: &str) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: x }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      reconcile:\n        default: false\n        remote: {{ endpoint: '{endpoint}', timeout: 2s }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
    )
}

/// A fleet serving Blueprint resources with `list` as `--tenant-egress`.
async fn egress_host(list: &[String]) -> FleetHost {
    let egress = inrun::egress::Egress::new(list, Vec::new()).expect("egress list");
    FleetHost::start(FleetOptions {
        resources: true,
        tenant_egress: Some(egress),
        ..FleetHost::options()
    })
    .await
}

/// The message of the CR's `Ready=False`, once it has one.
async fn not_ready(ar: &ApiResource, name: &str) -> String {
    eventually(&format!("{name} to be Ready=False"), || async {
        let obj = get(ar, Some("default"), name).await?;
        let (status, _, message) = reconciled(&obj)?;
        (status == "False").then_some(message)
    })
    .await
}

/// Annotates ServiceAccount `namespace/name` to admit the Blueprint resources `blueprints`
/// as they are now, by uid (`inrun.dev/blueprints: name=uid,…`).
async fn admit(namespace: &str, name: &str, blueprints: &[&String]) {
    let api: Api<DynamicObject> = Api::all_with(client(), &blueprint_resource());
    let mut entries = Vec::new();
    for b in blueprints {
        let uid = api
            .get(b)
            .await
            .expect("Blueprint")
            .metadata
            .uid
            .expect("uid");
        entries.push(format!("{b}={uid}"));
    }
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client(), namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {"inrun.dev/blueprints": entries.join(",")}}});
    accounts
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the ServiceAccount");
}

async fn delete_blueprints(names: &[&String]) {
    let api: Api<DynamicObject> = Api::all_with(client(), &blueprint_resource());
    for name in names {
        let _ = api.delete(name, &Default::default()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blueprint_resource_calls_out_only_where_the_egress_list_allows() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let port = remote_reconciler().await;
    let tag = |g: &str| {
        format!(
            "{}-{g}",
            unique_group("egress").split('.').next().unwrap_or("e")
        )
    };
    let (listed, unlisted, metadata, by_name) = (tag("ip"), tag("other"), tag("meta"), tag("name"));

    let host = egress_host(&[format!("127.0.0.1:{port}")]).await;
    // Listed by address: served.
    let group = unique_group("egress-ip");
    let endpoint = format!("http://127.0.0.1:{port}/reconcile");
    apply_blueprint(&listed, &remote_tenant(&group, "Called", &endpoint)).await;
    let called = resource(&group, "Called");
    apply_cr(&called, "default", &cr(&group, "Called", "e1")).await;
    eventually("the listed remote's ConfigMap", || {
        get(configmaps(), Some("default"), "e1-remote")
    })
    .await;

    // Not listed: refused before anything runs.
    let endpoint = format!("http://127.0.0.2:{port}/reconcile");
    apply_blueprint(
        &unlisted,
        &remote_tenant(&unique_group("egress-other"), "Far", &endpoint),
    )
    .await;
    let (status, _, message) = eventually("the unlisted endpoint to be refused", || {
        accepted(&unlisted)
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!(
            "reconcile.remote.endpoint: 127.0.0.2:{port} is not in the operator's egress allowlist"
        )),
        "{message}"
    );

    // An external call to the cloud metadata address is refused at call time.
    let group = unique_group("egress-meta");
    let text = declarative(&group, "Peek").replace(
        "        managedResources:",
        "        external:\n          - name: creds\n            http: { url: 'http://169.254.169.254/latest/meta-data/iam' }\n        managedResources:",
    );
    assert!(text.contains("169.254.169.254"), "{text}");
    apply_blueprint(&metadata, &text).await;
    let peek = resource(&group, "Peek");
    apply_cr(&peek, "default", &cr(&group, "Peek", "e3")).await;
    let message = not_ready(&peek, "e3").await;
    assert!(
        message.contains("169.254.169.254:80 is not in the operator's egress allowlist"),
        "{message}"
    );
    delete_blueprints(&[&listed, &unlisted, &metadata]).await;
    host.stop().await;

    // Listed by a name, not by address: the name resolves to loopback, refused when the
    // call connects.
    let host = egress_host(&[format!("localhost:{port}")]).await;
    let group = unique_group("egress-name");
    let endpoint = format!("http://localhost:{port}/reconcile");
    apply_blueprint(&by_name, &remote_tenant(&group, "Named", &endpoint)).await;
    let (status, _, message) =
        eventually("the named endpoint's verdict", || accepted(&by_name)).await;
    assert_eq!(status, "True", "{message}");
    let named = resource(&group, "Named");
    apply_cr(&named, "default", &cr(&group, "Named", "e2")).await;
    let message = not_ready(&named, "e2").await;
    assert!(message.contains("loopback"), "{message}");
    assert!(
        get(configmaps(), Some("default"), "e2-remote")
            .await
            .is_none()
    );
    delete_blueprints(&[&by_name]).await;
    host.stop().await;
}

/// A Blueprint resource acting as `sa` (omitted: the host's default) with three kinds: a
/// `Fenced` CR writes a ConfigMap into the namespace its `spec.target` names, a `Grabby`
/// CR a Secret into `kube-system`, a `Climber` CR a ClusterRole. Its `managedResources`
/// allow all three anywhere: only RBAC can stop them.
fn identity_tenant(group: &str, sa: Option<&inrun::blueprint::ServiceAccountRef>) -> String {
    let identity = sa.map_or(String::new(), |sa| {
        format!(
            "  serviceAccount: {{ namespace: {}, name: {} }}\n",
            sa.namespace, sa.name
        )
    });
    let kind = |kind: &str, object: &str, managed: &str| {
        format!(
            "    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      reconcile:\n        onReconcile:\n          - {object}\n        managedResources: [ {managed} ]\n"
        )
    };
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: x }}\nspec:\n{identity}  crds:\n{}{}{}",
        kind(
            "Fenced",
            "{ apiVersion: v1, kind: ConfigMap, metadata: { name: '{{ .metadata.name }}-cm', namespace: '{{ .spec.target }}' }, data: { from: '{{ .metadata.namespace }}' } }",
            "{ apiVersion: v1, kind: ConfigMap, namespaces: ['*'] }",
        ),
        kind(
            "Grabby",
            "{ apiVersion: v1, kind: Secret, metadata: { name: '{{ .metadata.name }}-grab', namespace: kube-system }, stringData: { k: v } }",
            "{ apiVersion: v1, kind: Secret, namespaces: ['*'] }",
        ),
        kind(
            "Climber",
            "{ apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: { name: '{{ .metadata.name }}-{{ .metadata.namespace }}' }, rules: [] }",
            "{ apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, clusterScoped: true }",
        ),
    )
}

fn target_cr(group: &str, kind: &str, name: &str, target: &str) -> String {
    format!(
        "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{ name: {name} }}\nspec: {{ target: {target} }}\n"
    )
}

/// The CR's `Ready` condition once it is False: (reason, message).
async fn refused(ar: &ApiResource, namespace: &str, name: &str) -> (String, String) {
    eventually(&format!("{name} to be Ready=False"), || async {
        let obj = get(ar, Some(namespace), name).await?;
        let (status, reason, message) = reconciled(&obj)?;
        (status == "False").then_some((reason, message))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blueprint_resource_acts_as_its_service_account_and_rbac_fences_what_it_writes() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let cp = inrun_testenv::ControlPlane::shared();
    let team_a = cp.namespace("team-a").await.expect("namespace");
    let team_b = cp.namespace("team-b").await.expect("namespace");
    let sa = inrun::blueprint::ServiceAccountRef {
        namespace: team_a.clone(),
        name: "tenant".into(),
    };
    let group = unique_group("identity");
    let text = identity_tenant(&group, Some(&sa));
    // The operator's RBAC for the tenant: what `inrun generate rbac --tenant` prints for
    // team-a, except writing ClusterRoles (it may still read them: its watch does).
    let blueprint = inrun::blueprint::from_str(&text, "tenant.yaml").expect("blueprint");
    let rbac_name = format!("tenant-{}", group.split('.').next().unwrap_or("t"));
    let mut docs = inrun::generate::rbac::tenant_manifests(
        &blueprint,
        &sa,
        std::slice::from_ref(&team_a),
        &inrun::generate::rbac::RbacOptions {
            name: rbac_name.clone(),
            install_crds: true,
            ..Default::default()
        },
    );
    let cluster_role = docs
        .iter_mut()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let rule = cluster_role["rules"]
        .as_array_mut()
        .expect("rules")
        .iter_mut()
        .find(|r| r["resources"] == serde_json::json!(["clusterroles"]))
        .expect("a rule on ClusterRoles");
    assert!(rule["verbs"].to_string().contains("create"), "{rule}");
    rule["verbs"] = serde_json::json!(["get", "list", "watch"]);
    apply_all(&docs).await;

    // The host may act as both tenants' ServiceAccounts (`--impersonate`), nothing more.
    let nobody = inrun::blueprint::ServiceAccountRef {
        namespace: team_a.clone(),
        name: "nobody".into(),
    };
    let options = FleetOptions {
        resources: true,
        ..FleetHost::options()
    };
    let rbac = FleetHost::rbac_options(&options, &[sa.clone(), nobody.clone()]);
    let mut host = FleetHost::start_as(
        options,
        inrun::sources::SourceOptions::default(),
        support::Run::Generated(rbac),
    )
    .await;
    // The tenants' writes their RBAC does not allow are refused on purpose.
    host.expect_forbidden();
    let tag = |t: &str| format!("{rbac_name}-{t}");
    let (fenced_bp, default_bp, nobody_bp) = (tag("sa"), tag("default"), tag("nobody"));
    // Each ServiceAccount admits the Blueprint resources that may act as it: by name, at
    // first, which is not enough.
    for (name, admits) in [("tenant", &fenced_bp), ("nobody", &nobody_bp)] {
        apply_all(&[serde_json::json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": team_a, "annotations": {"inrun.dev/blueprints": admits}},
        })])
        .await;
    }
    // A Blueprint resource naming a ServiceAccount that does not admit it: refused.
    let thief = tag("thief");
    apply_blueprint(
        &thief,
        &identity_tenant(&unique_group("identity-thief"), Some(&sa)),
    )
    .await;
    let (status, reason, message) =
        eventually("the borrowed identity to be refused", || accepted(&thief)).await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NoIdentity"),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "ServiceAccount {sa} does not admit the Blueprint {thief}"
        )),
        "{message}"
    );
    // Admitted by name only: refused, saying which uid to admit.
    apply_blueprint(&fenced_bp, &text).await;
    let (status, reason, message) =
        eventually("the tenant admitted by name only", || accepted(&fenced_bp)).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoIdentity"));
    assert!(message.contains("by name only"), "{message}");
    // Admitted by uid: served, at the next check, without touching the Blueprint.
    admit(&team_a, "tenant", &[&fenced_bp]).await;
    serving("the tenant to be accepted", &fenced_bp).await;

    // In its own namespace it reconciles, as the ServiceAccount.
    let fenced = resource(&group, "Fenced");
    apply_cr(
        &fenced,
        &team_a,
        &target_cr(&group, "Fenced", "home", &team_a),
    )
    .await;
    let cm = eventually("home's ConfigMap", || {
        get(configmaps(), Some(&team_a), "home-cm")
    })
    .await;
    assert_eq!(cm.data["data"]["from"], team_a.as_str());

    // Into team-b, kube-system or the cluster scope: Forbidden, nothing written.
    apply_cr(
        &fenced,
        &team_a,
        &target_cr(&group, "Fenced", "away", &team_b),
    )
    .await;
    let (reason, message) = refused(&fenced, &team_a, "away").await;
    assert_eq!(reason, "Forbidden", "{message}");
    assert!(
        message.contains(&sa.username()),
        "names the identity: {message}"
    );
    let grabby = resource(&group, "Grabby");
    apply_cr(&grabby, &team_a, &target_cr(&group, "Grabby", "grab", "x")).await;
    let (reason, message) = refused(&grabby, &team_a, "grab").await;
    assert_eq!(reason, "Forbidden", "{message}");
    assert!(message.contains(&sa.username()), "{message}");
    let climber = resource(&group, "Climber");
    apply_cr(
        &climber,
        &team_a,
        &target_cr(&group, "Climber", "climb", "x"),
    )
    .await;
    let (reason, message) = refused(&climber, &team_a, "climb").await;
    assert_eq!(reason, "Forbidden", "{message}");
    assert!(message.contains(&sa.username()), "{message}");
    assert!(get(configmaps(), Some(&team_b), "away-cm").await.is_none());
    let secrets = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    assert!(
        get(&secrets, Some("kube-system"), "grab-grab")
            .await
            .is_none()
    );
    let roles = ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&());
    assert!(
        get(&roles, None, &format!("climb-{team_a}"))
            .await
            .is_none()
    );

    // Another tenant, acting as the ServiceAccount the host's pattern derives from its name
    // (bound to cluster-admin here), is unaffected and may write where this one may not.
    let other = unique_group("identity-default");
    apply_blueprint(&default_bp, &identity_tenant(&other, None)).await;
    let (status, _, message) =
        eventually("the default-identity tenant", || accepted(&default_bp)).await;
    assert_eq!(status, "True", "{message}");
    let other_fenced = resource(&other, "Fenced");
    apply_cr(
        &other_fenced,
        &team_a,
        &target_cr(&other, "Fenced", "wide", &team_b),
    )
    .await;
    eventually("wide's ConfigMap in team-b", || {
        get(configmaps(), Some(&team_b), "wide-cm")
    })
    .await;
    let obj = get(&fenced, Some(&team_a), "home").await.expect("home");
    assert_eq!(reconciled(&obj).expect("Ready").0, "True");

    // A ServiceAccount without the reads its watches need: refused before it starts,
    // naming the identity and what it lacks.
    let nobody_text = identity_tenant(&unique_group("identity-nobody"), Some(&nobody));
    apply_blueprint(&nobody_bp, &nobody_text).await;
    admit(&team_a, "nobody", &[&nobody_bp]).await;
    // (Refused for want of consent until the annotation is read; then for its RBAC.)
    let (status, reason, message) = eventually("the powerless tenant's verdict", || async {
        accepted(&nobody_bp)
            .await
            .filter(|(_, reason, _)| reason != "NoIdentity")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "StartFailed"));
    assert!(
        message.contains(&format!("ServiceAccount {nobody}")) && message.contains("list"),
        "{message}"
    );
    // Refused for missing RBAC, it is tried again at every check: once the operator grants
    // what `inrun generate rbac --tenant` prints, it serves without being touched.
    let nobody_blueprint =
        inrun::blueprint::from_str(&nobody_text, "nobody.yaml").expect("blueprint");
    apply_all(&inrun::generate::rbac::tenant_manifests(
        &nobody_blueprint,
        &nobody,
        std::slice::from_ref(&team_a),
        &inrun::generate::rbac::RbacOptions {
            name: format!("{rbac_name}-nobody"),
            install_crds: true,
            ..Default::default()
        },
    ))
    .await;
    serving("the mended tenant to serve", &nobody_bp).await;
    // Consent withdrawn (the annotation no longer lists it): the serving tenant stops at the
    // next check, refused; admitted again, it serves again.
    admit(&team_a, "tenant", &[]).await;
    let (_, reason, message) = eventually("the tenant to lose its consent", || async {
        accepted(&fenced_bp)
            .await
            .filter(|(status, _, _)| status == "False")
    })
    .await;
    assert_eq!(reason, "NoIdentity", "{message}");
    assert!(
        host.tenant(&TenantSource::Resource(fenced_bp.clone()))
            .is_some_and(|v| v.error.is_some() && v.crds.is_empty()),
        "its controllers stopped"
    );
    admit(&team_a, "tenant", &[&fenced_bp]).await;
    serving("the tenant to serve again", &fenced_bp).await;

    // The Blueprint deleted and created again by someone else under the same name: the
    // consent was for the one deleted, so the new one is refused.
    delete_blueprints(&[&fenced_bp]).await;
    eventually("the deleted tenant to go", || async {
        host.tenant(&TenantSource::Resource(fenced_bp.clone()))
            .is_none()
            .then_some(())
    })
    .await;
    apply_blueprint(&fenced_bp, &text).await;
    let (status, reason, message) = eventually("the re-created Blueprint's verdict", || {
        accepted(&fenced_bp)
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoIdentity"));
    assert!(message.contains("deleted and created again"), "{message}");
    delete_blueprints(&[&fenced_bp, &default_bp, &nobody_bp, &thief]).await;
    host.stop().await;

    // Without a default identity, a Blueprint resource that names none is refused.
    let host = FleetHost::start(FleetOptions {
        resources: true,
        default_tenant_service_account: None,
        ..FleetHost::options()
    })
    .await;
    let anonymous = tag("anonymous");
    apply_blueprint(
        &anonymous,
        &identity_tenant(&unique_group("identity-none"), None),
    )
    .await;
    let (status, reason, message) =
        eventually("the anonymous tenant's verdict", || accepted(&anonymous)).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoIdentity"));
    assert!(message.contains("spec.serviceAccount"), "{message}");
    delete_blueprints(&[&anonymous]).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blueprint_resources_that_name_no_identity_each_act_as_their_own() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let cp = inrun_testenv::ControlPlane::shared();
    let team_a = cp.namespace("own-a").await.expect("namespace");
    let team_b = cp.namespace("own-b").await.expect("namespace");
    let accounts_ns = cp.namespace("own-ids").await.expect("namespace");
    let pattern = inrun::blueprint::AccountPattern::parse(&format!("{accounts_ns}/t-{{name}}"))
        .expect("pattern");
    let group = unique_group("own");
    let tag = |t: &str| format!("{}-{t}", group.split('.').next().unwrap_or("own"));
    let (a, b) = (tag("a"), tag("b"));
    let (group_a, group_b) = (format!("a.{group}"), format!("b.{group}"));
    let (text_a, text_b) = (
        identity_tenant(&group_a, None),
        identity_tenant(&group_b, None),
    );
    // The operator grants each derived ServiceAccount its own namespace only: what
    // `inrun generate rbac --tenant --default-tenant-service-account` prints for it.
    let (sa_a, sa_b) = (
        pattern.for_blueprint(&a).expect("sa"),
        pattern.for_blueprint(&b).expect("sa"),
    );
    for (name, text, sa, ns) in [(&a, &text_a, &sa_a, &team_a), (&b, &text_b, &sa_b, &team_b)] {
        let blueprint = inrun::blueprint::from_str(text, "t.yaml").expect("blueprint");
        apply_all(&inrun::generate::rbac::tenant_manifests(
            &blueprint,
            sa,
            std::slice::from_ref(ns),
            &inrun::generate::rbac::RbacOptions {
                name: format!("tenant-{name}"),
                install_crds: true,
                ..Default::default()
            },
        ))
        .await;
    }
    // The host, under its generated RBAC, may act as any ServiceAccount of that namespace.
    let options = FleetOptions {
        resources: true,
        default_tenant_service_account: Some(pattern.clone()),
        // No namespace but the pattern's: tenants' identities live where the operator says.
        tenant_identity_namespaces: Some(Vec::new()),
        on_removal: Default::default(),
        ..FleetHost::options()
    };
    let rbac = FleetHost::rbac_options(&options, &[]);
    let mut host = FleetHost::start_as(
        options,
        inrun::sources::SourceOptions::default(),
        support::Run::Generated(rbac),
    )
    .await;
    host.expect_forbidden();
    for (name, text) in [(&a, &text_a), (&b, &text_b)] {
        let doc = serde_yaml_ng::from_str(text).expect("yaml");
        support::put_blueprint_resource(name, doc).await;
    }
    // Before its ServiceAccount exists (and admits it by uid), a Blueprint acts as nobody.
    let (status, reason, message) = eventually("A's verdict", || accepted(&a)).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoIdentity"));
    assert!(
        message.contains(&format!("ServiceAccount {sa_a} does not exist")),
        "{message}"
    );
    for (name, sa) in [(&a, &sa_a), (&b, &sa_b)] {
        apply_all(&[serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": sa.name, "namespace": sa.namespace},
        })])
        .await;
        admit(&sa.namespace, &sa.name, &[name]).await;
    }
    for name in [&a, &b] {
        serving(&format!("{name} to serve"), name).await;
    }
    // Each writes in its own namespace, as its own ServiceAccount.
    let (fenced_a, fenced_b) = (resource(&group_a, "Fenced"), resource(&group_b, "Fenced"));
    apply_cr(
        &fenced_a,
        &team_a,
        &target_cr(&group_a, "Fenced", "home", &team_a),
    )
    .await;
    apply_cr(
        &fenced_b,
        &team_b,
        &target_cr(&group_b, "Fenced", "home", &team_b),
    )
    .await;
    for ns in [&team_a, &team_b] {
        eventually(&format!("home's ConfigMap in {ns}"), || {
            get(configmaps(), Some(ns), "home-cm")
        })
        .await;
    }
    // A reaching into B's namespace (its managedResources allow it): Forbidden by RBAC,
    // naming A's own identity, not a shared one that B's grants would have widened.
    apply_cr(
        &fenced_a,
        &team_a,
        &target_cr(&group_a, "Fenced", "reach", &team_b),
    )
    .await;
    let (reason, message) = refused(&fenced_a, &team_a, "reach").await;
    assert_eq!(reason, "Forbidden", "{message}");
    assert!(message.contains(&sa_a.username()), "{message}");
    assert!(get(configmaps(), Some(&team_b), "reach-cm").await.is_none());
    // A Blueprint resource naming a ServiceAccount outside the namespaces kept for tenants'
    // identities (one in a tenant's namespace, whose token a pod there could mount):
    // refused before anything is done as it.
    let c = tag("c");
    let elsewhere = inrun::blueprint::ServiceAccountRef {
        namespace: team_a.clone(),
        name: "tenant".into(),
    };
    let doc = serde_yaml_ng::from_str(&identity_tenant(&format!("c.{group}"), Some(&elsewhere)))
        .expect("yaml");
    support::put_blueprint_resource(&c, doc).await;
    let (status, reason, message) = eventually("C's verdict", || accepted(&c)).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoIdentity"));
    assert!(
        message.contains(&format!(
            "ServiceAccount {elsewhere} is not in a namespace the host keeps for tenants' identities ({accounts_ns}"
        )),
        "{message}"
    );
    delete_blueprints(&[&a, &b, &c]).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_draining_a_changed_controller_holds_up_no_other_tenants_load() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let group = unique_group("drain");
    let quick = format!("{}-quick", group.split('.').next().unwrap_or("drain"));
    // Tenant A (a file) reconciles with a plugin that sleeps to its 20 s deadline.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("slow.yaml");
    let text = tenant(
        "slow",
        &group,
        "Sleeper",
        &plugin("inrun_test_sleepy"),
        "20s",
    );
    std::fs::write(&file, &text).expect("write A");
    let host = FleetHost::start_serving(
        FleetOptions {
            tenants: Some(dir.path().to_path_buf()),
            resources: true,
            ..FleetHost::options()
        },
        inrun::sources::SourceOptions::default(),
        &[],
    )
    .await;
    let slow = TenantSource::File(file.clone());
    eventually("A to serve", || async {
        host.tenant(&slow).filter(|v| v.serving)
    })
    .await;
    let sleepers = resource(&group, "Sleeper");
    apply_cr(&sleepers, "default", &cr(&group, "Sleeper", "s1")).await;
    let busy = format!("controller_runtime_active_workers{{controller=\"sleepers.{group}\"}} 1");
    eventually("A's reconcile in flight", || async {
        host.metrics.render().contains(&busy).then_some(())
    })
    .await;
    // A's CRD changes: its controller must drain (the reconcile in flight finishes, at its
    // deadline) before the new one starts.
    support::replace_file(&file, text.replace("workers: 2", "workers: 3").as_bytes());
    // Meanwhile tenant B loads and serves.
    let other = unique_group("drain-quick");
    apply_blueprint(&quick, &declarative(&other, "Quick")).await;
    serving("B to serve", &quick).await;
    // ... while A still drains: its reload has not finished, its reconcile still runs.
    let a = host.tenant(&slow).expect("A's tenant");
    assert_eq!(
        a.reloads, 0,
        "A reloaded before B served: B waited on A's drain"
    );
    assert!(
        host.metrics.render().contains(&busy),
        "A's reconcile ended before B served"
    );
    // Then A's reload completes.
    eventually("A's reload", || async {
        host.tenant(&slow).filter(|v| v.reloads == 1)
    })
    .await;
    delete_blueprints(&[&quick]).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_plugin_source_hangs_holds_up_no_other_tenant() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // A plugin server that accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let asked = Arc::new(AtomicUsize::new(0));
    let held = tokio::spawn({
        let asked = asked.clone();
        async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                asked.fetch_add(1, Ordering::SeqCst);
                open.push(socket);
            }
        }
    });
    let group_slow = unique_group("tenant-hang");
    let group_b = unique_group("tenant-beside");
    let dir = tempfile::tempdir().expect("tempdir");
    // A plain-http registry (so the request is sent and its answer awaited, up to the
    // client's read timeout of a minute).
    let registry = format!("127.0.0.1:{port}");
    let hanging = format!("oci://{registry}/plugins/stuck:v1");
    std::fs::write(
        dir.path().join("a-slow.yaml"),
        tenant("team-slow", &group_slow, "Stuck", &hanging, "2s"),
    )
    .expect("write the slow tenant");
    let host = FleetHost::start_serving(
        FleetOptions {
            tenants: Some(dir.path().to_path_buf()),
            ..FleetHost::options()
        },
        inrun::sources::SourceOptions {
            insecure_registries: vec![registry],
            extra_roots: Vec::new(),
        },
        // The second tenant's file comes later; the host's RBAC covers it already.
        &[tenant(
            "team-b",
            &group_b,
            "Beside",
            &plugin("inrun_test_stamp_v1"),
            "2s",
        )],
    )
    .await;
    eventually("the slow tenant's plugin fetch to start", || async {
        (asked.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    // Another tenant arrives while the first is still fetching: it loads and serves.
    std::fs::write(
        dir.path().join("b.yaml"),
        tenant(
            "team-b",
            &group_b,
            "Beside",
            &plugin("inrun_test_stamp_v1"),
            "2s",
        ),
    )
    .expect("write b");
    let beside = resource(&group_b, "Beside");
    // (Names of its own: the stamp plugin's ConfigMaps are named after the CR.)
    let took = median_ready(&beside, &group_b, "past-hang", 1).await;
    let slow = host.tenant(&TenantSource::File(dir.path().join("a-slow.yaml")));
    assert!(
        slow.as_ref()
            .is_none_or(|v| !v.serving && v.error.is_none()),
        "the slow tenant is still loading: {slow:?}"
    );
    eprintln!(
        "tenant B served its first CR {:.0} ms after it arrived, beside a tenant whose plugin fetch hangs",
        took.as_secs_f64() * 1e3
    );
    // Shutting down does not wait for the hanging fetch either.
    host.stop().await;
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_url_reaches_only_the_host_the_egress_list_allows() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let pg = inrun_testenv::services::Postgres::start()
        .await
        .expect("postgres");
    let port = pg
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .expect("port");
    // The operator lists one name and the server's own address (loopback, refused
    // unless listed as an address).
    let host = egress_host(&[
        format!("db.example.invalid:{port}"),
        format!("127.0.0.1:{port}"),
    ])
    .await;
    let tag = |g: &str| {
        format!(
            "{}-{g}",
            unique_group("pg-egress").split('.').next().unwrap_or("e")
        )
    };
    let mut names = Vec::new();
    for (what, url, told) in [
        // The url crate reads the host after the last `@`, the client after the first.
        (
            "list",
            format!("postgres://postgres@127.0.0.1:{port},x@db.example.invalid:{port}/postgres"),
            "names more than one host",
        ),
        (
            "hostaddr",
            format!("postgres://postgres@db.example.invalid:{port}/postgres?hostaddr=127.0.0.1"),
            "names an address to dial (hostaddr)",
        ),
        (
            "param",
            format!("postgres://postgres@db.example.invalid:{port}/postgres?host=127.0.0.1"),
            "names more than one host",
        ),
    ] {
        let group = unique_group(&format!("pg-{what}"));
        let text = declarative(&group, "Query").replace(
            "        managedResources:",
            &format!(
                "        external:\n          - name: one\n            postgres: {{ url: '{url}', query: 'SELECT 1 AS one' }}\n        managedResources:"
            ),
        );
        let name = tag(what);
        apply_blueprint(&name, &text).await;
        names.push(name);
        let ar = resource(&group, "Query");
        apply_cr(&ar, "default", &cr(&group, "Query", what)).await;
        let message = not_ready(&ar, what).await;
        assert!(message.contains(told), "{what}: {message}");
        assert!(
            get(configmaps(), Some("default"), &format!("{what}-declared"))
                .await
                .is_none(),
            "{what}: nothing is applied after a refused call"
        );
    }
    // The listed address itself: connected to, and the query's row reaches the pass.
    let group = unique_group("pg-direct");
    let text = declarative(&group, "Query").replace(
        "        managedResources:",
        &format!(
            "        external:\n          - name: one\n            postgres: {{ url: 'postgres://postgres@127.0.0.1:{port}/postgres', query: 'SELECT 1 AS one' }}\n        managedResources:"
        ),
    );
    let name = tag("direct");
    apply_blueprint(&name, &text).await;
    names.push(name);
    let ar = resource(&group, "Query");
    apply_cr(&ar, "default", &cr(&group, "Query", "direct")).await;
    eventually("the listed server's query to succeed", || {
        get(configmaps(), Some("default"), "direct-declared")
    })
    .await;
    let names: Vec<&String> = names.iter().collect();
    delete_blueprints(&names).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blueprint_takes_a_share_under_the_hosts_per_tenant_budget_and_size() {
    let group = unique_group("budget");
    let dir = tempfile::tempdir().expect("tempdir");
    let stamp = plugin("inrun_test_stamp_v1");
    let with_budget = |budget: &str| {
        tenant("team-a", &group, "Budgeted", &stamp, "2s").replace(
            "spec:\n  crds:",
            &format!("spec:\n  runtime:\n    budget: {budget}\n  crds:"),
        )
    };
    let file = dir.path().join("a.yaml");
    std::fs::write(&file, with_budget("{ pluginCalls: 1000 }")).expect("write");
    let host = FleetHost::start(FleetOptions {
        tenants: Some(dir.path().to_path_buf()),
        ..FleetHost::options()
    })
    .await;
    let source = TenantSource::File(file.clone());
    // More than the host gives a tenant: refused, naming the field and the budget.
    let error = eventually("the greedy Blueprint refused", || async {
        host.tenant(&source)?.error
    })
    .await;
    assert!(
        error.contains(
            "spec.runtime.budget.pluginCalls: 1000 exceeds the host's per-tenant budget of "
        ),
        "{error}"
    );
    // Less: it serves, its calls under its own share.
    std::fs::write(
        &file,
        with_budget(
            "{ pluginCalls: 1, pluginMemory: 32Mi, logLinesPerSecond: 10, apiWritesPerSecond: 20 }",
        ),
    )
    .expect("rewrite");
    let ar = resource(&group, "Budgeted");
    apply_cr(&ar, "default", &cr(&group, "Budgeted", "frugal")).await;
    eventually("frugal Ready", || async {
        let obj = get(&ar, Some("default"), "frugal").await?;
        (reconciled(&obj)?.0 == "True").then_some(())
    })
    .await;
    assert!(host.tenant(&source).expect("tenant").error.is_none());

    // A tenant larger than a tenant may be (here 21 CRDs, each a cluster-wide watch):
    // refused before anything is installed, naming the field and the cap.
    let crds: String = (0..21)
        .map(|i| {
            format!(
                "    - {{ group: {group}, version: v1alpha1, kind: Many{i}, reconcile: {{ onReconcile: [] }} }}\n"
            )
        })
        .collect();
    let big = dir.path().join("big.yaml");
    std::fs::write(
        &big,
        format!("apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: big }}\nspec:\n  crds:\n{crds}"),
    )
    .expect("write big");
    let error = eventually("the oversized Blueprint refused", || async {
        host.tenant(&TenantSource::File(big.clone()))?.error
    })
    .await;
    assert!(
        error.contains("spec.crds: 21 CRDs; a tenant may declare at most 20"),
        "{error}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_past_its_tenants_compile_limits_fails_that_tenants_load_only() {
    let group = unique_group("compile");
    let dir = tempfile::tempdir().expect("tempdir");
    let (webapp, stamp_v1, stamp_v2, hog) = (
        plugin("inrun_plugin_webapp"),
        plugin("inrun_test_stamp_v1"),
        plugin("inrun_test_stamp_v2"),
        plugin("inrun_test_hog"),
    );
    let len = |p: &str| std::fs::metadata(p).expect("plugin").len();
    // What a load is charged: the module and its compiled form.
    let engine = inrun::wasm::Engine::new(inrun::wasm::EngineSettings::default()).expect("engine");
    let loaded = |p: &str| {
        let compiled = engine.load_file(std::path::Path::new(p)).expect("plugin");
        len(p) + compiled.info().compiled_size as u64
    };
    // Modules up to one byte less than the webapp's; an hour's bytes: one stamp and a half.
    let mut options = FleetOptions {
        tenants: Some(dir.path().to_path_buf()),
        ..FleetHost::options()
    };
    let hour = loaded(&stamp_v1) * 3 / 2;
    options.policy.tenant_size.compile = inrun::plugins::CompileLimits {
        module_bytes: len(&webapp) - 1,
        bytes_per_hour: hour,
    };
    assert!(len(&stamp_v2) < len(&webapp) && loaded(&hog) < hour);
    assert!(loaded(&stamp_v1) + loaded(&stamp_v2) > hour);
    let two = format!(
        "{}    - group: {group}\n      version: v1alpha1\n      kind: Second\n      reconcile:\n        default: false\n        constructor: {{ location: {stamp_v2} }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n",
        tenant("two", &group, "First", &stamp_v1, "2s")
    );
    let files = [
        ("big.yaml", tenant("big", &group, "Big", &webapp, "2s")),
        ("two.yaml", two),
        ("fine.yaml", tenant("fine", &group, "Fine", &hog, "2s")),
    ];
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let host = FleetHost::start(options).await;
    let source = |name: &str| TenantSource::File(dir.path().join(name));
    let error = |name: &'static str| {
        let source = source(name);
        let host = &host;
        async move {
            eventually(&format!("{name} refused"), || async {
                host.tenant(&source)?.error
            })
            .await
        }
    };
    // Larger than a tenant's module may be: refused, naming the limit and its flag.
    let big = error("big.yaml").await;
    assert!(
        big.contains("a tenant's plugin may be at most")
            && big.contains("--max-tenant-module-size"),
        "{big}"
    );
    // Two plugins, more bytes than its hour's budget: the second is refused.
    let two = error("two.yaml").await;
    assert!(
        two.contains("of plugins loaded an hour (--tenant-compile-budget)"),
        "{two}"
    );
    // Another tenant, with a budget of its own, serves.
    eventually("fine to serve", || async {
        host.tenant(&source("fine.yaml")).filter(|v| v.serving)
    })
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blueprint_events_faster_than_the_reload_interval_do_not_starve_the_checks() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The tenant file comes later: the operator's RBAC for the host covers it already.
    let quiet = declarative(&unique_group("tick-quiet"), "Quiet");
    let host = FleetHost::start_serving(
        FleetOptions {
            resources: true,
            tenants: Some(dir.path().to_path_buf()),
            reload: Some(Duration::from_secs(2)),
            ..FleetHost::options()
        },
        inrun::sources::SourceOptions::default(),
        std::slice::from_ref(&quiet),
    )
    .await;
    // A Blueprint resource touched every 300 ms: each touch is an event for the fleet.
    let noisy = format!(
        "{}-noisy",
        unique_group("tick").split('.').next().unwrap_or("t")
    );
    apply_blueprint(&noisy, &declarative(&unique_group("tick-noisy"), "Noisy")).await;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let toucher = {
        let noisy = noisy.clone();
        tokio::spawn(async move {
            let api: Api<DynamicObject> = Api::all_with(client(), &blueprint_resource());
            for n in 0u64.. {
                let patch = serde_json::json!({"metadata": {"labels": {"touch": n.to_string()}}});
                let _ = api
                    .patch(&noisy, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                    _ = stopped.changed() => return,
                }
            }
        })
    };
    // A tenant file written meanwhile is found by the periodic check, which the events
    // must not keep putting off.
    let file = dir.path().join("quiet.yaml");
    std::fs::write(&file, &quiet).expect("write");
    let view = eventually("the periodic check to find the new tenant file", || async {
        host.tenant(&TenantSource::File(file.clone()))
    })
    .await;
    assert!(view.error.is_none(), "{:?}", view.error);
    let _ = stop.send(true);
    let _ = toucher.await;
    delete_blueprints(&[&noisy]).await;
    host.stop().await;
}

/// The finalizers on the CR `name` of `ar` in `default`.
async fn finalizers_of(ar: &ApiResource, name: &str) -> Vec<String> {
    get(ar, Some("default"), name)
        .await
        .and_then(|cr| cr.metadata.finalizers)
        .unwrap_or_default()
}

/// Waits until the resource tenant `name` is gone from `host`.
async fn tenant_gone(host: &FleetHost, name: &str) {
    let source = TenantSource::Resource(name.to_string());
    eventually(&format!("tenant {name} to go"), || async {
        host.tenant(&source).is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_tenants_crs_lose_the_hosts_finalizers_so_deleting_them_does_not_hang() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let group = unique_group("release");
    let host = FleetHost::start(FleetOptions {
        resources: true,
        ..FleetHost::options()
    })
    .await;
    let name = format!("{}-bp", group.split('.').next().unwrap_or("t"));
    let two = format!(
        "{}{}",
        declarative(&group, "Kept"),
        declarative(&group, "Dropped")
            .split_once("  crds:\n")
            .map(|(_, crds)| crds)
            .unwrap_or_default()
    );
    apply_blueprint(&name, &two).await;
    serving("the Blueprint with two CRDs", &name).await;
    let (kept, dropped) = (resource(&group, "Kept"), resource(&group, "Dropped"));
    apply_cr(&kept, "default", &cr(&group, "Kept", "k1")).await;
    apply_cr(&dropped, "default", &cr(&group, "Dropped", "d1")).await;
    for (ar, n) in [(&kept, "k1"), (&dropped, "d1")] {
        eventually(&format!("{n} to carry the host's finalizer"), || async {
            finalizers_of(ar, n)
                .await
                .contains(&"inrun.dev/cleanup".to_string())
                .then_some(())
        })
        .await;
    }
    // Someone else's finalizer on k1 stays whatever the host does.
    Api::<DynamicObject>::namespaced_with(client(), "default", &kept)
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["inrun.dev/cleanup", "e2e.inrun.dev/keep"]}})),
        )
        .await
        .expect("add a finalizer of the test's");

    // The reload drops a CRD: its controller stops, and its CRs are let go. Deleting one
    // is immediate (no controller would ever finish its cleanup).
    apply_blueprint(&name, &declarative(&group, "Kept")).await;
    eventually("d1 to lose the host's finalizer", || async {
        finalizers_of(&dropped, "d1").await.is_empty().then_some(())
    })
    .await;
    Api::<DynamicObject>::namespaced_with(client(), "default", &dropped)
        .delete("d1", &Default::default())
        .await
        .expect("delete d1");
    eventually("d1 to be gone", || async {
        get(&dropped, Some("default"), "d1")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        finalizers_of(&kept, "k1").await,
        ["inrun.dev/cleanup", "e2e.inrun.dev/keep"],
        "the CRD kept is served on"
    );

    // The tenant removed: its CRs keep only others' finalizers, and their label.
    delete_blueprints(&[&name]).await;
    eventually("k1 to keep only the test's finalizer", || async {
        (finalizers_of(&kept, "k1").await == ["e2e.inrun.dev/keep"]).then_some(())
    })
    .await;
    let k1 = get(&kept, Some("default"), "k1").await.expect("k1");
    assert_eq!(
        k1.metadata.labels.unwrap_or_default()["app.kubernetes.io/managed-by"],
        "inrun"
    );
    host.stop().await;

    // `--on-tenant-removal keep`: the finalizers stay with the tenant gone.
    let host = FleetHost::start(FleetOptions {
        resources: true,
        on_removal: inrun::fleet::release::OnRemoval::Keep,
        ..FleetHost::options()
    })
    .await;
    let other = unique_group("keep");
    let kept_name = format!("{}-bp", other.split('.').next().unwrap_or("t"));
    apply_blueprint(&kept_name, &declarative(&other, "Held")).await;
    serving("the Blueprint whose CRs are kept", &kept_name).await;
    let held = resource(&other, "Held");
    apply_cr(&held, "default", &cr(&other, "Held", "h1")).await;
    eventually("h1 to carry the host's finalizer", || async {
        (finalizers_of(&held, "h1").await == ["inrun.dev/cleanup"]).then_some(())
    })
    .await;
    delete_blueprints(&[&kept_name]).await;
    tenant_gone(&host, &kept_name).await;
    host.stop().await;
    assert_eq!(finalizers_of(&held, "h1").await, ["inrun.dev/cleanup"]);

    // Tidy up: the test's own finalizers go, and so do the CRs.
    for (ar, n) in [(&kept, "k1"), (&held, "h1")] {
        let api = Api::<DynamicObject>::namespaced_with(client(), "default", ar);
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("drop finalizers");
        api.delete(n, &Default::default()).await.expect("delete");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_of_a_blueprint_resource_acts_as_its_tenant_and_reaches_no_farther() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let cp = inrun_testenv::ControlPlane::shared();
    let team = cp.namespace("plan-team").await.expect("namespace");
    let elsewhere = cp.namespace("plan-else").await.expect("namespace");
    let sa = inrun::blueprint::ServiceAccountRef {
        namespace: team.clone(),
        name: "planned".into(),
    };
    let group = unique_group("plan-tenant");
    let text = identity_tenant(&group, Some(&sa));
    let blueprint = inrun::blueprint::from_str(&text, "tenant.yaml").expect("blueprint");
    let name = format!("plan-{}", group.split('.').next().unwrap_or("t"));
    apply_all(&inrun::generate::rbac::tenant_manifests(
        &blueprint,
        &sa,
        std::slice::from_ref(&team),
        &inrun::generate::rbac::RbacOptions {
            name: format!("tenant-{name}"),
            install_crds: true,
            ..Default::default()
        },
    ))
    .await;
    let options = FleetOptions {
        resources: true,
        ..FleetHost::options()
    };
    let rbac = FleetHost::rbac_options(&options, std::slice::from_ref(&sa));
    let mut host = FleetHost::start_as(
        options,
        inrun::sources::SourceOptions::default(),
        support::Run::Generated(rbac),
    )
    .await;
    // The CR writing outside the tenant's namespace is refused on purpose.
    host.expect_forbidden();
    apply_all(&[serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "planned", "namespace": team},
    })])
    .await;
    apply_blueprint(&name, &text).await;
    admit(&team, "planned", &[&name]).await;
    serving("the tenant to serve", &name).await;
    let fenced = resource(&group, "Fenced");
    apply_cr(&fenced, &team, &target_cr(&group, "Fenced", "home", &team)).await;
    eventually("home's ConfigMap", || {
        get(configmaps(), Some(&team), "home-cm")
    })
    .await;
    apply_cr(
        &fenced,
        &team,
        &target_cr(&group, "Fenced", "away", &elsewhere),
    )
    .await;
    refused(&fenced, &team, "away").await;
    host.stop().await;

    // The tenant's change: its ConfigMaps get a field more. Planned against the Blueprint
    // resource as it runs, by an operator (the harness's admin, on purpose: the plan must
    // narrow itself to the tenant, not rely on its runner's reach).
    let dir = tempfile::tempdir().expect("tempdir");
    let new = dir.path().join("new.yaml");
    let from = "data: { from: '{{ .metadata.namespace }}' }";
    assert!(text.contains(from));
    std::fs::write(
        &new,
        text.replace(
            from,
            "data: { from: '{{ .metadata.namespace }}', planned: 'yes' }",
        ),
    )
    .expect("write");
    let crd = format!("fenceds.{group}");
    let args = [
        "--current-resource",
        name.as_str(),
        "--blueprint",
        new.to_str().unwrap_or_default(),
        "--crd",
        crd.as_str(),
        "-n",
        team.as_str(),
    ];
    let (code, report) = support::plan::run(cp.kubeconfig(), &args);
    assert_eq!(code, 1, "{report:#?}");
    let home = support::plan::of(&report, "home");
    assert_eq!(
        home["updated"][0]["fields"],
        serde_json::json!([{"path": "data.planned", "to": "yes"}]),
        "{home:#}"
    );
    // Where the tenant may not write, neither may its plan: the dry run, as the tenant's
    // ServiceAccount, is refused as the run was.
    let away = support::plan::of(&report, "away");
    assert_eq!(away["verdict"], "fails", "{away:#}");
    let message = away["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&sa.username()) && message.contains("forbidden"),
        "{away:#}"
    );
    assert!(
        get(configmaps(), Some(&elsewhere), "away-cm")
            .await
            .is_none()
    );
    delete_blueprints(&[&name]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blueprint_resources_change_rolls_out_step_by_step_and_its_status_shows_it() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let cp = inrun_testenv::ControlPlane::shared();
    let ns = cp.namespace("rollout-tenant").await.expect("namespace");
    let group = unique_group("rollout-tenant");
    let name = format!("roll-{}", group.split('.').next().unwrap_or("t"));
    let text = |size: &str| {
        format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: x }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: Sized\n      reconcile:\n        onReconcile:\n          - {{ apiVersion: v1, kind: ConfigMap, metadata: {{ name: '{{{{ .metadata.name }}}}-size' }}, data: {{ size: {size} }} }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n        rollout: {{ steps: [ {{ percent: 20, pause: 1h }}, {{ percent: 100 }} ] }}\n"
        )
    };
    let host = FleetHost::start(FleetOptions {
        resources: true,
        ..FleetHost::options()
    })
    .await;
    apply_blueprint(&name, &text("small")).await;
    serving("the tenant to serve", &name).await;
    let sized = resource(&group, "Sized");
    for i in 0..20 {
        apply_cr(&sized, &ns, &cr(&group, "Sized", &format!("s{i}"))).await;
    }
    let sizes = || async {
        let api: Api<DynamicObject> = Api::namespaced_with(client(), &ns, &configmaps());
        let list = api.list(&Default::default()).await.ok()?;
        let mut by = std::collections::BTreeMap::<String, usize>::new();
        for cm in list.items {
            if let Some(size) = cm.data["data"]["size"].as_str() {
                *by.entry(size.to_string()).or_default() += 1;
            }
        }
        Some(by)
    };
    eventually("every CR's ConfigMap", || async {
        sizes().await.filter(|by| by.get("small") == Some(&20))
    })
    .await;
    // The tenant's change: 20 % first, shown on its Blueprint's status.
    apply_blueprint(&name, &text("large")).await;
    let crd = format!("sizeds.{group}");
    let shown = eventually("the rollout on the Blueprint's status", || async {
        let bp = get(blueprint_resource(), None, &name).await?;
        let view = bp.data["status"]["rollouts"][&crd].clone();
        (view["onNew"] == 4).then_some(view)
    })
    .await;
    assert_eq!(shown["phase"], "Progressing", "{shown:#}");
    assert_eq!(shown["step"], 1, "{shown:#}");
    assert!(
        shown["from"]
            .as_str()
            .is_some_and(|f| f.starts_with("declarative:")),
        "{shown:#}"
    );
    eventually("four CRs on the new version", || async {
        sizes()
            .await
            .filter(|by| by.get("large") == Some(&4) && by.get("small") == Some(&16))
    })
    .await;
    // Its Accepted condition stands beside it.
    let (status, reason, _) = accepted(&name).await.expect("accepted");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Serving"));
    delete_blueprints(&[&name]).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blueprint_resource_whose_schema_would_strand_its_crs_is_refused_with_a_condition() {
    let _alone = RESOURCE_TENANTS.lock().await;
    let cp = inrun_testenv::ControlPlane::shared();
    let ns = cp.namespace("schema-tenant").await.expect("namespace");
    let group = unique_group("schema-tenant");
    let name = format!("schema-{}", group.split('.').next().unwrap_or("t"));
    let text = |fields: &str| {
        format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: x }}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: Boxed\n      schema: {{ type: object, properties: {{ spec: {{ type: object, properties: {{ {fields} }} }} }} }}\n      reconcile:\n        onReconcile:\n          - {{ apiVersion: v1, kind: ConfigMap, metadata: {{ name: '{{{{ .metadata.name }}}}-box' }}, data: {{ k: v }} }}\n        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
        )
    };
    let host = FleetHost::start(FleetOptions {
        resources: true,
        ..FleetHost::options()
    })
    .await;
    apply_blueprint(
        &name,
        &text("size: { type: string }, note: { type: string }"),
    )
    .await;
    serving("the tenant to serve", &name).await;
    let boxed = resource(&group, "Boxed");
    for (cr, spec) in [
        ("a", "{ size: L }"),
        ("b", "{ size: M }"),
        ("c", "{ size: S }"),
        ("d", "{ note: n }"),
    ] {
        apply_cr(
            &boxed,
            &ns,
            &format!("apiVersion: {group}/v1alpha1\nkind: Boxed\nmetadata: {{ name: {cr} }}\nspec: {spec}\n"),
        )
        .await;
    }
    eventually("every CR's ConfigMap", || async {
        get(configmaps(), Some(&ns), "d-box").await
    })
    .await;
    // The tenant's next Blueprint drops spec.size, which three of its CRs use.
    apply_blueprint(&name, &text("note: { type: string }")).await;
    let (status, reason, message) = eventually("the change refused", || async {
        accepted(&name)
            .await
            .filter(|(status, _, _)| status == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "StartFailed"));
    assert!(
        message.contains("spec.size: removed")
            && message.contains("3 live CR(s) would no longer pass it")
            && ["a", "b", "c"]
                .iter()
                .all(|cr| message.contains(&format!("{ns}/{cr}")))
            && !message.contains(&format!("{ns}/d")),
        "{message}"
    );
    // Its CRD is left as it was, and its CRs keep being served.
    let crd = get(
        kube::discovery::ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&()),
        None,
        &format!("boxeds.{group}"),
    )
    .await
    .expect("the CRD");
    assert!(
        crd.data
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/size")
            .is_some(),
        "the refused schema was installed"
    );
    delete_blueprints(&[&name]).await;
    host.stop().await;
}
