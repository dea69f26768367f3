//! Breaking changes between two versions of a CRD's manifest, and the CRs each would
//! strand: a field removed (where unknown fields are pruned), a type changed, a field
//! newly required, an enum that no longer allows a value, a bound tightened (`minimum`,
//! `maxLength`, `maxItems`, `pattern`, …), a validation rule added
//! (`x-kubernetes-validations`), a served version dropped. `inrun plan` compares the
//! manifests two Blueprints make ([`CrdSpec::manifest`]); the host compares the CRD the
//! API server holds with the one it would install, and refuses a breaking change unless
//! the Blueprint allows it.
//!
//! A new rule is evaluated here (CEL, `self` bound to the value it guards), as the API
//! server would on the CR's next write. What is not judged here, and strands nothing: a
//! transition rule (`oldSelf`: it compares with the write before), a rule calling a
//! function of Kubernetes' own CEL libraries (`quantity`, `url`, `isSorted`, …), and a
//! rule with more than one comprehension (`all`, `exists`, `map`, `filter`), whose cost
//! may grow with the square of a CR: the host judges tenants' rules, and no rule may
//! make it spend more than a pass over the CR.

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
    /// A bound keyword (`minimum`, `maxLength`, `pattern`, …) and its new limit.
    Bound(&'static str, Value),
    /// A validation rule (CEL), and the message the API server would give.
    Rule(String),
    Version,
}

/// The bounds a schema node may set, each with whether a larger limit is tighter.
const BOUNDS: [(&str, Tighter); 9] = [
    ("minimum", Tighter::Larger),
    ("maximum", Tighter::Smaller),
    ("minLength", Tighter::Larger),
    ("maxLength", Tighter::Smaller),
    ("minItems", Tighter::Larger),
    ("maxItems", Tighter::Smaller),
    ("minProperties", Tighter::Larger),
    ("maxProperties", Tighter::Smaller),
    ("pattern", Tighter::Changed),
];

/// Which change of a bound's limit can refuse a value it allowed.
#[derive(Clone, Copy)]
enum Tighter {
    Larger,
    Smaller,
    Changed,
}

