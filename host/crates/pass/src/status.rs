//! The CR's status as the pass wants it: `emit.status` and the Result's status, plus
//! `observedGeneration` and a `Ready` condition following the Kubernetes API conventions;
//! and whether the CR already shows exactly that, so an unchanged pass writes nothing.

use serde_json::{Map, Value, json};

use super::fields::owned_keys;
use super::meta::STATUS_MANAGER;
use crate::reason::ConditionReason;

/// Longest condition message, in characters.
const MESSAGE_MAX: usize = 1000;

/// A condition the host sets (`Reconciled`, `Ready`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// Why.
    pub reason: ConditionReason,
    /// For people; bounded and free of secrets.
    pub message: String,
}

impl Ready {
    /// A true condition with `reason`.
    pub fn yes(reason: ConditionReason, message: String) -> Self {
        Ready {
            status: "True",
            reason,
            message,
        }
    }

    /// A false condition with `reason`.
    pub fn not(reason: ConditionReason, message: String) -> Self {
        Ready {
            status: "False",
            reason,
            message,
        }
    }

    /// A condition whose truth is not known (offline, children not observed).
    pub fn unknown(reason: ConditionReason, message: String) -> Self {
        Ready {
            status: "Unknown",
            reason,
            message,
        }
    }

    /// Whether the condition is `True`.
    pub fn ok(&self) -> bool {
        self.status == "True"
    }
}

/// The host's verdict on a pass: `Reconciled` (the pass's own outcome; `None` for kinds
/// that do not carry it, such as packages), `Ready` (the pass succeeded and every child is
/// ready), and the children's states for `status.resources` (`None`: not written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The `Reconciled` condition.
    pub reconciled: Option<Ready>,
    /// The `Ready` condition.
    pub ready: Ready,
    /// `status.resources`: one compact entry per child.
    pub resources: Option<Value>,
}

impl Verdict {
    /// `Reconciled` and `Ready` both saying `condition` (a failed or held pass).
    pub fn both(condition: Ready) -> Self {
        Verdict {
            reconciled: Some(condition.clone()),
            ready: condition,
            resources: None,
        }
    }

    /// Only `Ready` (packages).
    pub fn ready(ready: Ready) -> Self {
        Verdict {
            reconciled: None,
            ready,
            resources: None,
        }
    }
}

pub use inrun_contract::HOST_CONDITIONS;

/// What reconciles a CR through `plan`, as `status.reconciledBy` records it: the
/// `sha256:` digests of the plugins serving the block (in order, each once), or, for a
/// block with none (templates, a remote endpoint), its kind and a digest of the block as
/// written. `inrun plan` and a rollout read which version a CR is on from it; it changes
/// (and costs a status write) only when what reconciles the CR does.
pub fn reconciled_by(plan: &inrun_reconcilers::plan::ReconcilePlan) -> String {
    let mut digests: Vec<String> = Vec::new();
    for slot in &plan.slots {
        let digest = format!("sha256:{}", slot.current().id().digest);
        if !digests.contains(&digest) {
            digests.push(digest);
        }
    }
    if !digests.is_empty() {
        return digests.join(",");
    }
    format!("{}:{}", plan.reconciler.kind(), plan.block)
}

