//! The least RBAC the host needs to run a Blueprint: a ClusterRole for CRs, their
//! subresources, managed kinds, events, CRDs and (only when needed) Secrets, plus a Role
//! for the leader-election Lease. [`required`] is the single list both the generated
//! manifests and the startup access check (`runtime::access`) use, so they cannot drift.

use std::collections::BTreeMap;

use inrun_contract::api_version::group_of;
use serde_json::{Value, json};

use inrun_blueprint::{
    Blueprint, CrdSpec, ManagedResource, ReadKind, ReconcileSpec, Scope, ServiceAccountRef,
};

/// Verbs on the CRs themselves: watch them, patch metadata, delete after `cleanup`.
const CR_VERBS: &[&str] = &["get", "list", "watch", "patch", "update", "delete"];
/// Verbs on kinds plugins are granted to read: the host serves reads from a watch cache.
const READ_VERBS: &[&str] = &["get", "list", "watch"];
/// Verbs on children: watch, server-side apply, prune and finalize.
const CHILD_VERBS: &[&str] = &[
    "get", "list", "watch", "create", "patch", "update", "delete",
];

/// One permission: `verbs` on `resources` of `group`, cluster-wide unless `namespace`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// API group (`""` for core).
    pub group: String,
    /// Resource (plural, or `plural/subresource`).
    pub resource: String,
    /// Only these object names, when not empty.
    pub names: Vec<String>,
    /// The verbs.
    pub verbs: Vec<String>,
    /// The namespace, for namespaced grants (the Lease); cluster-wide when `None`.
    pub namespace: Option<String>,
    /// Why the host needs it, for error messages.
    pub why: String,
}

/// Settings that are not in the Blueprint.
#[derive(Debug, Clone)]
pub struct RbacOptions {
    /// Name of the roles and bindings.
    pub name: String,
    /// Namespace of the ServiceAccount (and of the Lease unless the Blueprint names one).
    pub namespace: String,
    /// The ServiceAccount the host runs as.
    pub service_account: String,
    /// Whether the host installs CRDs itself (`--install-crds`).
    pub install_crds: bool,
    /// Whether the host serves `Blueprint` resources (`--blueprint-resources`).
    pub blueprint_resources: bool,
    /// ServiceAccounts the host acts as for tenants (besides the Blueprint's own
    /// `spec.serviceAccount`): it may impersonate each, and nothing else.
    pub impersonate: Vec<ServiceAccountRef>,
    /// The ServiceAccounts of Blueprint resources that name none
    /// (`--default-tenant-service-account`, one a Blueprint): the host may impersonate any
    /// in that namespace, which the operator keeps for tenants' identities.
    pub tenant_accounts: Option<inrun_blueprint::AccountPattern>,
}

impl Default for RbacOptions {
    fn default() -> Self {
        RbacOptions {
            name: "inrun".into(),
            namespace: "inrun-system".into(),
            service_account: "inrun".into(),
            install_crds: false,
            blueprint_resources: false,
            impersonate: Vec::new(),
            tenant_accounts: None,
        }
    }
}

/// Listing the instances of a block's `managedTypes` (the deletion safeguard looks for
/// foreign ones): every resource of the named group, or of every group for a pattern.
fn managed_type_permissions(crd: &CrdSpec, block: &ReconcileSpec) -> Vec<Permission> {
    block
        .managed_types
        .iter()
        .map(|t| {
            let group = if t.is_pattern() {
                "*"
            } else {
                t.group.as_str()
            };
            perm(
                group,
                "*",
                &["list"],
                format!(
                    "foreign instances of managed types {}/{} of {} CRs",
                    t.group, t.kind, crd.kind
                ),
            )
        })
        .collect()
}

fn perm(group: &str, resource: &str, verbs: &[&str], why: String) -> Permission {
    Permission {
        group: group.into(),
        resource: resource.into(),
        names: Vec::new(),
        verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
        namespace: None,
        why,
    }
}

/// The API group and resource (plural) of `kind`: a kind the Blueprint itself declares
/// keeps its declared plural.
fn resource_of<'a>(blueprint: &Blueprint, api_version: &'a str, kind: &str) -> (&'a str, String) {
    let group = group_of(api_version);
    let resource = blueprint
        .crd(group, kind)
        .map_or_else(|| plural(kind), CrdSpec::plural);
    (group, resource)
}

