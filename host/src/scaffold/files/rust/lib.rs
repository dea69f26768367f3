//! The @KIND@ reconciler: a ConfigMap with `spec.message`, and the message in status.

use inrun_sdk::{Outcome, Request, json};

/// What the CR should become.
///
/// # Errors
/// When `spec.message` is not a string.
pub fn reconcile(req: &Request) -> Result<Outcome, String> {
    if req.finalizing {
        return Ok(Outcome::new());
    }
    let message = match req.spec().get("message") {
        None => "hello".to_string(),
        Some(m) => m.as_str().ok_or("spec.message must be a string")?.to_string(),
    };
    Ok(Outcome::new()
        .resource(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": req.name(), "namespace": req.namespace()},
            "data": {"message": message},
        }))
        .status("message", message))
}

#[cfg(target_arch = "wasm32")]
mod component {
    struct Plugin;

    impl inrun_sdk::Reconciler for Plugin {
        fn reconcile(req: inrun_sdk::Request) -> Result<inrun_sdk::Outcome, String> {
            super::reconcile(&req)
        }
    }

    inrun_sdk::export_reconciler!(Plugin);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(spec: inrun_sdk::Value) -> Request {
        Request::for_object(
            json!({
                "apiVersion": "example.inrun.dev/v1alpha1",
                "kind": "@KIND@",
                "metadata": {"name": "sample", "namespace": "default"},
                "spec": spec,
            }),
            json!({}),
        )
    }

    #[test]
    fn the_message_becomes_a_config_map_and_the_status() {
        let out = reconcile(&request(json!({"message": "hi"}))).expect("reconcile");
        assert_eq!(out.resources.len(), 1);
        assert_eq!(out.resources[0]["kind"], "ConfigMap");
        assert_eq!(out.resources[0]["metadata"]["name"], "sample");
        assert_eq!(out.resources[0]["data"]["message"], "hi");
        assert_eq!(out.status.expect("status")["message"], "hi");
    }

    #[test]
    fn a_message_that_is_not_text_is_refused() {
        let err = reconcile(&request(json!({"message": 3}))).unwrap_err();
        assert_eq!(err, "spec.message must be a string");
    }
}
