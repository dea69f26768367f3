//! What a tenant's ServiceAccount needs when the host acts as it: reads cluster-wide,
//! writes only in the namespaces the tenant is confined to.

use inrun_blueprint::{Blueprint, CrdSpec, ManagedResource, Scope};

use super::blocks::{
    all_blocks, block_read_permissions, blocks, cr_subresource_permissions, crd_names,
    crd_permissions, event_permission, named_secrets, reads_secrets, resource_of,
};
use super::permission::{
    CHILD_WRITE_VERBS, Permission, READ_VERBS, RbacOptions, merge, perm, scoped,
};

/// Verbs on a tenant's own CRs beyond reading them.
const CR_WRITE_VERBS: &[&str] = &["patch", "update", "delete"];

/// What a tenant's ServiceAccount needs to run `blueprint` when the host acts as it, its
/// writes confined to `namespaces`: reading its CRs, their children's kinds and the kinds
/// granted to plugins cluster-wide (the host's watches are), writing CRs, children,
/// events and reading Secrets only in `namespaces` (cluster-scoped CRs and kinds marked
/// `clusterScoped` cluster-wide). With no namespaces, what the host checks before a
/// tenant's controllers start: everything cluster-wide, nothing else.
///
/// # Guarantees
/// Secrets are readable cluster-wide only when the Blueprint manages Secrets or grants its
/// plugins reads of them (its watches are cluster-wide); the Secrets its references name
/// are readable by name in their own namespace, others only in `namespaces`. No write
/// reaches a namespace not listed unless the Blueprint declares the kind cluster-scoped
/// (events of cluster-scoped CRs go to `default`).
pub fn tenant_required(
    blueprint: &Blueprint,
    namespaces: &[String],
    options: &RbacOptions,
) -> Vec<Permission> {
    let mut perms = Vec::new();
    for crd in &blueprint.spec.crds {
        perms.extend(tenant_cr_permissions(crd, namespaces));
        for block in blocks(crd) {
            for m in &block.managed_resources {
                perms.extend(tenant_child_permissions(blueprint, crd, m, namespaces));
            }
            perms.extend(block_read_permissions(blueprint, crd, block));
        }
    }
    perms.extend(tenant_event_permissions(blueprint, namespaces));
    perms.extend(tenant_secret_permissions(blueprint, namespaces));
    perms.extend(crd_permissions(crd_names(blueprint), options.install_crds));
    merge(perms)
}

/// Reading a tenant's CRs cluster-wide; writing them, their status and finalizers in
/// `namespaces` (cluster-wide for cluster-scoped CRs).
fn tenant_cr_permissions(crd: &CrdSpec, namespaces: &[String]) -> Vec<Permission> {
    let cr_plural = crd.plural();
    let what = format!("{} CRs", crd.kind);
    let cluster = crd.scope == Scope::Cluster;
    let mut perms = vec![perm(&crd.group, &cr_plural, READ_VERBS, what.clone())];
    let write = perm(&crd.group, &cr_plural, CR_WRITE_VERBS, what);
    let writes = std::iter::once(write).chain(cr_subresource_permissions(crd));
    perms.extend(writes.flat_map(|p| scoped(p, cluster, namespaces)));
    perms
}

/// Reading `m`'s children cluster-wide; writing them in `namespaces` (cluster-wide for a
/// kind marked `clusterScoped`).
fn tenant_child_permissions(
    blueprint: &Blueprint,
    crd: &CrdSpec,
    m: &ManagedResource,
    namespaces: &[String],
) -> Vec<Permission> {
    let (group, resource) = resource_of(blueprint, &m.api_version, &m.kind);
    let why = format!("{} children of {} CRs", m.kind, crd.kind);
    let mut perms = vec![perm(group, &resource, READ_VERBS, why.clone())];
    let write = perm(group, &resource, CHILD_WRITE_VERBS, why);
    perms.extend(scoped(write, m.cluster_scoped, namespaces));
    perms
}

/// Events in `namespaces`, and in `default` for cluster-scoped CRs.
fn tenant_event_permissions(blueprint: &Blueprint, namespaces: &[String]) -> Vec<Permission> {
    let events = event_permission();
    let cluster_scoped_crs = blueprint
        .spec
        .crds
        .iter()
        .any(|crd| crd.scope == Scope::Cluster);
    let mut perms = Vec::new();
    if cluster_scoped_crs && !namespaces.iter().any(|n| n == "default") {
        let mut p = events.clone();
        p.namespace = Some("default".into());
        p.why = "events on cluster-scoped CRs".into();
        perms.push(p);
    }
    perms.extend(scoped(events, false, namespaces));
    perms
}

/// The Secrets a tenant reads: each one its Blueprint names in a namespace of its own, by
/// name there; any in `namespaces` when a block reads Secrets of the CR's namespace.
fn tenant_secret_permissions(blueprint: &Blueprint, namespaces: &[String]) -> Vec<Permission> {
    let mut named: Vec<(String, String)> = all_blocks(blueprint).flat_map(named_secrets).collect();
    named.sort();
    named.dedup();
    let mut perms: Vec<Permission> = named
        .into_iter()
        .map(|(namespace, name)| {
            let mut p = perm(
                "",
                "secrets",
                &["get"],
                format!("the Secret {namespace}/{name} the Blueprint names"),
            );
            p.names = vec![name];
            p.namespace = Some(namespace);
            p
        })
        .collect();
    if all_blocks(blueprint).any(reads_secrets) {
        let any = perm(
            "",
            "secrets",
            &["get"],
            "Secrets named by remote auth, external inputs or pull secrets".into(),
        );
        perms.extend(scoped(any, false, namespaces));
    }
    perms
}