/// The group of an `apiVersion` (`""` for `v1`).
pub use inrun_blueprint::default_plural as plural;

/// Every reconcile block of a CRD: its own and each serve target's.
fn blocks(crd: &CrdSpec) -> impl Iterator<Item = &ReconcileSpec> {
    std::iter::once(&crd.reconcile).chain(
        crd.serve
            .iter()
            .flat_map(|s| s.targets.iter().map(|t| &t.reconcile)),
    )
}

/// The kinds a block's hooks and constructor are granted to read.
fn plugin_reads(block: &ReconcileSpec) -> impl Iterator<Item = &ReadKind> {
    block
        .hooks
        .iter()
        .map(|h| &h.capabilities)
        .chain(block.constructor.iter().map(|c| &c.capabilities))
        .flat_map(|caps| caps.reads())
}

/// The Secrets a block names in a namespace of their own: (namespace, name).
fn named_secrets(block: &ReconcileSpec) -> Vec<(String, String)> {
    secret_references(block)
        .into_iter()
        .filter_map(|(ns, name)| Some((ns?, name)))
        .collect()
}

/// Whether any reconcile block reads a Secret (remote auth, external inputs, plugin pull
/// secrets).
fn reads_secrets(block: &ReconcileSpec) -> bool {
    let remote = block.remote.as_ref().is_some_and(|r| r.auth.is_some())
        || block
            .package
            .as_ref()
            .is_some_and(|p| !p.capabilities.credentials.is_empty());
    let pull = block.hooks.iter().any(|h| h.pull_secret.is_some())
        || block
            .constructor
            .iter()
            .chain(&block.package)
            .any(|c| c.pull_secret.is_some());
    let external = block.external.iter().any(|e| {
        e.http.as_ref().is_some_and(|h| h.secret_ref.is_some())
            || e.postgres.as_ref().is_some_and(|p| p.secret_ref.is_some())
            || e.redis.as_ref().is_some_and(|r| r.secret_ref.is_some())
    });
    remote || external || pull
}

/// Reading (and with `install`, installing) the CRDs named `names`; none without names.
fn crd_permissions(names: Vec<String>, install: bool) -> Vec<Permission> {
    if names.is_empty() {
        return Vec::new();
    }
    let verbs: &[&str] = if install { &["get", "patch"] } else { &["get"] };
    let mut read = perm(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        verbs,
        "the Blueprint's CRDs".into(),
    );
    read.names = names;
    let mut out = vec![read];
    if install {
        out.push(perm(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &["create"],
            "installing the Blueprint's CRDs".into(),
        ));
    }
    out
}

/// Cluster-wide reads of every kind `block` grants its plugins.
fn plugin_read_permissions(
    blueprint: &Blueprint,
    crd: &CrdSpec,
    block: &ReconcileSpec,
) -> Vec<Permission> {
    plugin_reads(block)
        .map(|read| {
            let (group, resource) = resource_of(blueprint, &read.api_version, &read.kind);
            perm(
                group,
                &resource,
                READ_VERBS,
                format!("{} reads granted to plugins of {} CRs", read.kind, crd.kind),
            )
        })
        .collect()
}

/// Verbs on children that change them, granted per namespace when the Blueprint bounds
/// where children may go (or a tenant's writes are confined).
const CHILD_WRITE_VERBS: &[&str] = &["create", "patch", "update", "delete"];

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

/// A Secret a reconcile block reads: its name, and its namespace (`None`: the CR's own).
type SecretName = (Option<String>, String);

