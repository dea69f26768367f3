//! Breaking changes between two versions of a CRD's manifest, and the CRs each would
//! strand: a field removed (where unknown fields are pruned), a type changed, a field
//! newly required, an enum that no longer allows a value, a served version dropped.
//! `inrun plan` compares the manifests two Blueprints make ([`CrdSpec::manifest`]); the
//! host compares the CRD the API server holds with the one it would install, and refuses
//! a breaking change unless the Blueprint allows it. Rules the API server evaluates
//! (`x-kubernetes-validations`) are not judged here.

use serde::Serialize;
use serde_json::Value;

use crate::crd::CrdSpec;

/// One step of a path into a CR.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A field of an object.
    Field(String),
    /// Every item of an array.
    Items,
}

/// A breaking change, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Break {
    /// Where, as `spec.size` or `spec.ports[].name`; `versions` for a dropped version.
    pub path: String,
    /// What changed.
    pub what: String,
    #[serde(skip)]
    at: Vec<Step>,
    #[serde(skip)]
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Removed,
    Retyped(String),
    Required(String),
    Enum(Vec<Value>),
    Version,
}

/// The breaking changes from `old` to `new` (the same CRD in the running and the new
/// Blueprint).
pub fn breaking(old: &CrdSpec, new: &CrdSpec) -> Vec<Break> {
    breaking_manifests(&old.manifest(), &new.manifest())
}