impl Break {
    /// Whether it only tightens validation (a bound, a rule): it breaks nothing for a
    /// client, only the CRs it would refuse, so it counts only where it strands one.
    pub fn tightens_only(&self) -> bool {
        matches!(self.kind, Kind::Bound(..) | Kind::Rule(_))
    }
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
    bounds(at, old, new, out);
    rules(at, old, new, out);
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

/// Each bound of [`BOUNDS`] that `new` sets tighter than `old` (or sets where `old` did
/// not).
fn bounds(at: &[Step], old: &Value, new: &Value, out: &mut Vec<Break>) {
    for (keyword, tighter) in BOUNDS {
        let Some(limit) = new.get(keyword).filter(|l| !l.is_null()) else {
            continue;
        };
        let before = old.get(keyword).filter(|l| !l.is_null());
        let tightened = match (before, tighter) {
            (None, _) => true,
            (Some(b), Tighter::Changed) => b != limit,
            (Some(b), Tighter::Larger) => number(limit) > number(b),
            (Some(b), Tighter::Smaller) => number(limit) < number(b),
        };
        if tightened {
            let what = match before {
                Some(b) => format!("{keyword} {b} becomes {limit}"),
                None => format!("now {keyword} {limit}"),
            };
            out.push(Break {
                path: path_text(at),
                what,
                at: at.to_vec(),
                kind: Kind::Bound(keyword, limit.clone()),
            });
        }
    }
}

/// Each validation rule of `new` that `old` does not have.
fn rules(at: &[Step], old: &Value, new: &Value, out: &mut Vec<Break>) {
    let of = |v: &Value| -> Vec<(String, String)> {
        v["x-kubernetes-validations"]
            .as_array()
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| {
                        let rule = r["rule"].as_str()?.to_string();
                        let message = r["message"].as_str().unwrap_or_default().to_string();
                        Some((rule, message))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let before: Vec<String> = of(old).into_iter().map(|(rule, _)| rule).collect();
    for (rule, message) in of(new) {
        if before.contains(&rule) {
            continue;
        }
        let said = if message.is_empty() {
            String::new()
        } else {
            format!(" ({message})")
        };
        out.push(Break {
            path: path_text(at),
            what: format!("new rule `{rule}`{said}"),
            at: at.to_vec(),
            kind: Kind::Rule(rule),
        });
    }
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Whether `value` breaks the bound `keyword` at `limit` (a value of another type than
/// the bound concerns passes it: the type is judged apart).
fn breaks_bound(keyword: &str, limit: &Value, value: &Value) -> bool {
    let n = number(limit);
    let count = |c: usize| c as f64;
    match keyword {
        "minimum" => value.as_f64().is_some_and(|v| v < n),
        "maximum" => value.as_f64().is_some_and(|v| v > n),
        "minLength" => value.as_str().is_some_and(|v| count(v.chars().count()) < n),
        "maxLength" => value.as_str().is_some_and(|v| count(v.chars().count()) > n),
        "minItems" => value.as_array().is_some_and(|v| count(v.len()) < n),
        "maxItems" => value.as_array().is_some_and(|v| count(v.len()) > n),
        "minProperties" => value.as_object().is_some_and(|v| count(v.len()) < n),
        "maxProperties" => value.as_object().is_some_and(|v| count(v.len()) > n),
        "pattern" => match (limit.as_str().map(regex::Regex::new), value.as_str()) {
            (Some(Ok(pattern)), Some(v)) => !pattern.is_match(v),
            _ => false,
        },
        _ => false,
    }
}

/// Most comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) a rule judged
/// here may hold: one keeps its cost a pass over the value.
const RULE_COMPREHENSIONS: usize = 1;

/// Longest rule judged here: a tenant writes the rules the host parses.
const RULE_MAX_BYTES: usize = 4096;

/// Deepest nesting of brackets in a rule judged here: the parser recurses once a level,
/// and a rule nested thousands deep would overflow the host's stack.
const RULE_MAX_NESTING: usize = 32;

/// How deep brackets nest in `rule` (quotes not told apart: a bracket in a string counts
/// too, which only makes the bound stricter).
fn nesting(rule: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in rule.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether `value` fails `rule`, as the API server would judge it: `false`, or an error
/// it would give too (a key the value lacks). `None`: not judged here (a transition rule,
/// a function of Kubernetes' own libraries, a rule too costly, one that does not parse).
fn fails_rule(rule: &str, value: &Value) -> Option<bool> {
    let comprehensions = [".all(", ".exists(", ".exists_one(", ".map(", ".filter("]
        .iter()
        .map(|m| rule.matches(m).count())
        .sum::<usize>();
    if rule.contains("oldSelf")
        || comprehensions > RULE_COMPREHENSIONS
        || rule.len() > RULE_MAX_BYTES
        || nesting(rule) > RULE_MAX_NESTING
    {
        return None;
    }
    let program = cel_interpreter::Program::compile(rule).ok()?;
    let mut context = cel_interpreter::Context::default();
    context.add_variable_from_value("self", cel_value(value));
    match program.execute(&context) {
        Ok(cel_interpreter::Value::Bool(holds)) => Some(!holds),
        Ok(_) => Some(true),
        Err(cel_interpreter::ExecutionError::NoSuchKey(_)) => Some(true),
        Err(_) => None,
    }
}

/// `value` as CEL sees a CR's field: integers as `int`, other numbers as `double`.
fn cel_value(value: &Value) -> cel_interpreter::Value {
    use cel_interpreter::Value as Cel;
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(std::sync::Arc::new(s.clone())),
        Value::Array(items) => {
            Cel::List(std::sync::Arc::new(items.iter().map(cel_value).collect()))
        }
        Value::Object(fields) => {
            let map: std::collections::HashMap<String, Cel> = fields
                .iter()
                .map(|(k, v)| (k.clone(), cel_value(v)))
                .collect();
            map.into()
        }
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
                Kind::Bound(keyword, limit) => {
                    values.iter().any(|v| breaks_bound(keyword, limit, v))
                }
                Kind::Rule(rule) => values.iter().any(|v| fails_rule(rule, v) == Some(true)),
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

    #[test]
    fn a_bound_tightened_or_a_rule_added_strands_the_crs_it_refuses_and_no_other() {
        let old = crd(
            "v1",
            json!({"type": "object", "properties": {
                "size": {"type": "integer", "maximum": 100},
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            }}),
        );
        let new = crd(
            "v1",
            json!({"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.size <= self.limit", "message": "size within the limit"},
                    {"rule": "self.size >= oldSelf.size"},
                    {"rule": "isURL(self.name)"},
                    {"rule": "self.tags.all(t, self.tags.exists(u, u == t))"},
                ],
                "properties": {
                "size": {"type": "integer", "maximum": 10, "minimum": 0},
                "limit": {"type": "integer"},
                "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"},
                         "x-kubernetes-validations": [{"rule": "self.all(t, t.size() > 1)"}]},
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
                (
                    "spec",
                    "new rule `self.size <= self.limit` (size within the limit)"
                ),
                ("spec", "new rule `self.size >= oldSelf.size`"),
                ("spec", "new rule `isURL(self.name)`"),
                (
                    "spec",
                    "new rule `self.tags.all(t, self.tags.exists(u, u == t))`"
                ),
                ("spec.size", "now minimum 0"),
                ("spec.size", "maximum 100 becomes 10"),
                ("spec.name", "now maxLength 5"),
                ("spec.name", "now pattern \"^[a-z]+$\""),
                ("spec.tags", "now maxItems 2"),
                ("spec.tags", "new rule `self.all(t, t.size() > 1)`"),
            ]
        );
        let fine = cr(json!({"size": 3, "limit": 5, "name": "abc", "tags": ["ab", "cd"]}));
        assert!(
            stranded(&fine, &breaks).is_empty(),
            "{:?}",
            stranded(&fine, &breaks)
        );
        // Each bound and each judged rule strands what it refuses; the transition rule,
        // the Kubernetes library function and the quadratic rule are not judged.
        let hit = cr(json!({"size": 50, "limit": 5, "name": "Toolong", "tags": ["a", "b", "c"]}));
        assert_eq!(
            stranded(&hit, &breaks),
            [
                "spec: new rule `self.size <= self.limit` (size within the limit)",
                "spec.size: maximum 100 becomes 10",
                "spec.name: now maxLength 5",
                "spec.name: now pattern \"^[a-z]+$\"",
                "spec.tags: now maxItems 2",
                "spec.tags: new rule `self.all(t, t.size() > 1)`",
            ]
        );
        // A rule reading a field the CR lacks fails as the API server's would (no such key),
        // before any library function it would call.
        let missing = cr(json!({"size": 3}));
        assert_eq!(
            stranded(&missing, &breaks),
            [
                "spec: new rule `self.size <= self.limit` (size within the limit)",
                "spec: new rule `isURL(self.name)`"
            ]
        );
        // A bound loosened is not a break.
        assert!(
            breaking(
                &new,
                &crd(
                    "v1",
                    json!({"type": "object", "properties": {
            "size": {"type": "integer", "maximum": 20}}})
                )
            )
            .iter()
            .all(|b| b.path != "spec.size")
        );
    }

    #[test]
    fn a_rule_nested_past_the_bound_or_too_long_is_not_judged_and_does_not_crash() {
        let deep = format!("{}self.size > 1{}", "(".repeat(50_000), ")".repeat(50_000));
        assert_eq!(fails_rule(&deep, &json!({"size": 0})), None);
        let long = format!("self.size > 1 && {}", "true && ".repeat(1000)) + "true";
        assert_eq!(fails_rule(&long, &json!({"size": 0})), None);
        assert_eq!(
            fails_rule("((self.size > 1))", &json!({"size": 0})),
            Some(true)
        );
    }
}