/// Every Secret a block names (remote auth, external inputs, plugin pull secrets, a
/// package's credentials).
fn secret_references(block: &ReconcileSpec) -> Vec<SecretName> {
    let pulls = block
        .hooks
        .iter()
        .filter_map(|h| h.pull_secret.as_ref())
        .chain(
            block
                .constructor
                .iter()
                .chain(&block.package)
                .filter_map(|c| c.pull_secret.as_ref()),
        )
        .map(|p| (Some(p.namespace.clone()), p.name.clone()));
    let refs = block
        .remote
        .iter()
        .filter_map(|r| r.auth.as_ref().map(|a| &a.secret_ref))
        .chain(block.external.iter().flat_map(|e| {
            e.http
                .iter()
                .filter_map(|h| h.secret_ref.as_ref())
                .chain(e.postgres.iter().filter_map(|p| p.secret_ref.as_ref()))
                .chain(e.redis.iter().filter_map(|r| r.secret_ref.as_ref()))
        }))
        .map(|r| (r.namespace.clone(), r.name.clone()));
    // A package's credentials: Secrets of the CR's own namespace.
    let credentials = block
        .package
        .iter()
        .flat_map(|p| &p.capabilities.credentials)
        .map(|c| (None, c.secret.clone()));
    pulls.chain(refs).chain(credentials).collect()
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

/// The permissions the host needs to run `blueprint`, merged per group/resource.
///
/// # Guarantees
/// Secrets appear only by name (`get` on each Secret a remote reconciler's `auth`, an
/// external input or a pull secret names), or as a kind a plugin is granted to read;
/// children are written only in the namespaces the Blueprint allows when it bounds them;
/// CRD writes only with `install_crds`;
/// the Lease only with leader election. Every kind a plugin may read gets get, list and
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
    perms.extend(identity_lock_permissions(blueprint, options));
    perms.extend(impersonation_permissions(blueprint, options));
    if options.blueprint_resources {
        perms.extend(blueprint_resource_permissions(options.install_crds));
    }
    merge(perms)
}

/// Every reconcile block of every CRD of `blueprint`.
fn all_blocks(blueprint: &Blueprint) -> impl Iterator<Item = &ReconcileSpec> {
    blueprint.spec.crds.iter().flat_map(blocks)
}

/// The names of the CRDs `blueprint` declares.
fn crd_names(blueprint: &Blueprint) -> Vec<String> {
    blueprint.spec.crds.iter().map(CrdSpec::crd_name).collect()
}

/// Writing a CRD's status and its finalizers (and owner references).
fn cr_subresource_permissions(crd: &CrdSpec) -> [Permission; 2] {
    let cr_plural = crd.plural();
    [
        perm(
            &crd.group,
            &format!("{cr_plural}/status"),
            &["get", "patch", "update"],
            format!("{} CRs: status", crd.kind),
        ),
        perm(
            &crd.group,
            &format!("{cr_plural}/finalizers"),
            &["update"],
            format!("{} CRs: finalizers and owner references", crd.kind),
        ),
    ]
}

/// What every block needs read cluster-wide besides its children: the kinds granted to
/// its plugins, and the instances of its managed types.
fn block_read_permissions(
    blueprint: &Blueprint,
    crd: &CrdSpec,
    block: &ReconcileSpec,
) -> Vec<Permission> {
    let mut perms = plugin_read_permissions(blueprint, crd, block);
    perms.extend(managed_type_permissions(crd, block));
    perms
}

