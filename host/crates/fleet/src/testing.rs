//! What the fleet's unit tests share: a fleet that never dials its API server, and tenants
//! assembled from small declarative Blueprints.

use crate::state::*;

/// A fleet for unit tests: a client that is never dialled, a default engine, no tenants.
pub(super) fn test_fleet(options: FleetOptions) -> Arc<Fleet> {
    let config = kube::Config::new("https://127.0.0.1:9".parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let engine = Engine::new(inrun_wasm::EngineSettings {
        max_instances: 4,
        ..inrun_wasm::EngineSettings::default()
    })
    .expect("engine");
    let services = Services::new(Arc::new(inrun_reconcilers::secrets::StaticSecrets::new()));
    Fleet::new(
        Shared::new(client, "test".into()),
        engine,
        services,
        options,
    )
}

/// Options serving nothing, for [`test_fleet`].
pub(super) fn test_options() -> FleetOptions {
    FleetOptions {
        blueprint: None,
        tenants: None,
        resources: false,
        reload: None,
        policy: Policy::default(),
        install_crds: false,
        resource_capabilities: false,
        tenant_egress: None,
        default_tenant_service_account: None,
        tenant_identity_namespaces: None,
        on_removal: Default::default(),
    }
}

/// Polls `done` until it holds, for at most ten seconds.
pub(super) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A declarative Blueprint of `kinds` (group `g.example`, each with its workers),
/// assembled by `fleet` for the tenant `source`, and that tenant, serving nothing yet.
pub(super) async fn test_tenant(
    fleet: &Fleet,
    source: &TenantSource,
    kinds: &[(&str, u32)],
) -> (Arc<Assembly>, Tenant) {
    let crds: String = kinds
        .iter()
        .map(|(k, workers)| {
            format!(
                "    - group: g.example\n      version: v1\n      kind: {k}\n      workers: {workers}\n      reconcile: {{ onReconcile: [] }}\n"
            )
        })
        .collect();
    let blueprint = inrun_blueprint::from_str(
        &format!("apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: t }}\nspec:\n  crds:\n{crds}"),
        "t.yaml",
    )
    .expect("blueprint");
    let tenant = fleet.new_tenant(source.clone());
    let assembly = fleet
        .assemble(&tenant.policy, &tenant.acting, blueprint)
        .await
        .expect("assembly");
    (Arc::new(assembly), tenant)
}
