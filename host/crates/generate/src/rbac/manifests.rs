//! The RBAC documents: ClusterRole and binding for what is cluster-wide, a Role and
//! binding per namespace for the rest, then the users' aggregated roles.

use std::collections::BTreeMap;

use inrun_blueprint::{Blueprint, ServiceAccountRef};
use serde_json::{Value, json};

use super::host::required;
use super::permission::{Permission, RbacOptions};
use super::tenant::tenant_required;

/// The manifests: ClusterRole and ClusterRoleBinding, and when leader election is on, a
/// Role and RoleBinding for the Lease in its namespace; then the users' aggregated roles
/// ([`crate::roles::user_roles`]).
pub fn manifests(blueprint: &Blueprint, options: &RbacOptions) -> Vec<Value> {
    let perms = required(blueprint, options);
    let host = ServiceAccountRef {
        namespace: options.namespace.clone(),
        name: options.service_account.clone(),
    };
    bound_to(&host, &perms, blueprint, options)
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
    bound_to(sa, &perms, blueprint, options)
}

/// The documents for `perms`, bound to the ServiceAccount `sa`, then the users' aggregated
/// roles.
fn bound_to(
    sa: &ServiceAccountRef,
    perms: &[Permission],
    blueprint: &Blueprint,
    options: &RbacOptions,
) -> Vec<Value> {
    let subject = json!([{
        "kind": "ServiceAccount",
        "name": sa.name,
        "namespace": sa.namespace,
    }]);
    let mut docs = documents(perms, &options.name, &subject);
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
