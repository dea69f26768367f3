//! What a change does to one CR, from two renders (the running version's and the new one's)
//! and what the cluster holds: the CR's verdict, the children created, updated (field by
//! field) and pruned, and the status fields that change. Pure: the cluster's answers (its
//! live children, and what a dry-run apply would store) come in as values.

use std::collections::BTreeMap;

use inrun::render::{RenderError, RenderOutput};
use serde::Serialize;
use serde_json::{Map, Value};

/// A child's identity: apiVersion, kind, namespace (empty when cluster-scoped), name.
pub type ChildId = (String, String, String, String);

/// The identity of `object`.
pub fn child_id(object: &Value) -> ChildId {
    child_id_in(object, "")
}

/// The identity of `object`, in `namespace` when it names none (a child the CR returns
/// without a namespace goes to the CR's).
pub fn child_id_in(object: &Value, namespace: &str) -> ChildId {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut ns = text("/metadata/namespace");
    if ns.is_empty() {
        ns = namespace.to_string();
    }
    (
        text("/apiVersion"),
        text("/kind"),
        ns,
        text("/metadata/name"),
    )
}

/// `kind namespace/name` (or `kind name`), as a plan names a child.
pub fn child_name(id: &ChildId) -> String {
    let (_, kind, namespace, name) = id;
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// What the new version does to one CR.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Verdict {
    /// Nothing it writes differs from what the cluster holds.
    Unchanged,
    /// It would write: the children and status fields listed.
    Changes(Changes),
    /// The new version errors, traps, times out or is refused on this CR.
    Fails {
        /// Why, as the CR's condition would say it.
        message: String,
        /// Whether the running version fails on it too (not the change's doing).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        already: bool,
    },
    /// The CR would not be reconciled: its gate holds it, it breaks the Blueprint's
    /// rules, or the reconciler returns a kind outside `managedResources`.
    Blocked {
        /// Why.
        message: String,
    },
}

/// The writes a change makes to one CR.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    /// Children it would create.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<String>,
    /// Children it would change, each with its fields.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub updated: Vec<Updated>,
    /// Children it would prune (the CR's, no longer returned).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<String>,
    /// Status fields that would change (`status.<field>`, and `Ready`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<FieldChange>,
    /// For a package CR: the changes to its infrastructure the host would run (`converge`,
    /// `delete`), because its `observe` says the infrastructure differs. A plan only
    /// observes; it never runs them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub would_run: Vec<String>,
}

impl Changes {
    fn is_empty(&self) -> bool {
        self.created.is_empty()
            && self.updated.is_empty()
            && self.deleted.is_empty()
            && self.status.is_empty()
            && self.would_run.is_empty()
    }
}

/// A child that would change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Updated {
    /// `kind namespace/name`.
    pub child: String,
    /// The fields that differ from what the cluster holds.
    pub fields: Vec<FieldChange>,
    /// The running version would write the same: the child drifted from it (edited by
    /// hand, or by another manager), and any next pass puts it back.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub drift: bool,
}

/// One field, as the cluster holds it and as it would be.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    /// Its path (`spec.replicas`, `data.key`).
    pub path: String,
    /// As the cluster holds it; `None`: absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<Value>,
    /// As it would be; `None`: removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<Value>,
}

/// What one CR's plan is made from.
pub struct Inputs<'a> {
    /// The running version's render of the CR.
    pub current: &'a Result<RenderOutput, RenderError>,
    /// The new version's render of the CR.
    pub new: &'a Result<RenderOutput, RenderError>,
    /// The CR as the cluster holds it.
    pub cr: &'a Value,
    /// Its children as the cluster holds them (objects labelled with its uid).
    pub live: &'a [Value],
    /// What a dry-run apply of each child the new version returns would store, by
    /// identity; a child missing here is judged by its desired fields against `live`.
    pub stored: &'a BTreeMap<ChildId, Value>,
    /// How the CRD prunes children no longer returned.
    pub prune: &'a inrun::blueprint::PruneSpec,
}

