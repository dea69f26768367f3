//! Example hooks that adjust what a Blueprint's templates rendered.
//!
//! - `add-labels`: label every resource, and the CR, `demo.inrun.dev/team: <args.team>`
//!   (`platform` when the Blueprint passes no `team` argument).
//! - `annotate`: annotate every resource `demo.inrun.dev/rendered-by: hooks`.
//! - `add-sidecar`: add a `log-shipper` container (`busybox:1.36`) to every Deployment's
//!   pod template.
//!
//! Hooks edit full objects only: a resource in the intent form
//! (`{"type": ..., "fields": ...}`) has no metadata yet and is passed through untouched.

use inrun_sdk::{Hooks, Map, Outcome, Request, Value, json};

/// The label `add-labels` sets.
pub const TEAM_LABEL: &str = "demo.inrun.dev/team";
/// The team used when the Blueprint passes no `team` argument.
pub const DEFAULT_TEAM: &str = "platform";
/// The annotation `annotate` sets.
pub const RENDERED_BY: &str = "demo.inrun.dev/rendered-by";
/// The name of the container `add-sidecar` adds.
pub const SIDECAR_NAME: &str = "log-shipper";
/// The image of the container `add-sidecar` adds.
pub const SIDECAR_IMAGE: &str = "busybox:1.36";

/// The hook functions this plugin exports.
pub const FUNCTIONS: [&str; 3] = ["add-labels", "annotate", "add-sidecar"];

/// The hooks, as the SDK's [`Hooks`] trait.
pub struct LabelHooks;

impl Hooks for LabelHooks {
    fn functions() -> Vec<String> {
        FUNCTIONS.iter().map(|f| (*f).to_owned()).collect()
    }

    fn call(function: &str, req: Request, current: Outcome) -> Result<Outcome, String> {
        match function {
            "add-labels" => add_labels(&req, current),
            "annotate" => Ok(annotate(current)),
            "add-sidecar" => Ok(add_sidecar(current)),
            other => Err(format!("unknown hook function `{other}`")),
        }
    }
}

/// Labels every resource and the CR with the team from `args.team`.
///
/// # Errors
/// When `args.team` is present but not a string.
pub fn add_labels(req: &Request, mut current: Outcome) -> Result<Outcome, String> {
    let team = req
        .optional_arg::<String>("team")?
        .unwrap_or_else(|| DEFAULT_TEAM.to_owned());
    for resource in full_objects(&mut current.resources) {
        metadata_map(resource, "labels").insert(TEAM_LABEL.to_owned(), json!(team));
    }
    Ok(current.label(TEAM_LABEL, &team))
}

/// Annotates every resource as rendered by these hooks.
pub fn annotate(mut current: Outcome) -> Outcome {
    for resource in full_objects(&mut current.resources) {
        metadata_map(resource, "annotations").insert(RENDERED_BY.to_owned(), json!("hooks"));
    }
    current
}

/// Adds the log-shipper sidecar to every Deployment that does not have it yet.
pub fn add_sidecar(mut current: Outcome) -> Outcome {
    let deployments = full_objects(&mut current.resources)
        .filter(|r| r.get("kind").and_then(Value::as_str) == Some("Deployment"));
    for deployment in deployments {
        let Some(containers) = deployment
            .get_mut("spec")
            .and_then(|spec| spec.pointer_mut("/template/spec/containers"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        if !containers.iter().any(|c| c["name"] == SIDECAR_NAME) {
            containers.push(json!({"name": SIDECAR_NAME, "image": SIDECAR_IMAGE}));
        }
    }
    current
}

/// The resources that are full Kubernetes objects (they have a `kind`), not intents.
fn full_objects(resources: &mut [Value]) -> impl Iterator<Item = &mut Map<String, Value>> {
    resources
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .filter(|r| r.contains_key("kind"))
}

/// `metadata.<field>` of `object` as a map, created when missing (or replacing a value
/// that is not a map).
fn metadata_map<'a>(object: &'a mut Map<String, Value>, field: &str) -> &'a mut Map<String, Value> {
    object_field(object_field(object, "metadata"), field)
}

/// `parent.<field>` as a map, created when missing (or replacing a value that is not one).
fn object_field<'a>(parent: &'a mut Map<String, Value>, field: &str) -> &'a mut Map<String, Value> {
    let slot = parent.entry(field).or_insert(Value::Null);
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(map) => map,
        _ => unreachable!("the slot was just made an object"),
    }
}

#[cfg(target_arch = "wasm32")]
inrun_sdk::export_hooks!(LabelHooks);

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: Value) -> Request {
        Request::for_object(
            json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": "shop", "namespace": "prod"}}),
            args,
        )
    }

    fn rendered() -> Outcome {
        Outcome::new()
            .resource(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "shop", "labels": {"app": "shop"}},
                "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
            }))
            .resource(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop"}}))
            .intent("deployment", json!({"image": "nginx"}))
    }

    fn call(function: &str, args: Value) -> Outcome {
        match LabelHooks::call(function, request(args), rendered()) {
            Ok(outcome) => outcome,
            Err(e) => panic!("{function} failed: {e}"),
        }
    }

    #[test]
    fn add_labels_labels_every_object_and_the_cr_with_the_team_argument() {
        let out = call("add-labels", json!({"team": "payments"}));
        assert_eq!(
            out.resources[0]["metadata"]["labels"],
            json!({"app": "shop", TEAM_LABEL: "payments"})
        );
        assert_eq!(
            out.resources[1]["metadata"]["labels"],
            json!({TEAM_LABEL: "payments"})
        );
        assert_eq!(
            out.labels.get(TEAM_LABEL).map(String::as_str),
            Some("payments")
        );
    }

    #[test]
    fn add_labels_defaults_the_team_to_platform() {
        let out = call("add-labels", json!({}));
        assert_eq!(
            out.resources[1]["metadata"]["labels"][TEAM_LABEL],
            DEFAULT_TEAM
        );
        assert_eq!(
            out.labels.get(TEAM_LABEL).map(String::as_str),
            Some(DEFAULT_TEAM)
        );
    }

    #[test]
    fn add_labels_rejects_a_team_that_is_not_a_string() {
        let err = LabelHooks::call("add-labels", request(json!({"team": 7})), rendered());
        assert!(err.is_err_and(|e| e.starts_with("args.team: invalid type")));
    }

    #[test]
    fn hooks_leave_intent_form_resources_untouched() {
        for function in FUNCTIONS {
            let out = call(function, json!({}));
            assert_eq!(out.resources[2], rendered().resources[2], "{function}");
        }
    }

    #[test]
    fn annotate_marks_every_object_as_rendered_by_hooks() {
        let out = call("annotate", json!({}));
        for resource in &out.resources[..2] {
            assert_eq!(resource["metadata"]["annotations"][RENDERED_BY], "hooks");
        }
        assert!(out.annotations.is_empty(), "the CR itself is not annotated");
    }

    #[test]
    fn add_sidecar_adds_the_log_shipper_to_deployments_only_once() {
        let once = call("add-sidecar", json!({}));
        let twice = add_sidecar(once.clone());
        let containers = &twice.resources[0]["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            containers,
            &json!([{"name": "web", "image": "nginx"}, {"name": SIDECAR_NAME, "image": SIDECAR_IMAGE}])
        );
        assert_eq!(
            twice.resources[1],
            rendered().resources[1],
            "a Service gets no sidecar"
        );
    }

    #[test]
    fn the_function_list_names_every_hook() {
        assert_eq!(
            LabelHooks::functions(),
            vec!["add-labels", "annotate", "add-sidecar"]
        );
    }
}
