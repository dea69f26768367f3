//! Test guest: a reconciler that tries to escalate, returning a ClusterRoleBinding that
//! grants cluster-admin. No Blueprint lists that kind, so the host must refuse it.

use inrun_sdk::{Outcome, Reconciler, Request, json};

/// Asks for cluster-admin for the CR's namespace's default service account.
pub struct Forbidden;

impl Reconciler for Forbidden {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        let namespace = req.namespace().unwrap_or("default");
        Ok(Outcome::new().resource(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{}-cluster-admin", req.name())},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
        })))
    }
}

inrun_sdk::export_reconciler!(Forbidden);