/// The status to write: `fields`, `observedGeneration`, `resources` and the conditions of
/// `verdict`. Other conditions already on the CR are kept; a condition's transition time
/// moves only when its status flips.
pub fn desired(
    object: &Value,
    mut fields: Map<String, Value>,
    verdict: &Verdict,
    now: &str,
) -> Map<String, Value> {
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let previous = object
        .pointer("/status/conditions")
        .and_then(Value::as_array);
    // Conditions of the reconciler's own (`status.conditions` from `emit.status` or the
    // Result), merged by type over those on the CR; `Ready` and `Reconciled` stay the
    // host's.
    let theirs = reconciler_conditions(object, fields.remove("conditions"), generation, now);
    let mut conditions: Vec<Value> = previous
        .map(|c| {
            c.iter()
                .filter(|c| {
                    !HOST_CONDITIONS.iter().any(|h| c["type"] == *h)
                        && !theirs.iter().any(|t| t["type"] == c["type"])
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    conditions.extend(theirs);
    if let Some(r) = &verdict.reconciled {
        conditions.push(condition(
            object,
            "Reconciled",
            r.status,
            r.reason.as_str(),
            &r.message,
            now,
        ));
    }
    let r = &verdict.ready;
    conditions.push(condition(
        object,
        "Ready",
        r.status,
        r.reason.as_str(),
        &r.message,
        now,
    ));
    fields.insert("observedGeneration".into(), json!(generation));
    fields.insert("conditions".into(), Value::Array(conditions));
    if let Some(resources) = &verdict.resources {
        fields.insert("resources".into(), resources.clone());
    }
    fields
}

/// The well-formed conditions in a reconciler's `status.conditions` (objects with a
/// `type` other than the host's (`Ready`, `Reconciled`) and a `status` of `True`, `False` or `Unknown`), shaped as the
/// API conventions want them: `observedGeneration` defaulted to the CR's generation and
/// `lastTransitionTime` kept from the CR while the status holds. Anything else is dropped.
fn reconciler_conditions(
    object: &Value,
    given: Option<Value>,
    generation: i64,
    now: &str,
) -> Vec<Value> {
    let Some(Value::Array(given)) = given else {
        return Vec::new();
    };
    let mut out: Vec<Value> = Vec::new();
    for c in given {
        let Value::Object(mut c) = c else { continue };
        let kind = c
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // A rendered `true`/`false` (a template's typed answer) reads as True/False.
        if let Some(b) = c.get("status").and_then(Value::as_bool) {
            c.insert("status".into(), json!(if b { "True" } else { "False" }));
        }
        let status = c.get("status").and_then(Value::as_str).unwrap_or_default();
        if kind.is_empty()
            || HOST_CONDITIONS.contains(&kind.as_str())
            || !["True", "False", "Unknown"].contains(&status)
            || out.iter().any(|o| o["type"] == kind.as_str())
        {
            continue;
        }
        if !c.contains_key("lastTransitionTime") {
            let at = transition(object, &kind, status, now);
            c.insert("lastTransitionTime".into(), json!(at));
        }
        c.entry("observedGeneration").or_insert(json!(generation));
        c.entry("reason").or_insert(json!(kind));
        let message = match c.get("message") {
            Some(Value::String(m)) => m.chars().take(MESSAGE_MAX).collect(),
            _ => String::new(),
        };
        c.insert("message".into(), json!(message));
        out.push(Value::Object(c));
    }
    out
}

/// When the condition `kind` last changed: the time on `object` while its status is still
/// `status`, else `now`.
fn transition(object: &Value, kind: &str, status: &str, now: &str) -> String {
    let was = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == kind));
    match was.map(|w| (&w["lastTransitionTime"], &w["status"])) {
        Some((Value::String(t), s)) if s == status => t.clone(),
        _ => now.to_string(),
    }
}

/// A condition of `type` as the Kubernetes API conventions shape it, its transition time
/// kept from the one on `object` while its status holds.
pub fn condition(
    object: &Value,
    kind: &str,
    status_text: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> Value {
    let transition = transition(object, kind, status_text, now);
    let mut message: String = message.chars().take(MESSAGE_MAX).collect();
    if message.is_empty() {
        message = reason.to_string();
    }
    json!({
        "type": kind,
        "status": status_text,
        "reason": reason,
        "message": message,
        "observedGeneration": object.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or_default(),
        "lastTransitionTime": transition,
    })
}

/// Whether writing `desired` would change the CR's status: a field differs, or the host
/// owns a field it no longer sends (the apply would remove it).
pub fn differs(object: &Value, desired: &Map<String, Value>) -> bool {
    let live = object.get("status").and_then(Value::as_object);
    let get = |k: &str| live.and_then(|l| l.get(k));
    desired.iter().any(|(k, v)| get(k) != Some(v))
        || owned_keys(object, STATUS_MANAGER, "status", &["status"])
            .iter()
            .any(|k| !desired.contains_key(k))
}

/// The `Ready` condition on the CR now, as (status, reason, message).
pub fn ready_now(object: &Value) -> Option<(String, String, String)> {
    condition_now(object, "Ready")
}

/// The condition `kind` on the CR now, as (status, reason, message).
pub fn condition_now(object: &Value, kind: &str) -> Option<(String, String, String)> {
    let c = object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// Whether `desired`'s `Ready` condition says something other than the CR's does now.
pub fn ready_changes(object: &Value, desired: &Map<String, Value>) -> bool {
    changes(object, desired, "Ready")
}

/// Whether `desired`'s condition `kind` has another status or reason than the CR's now
/// (a new message alone is progress, not a turn).
pub fn turns(object: &Value, desired: &Map<String, Value>, kind: &str) -> bool {
    let two = |c: Option<(String, String, String)>| c.map(|(s, r, _)| (s, r));
    two(condition_now(&json!({"status": desired}), kind)) != two(condition_now(object, kind))
}

/// Whether `desired`'s condition `kind` says something other than the CR's does now.
pub fn changes(object: &Value, desired: &Map<String, Value>, kind: &str) -> bool {
    condition_now(&json!({"status": desired}), kind) != condition_now(object, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Verdict {
        Verdict::both(Ready::yes(
            ConditionReason::Reconciled,
            "applied 2 resource(s)".into(),
        ))
    }

    #[test]
    fn the_same_status_again_is_no_difference_and_keeps_the_transition_time() {
        let fields = Map::from_iter([("phase".to_string(), json!("Running"))]);
        let fresh = json!({"metadata": {"generation": 3}});
        let first = desired(&fresh, fields.clone(), &ok(), "2026-01-01T00:00:00Z");
        assert!(differs(&fresh, &first));
        let written = json!({"metadata": {"generation": 3}, "status": first});
        let again = desired(&written, fields.clone(), &ok(), "2026-01-01T00:05:00Z");
        assert_eq!(again, first, "the transition time stays");
        assert!(!differs(&written, &again));
        assert!(!ready_changes(&written, &again));
        // A new generation is a difference: observedGeneration moves.
        let newer = json!({"metadata": {"generation": 4}, "status": first});
        assert!(differs(&newer, &desired(&newer, fields, &ok(), "t")));
    }

    #[test]
    fn a_field_the_host_owned_and_no_longer_sends_is_a_difference() {
        let object = json!({"metadata": {"generation": 1, "managedFields": [
            {"manager": STATUS_MANAGER, "operation": "Apply", "subresource": "status",
             "fieldsV1": {"f:status": {"f:old": {}, "f:conditions": {}, "f:observedGeneration": {}}}}]},
            "status": {"old": 1}});
        let want = desired(&object, Map::new(), &ok(), "t");
        let mut written = object.clone();
        written["status"] = Value::Object(want.clone());
        written["status"]["old"] = json!(1);
        assert!(differs(&written, &want));
        // Someone else's field is not ours to remove.
        written["metadata"]["managedFields"][0]["fieldsV1"]["f:status"]
            .as_object_mut()
            .expect("map")
            .remove("f:old");
        assert!(!differs(&written, &want));
    }

    #[test]
    fn a_reconcilers_conditions_are_merged_by_type_and_ready_stays_the_hosts() {
        let object = json!({"metadata": {"generation": 4}, "status": {"conditions": [
            {"type": "Degraded", "status": "True", "reason": "Old", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z", "observedGeneration": 3},
            {"type": "BackedUp", "status": "False", "reason": "Never", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z", "observedGeneration": 3},
            {"type": "External", "status": "True", "reason": "Theirs"}
        ]}});
        let mut fields = Map::new();
        fields.insert(
            "conditions".into(),
            json!([
                {"type": "Degraded", "status": "True", "reason": "StillDegraded", "message": "one replica down"},
                {"type": "BackedUp", "status": "True", "reason": "Done"},
                {"type": "Ready", "status": "False", "reason": "Spoofed"},
                {"type": "Reconciled", "status": "False", "reason": "Spoofed"},
                {"type": "Bad", "status": "Maybe"},
                "not an object"
            ]),
        );
        let got = desired(&object, fields, &ok(), "2026-01-01T00:00:00Z");
        let conditions = got["conditions"].as_array().expect("conditions");
        let by = |t: &str| conditions.iter().find(|c| c["type"] == t).cloned();
        let types: Vec<&str> = conditions
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(
            types,
            ["External", "Degraded", "BackedUp", "Reconciled", "Ready"]
        );
        let degraded = by("Degraded").expect("Degraded");
        assert_eq!(degraded["reason"], "StillDegraded");
        // Still True: the transition time stays; the generation is the one the pass read.
        assert_eq!(degraded["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(degraded["observedGeneration"], 4);
        assert_eq!(
            by("BackedUp").expect("BackedUp")["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(by("Ready").expect("Ready")["status"], "True");
        // An Unknown that stays Unknown keeps its time too: a pass that changes nothing
        // writes nothing.
        let object = json!({"metadata": {"generation": 1}, "status": {"conditions": [
            {"type": "Synced", "status": "Unknown", "lastTransitionTime": "2020-01-01T00:00:00Z"}
        ]}});
        let mut fields = Map::new();
        fields.insert(
            "conditions".into(),
            json!([{"type": "Synced", "status": "Unknown"}]),
        );
        let got = desired(&object, fields, &ok(), "2026-01-01T00:00:00Z");
        assert_eq!(
            got["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
    }

    #[test]
    fn a_flip_of_ready_moves_the_transition_time_and_is_a_ready_change() {
        let object = json!({"metadata": {"generation": 1}});
        let failed = desired(
            &object,
            Map::new(),
            &Verdict::both(Ready::not(ConditionReason::ReconcileError, "boom".into())),
            "t1",
        );
        let written = json!({"metadata": {"generation": 1}, "status": failed});
        let fixed = desired(&written, Map::new(), &ok(), "t2");
        assert_eq!(fixed["conditions"][0]["lastTransitionTime"], "t2");
        assert!(ready_changes(&written, &fixed));
    }
}