/// Events on CRs, cluster-wide unless a tenant's writes are confined.
fn event_permission() -> Permission {
    perm(
        "events.k8s.io",
        "events",
        &["create", "patch"],
        "events on CRs".into(),
    )
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

/// Package CRs' identity locks: Leases named after what they hold, in the host's
/// namespace (a Blueprint resource may bring a package too).
fn identity_lock_permissions(blueprint: &Blueprint, options: &RbacOptions) -> Option<Permission> {
    let packages = all_blocks(blueprint).any(|b| b.package.is_some());
    if !packages && !options.blueprint_resources {
        return None;
    }
    let mut p = perm(
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update", "delete"],
        "package CRs' identity locks: one owner per piece of infrastructure".into(),
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

/// `p` cluster-wide when `cluster`, else one copy in each of `namespaces`.
fn scoped(p: Permission, cluster: bool, namespaces: &[String]) -> Vec<Permission> {
    if cluster {
        return vec![p];
    }
    namespaces
        .iter()
        .map(|ns| {
            let mut p = p.clone();
            p.namespace = Some(ns.clone());
            p
        })
        .collect()
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

/// Merges permissions on the same group, resource, names and namespace.
fn merge(perms: Vec<Permission>) -> Vec<Permission> {
    let mut merged: Vec<Permission> = Vec::new();
    for p in perms {
        match merged.iter_mut().find(|m| {
            m.group == p.group
                && m.resource == p.resource
                && m.names == p.names
                && m.namespace == p.namespace
        }) {
            Some(m) => {
                for v in p.verbs {
                    if !m.verbs.contains(&v) {
                        m.verbs.push(v);
                    }
                }
            }
            None => merged.push(p),
        }
    }
    merged
}

/// RBAC rules for a set of permissions: one rule per group, verbs and names.
fn rules<'a>(perms: impl Iterator<Item = &'a Permission>) -> Vec<Value> {
    let mut grouped: BTreeMap<(String, Vec<String>, Vec<String>), Vec<String>> = BTreeMap::new();
    for p in perms {
        grouped
            .entry((p.group.clone(), p.verbs.clone(), p.names.clone()))
            .or_default()
            .push(p.resource.clone());
    }
    grouped
        .into_iter()
        .map(|((group, verbs, names), resources)| {
            let mut rule = json!({"apiGroups": [group], "resources": resources, "verbs": verbs});
            if !names.is_empty() {
                rule["resourceNames"] = json!(names);
            }
            rule
        })
        .collect()
}

/// The manifests: ClusterRole and ClusterRoleBinding, and when leader election is on, a
/// Role and RoleBinding for the Lease in its namespace; then the users' aggregated roles
/// ([`crate::roles::user_roles`]).
pub fn manifests(blueprint: &Blueprint, options: &RbacOptions) -> Vec<Value> {
    let perms = required(blueprint, options);
    let subject = json!([{
        "kind": "ServiceAccount",
        "name": options.service_account,
        "namespace": options.namespace,
    }]);
    let mut docs = documents(&perms, &options.name, &subject);
    docs.extend(crate::roles::user_roles(blueprint, &options.name));
    docs
}

/// The manifests a tenant's ServiceAccount `sa` needs ([`tenant_required`]): a
/// ClusterRole and binding for what is cluster-wide, a Role and binding in each of
/// `namespaces` (the ServiceAccount's own when empty) for its writes there.
pub fn tenant_manifests(
    blueprint: &Blueprint,
    sa: &ServiceAccountRef,
    namespaces: &[String],
    options: &RbacOptions,
) -> Vec<Value> {
    let namespaces = if namespaces.is_empty() {
        vec![sa.namespace.clone()]
    } else {
        namespaces.to_vec()
    };
    let perms = tenant_required(blueprint, &namespaces, options);
    let subject = json!([{
        "kind": "ServiceAccount",
        "name": sa.name,
        "namespace": sa.namespace,
    }]);
    let mut docs = documents(&perms, &options.name, &subject);
    docs.extend(crate::roles::user_roles(blueprint, &options.name));
    docs
}

/// ClusterRole and binding for the cluster-wide `perms`, Role and binding per namespace
/// for the rest, all named `name` and bound to `subject`.
fn documents(perms: &[Permission], name: &str, subject: &Value) -> Vec<Value> {
    let labels =
        json!({"app.kubernetes.io/name": "inrun", "app.kubernetes.io/managed-by": "inrun"});
    let mut docs = vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": rules(perms.iter().filter(|p| p.namespace.is_none())),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subject,
        }),
    ];
    let namespaces: std::collections::BTreeSet<&String> =
        perms.iter().filter_map(|p| p.namespace.as_ref()).collect();
    for ns in namespaces {
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "rules": rules(perms.iter().filter(|p| p.namespace.as_ref() == Some(ns))),
        }));
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subject,
        }));
    }
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blueprint(extra: &str) -> Blueprint {
        let text = format!(
            r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: t}}