/// The verdict on one CR.
pub fn verdict(inputs: &Inputs<'_>) -> Verdict {
    let new = match inputs.new {
        Ok(out) => out,
        Err(e) => {
            let message = inrun::errors::chain(e);
            return if e.holds_back() {
                Verdict::Blocked { message }
            } else {
                Verdict::Fails {
                    message,
                    already: inputs.current.is_err(),
                }
            };
        }
    };
    if let Some(gated) = &new.gated {
        return Verdict::Blocked {
            message: format!("held by its gate: {gated}"),
        };
    }
    let current = inputs.current.as_ref().ok();
    let cr_ns = inputs
        .cr
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let id = |o: &Value| child_id_in(o, cr_ns);
    let live: BTreeMap<ChildId, &Value> = inputs.live.iter().map(|o| (id(o), o)).collect();
    let mut changes = Changes::default();
    for desired in &new.resources {
        let child = id(desired);
        let Some(held) = live.get(&child) else {
            changes.created.push(child_name(&child));
            continue;
        };
        let fields = match inputs.stored.get(&child) {
            Some(stored) => diff(&comparable(held), &comparable(stored)),
            None => desired_diff(held, desired),
        };
        if fields.is_empty() {
            continue;
        }
        let drift = current.is_some_and(|c| c.resources.iter().any(|r| r == desired));
        changes.updated.push(Updated {
            child: child_name(&child),
            fields,
            drift,
        });
    }
    let prune = inputs.prune;
    if prune.enabled && (prune.allow_empty || !new.resources.is_empty()) {
        let returned: Vec<ChildId> = new.resources.iter().map(id).collect();
        changes.deleted = live
            .keys()
            .filter(|id| !returned.contains(id) && !prune.keeps(&id.0, &id.1))
            .map(child_name)
            .collect();
    }
    changes.status = status_changes(inputs.cr, current, new);
    changes.would_run.clone_from(&new.would_run);
    if changes.is_empty() {
        Verdict::Unchanged
    } else {
        Verdict::Changes(changes)
    }
}

/// `object` without what the API server keeps for itself (identity, versions, times,
/// managers): what is left is what a write changes.
fn comparable(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for noise in [
            "resourceVersion",
            "managedFields",
            "generation",
            "creationTimestamp",
            "uid",
            "selfLink",
        ] {
            meta.remove(noise);
        }
        // The hash the host keeps of what it applied: the dry run is not sent with it.
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(inrun::runtime::APPLIED_HASH);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    object
        .as_object_mut()
        .map(|o| o.remove("status"))
        .unwrap_or_default();
    object
}

/// The fields of `desired` (an apply's intent) whose value `held` does not have; with no
/// dry run to tell what the server would store, fields `desired` leaves out are kept.
pub fn desired_diff(held: &Value, desired: &Value) -> Vec<FieldChange> {
    let mut out = Vec::new();
    intent_diff("", held, &comparable(desired), &mut out);
    out
}

fn intent_diff(path: &str, held: &Value, desired: &Value, out: &mut Vec<FieldChange>) {
    match (held, desired) {
        (Value::Object(h), Value::Object(d)) => {
            for (k, dv) in d {
                let at = join(path, k);
                match h.get(k) {
                    Some(hv) => intent_diff(&at, hv, dv, out),
                    None => out.push(FieldChange {
                        path: at,
                        from: None,
                        to: Some(dv.clone()),
                    }),
                }
            }
        }
        _ if held == desired => {}
        _ => out.push(FieldChange {
            path: path.to_string(),
            from: Some(held.clone()),
            to: Some(desired.clone()),
        }),
    }
}

/// Every field that differs between `from` and `to`, objects compared key by key and
/// anything else whole.
pub fn diff(from: &Value, to: &Value) -> Vec<FieldChange> {
    let mut out = Vec::new();
    walk("", from, to, &mut out);
    out
}

