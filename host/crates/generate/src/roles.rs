//! ClusterRoles for the people who create a Blueprint's CRs, aggregated into Kubernetes'
//! built-in `admin`, `edit` and `view` roles: whoever may edit Deployments in a namespace
//! may edit the Blueprint's CRs there too, with no binding of its own.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use inrun_blueprint::Blueprint;

/// Verbs of the edit role on CRs (the built-in `edit` role's verbs on workloads).
const EDIT_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Verbs of the view role on CRs.
const VIEW_VERBS: &[&str] = &["get", "list", "watch"];

/// Two ClusterRoles for the Blueprint's CRDs: `<name>-edit` (aggregated to `admin` and
/// `edit`: every verb on the CRs, reading their status) and `<name>-view` (aggregated to
/// `view`: reading them and their status). Status stays the host's to write. Empty when
/// the Blueprint declares no CRD.
pub fn user_roles(blueprint: &Blueprint, name: &str) -> Vec<Value> {
    let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for crd in &blueprint.spec.crds {
        by_group.entry(&crd.group).or_default().push(crd.plural());
    }
    if by_group.is_empty() {
        return Vec::new();
    }
    let rules = |verbs: &[&str]| -> Vec<Value> {
        by_group
            .iter()
            .flat_map(|(group, plurals)| {
                let status: Vec<String> = plurals.iter().map(|p| format!("{p}/status")).collect();
                [
                    json!({"apiGroups": [group], "resources": plurals, "verbs": verbs}),
                    json!({"apiGroups": [group], "resources": status, "verbs": ["get"]}),
                ]
            })
            .collect()
    };
    let role = |suffix: &str, aggregate_to: &[&str], verbs: &[&str]| {
        let mut labels = json!({
            "app.kubernetes.io/name": "inrun",
            "app.kubernetes.io/managed-by": "inrun",
        });
        for to in aggregate_to {
            labels[format!("rbac.authorization.k8s.io/aggregate-to-{to}")] = json!("true");
        }
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": format!("{name}-{suffix}"), "labels": labels},
            "rules": rules(verbs),
        })
    };
    vec![
        role("edit", &["admin", "edit"], EDIT_VERBS),
        role("view", &["view"], VIEW_VERBS),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blueprint() -> Blueprint {
        inrun_blueprint::from_str(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds:\n    - {group: apps.example.dev, version: v1, kind: WebApp}\n    - {group: apps.example.dev, version: v1, kind: Proxy, plural: proxies}\n    - {group: data.example.dev, version: v1, kind: Bucket}\n",
            "t.yaml",
        )
        .expect("blueprint")
    }

    #[test]
    fn edit_aggregates_to_admin_and_edit_and_view_only_to_view() {
        let roles = user_roles(&blueprint(), "inrun");
        let labels = |i: usize| roles[i]["metadata"]["labels"].clone();
        assert_eq!(roles[0]["metadata"]["name"], "inrun-edit");
        assert_eq!(
            labels(0)["rbac.authorization.k8s.io/aggregate-to-admin"],
            "true"
        );
        assert_eq!(
            labels(0)["rbac.authorization.k8s.io/aggregate-to-edit"],
            "true"
        );
        assert!(
            labels(0)
                .get("rbac.authorization.k8s.io/aggregate-to-view")
                .is_none()
        );
        assert_eq!(roles[1]["metadata"]["name"], "inrun-view");
        assert_eq!(
            labels(1)["rbac.authorization.k8s.io/aggregate-to-view"],
            "true"
        );
        assert!(
            labels(1)
                .get("rbac.authorization.k8s.io/aggregate-to-edit")
                .is_none()
        );
    }

    #[test]
    fn the_roles_cover_every_crd_by_group_and_never_write_status() {
        let roles = user_roles(&blueprint(), "inrun");
        assert_eq!(
            roles[1]["rules"],
            json!([
                {"apiGroups": ["apps.example.dev"], "resources": ["webapps", "proxies"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["apps.example.dev"], "resources": ["webapps/status", "proxies/status"], "verbs": ["get"]},
                {"apiGroups": ["data.example.dev"], "resources": ["buckets"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["data.example.dev"], "resources": ["buckets/status"], "verbs": ["get"]},
            ])
        );
        let edit = roles[0]["rules"].as_array().expect("rules");
        assert!(
            edit[0]["verbs"]
                .as_array()
                .expect("verbs")
                .contains(&json!("create"))
        );
        assert_eq!(edit[1]["verbs"], json!(["get"]));
    }

    #[test]
    fn a_blueprint_without_crds_needs_no_user_roles() {
        let bp = inrun_blueprint::from_str(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: t}\nspec:\n  crds: []\n",
            "t.yaml",
        )
        .expect("a Blueprint may declare no CRD");
        assert!(user_roles(&bp, "inrun").is_empty());
    }
}