/// The breaking changes from the CRD manifest `old` (as the API server holds it, or as a
/// Blueprint makes it) to `new`: each version `old` serves that `new` does not, then the
/// schema of `old`'s storage version against `new`'s.
pub fn breaking_manifests(old: &Value, new: &Value) -> Vec<Break> {
    let versions = |m: &Value| -> Vec<Value> {
        m.pointer("/spec/versions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (before, after) = (versions(old), versions(new));
    let served: Vec<&str> = after
        .iter()
        .filter(|v| v["served"] == true)
        .filter_map(|v| v["name"].as_str())
        .collect();
    let mut out = Vec::new();
    for version in before.iter().filter(|v| v["served"] == true) {
        let name = version["name"].as_str().unwrap_or_default();
        if !served.contains(&name) {
            out.push(Break {
                path: "versions".into(),
                what: format!(
                    "version {name} is no longer served (the CRD serves {}); CRs stored as {name} can no longer be read",
                    served.join(", ")
                ),
                at: Vec::new(),
                kind: Kind::Version,
            });
        }
    }
    let storage_schema = |versions: &[Value]| {
        versions
            .iter()
            .find(|v| v["storage"] == true)
            .or(versions.first())
            .map(|v| v["schema"]["openAPIV3Schema"].clone())
            .unwrap_or_default()
    };
    walk(
        &mut Vec::new(),
        &storage_schema(&before),
        &storage_schema(&after),
        &mut out,
    );
    out
}

fn walk(at: &mut Vec<Step>, old: &Value, new: &Value, out: &mut Vec<Break>) {
    let push = |out: &mut Vec<Break>, at: &[Step], what: String, kind: Kind| {
        out.push(Break {
            path: path_text(at),
            what,
            at: at.to_vec(),
            kind,
        });
    };
    let (old_type, new_type) = (old["type"].as_str(), new["type"].as_str());
    if let (Some(o), Some(n)) = (old_type, new_type)
        && o != n
    {
        push(
            out,
            at,
            format!("type {o} becomes {n}"),
            Kind::Retyped(n.to_string()),
        );
        return;
    }
    if let Some(allowed) = new["enum"].as_array() {
        let dropped: Vec<Value> = match old["enum"].as_array() {
            Some(before) => before
                .iter()
                .filter(|v| !allowed.contains(v))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        if old["enum"].is_null() {
            push(
                out,
                at,
                format!("now allows only {}", list(allowed)),
                Kind::Enum(allowed.clone()),
            );
        } else if !dropped.is_empty() {
            push(
                out,
                at,
                format!("no longer allows {}", list(&dropped)),
                Kind::Enum(allowed.clone()),
            );
        }
    }
    let required = |v: &Value| -> Vec<String> {
        v["required"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = required(old);
    for field in required(new) {
        if !before.contains(&field) {
            push(
                out,
                at,
                format!("{field} becomes required"),
                Kind::Required(field),
            );
        }
    }
    let keeps_unknown = new["x-kubernetes-preserve-unknown-fields"] == true;
    if let Some(props) = old["properties"].as_object() {
        for (name, old_field) in props {
            at.push(Step::Field(name.clone()));
            match new["properties"].get(name) {
                Some(new_field) => walk(at, old_field, new_field, out),
                None if !keeps_unknown => {
                    push(
                        out,
                        at,
                        "removed (the API server prunes it)".into(),
                        Kind::Removed,
                    );
                }
                None => {}
            }
            at.pop();
        }
    }
    if old["items"].is_object() && new["items"].is_object() {
        at.push(Step::Items);
        walk(at, &old["items"], &new["items"], out);
        at.pop();
    }
}

fn list(values: &[Value]) -> String {
    values
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn path_text(at: &[Step]) -> String {
    let mut text = String::new();
    for step in at {
        match step {
            Step::Field(name) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(name);
            }
            Step::Items => text.push_str("[]"),
        }
    }
    text
}

/// The values at `at` in `object` (every item of each array on the way).
fn values_at<'v>(object: &'v Value, at: &[Step]) -> Vec<&'v Value> {
    let mut here = vec![object];
    for step in at {
        here = here
            .into_iter()
            .flat_map(|v| match step {
                Step::Field(name) => v.get(name).into_iter().collect::<Vec<_>>(),
                Step::Items => v.as_array().map(|a| a.iter().collect()).unwrap_or_default(),
            })
            .collect();
    }
    here
}

/// The breaking changes of `breaks` that `cr` would no longer pass, as `path: what`.
pub fn stranded(cr: &Value, breaks: &[Break]) -> Vec<String> {
    breaks
        .iter()
        .filter(|b| {
            let values = values_at(cr, &b.at);
            match &b.kind {
                Kind::Version => true,
                Kind::Removed => !values.is_empty(),
                Kind::Retyped(to) => values.iter().any(|v| !of_type(v, to)),
                Kind::Required(field) => values.iter().any(|v| v.get(field).is_none()),
                Kind::Enum(allowed) => values.iter().any(|v| !allowed.contains(v)),
            }
        })
        .map(|b| format!("{}: {}", b.path, b.what))
        .collect()
}

/// Whether `value` is of the OpenAPI `type`.
fn of_type(value: &Value, type_: &str) -> bool {
    match type_ {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(version: &str, spec_schema: Value) -> CrdSpec {
        let text = format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: t}}\nspec:\n  crds:\n    - group: t.inrun.dev\n      version: {version}\n      kind: Shop\n      schema: {}\n      reconcile: {{}}\n",
            json!({"type": "object", "properties": {"spec": spec_schema}})
        );
        crate::from_str(&text, "t.yaml")
            .expect("blueprint")
            .spec
            .crds
            .remove(0)
    }

    fn cr(spec: Value) -> Value {
        json!({"apiVersion": "t.inrun.dev/v1", "kind": "Shop", "metadata": {"name": "a"}, "spec": spec})
    }

    #[test]
    fn each_kind_of_break_is_named_and_strands_only_the_crs_it_concerns() {
        let old = crd(
            "v1",
            json!({"type": "object", "properties": {
                "size": {"type": "string"},
                "tier": {"type": "string", "enum": ["gold", "silver", "bronze"]},
                "replicas": {"type": "string"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "port": {"type": "integer"}}}},
            }}),
        );
        let new = crd(
            "v1",
            json!({"type": "object", "required": ["owner"], "properties": {
                "tier": {"type": "string", "enum": ["gold", "silver"]},
                "replicas": {"type": "integer"},
                "owner": {"type": "string"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "port": {"type": "integer"}}}},
            }}),
        );
        let breaks = breaking(&old, &new);
        let named: Vec<(&str, &str)> = breaks
            .iter()
            .map(|b| (b.path.as_str(), b.what.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("spec", "owner becomes required"),
                ("spec.size", "removed (the API server prunes it)"),
                ("spec.tier", "no longer allows \"bronze\""),
                ("spec.replicas", "type string becomes integer"),
                ("spec.ports[].name", "removed (the API server prunes it)"),
            ]
        );
        let fine = cr(json!({"owner": "x", "tier": "gold", "replicas": 2}));
        assert!(
            stranded(&fine, &breaks).is_empty(),
            "{:?}",
            stranded(&fine, &breaks)
        );
        let hit = cr(json!({"tier": "bronze", "size": "L", "replicas": "2",
                            "ports": [{"name": "http", "port": 80}]}));
        assert_eq!(
            stranded(&hit, &breaks).len(),
            5,
            "{:?}",
            stranded(&hit, &breaks)
        );
    }

    #[test]
    fn a_dropped_version_strands_every_cr_and_an_open_object_keeps_unknown_fields() {
        let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let old = crd(
            "v1",
            json!({"type": "object", "properties": {"size": {"type": "string"}}}),
        );
        let new = crd("v2", open);
        let breaks = breaking(&old, &new);
        assert_eq!(breaks.len(), 1, "{breaks:?}");
        assert_eq!(breaks[0].path, "versions");
        assert_eq!(stranded(&cr(json!({})), &breaks).len(), 1);
        assert!(breaking(&old, &old).is_empty());
    }
}
