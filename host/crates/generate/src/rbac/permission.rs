//! What a permission is, and the few operations every list of them is built with.

use inrun_blueprint::ServiceAccountRef;
pub(super) use inrun_blueprint::default_plural as plural;

/// Verbs on kinds plugins are granted to read: the host serves reads from a watch cache.
pub(super) const READ_VERBS: &[&str] = &["get", "list", "watch"];

/// Verbs on children that change them, granted per namespace when the Blueprint bounds
/// where children may go (or a tenant's writes are confined).
pub(super) const CHILD_WRITE_VERBS: &[&str] = &["create", "patch", "update", "delete"];

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

/// `verbs` on every object of `resource` in `group`, cluster-wide, for the reason `why`.
pub(super) fn perm(group: &str, resource: &str, verbs: &[&str], why: String) -> Permission {
    Permission {
        group: group.into(),
        resource: resource.into(),
        names: Vec::new(),
        verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
        namespace: None,
        why,
    }
}

/// `p` cluster-wide when `cluster`, else one copy in each of `namespaces`.
pub(super) fn scoped(p: Permission, cluster: bool, namespaces: &[String]) -> Vec<Permission> {
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

/// Merges permissions on the same group, resource, names and namespace.
pub(super) fn merge(perms: Vec<Permission>) -> Vec<Permission> {
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
