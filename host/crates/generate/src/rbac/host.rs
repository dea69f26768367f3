//! What the host itself needs: its CRs, their children where the Blueprint lets them go,
//! events, CRDs, the Secrets the Blueprint names, the Lease, and acting as tenants.

use inrun_blueprint::{Blueprint, CrdSpec, ManagedResource, Scope, ServiceAccountRef};

use super::blocks::{
    SecretName, all_blocks, block_read_permissions, blocks, cr_subresource_permissions, crd_names,
    crd_permissions, event_permission, resource_of, secret_references,
};
use super::permission::{
    CHILD_WRITE_VERBS, Permission, READ_VERBS, RbacOptions, merge, perm, scoped,
};

/// Verbs on the CRs themselves: watch them, patch metadata, delete after `cleanup`.
const CR_VERBS: &[&str] = &["get", "list", "watch", "patch", "update", "delete"];

/// Verbs on children: watch, server-side apply, prune and finalize.
const CHILD_VERBS: &[&str] = &[
    "get", "list", "watch", "create", "patch", "update", "delete",
];

/// The permissions the host needs to run `blueprint`, merged per group/resource.
///
/// # Guarantees
/// Secrets appear only by name (`get` on each Secret a remote reconciler's `auth`, an
/// external input or a pull secret names), or as a kind a plugin is granted to read;
/// children are written only in the namespaces the Blueprint allows when it bounds them;
/// CRD writes only with `install_crds`;
/// the Lease only with leader election, the ring's Leases only with sharding. Every kind a plugin may read gets get, list and
/// watch (cluster-wide: the host keeps one watch cache per kind).
pub fn required(blueprint: &Blueprint, options: &RbacOptions) -> Vec<Permission> {
    let mut perms = Vec::new();
    for crd in &blueprint.spec.crds {
        perms.push(perm(
            &crd.group,
            &crd.plural(),
            CR_VERBS,
            format!("{} CRs", crd.kind),
        ));
        perms.extend(cr_subresource_permissions(crd));
        for block in blocks(crd) {
            for m in &block.managed_resources {
                perms.extend(child_permissions(blueprint, crd, m));
            }
            perms.extend(block_read_permissions(blueprint, crd, block));
        }
    }
    perms.push(event_permission());
    perms.extend(crd_permissions(crd_names(blueprint), options.install_crds));
    let secret_refs = all_blocks(blueprint).flat_map(secret_references).collect();
    perms.extend(secret_permissions(secret_refs));
    perms.extend(leader_election_permissions(blueprint, options));
    perms.extend(sharding_permissions(blueprint, options));
    perms.extend(identity_lock_permissions(blueprint, options));
    perms.extend(impersonation_permissions(blueprint, options));
    if options.blueprint_resources {
        perms.extend(blueprint_resource_permissions(options.install_crds));
    }
    merge(perms)
}

/// The leader-election Lease, by name in its namespace, and creating it; none without
/// leader election.
fn leader_election_permissions(blueprint: &Blueprint, options: &RbacOptions) -> Vec<Permission> {
    let le = &blueprint.spec.runtime.leader_election;
    if !le.enabled {
        return Vec::new();
    }
    let namespace = le.namespace.clone().unwrap_or(options.namespace.clone());
    let mut held = perm(
        "coordination.k8s.io",
        "leases",
        &["get", "update", "patch"],
        "the leader-election Lease".into(),
    );
    held.names = vec![le.lease_name.clone()];
    held.namespace = Some(namespace.clone());
    let mut create = perm(
        "coordination.k8s.io",
        "leases",
        &["create"],
        "creating the leader-election Lease".into(),
    );
    create.namespace = Some(namespace);
    vec![held, create]
}

/// The sharding ring's Leases (one per replica and one per bucket, named at run time) in
/// the leader-election namespace; none without sharding.
fn sharding_permissions(blueprint: &Blueprint, options: &RbacOptions) -> Option<Permission> {
    let runtime = &blueprint.spec.runtime;
    if !runtime.sharding.enabled {
        return None;
    }
    let mut p = perm(
        "coordination.k8s.io",
        "leases",
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
        format!(
            "the sharding ring {}: a Lease per replica and per bucket of CRs, and the ring's leader Lease",
            runtime.sharding.ring
        ),
    );
    p.namespace = Some(
        runtime
            .leader_election
            .namespace
            .clone()
            .unwrap_or(options.namespace.clone()),
    );
    Some(p)
}

/// What the host needs in `namespace`, the one it keeps identity locks and rollouts'
/// records in, to serve `blueprint`'s packages and rollouts; `None` when it has neither.
/// The startup access check asks for it there, naming the flag that sets it.
pub fn lock_permission(blueprint: &Blueprint, namespace: &str) -> Option<Permission> {
    let options = RbacOptions {
        namespace: namespace.to_string(),
        ..RbacOptions::default()
    };
    identity_lock_permissions(blueprint, &options).map(|mut p| {
        p.why.push_str(
            ", in the lock namespace: --lock-namespace, else $POD_NAMESPACE, else the kubeconfig context's",
        );
        p
    })
}

