//! Example constructor: a `WebApp` CR becomes a Deployment and a Service.
//!
//! The logic is a plain function, [`reconcile`], so it also compiles natively: its unit
//! tests run with `cargo test`, and the host's benchmark calls it as the native baseline
//! for the same logic run as a Wasm component.

use std::collections::BTreeMap;

use inrun_sdk::{Outcome, Request, Value, json};
use serde::Deserialize;

/// The label every object of one WebApp carries, and the selector that finds its pods.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";

/// The label the reconciler sets on the WebApp itself.
pub const TIER_LABEL: &str = "demo.inrun.dev/tier";

/// The fields of a WebApp's `spec`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WebAppSpec {
    /// The container image; required (checked by [`reconcile`] for a clear message).
    image: Option<String>,
    /// Pod replicas.
    #[serde(default = "default_replicas")]
    replicas: u32,
    /// The port the container listens on; the Service forwards port 80 to it.
    #[serde(default = "default_port")]
    port: u16,
    /// Environment variables for the container.
    #[serde(default)]
    env: BTreeMap<String, String>,
}

fn default_replicas() -> u32 {
    1
}

fn default_port() -> u16 {
    8080
}

/// Declares the Deployment and Service a WebApp CR should have, its status and its tier
/// label. A finalizing CR gets an empty outcome: the host deletes the children.
///
/// # Errors
/// When `spec.image` is missing (`spec.image is required`) or the spec has a field of
/// the wrong type.
pub fn reconcile(req: &Request) -> Result<Outcome, String> {
    if req.finalizing {
        return Ok(Outcome::new());
    }
    if req.spec().is_null() {
        return Err("spec.image is required".to_owned());
    }
    let spec: WebAppSpec = req.spec_as()?;
    let image = spec
        .image
        .as_deref()
        .filter(|image| !image.is_empty())
        .ok_or("spec.image is required")?;
    let name = req.name();
    let namespace = req.namespace().unwrap_or("default");

    Ok(Outcome::new()
        .resource(deployment(name, namespace, image, &spec))
        .resource(service(name, namespace, spec.port))
        .status("image", image)
        .status("replicas", spec.replicas)
        .status("url", format!("http://{name}.{namespace}.svc:80"))
        .label(TIER_LABEL, "web"))
}

fn deployment(name: &str, namespace: &str, image: &str, spec: &WebAppSpec) -> Value {
    let labels = json!({ NAME_LABEL: name });
    let mut container = json!({
        "name": "web",
        "image": image,
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
    });
    if !spec.env.is_empty() {
        let env: Vec<Value> = spec
            .env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        container["env"] = Value::Array(env);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container]},
            },
        },
    })
}

fn service(name: &str, namespace: &str, port: u16) -> Value {
    let labels = json!({ NAME_LABEL: name });
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": 80, "targetPort": port, "protocol": "TCP"}],
        },
    })
}

/// The Wasm export: the typed SDK wraps [`reconcile`].
#[cfg(target_arch = "wasm32")]
mod component {
    struct WebApp;

    impl inrun_sdk::Reconciler for WebApp {
        fn reconcile(req: inrun_sdk::Request) -> Result<inrun_sdk::Outcome, String> {
            super::reconcile(&req)
        }
    }

    inrun_sdk::export_reconciler!(WebApp);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn webapp(spec: Value) -> Request {
        Request::for_object(
            json!({
                "apiVersion": "demo.inrun.dev/v1alpha1",
                "kind": "WebApp",
                "metadata": {"name": "shop", "namespace": "prod"},
                "spec": spec,
            }),
            json!({}),
        )
    }

    fn ok(req: &Request) -> Outcome {
        match reconcile(req) {
            Ok(outcome) => outcome,
            Err(e) => panic!("reconcile failed: {e}"),
        }
    }

    #[test]
    fn a_webapp_becomes_a_deployment_and_a_service_with_defaults() {
        let outcome = ok(&webapp(json!({"image": "nginx:1.27"})));
        let [deploy, svc] = outcome.resources.as_slice() else {
            panic!("expected two resources, got {:?}", outcome.resources);
        };
        assert_eq!(deploy["apiVersion"], "apps/v1");
        assert_eq!(deploy["kind"], "Deployment");
        assert_eq!(deploy["metadata"]["name"], "shop");
        assert_eq!(deploy["metadata"]["namespace"], "prod");
        assert_eq!(deploy["spec"]["replicas"], 1);
        assert_eq!(
            deploy["spec"]["selector"]["matchLabels"][NAME_LABEL],
            "shop"
        );
        assert_eq!(
            deploy["spec"]["template"]["metadata"]["labels"][NAME_LABEL],
            "shop"
        );
        let container = &deploy["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], "web");
        assert_eq!(container["image"], "nginx:1.27");
        assert_eq!(container["ports"][0]["containerPort"], 8080);
        assert!(container.get("env").is_none());

        assert_eq!(svc["apiVersion"], "v1");
        assert_eq!(svc["kind"], "Service");
        assert_eq!(svc["metadata"]["namespace"], "prod");
        assert_eq!(svc["spec"]["selector"][NAME_LABEL], "shop");
        assert_eq!(svc["spec"]["ports"][0]["port"], 80);
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    }

    #[test]
    fn the_status_reports_image_replicas_and_url() {
        let outcome = ok(&webapp(
            json!({"image": "nginx:1.27", "replicas": 3, "port": 9000}),
        ));
        assert_eq!(
            Value::Object(outcome.status.unwrap_or_default()),
            json!({"image": "nginx:1.27", "replicas": 3, "url": "http://shop.prod.svc:80"})
        );
        assert_eq!(
            outcome.labels.get(TIER_LABEL).map(String::as_str),
            Some("web")
        );
        assert_eq!(outcome.resources[1]["spec"]["ports"][0]["targetPort"], 9000);
    }

    #[test]
    fn env_becomes_container_environment_variables() {
        let outcome = ok(&webapp(json!({"image": "x", "env": {"B": "2", "A": "1"}})));
        let env = &outcome.resources[0]["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(
            env,
            &json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
    }

    #[test]
    fn a_missing_image_is_an_error() {
        let expected = Err("spec.image is required".to_owned());
        assert_eq!(reconcile(&webapp(json!({"replicas": 2}))), expected);
        assert_eq!(reconcile(&webapp(json!({"image": ""}))), expected);
        assert_eq!(reconcile(&webapp(Value::Null)), expected);
    }

    #[test]
    fn a_spec_field_of_the_wrong_type_is_an_error() {
        let err = reconcile(&webapp(json!({"image": "x", "replicas": "many"})));
        assert!(err.is_err_and(|e| e.starts_with("spec: invalid type")));
    }

    #[test]
    fn a_finalizing_webapp_gets_an_empty_outcome() {
        let mut req = webapp(json!({"image": "nginx"}));
        req.finalizing = true;
        assert_eq!(reconcile(&req), Ok(Outcome::new()));
    }
}