fn walk(path: &str, from: &Value, to: &Value, out: &mut Vec<FieldChange>) {
    match (from, to) {
        (Value::Object(f), Value::Object(t)) => {
            let keys: std::collections::BTreeSet<&String> = f.keys().chain(t.keys()).collect();
            for k in keys {
                let at = join(path, k);
                match (f.get(k), t.get(k)) {
                    (Some(a), Some(b)) => walk(&at, a, b, out),
                    (a, b) => out.push(FieldChange {
                        path: at,
                        from: a.cloned(),
                        to: b.cloned(),
                    }),
                }
            }
        }
        _ if from == to => {}
        _ => out.push(FieldChange {
            path: path.to_string(),
            from: Some(from.clone()),
            to: Some(to.clone()),
        }),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The status fields the new version would write differently from the running one, as
/// the CR holds them (the Ready condition by status and reason; other conditions' times
/// are the server's). A field both versions write alike is not the change's doing: the
/// next pass of either writes it.
fn status_changes(
    cr: &Value,
    current: Option<&RenderOutput>,
    new: &RenderOutput,
) -> Vec<FieldChange> {
    let held = cr
        .get("status")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut out = Vec::new();
    for (k, v) in &new.status {
        let was = held.get(k);
        let alike = current.is_some_and(|c| c.status.get(k) == Some(v));
        if was != Some(v) && !alike {
            out.push(FieldChange {
                path: format!("status.{k}"),
                from: was.cloned(),
                to: Some(v.clone()),
            });
        }
    }
    let ready_alike = current.is_some_and(|c| {
        c.ready.as_ref().map(|r| (&r.status, &r.reason))
            == new.ready.as_ref().map(|r| (&r.status, &r.reason))
    });
    if let Some(ready) = new.ready.as_ref().filter(|_| !ready_alike) {
        let was = held
            .get("conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        let as_held = was.map(|c| (c["status"].clone(), c["reason"].clone()));
        let to = (
            Value::String(ready.status.clone()),
            Value::String(ready.reason.clone()),
        );
        if as_held.as_ref() != Some(&to) {
            out.push(FieldChange {
                path: "Ready".into(),
                from: as_held.map(|(s, r)| Value::String(format!("{} {}", text(&s), text(&r)))),
                to: Some(Value::String(format!("{} {}", ready.status, ready.reason))),
            });
        }
    }
    out
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "team"}, "data": data})
    }

    #[test]
    fn a_field_diff_names_each_changed_added_and_removed_path() {
        let from = json!({"data": {"a": "1", "b": "2"}, "spec": {"replicas": 1}});
        let to = json!({"data": {"a": "1", "c": "3"}, "spec": {"replicas": 2}});
        let paths: Vec<(String, Option<Value>, Option<Value>)> = diff(&from, &to)
            .into_iter()
            .map(|f| (f.path, f.from, f.to))
            .collect();
        assert_eq!(
            paths,
            vec![
                ("data.b".into(), Some(json!("2")), None),
                ("data.c".into(), None, Some(json!("3"))),
                ("spec.replicas".into(), Some(json!(1)), Some(json!(2))),
            ]
        );
    }

    #[test]
    fn without_a_dry_run_only_the_fields_the_intent_sets_are_compared() {
        let mut held = cm("a", json!({"k": "v"}));
        held["metadata"]["resourceVersion"] = json!("42");
        held["metadata"]["annotations"] = json!({"other": "x"});
        assert!(desired_diff(&held, &cm("a", json!({"k": "v"}))).is_empty());
        let changed = desired_diff(&held, &cm("a", json!({"k": "w"})));
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].path, "data.k");
    }

    #[test]
    fn a_stored_object_differing_only_in_server_fields_is_no_change() {
        let mut held = cm("a", json!({"k": "v"}));
        held["metadata"]["resourceVersion"] = json!("1");
        held["metadata"]["managedFields"] = json!([{"manager": "x"}]);
        let mut stored = cm("a", json!({"k": "v"}));
        stored["metadata"]["resourceVersion"] = json!("2");
        assert!(diff(&comparable(&held), &comparable(&stored)).is_empty());
    }
}