/// Package CRs' identity locks and rollouts' records: Leases named after what they hold,
/// in the host's namespace (a Blueprint resource may bring a package or a rollout too).
fn identity_lock_permissions(blueprint: &Blueprint, options: &RbacOptions) -> Option<Permission> {
    let packages = all_blocks(blueprint).any(|b| b.package.is_some());
    let rollouts = all_blocks(blueprint).any(|b| b.rollout.is_some());
    if !packages && !rollouts && !options.blueprint_resources {
        return None;
    }
    // A rollout's record is written by server-side apply (a patch).
    let verbs: &[&str] = if rollouts || options.blueprint_resources {
        &["get", "create", "update", "patch", "delete"]
    } else {
        &["get", "create", "update", "delete"]
    };
    let mut p = perm(
        "coordination.k8s.io",
        "leases",
        verbs,
        "package CRs' identity locks (one owner per piece of infrastructure) and rollouts' records"
            .into(),
    );
    p.namespace = Some(options.namespace.clone());
    Some(p)
}

/// Acting as the tenants' ServiceAccounts: each one named (the Blueprint's own and
/// `options.impersonate`) by name, and the namespace of `options.tenant_accounts` whole.
fn impersonation_permissions(blueprint: &Blueprint, options: &RbacOptions) -> Vec<Permission> {
    let mut impersonated: Vec<&ServiceAccountRef> = blueprint
        .spec
        .service_account
        .iter()
        .chain(&options.impersonate)
        .collect();
    impersonated.sort();
    impersonated.dedup();
    let mut perms: Vec<Permission> = impersonated
        .into_iter()
        .map(|sa| {
            // `get`: a Blueprint resource may act as it only if it admits that Blueprint.
            let mut p = perm(
                "",
                "serviceaccounts",
                &["get", "impersonate"],
                format!("acting as the tenant's ServiceAccount {sa}"),
            );
            p.names = vec![sa.name.clone()];
            p.namespace = Some(sa.namespace.clone());
            p
        })
        .collect();
    if let Some(pattern) = &options.tenant_accounts {
        // Names are not known before the Blueprints exist: the whole namespace, which the
        // operator keeps for tenants' identities. Each still admits its Blueprint by uid.
        let mut p = perm(
            "",
            "serviceaccounts",
            &["get", "impersonate"],
            format!("acting as each Blueprint resource's own ServiceAccount {pattern}"),
        );
        p.namespace = Some(pattern.namespace.clone());
        perms.push(p);
    }
    perms
}

/// Serving `Blueprint` resources: reading them, writing their status, reading (and with
/// `install_crds`, installing) the Blueprint CRD.
fn blueprint_resource_permissions(install_crds: bool) -> Vec<Permission> {
    let mut perms = vec![
        perm(
            "inrun.dev",
            "blueprints",
            &["get", "list", "watch"],
            "Blueprint resources: one tenant each".into(),
        ),
        perm(
            "inrun.dev",
            "blueprints/status",
            &["get", "patch"],
            "Blueprint resources: whether each is accepted".into(),
        ),
    ];
    let mut crd = perm(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        if install_crds {
            &["get", "patch"]
        } else {
            &["get"]
        },
        "the Blueprint CRD".into(),
    );
    crd.names = vec![inrun_blueprint::BLUEPRINT_CRD.to_string()];
    perms.push(crd);
    if install_crds {
        // Creating takes no name: RBAC cannot scope it to the Blueprint CRD.
        perms.push(perm(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &["create"],
            "installing the Blueprint CRD".into(),
        ));
    }
    perms
}

/// The namespaces children of `m` may be written in, when the Blueprint bounds them: the
/// namespaces `crd`'s CRs are reconciled in (its `namespaces.include`) and those `m` lists
/// besides. `None`: anywhere (CRs in any namespace, `*`, or a cluster-scoped kind or CR).
fn child_namespaces(crd: &CrdSpec, m: &ManagedResource) -> Option<Vec<String>> {
    if m.cluster_scoped
        || crd.scope == Scope::Cluster
        || crd.namespaces.include.is_empty()
        || m.namespaces.iter().any(|n| n == "*")
    {
        return None;
    }
    let mut namespaces: Vec<String> = crd
        .namespaces
        .include
        .iter()
        .chain(&m.namespaces)
        .cloned()
        .collect();
    namespaces.sort();
    namespaces.dedup();
    Some(namespaces)
}

/// Watching `m`'s children cluster-wide (the host's watches are), and writing them where
/// [`child_namespaces`] allows.
fn child_permissions(blueprint: &Blueprint, crd: &CrdSpec, m: &ManagedResource) -> Vec<Permission> {
    let (group, resource) = resource_of(blueprint, &m.api_version, &m.kind);
    let why = format!("{} children of {} CRs", m.kind, crd.kind);
    match child_namespaces(crd, m) {
        None => vec![perm(group, &resource, CHILD_VERBS, why)],
        Some(namespaces) => {
            let mut perms = vec![perm(group, &resource, READ_VERBS, why.clone())];
            let write = perm(group, &resource, CHILD_WRITE_VERBS, why);
            perms.extend(scoped(write, false, &namespaces));
            perms
        }
    }
}

/// `get` on exactly the Secrets the Blueprint names, never `list` or `watch` (the host
/// reads each by name): by name in its namespace, or by name in every namespace for a
/// reference that takes the CR's own.
fn secret_permissions(mut refs: Vec<SecretName>) -> Vec<Permission> {
    refs.sort();
    refs.dedup();
    refs.into_iter()
        .map(|(namespace, name)| {
            let why = match &namespace {
                Some(ns) => format!("the Secret {ns}/{name} the Blueprint names"),
                None => format!("the Secret {name} in a CR's namespace, which the Blueprint names"),
            };
            let mut p = perm("", "secrets", &["get"], why);
            p.names = vec![name];
            p.namespace = namespace;
            p
        })
        .collect()
}
