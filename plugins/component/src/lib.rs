//! Test guest: a component in the shape seed 003 describes — a CustomResourceDefinition
//! (`Gizmo` in the group `args.group`), the Deployment of the operator that would serve it
//! (`<name>-operator`), and one instance of the new type (`<name>-own`). The host must apply
//! them in waves: the instance only once the CRD is Established; and delete them in
//! reverse.
//!
//! With `spec.ship: false` only the operator is returned (the CRD and the instance are to be
//! pruned). A finalizing CR gets an empty outcome.

use inrun_sdk::{Outcome, Reconciler, Request, json};

/// Returns the CRD, the operator and the instance.
pub struct Component;

impl Reconciler for Component {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        if req.finalizing {
            return Ok(Outcome::new());
        }
        let group: String = req.arg("group")?;
        let name = req.name().to_string();
        let labels = json!({"app": format!("{name}-operator")});
        let operator = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": format!("{name}-operator")},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "operator", "image": "gizmo-operator:1"}]},
                },
            },
        });
        if req.spec()["ship"] == json!(false) {
            return Ok(Outcome::new().resource(operator));
        }
        Ok(Outcome::new()
            .resource(json!({
                "apiVersion": format!("{group}/v1"),
                "kind": "Gizmo",
                "metadata": {"name": format!("{name}-own")},
                "spec": {"size": 1},
            }))
            .resource(operator)
            .resource(json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("gizmos.{group}")},
                "spec": {
                    "group": group,
                    "names": {"kind": "Gizmo", "plural": "gizmos", "singular": "gizmo", "listKind": "GizmoList"},
                    "scope": "Namespaced",
                    "versions": [{
                        "name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    }],
                },
            })))
    }
}

inrun_sdk::export_reconciler!(Component);
