//! The least RBAC the host needs to run a Blueprint: a ClusterRole for CRs, their
//! subresources, managed kinds, events, CRDs and (only when needed) Secrets, plus a Role
//! for the leader-election Lease. [`required`] is the single list both the generated
//! manifests and the startup access check (`runtime::access`) use, so they cannot drift.
//! [`tenant_required`] is what a tenant's ServiceAccount needs when the host acts as it.

mod blocks;
mod host;
mod manifests;
mod permission;
mod tenant;

pub use host::{lock_permission, required};
pub use manifests::{manifests, tenant_manifests};
pub use tenant::tenant_required;

/// The resource (plural) Kubernetes gives a kind by default.
pub use inrun_blueprint::default_plural as plural;
pub use permission::{Permission, RbacOptions};

#[cfg(test)]
mod tests {
    use super::permission::{CHILD_WRITE_VERBS, READ_VERBS};
    use super::*;
    use inrun_blueprint::Blueprint;
    use inrun_blueprint::ServiceAccountRef;

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
    fn a_sharded_host_may_list_and_write_the_rings_leases_in_its_lease_namespace_only() {
        let options = RbacOptions {
            namespace: "ops".into(),
            ..RbacOptions::default()
        };
        let sharded = blueprint("  runtime:\n    sharding: {enabled: true}\n");
        let perms = required(&sharded, &options);
        let leases: Vec<_> = perms.iter().filter(|p| p.resource == "leases").collect();
        assert_eq!(leases.len(), 1, "{leases:?}");
        assert_eq!(leases[0].namespace.as_deref(), Some("ops"));
        assert!(
            leases[0].names.is_empty(),
            "Lease names are made at run time"
        );
        assert_eq!(
            leases[0].verbs,
            [
                "get", "list", "watch", "create", "update", "patch", "delete"
            ]
        );
        let elsewhere = blueprint(
            "  runtime:\n    sharding: {enabled: true}\n    leaderElection: {namespace: ring}\n",
        );
        let perms = required(&elsewhere, &options);
        assert!(
            perms
                .iter()
                .any(|p| p.resource == "leases" && p.namespace.as_deref() == Some("ring"))
        );
        assert!(
            !required(&blueprint(""), &options)
                .iter()
                .any(|p| p.resource == "leases")
        );
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