spec:
  crds:
    - group: apps.example.dev
      version: v1alpha1
      kind: WebApp
      reconcile:
        onReconcile:
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {{name: x}}
        managedResources:
          - {{apiVersion: apps/v1, kind: Deployment}}
          - {{apiVersion: networking.k8s.io/v1, kind: Ingress}}
          - {{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy}}
{extra}"#
        );
        inrun_blueprint::from_str(&text, "t.yaml").expect("blueprint")
    }

    fn tenant_blueprint() -> Blueprint {
        inrun_blueprint::from_str(
            r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: t}
spec:
  serviceAccount: {namespace: team-a, name: tenant}
  crds:
    - group: apps.example.dev
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        remote:
          endpoint: https://reconciler.example.com/r
          auth: {secretRef: {name: token, key: token}}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
          - {apiVersion: v1, kind: Namespace, clusterScoped: true}
"#,
            "t.yaml",
        )
        .expect("blueprint")
    }

    #[test]
    fn a_tenant_reads_cluster_wide_but_writes_and_reads_secrets_only_in_its_namespaces() {
        let bp = tenant_blueprint();
        let ns = ["team-a".to_string(), "team-b".to_string()];
        let perms = tenant_required(&bp, &ns, &RbacOptions::default());
        for p in perms.iter().filter(|p| p.namespace.is_none()) {
            let writes: Vec<_> = p
                .verbs
                .iter()
                .filter(|v| !READ_VERBS.contains(&v.as_str()))
                .collect();
            assert!(
                writes.is_empty() || p.resource == "namespaces",
                "cluster-wide writes on {}: {writes:?}",
                p.resource
            );
            assert_ne!(p.resource, "secrets", "Secrets readable cluster-wide");
        }
        for namespace in &ns {
            let configmaps = perms
                .iter()
                .find(|p| p.resource == "configmaps" && p.namespace.as_ref() == Some(namespace))
                .expect("configmap writes in each namespace");
            assert!(configmaps.verbs.contains(&"patch".to_string()));
            assert!(perms.iter().any(|p| p.resource == "secrets"
                && p.verbs == ["get"]
                && p.namespace.as_ref() == Some(namespace)));
        }
        let namespaces = perms
            .iter()
            .find(|p| p.resource == "namespaces" && p.namespace.is_none())
            .expect("a clusterScoped kind is written cluster-wide");
        assert!(namespaces.verbs.contains(&"create".to_string()));
        // Without namespaces: only what the host checks before the tenant starts.
        let checked = tenant_required(&bp, &[], &RbacOptions::default());
        assert!(checked.iter().all(|p| p.namespace.is_none()));
        assert!(
            !checked
                .iter()
                .any(|p| p.resource == "configmaps" && p.verbs.contains(&"patch".to_string()))
        );
    }

    #[test]
    fn each_blueprint_resources_own_service_account_is_impersonable_in_its_namespace_only() {
        let perms = required(
            &tenant_blueprint(),
            &RbacOptions {
                tenant_accounts: Some(
                    inrun_blueprint::AccountPattern::parse("inrun-tenants/{name}")
                        .expect("pattern"),
                ),
                ..RbacOptions::default()
            },
        );
        let granted: Vec<_> = perms
            .iter()
            .filter(|p| p.verbs.contains(&"impersonate".to_string()))
            .map(|p| (p.namespace.clone(), p.names.clone()))
            .collect();
        assert!(
            granted.contains(&(Some("inrun-tenants".into()), Vec::new())),
            "{granted:?}"
        );
        assert!(
            granted.iter().all(|(ns, _)| ns.is_some()),
            "never cluster-wide: {granted:?}"
        );
    }

    #[test]
    fn the_host_may_impersonate_the_tenant_service_accounts_and_no_other() {
        let perms = required(
            &tenant_blueprint(),
            &RbacOptions {
                impersonate: vec![ServiceAccountRef {
                    namespace: "team-b".into(),
                    name: "other".into(),
                }],
                ..RbacOptions::default()
            },
        );
        let mut granted: Vec<_> = perms
            .iter()
            .filter(|p| p.verbs.contains(&"impersonate".to_string()))
            .map(|p| (p.resource.as_str(), p.namespace.clone(), p.names.clone()))
            .collect();
        granted.sort();
        assert_eq!(
            granted,
            [
                (
                    "serviceaccounts",
                    Some("team-a".into()),
                    vec!["tenant".to_string()]
                ),
                (
                    "serviceaccounts",
                    Some("team-b".into()),
                    vec!["other".to_string()]
                ),
            ]
        );
        let docs = tenant_manifests(
            &tenant_blueprint(),
            &ServiceAccountRef {
                namespace: "team-a".into(),
                name: "tenant".into(),
            },
            &[],
            &RbacOptions::default(),
        );
        let kinds: Vec<_> = docs
            .iter()
            .map(|d| d["kind"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            kinds,
            [
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRole"
            ]
        );
        assert_eq!(docs[2]["metadata"]["namespace"], "team-a");
        assert_eq!(docs[3]["subjects"][0]["name"], "tenant");
    }

    #[test]
    fn managed_types_may_be_listed_in_their_group_or_every_group_for_a_pattern() {
        let bp = blueprint(
            "        managedTypes:\n          - {group: '*.widgets.io', kind: '*'}\n          - {group: tools.example.com, kind: Tool}\n",
        );
        let perms = required(&bp, &RbacOptions::default());
        for group in ["*", "tools.example.com"] {
            let p = perms
                .iter()
                .find(|p| p.group == group && p.resource == "*")
                .unwrap_or_else(|| panic!("listing in {group}: {perms:?}"));
            assert_eq!(p.verbs, ["list"]);
        }
    }

    #[test]
    fn plurals_follow_kubernetes_defaults() {
        assert_eq!(plural("Deployment"), "deployments");
        assert_eq!(plural("Ingress"), "ingresses");
        assert_eq!(plural("NetworkPolicy"), "networkpolicies");
        assert_eq!(plural("Gateway"), "gateways");
        assert_eq!(plural("Endpoints"), "endpoints");
    }

    #[test]
    fn a_plugin_pull_secret_needs_reading_secrets() {
        let bp = inrun_blueprint::from_str(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds:\n    - group: apps.example.dev\n      version: v1alpha1\n      kind: WebApp\n      reconcile:\n        default: false\n        constructor:\n          location: oci://registry.example.com/webapp:1\n          pullSecret: {namespace: ops, name: registry}\n",
            "t.yaml",
        )
        .expect("blueprint");
        let perms = required(&bp, &RbacOptions::default());
        assert!(perms.iter().any(|p| p.resource == "secrets"));
    }

    #[test]
    fn secrets_are_granted_get_by_name_only_never_list_or_watch() {
        let bp = inrun_blueprint::from_str(
            r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: t}
spec:
  crds:
    - group: apps.example.dev
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        remote:
          endpoint: https://reconciler.example.com/r
          auth: {secretRef: {name: token, key: token}}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap}
    - group: apps.example.dev
      version: v1alpha1
      kind: Db
      reconcile:
        default: false
        remote:
          endpoint: https://reconciler.example.com/db
          auth: {secretRef: {name: shared, key: token, namespace: ops}}
"#,
            "t.yaml",
        )
        .expect("blueprint");
        let perms = required(&bp, &RbacOptions::default());
        let secrets: Vec<_> = perms.iter().filter(|p| p.resource == "secrets").collect();
        assert_eq!(secrets.len(), 2, "{secrets:?}");
        for p in &secrets {
            assert_eq!(p.verbs, ["get"], "{p:?}");
        }
        // A reference without a namespace: that name, in the CR's namespace, wherever it is.
        assert!(
            secrets
                .iter()
                .any(|p| p.names == ["token"] && p.namespace.is_none())
        );
        // With one: that name in that namespace only (a Role).
        assert!(
            secrets
                .iter()
                .any(|p| p.names == ["shared"] && p.namespace.as_deref() == Some("ops"))
        );
        let docs = manifests(&bp, &RbacOptions::default());
        let role = docs
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == "ops")
            .expect("a Role in ops");
        assert_eq!(
            role["rules"],
            serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["shared"]}])
        );
    }

    #[test]
    fn children_are_written_only_in_the_namespaces_the_blueprint_allows() {
        let bp = inrun_blueprint::from_str(
            r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: t}
spec:
  crds:
    - group: apps.example.dev
      version: v1alpha1
      kind: WebApp
      namespaces: {include: [shop, blog]}
      reconcile:
        onReconcile:
          - {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}
        managedResources:
          - {apiVersion: v1, kind: ConfigMap, namespaces: [shared]}
          - {apiVersion: apps/v1, kind: Deployment, namespaces: ["*"]}
          - {apiVersion: v1, kind: Namespace, clusterScoped: true}
"#,
            "t.yaml",
        )
        .expect("blueprint");
        let perms = required(&bp, &RbacOptions::default());
        let of = |resource: &str| -> Vec<&Permission> {
            perms.iter().filter(|p| p.resource == resource).collect()
        };
        // ConfigMaps: watched cluster-wide, written in the CRs' namespaces and `shared`.
        let cm = of("configmaps");
        let cluster: Vec<_> = cm.iter().filter(|p| p.namespace.is_none()).collect();
        assert_eq!(cluster.len(), 1);
        assert_eq!(cluster[0].verbs, READ_VERBS);
        let mut written: Vec<_> = cm.iter().filter_map(|p| p.namespace.clone()).collect();
        written.sort();
        assert_eq!(written, ["blog", "shared", "shop"]);
        for p in cm.iter().filter(|p| p.namespace.is_some()) {
            assert_eq!(p.verbs, CHILD_WRITE_VERBS);
        }
        // `*` and cluster-scoped kinds: anywhere.
        for resource in ["deployments", "namespaces"] {
            let p = of(resource);
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(p[0].namespace.is_none() && p[0].verbs.contains(&"create".to_string()));
        }
        // CRs in any namespace: children anywhere too.
        let anywhere = required(&blueprint(""), &RbacOptions::default());
        assert!(
            anywhere
                .iter()
                .filter(|p| p.resource == "deployments")
                .all(|p| p.namespace.is_none())
        );
    }

    #[test]
    fn the_types_crd_children_define_are_listable_or_the_blueprint_is_refused() {
        let with = |managed: &str| {
            inrun_blueprint::from_str(
                &format!(
                    "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: t}}\nspec:\n  crds:\n    - group: apps.example.dev\n      version: v1alpha1\n      kind: Gadget\n      reconcile:\n        managedResources:\n          - {{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, clusterScoped: true}}\n{managed}"
                ),
                "t.yaml",
            )
        };
        let refused = with("")
            .expect_err("a CRD child with no type named")
            .to_string();
        assert!(
            refused.contains("spec.crds[0].reconcile.managedTypes")
                && refused.contains("CustomResourceDefinition"),
            "{refused}"
        );
        let bp = with("        managedTypes: [{group: gizmo.example, kind: '*'}]\n")
            .expect("types named");
        let perms = required(&bp, &RbacOptions::default());
        assert!(
            perms
                .iter()
                .any(|p| p.group == "gizmo.example" && p.resource == "*" && p.verbs == ["list"])
        );
        // The safeguard's question, answered from the same declarations.
        let block = &bp.spec.crds[0].reconcile;
        assert!(block.lists_instances_of("gizmo.example", Some(("Gizmo", "gizmos"))));
        assert!(block.lists_instances_of("gizmo.example", None));
        assert!(!block.lists_instances_of("other.example", Some(("Gizmo", "gizmos"))));
        let bp =
            with("          - {apiVersion: parts.example/v1, kind: Part}\n").expect("a kind named");
        let block = &bp.spec.crds[0].reconcile;
        assert!(block.lists_instances_of("parts.example", Some(("Part", "parts"))));
        assert!(!block.lists_instances_of("parts.example", Some(("Other", "others"))));
        assert!(!block.lists_instances_of("parts.example", None));
        // A plural other than the one the grant names: listing would be refused.
        assert!(!block.lists_instances_of("parts.example", Some(("Part", "partz"))));
    }

    #[test]
    fn secrets_and_leases_appear_only_when_needed() {
        let perms = required(&blueprint(""), &RbacOptions::default());
        assert!(!perms.iter().any(|p| p.resource == "secrets"));
        assert!(!perms.iter().any(|p| p.resource == "leases"));
        assert!(perms.iter().any(|p| p.group == "apps"
            && p.resource == "deployments"
            && p.verbs.contains(&"create".to_string())));
        assert!(perms.iter().any(|p| p.resource == "webapps/status"));
        let le = blueprint("  runtime:\n    leaderElection: {enabled: true, namespace: ops}\n");
        let docs = manifests(&le, &RbacOptions::default());
        let role = docs.iter().find(|d| d["kind"] == "Role").expect("a Role");
        assert_eq!(role["metadata"]["namespace"], "ops");
        assert!(role["rules"].to_string().contains("leases"));
    }

    #[test]
    fn a_package_crd_gets_its_identity_locks_in_the_hosts_namespace() {
        let bp = inrun_blueprint::from_str(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds:\n    - { group: a.b, version: v1, kind: P, reconcile: { default: false, package: { location: ./p.wasm } } }\n",
            "p.yaml",
        )
        .expect("blueprint");
        let options = RbacOptions {
            namespace: "ops".into(),
            ..RbacOptions::default()
        };
        let perms = required(&bp, &options);
        let locks: Vec<_> = perms.iter().filter(|p| p.resource == "leases").collect();
        assert_eq!(locks.len(), 1, "{locks:?}");
        assert_eq!(locks[0].namespace.as_deref(), Some("ops"));
        assert_eq!(locks[0].verbs, ["get", "create", "update", "delete"]);
        assert!(locks[0].names.is_empty(), "named after what they hold");

        // Its credentials: those Secrets by name, in whatever namespace a CR lives.
        let bp = inrun_blueprint::from_str(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds:\n    - { group: a.b, version: v1, kind: P, reconcile: { default: false, package: { location: ./p.wasm, capabilities: { credentials: [ { secret: db-creds, keys: [password] } ] } } } }\n",
            "p.yaml",
        )
        .expect("blueprint");
        let perms = required(&bp, &options);
        let secrets: Vec<_> = perms.iter().filter(|p| p.resource == "secrets").collect();
        assert_eq!(secrets.len(), 1, "{secrets:?}");
        assert_eq!(secrets[0].names, ["db-creds"]);
        assert_eq!(secrets[0].verbs, ["get"]);
        assert_eq!(secrets[0].namespace, None, "the CR's own, any of them");
    }

    #[test]
    fn kinds_granted_to_plugins_get_read_verbs() {
        let bp = inrun_blueprint::from_str(
            r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: t}
spec:
  crds:
    - group: apps.example.dev
      version: v1alpha1
      kind: WebApp
      reconcile:
        default: false
        constructor:
          location: ./c.wasm
          capabilities:
            cluster:
              read:
                - {apiVersion: v1, kind: ConfigMap, namespaces: [shared]}
                - {apiVersion: v1, kind: Secret}
                - {apiVersion: apps.example.dev/v1alpha1, kind: WebApp}
"#,
            "t.yaml",
        )
        .expect("blueprint");
        let perms = required(&bp, &RbacOptions::default());
        let verbs = |resource: &str| {
            perms
                .iter()
                .find(|p| p.resource == resource)
                .map(|p| p.verbs.clone())
        };
        let read = Some(vec!["get".to_string(), "list".into(), "watch".into()]);
        assert_eq!(verbs("configmaps"), read);
        assert_eq!(verbs("secrets"), read);
        // Reading a kind the Blueprint also reconciles adds nothing to the CR verbs.
        assert!(verbs("webapps").is_some_and(|v| v.contains(&"patch".to_string())));
        let none = required(&blueprint(""), &RbacOptions::default());
        assert!(!none.iter().any(|p| p.resource == "configmaps"));
    }

    #[test]
    fn crd_writes_only_when_installing() {
        let read_only = required(&blueprint(""), &RbacOptions::default());
        let crd: Vec<_> = read_only
            .iter()
            .filter(|p| p.resource == "customresourcedefinitions")
            .collect();
        assert_eq!(crd.len(), 1);
        assert_eq!(crd[0].verbs, ["get"]);
        assert_eq!(crd[0].names, ["webapps.apps.example.dev"]);
        let installing = required(
            &blueprint(""),
            &RbacOptions {
                install_crds: true,
                ..RbacOptions::default()
            },
        );
        assert!(
            installing
                .iter()
                .any(|p| p.resource == "customresourcedefinitions" && p.verbs == ["create"])
        );
    }

    #[test]
    fn a_host_serving_only_blueprint_resources_may_install_the_blueprint_crd() {
        let empty = inrun_blueprint::from_str(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: fleet}\nspec: {crds: []}\n",
            "fleet.yaml",
        )
        .expect("an empty Blueprint");
        let options = RbacOptions {
            blueprint_resources: true,
            install_crds: true,
            ..RbacOptions::default()
        };
        let perms = required(&empty, &options);
        assert!(
            perms
                .iter()
                .any(|p| p.resource == "customresourcedefinitions"
                    && p.names.is_empty()
                    && p.verbs == ["create"])
        );
        assert!(
            perms
                .iter()
                .any(|p| p.resource == "customresourcedefinitions"
                    && p.names == ["blueprints.inrun.dev"]
                    && p.verbs == ["get", "patch"])
        );
    }

    #[test]
    fn blueprint_resources_add_reading_them_and_writing_their_status_only() {
        let plain = required(&blueprint(""), &RbacOptions::default());
        assert!(!plain.iter().any(|p| p.group == "inrun.dev"));
        let serving = required(
            &blueprint(""),
            &RbacOptions {
                blueprint_resources: true,
                ..RbacOptions::default()
            },
        );
        let find = |resource: &str| {
            serving
                .iter()
                .find(|p| p.group == "inrun.dev" && p.resource == resource)
                .map(|p| p.verbs.clone())
        };
        assert_eq!(
            find("blueprints"),
            Some(vec!["get".into(), "list".into(), "watch".into()])
        );
        assert_eq!(
            find("blueprints/status"),
            Some(vec!["get".into(), "patch".into()])
        );
        assert!(
            serving
                .iter()
                .any(|p| p.resource == "customresourcedefinitions"
                    && p.names == ["blueprints.inrun.dev"]
                    && p.verbs == ["get"])
        );
    }
}
