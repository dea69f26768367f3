//! Bench guest: a `Pair` CR becomes a ConfigMap and a headless Service of the same name,
//! in the CR's namespace.
//!
//! The end-to-end benchmark (`host/benches/e2e.rs`) runs this as a Wasm constructor and
//! calls [`children`] natively for its plain kube-rs baseline and its remote reconciler,
//! so every mode applies the same two objects. Its declarative Blueprint writes the same
//! objects as templates.

use inrun_sdk::{Outcome, Request, Value, json};

/// The ConfigMap and the Service a `Pair` named `name` in `namespace` should have;
/// `message` is its `spec.message`. The Service is headless, so it takes no cluster IP.
pub fn children(name: &str, namespace: &str, message: &str) -> [Value; 2] {
    [
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"message": message},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "clusterIP": "None",
                "selector": {"app": name},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
            },
        }),
    ]
}

/// Declares the two children of the CR in `req`; a finalizing CR gets an empty outcome
/// (the host deletes the children).
///
/// # Errors
///
/// Never; the signature is the reconciler's.
pub fn reconcile(req: &Request) -> Result<Outcome, String> {
    if req.finalizing {
        return Ok(Outcome::new());
    }
    let message = req.spec()["message"].as_str().unwrap_or_default();
    let namespace = req.namespace().unwrap_or("default");
    let [config_map, service] = children(req.name(), namespace, message);
    Ok(Outcome::new().resource(config_map).resource(service))
}

/// The Wasm export: the typed SDK wraps [`reconcile`].
#[cfg(target_arch = "wasm32")]
mod component {
    struct Pair;

    impl inrun_sdk::Reconciler for Pair {
        fn reconcile(req: inrun_sdk::Request) -> Result<inrun_sdk::Outcome, String> {
            super::reconcile(&req)
        }
    }

    inrun_sdk::export_reconciler!(Pair);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_declares_its_config_map_and_service_in_its_namespace() {
        let req = Request::for_object(
            json!({"apiVersion": "e2e.bench.inrun.dev/v1alpha1", "kind": "Pair",
                   "metadata": {"name": "p-1", "namespace": "bench"},
                   "spec": {"message": "hello"}}),
            json!({}),
        );
        let out = reconcile(&req).expect("reconcile");
        let kinds: Vec<_> = out.resources.iter().map(|r| r["kind"].clone()).collect();
        assert_eq!(kinds, [json!("ConfigMap"), json!("Service")]);
        assert_eq!(out.resources[0]["data"]["message"], "hello");
        assert_eq!(out.resources[1]["metadata"]["namespace"], "bench");
        assert_eq!(out.resources[1]["spec"]["clusterIP"], "None");
    }
}
