//! The Outcome a reconciler returns, whatever its kind, and the rules every outcome keeps.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::report::{
    Condition, Event, HOST_EVENT_REASONS, MAX_CONDITIONS, MAX_EVENTS, is_condition_type, is_reason,
};

/// The prefix of label and annotation keys the host keeps for itself.
pub const RESERVED_PREFIX: &str = "inrun.dev/";

/// Annotation on a resource from `onCreate` templates: the host creates it when it is
/// missing and never updates it afterwards. The host removes the annotation before applying.
pub const CREATE_ONLY_ANNOTATION: &str = "inrun.dev/create-only";

/// The most resources one Result may hold, whatever the reconciler kind (a Wasm plugin's
/// `limits.resources` may set a lower bound for it).
pub const MAX_RESOURCES: usize = 10_000;

/// Ask the host to delete the CR after a grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cleanup {
    /// How long to wait before deleting the CR.
    #[serde(with = "crate::duration::serde_str")]
    pub after: Duration,
}

/// What a reconciler declares the CR should become. The host does every write.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Outcome {
    /// Merged into the CR's status after `emit.status` (this wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Map<String, Value>>,
    /// Objects to apply: full objects or the intent form.
    #[serde(default)]
    pub resources: Vec<Value>,
    /// Labels to set on the CR.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations to set on the CR.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Reconcile again after the default delay (or `requeue_after`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeue: bool,
    /// Reconcile again after this long.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::duration::serde_opt"
    )]
    pub requeue_after: Option<Duration>,
    /// Delete the CR after a grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<Cleanup>,
    /// Conditions to set on the CR, merged by type over those already there (`Ready` and
    /// `Reconciled` are the host's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Events to record on the CR (rate-limited per CR; one identical to a recent one is
    /// not recorded again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
}

/// An outcome that breaks the contract, whoever produced it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OutcomeError {
    /// A label or annotation key under `inrun.dev/`.
    #[error("{field} key {key:?} is reserved: keys under inrun.dev/ belong to the host")]
    ReservedKey {
        /// `labels` or `annotations`.
        field: &'static str,
        /// The offending key.
        key: String,
    },
    /// A resource that is not a JSON object.
    #[error("resources[{index}] is not an object")]
    NotAnObject {
        /// Position in `resources`.
        index: usize,
    },
    /// More resources than one Result may hold.
    #[error("{count} resources, more than the {MAX_RESOURCES} one Result may hold")]
    TooManyResources {
        /// How many there were.
        count: usize,
    },
    /// A condition or event that Kubernetes would not take, or too many of them.
    #[error("{field}: {problem}")]
    Report {
        /// `conditions[2].type`, `events`, ...
        field: String,
        /// What is wrong.
        problem: String,
    },
}

impl Outcome {
    /// An empty outcome: no resources, status or metadata, no requeue.
    ///
    /// Build one with the chaining methods:
    ///
    /// ```
    /// use std::time::Duration;
    /// use inrun_contract::Outcome;
    /// use serde_json::json;
    ///
    /// let outcome = Outcome::new()
    ///     .resource(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}}))
    ///     .intent("deployment", json!({"image": "nginx:1.27"}))
    ///     .status("phase", "Ready")
    ///     .label("demo.inrun.dev/tier", "web")
    ///     .requeue_after(Duration::from_secs(60));
    /// assert_eq!(outcome.resources.len(), 2);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a resource to apply, usually a full Kubernetes object.
    #[must_use]
    pub fn resource(mut self, object: Value) -> Self {
        self.resources.push(object);
        self
    }

    /// Adds a resource in the intent form, `{"type": kind, "fields": fields}`, which the
    /// host expands into a full object.
    #[must_use]
    pub fn intent(mut self, kind: &str, fields: Value) -> Self {
        self.resources
            .push(serde_json::json!({"type": kind, "fields": fields}));
        self
    }

    /// Sets one key of the status to merge into the CR's status.
    #[must_use]
    pub fn status(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.status
            .get_or_insert_with(Map::new)
            .insert(key.to_owned(), value.into());
        self
    }

    /// Merges every key of `fields` into the status (a later key wins).
    #[must_use]
    pub fn status_object(mut self, fields: Map<String, Value>) -> Self {
        self.status.get_or_insert_with(Map::new).extend(fields);
        self
    }

    /// Sets a label on the CR.
    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Sets an annotation on the CR.
    #[must_use]
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Asks to be reconciled again after the host's default delay; while the CR is being
    /// deleted, this holds the deletion.
    #[must_use]
    pub fn requeue(mut self) -> Self {
        self.requeue = true;
        self
    }

    /// Asks to be reconciled again after `delay`. On its own it is a refresh: it does not
    /// hold a deletion.
    #[must_use]
    pub fn requeue_after(mut self, delay: Duration) -> Self {
        self.requeue_after = Some(delay);
        self
    }

    /// Asks the host to delete the CR after `grace`; an outcome without it withdraws a
    /// pending one. A Wasm guest's grace crosses the boundary in whole seconds, rounded up.
    #[must_use]
    pub fn cleanup_after(mut self, grace: Duration) -> Self {
        self.cleanup = Some(Cleanup { after: grace });
        self
    }

    /// Whether the outcome asks for nothing at all (no resources, status or metadata).
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
            && self.status.as_ref().is_none_or(Map::is_empty)
            && self.labels.is_empty()
            && self.annotations.is_empty()
    }

    /// Whether the outcome asks to be reconciled again at all (`requeue` or `requeueAfter`).
    /// Only `requeue` holds a deleting CR; `requeueAfter` alone is a refresh.
    pub fn wants_requeue(&self) -> bool {
        self.requeue || self.requeue_after.is_some()
    }

    /// Checks the rules every reconciler's outcome must follow.
    ///
    /// # Errors
    /// The first broken rule: a reserved label or annotation key, or a resource that is
    /// not an object.
    pub fn check(&self) -> Result<(), OutcomeError> {
        for (field, map) in [("labels", &self.labels), ("annotations", &self.annotations)] {
            if let Some(key) = map.keys().find(|k| k.starts_with(RESERVED_PREFIX)) {
                return Err(OutcomeError::ReservedKey {
                    field,
                    key: key.clone(),
                });
            }
        }
        if self.resources.len() > MAX_RESOURCES {
            return Err(OutcomeError::TooManyResources {
                count: self.resources.len(),
            });
        }
        if let Some(index) = self.resources.iter().position(|r| !r.is_object()) {
            return Err(OutcomeError::NotAnObject { index });
        }
        self.check_reports()
    }

    /// The conditions and events follow Kubernetes' rules for them.
    fn check_reports(&self) -> Result<(), OutcomeError> {
        let report = |field: String, problem: String| Err(OutcomeError::Report { field, problem });
        if self.conditions.len() > MAX_CONDITIONS {
            return report(
                "conditions".into(),
                format!(
                    "{} conditions, more than the {MAX_CONDITIONS} one Result may set",
                    self.conditions.len()
                ),
            );
        }
        if self.events.len() > MAX_EVENTS {
            return report(
                "events".into(),
                format!(
                    "{} events, more than the {MAX_EVENTS} one Result may ask for",
                    self.events.len()
                ),
            );
        }
        for (i, c) in self.conditions.iter().enumerate() {
            check_condition(i, c)?;
        }
        for (i, e) in self.events.iter().enumerate() {
            check_event(i, e)?;
        }
        Ok(())
    }

    /// Sets a condition on the CR (a later one of the same type wins).
    #[must_use]
    pub fn condition(mut self, condition: Condition) -> Self {
        self.conditions.retain(|c| c.kind != condition.kind);
        self.conditions.push(condition);
        self
    }

    /// Asks for an event on the CR.
    #[must_use]
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }
}

/// One condition follows Kubernetes' rules: a condition type, a status, a reason.
fn check_condition(i: usize, c: &Condition) -> Result<(), OutcomeError> {
    let report = |field: String, problem: String| Err(OutcomeError::Report { field, problem });
    if !is_condition_type(&c.kind) {
        return report(
            format!("conditions[{i}].type"),
            format!(
                "{:?} is not a condition type (CamelCase, optionally under a DNS prefix)",
                c.kind
            ),
        );
    }
    if !["True", "False", "Unknown"].contains(&c.status.as_str()) {
        return report(
            format!("conditions[{i}].status"),
            format!("{:?} is not True, False or Unknown", c.status),
        );
    }
    if !c.reason.is_empty() && !is_reason(&c.reason) {
        return report(
            format!("conditions[{i}].reason"),
            format!("{:?} is not a CamelCase reason", c.reason),
        );
    }
    Ok(())
}

/// One event follows Kubernetes' rules, and is not one of the host's own.
fn check_event(i: usize, e: &Event) -> Result<(), OutcomeError> {
    let report = |field: String, problem: String| Err(OutcomeError::Report { field, problem });
    if !["Normal", "Warning"].contains(&e.kind.as_str()) {
        return report(
            format!("events[{i}].type"),
            format!("{:?} is not Normal or Warning", e.kind),
        );
    }
    if !is_reason(&e.reason) {
        return report(
            format!("events[{i}].reason"),
            format!("{:?} is not a CamelCase reason", e.reason),
        );
    }
    if HOST_EVENT_REASONS.contains(&e.reason.as_str()) {
        return report(
            format!("events[{i}].reason"),
            format!("{:?} is a reason of the host's own events", e.reason),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_builder_wraps_intents_merges_status_and_keeps_the_last_label() {
        let mut extra = Map::new();
        extra.insert("phase".into(), json!("Ready"));
        let o = Outcome::new()
            .intent("deployment", json!({"image": "nginx"}))
            .status("phase", "Pending")
            .status("replicas", 2)
            .status_object(extra)
            .label("a", "1")
            .label("a", "2")
            .annotation("b", "3")
            .cleanup_after(Duration::from_secs(5));
        assert_eq!(
            o.resources,
            vec![json!({"type": "deployment", "fields": {"image": "nginx"}})]
        );
        assert_eq!(
            Value::Object(o.status.clone().unwrap_or_default()),
            json!({"phase": "Ready", "replicas": 2})
        );
        assert_eq!(o.labels.get("a").map(String::as_str), Some("2"));
        assert_eq!(o.cleanup.map(|c| c.after), Some(Duration::from_secs(5)));
        assert!(Outcome::new().requeue().is_empty());
        assert!(Outcome::new().requeue().wants_requeue());
    }

    #[test]
    fn outcome_reads_durations_and_cleanup() {
        let o: Outcome = serde_json::from_value(json!({
            "resources": [], "requeueAfter": "30s", "cleanup": {"after": "1m"}
        }))
        .unwrap();
        assert_eq!(o.requeue_after, Some(Duration::from_secs(30)));
        assert_eq!(
            o.cleanup,
            Some(Cleanup {
                after: Duration::from_secs(60)
            })
        );
        assert!(o.wants_requeue());
    }

    #[test]
    fn outcome_with_reserved_label_is_refused() {
        let mut o = Outcome::default();
        o.labels.insert("inrun.dev/owner-uid".into(), "x".into());
        assert!(matches!(
            o.check(),
            Err(OutcomeError::ReservedKey {
                field: "labels",
                ..
            })
        ));
    }

    #[test]
    fn an_outcome_with_more_resources_than_a_result_holds_is_refused() {
        let mut o = Outcome {
            resources: vec![json!({}); MAX_RESOURCES],
            ..Outcome::default()
        };
        assert!(o.check().is_ok());
        o.resources.push(json!({}));
        let err = o.check().expect_err("one too many");
        assert!(
            matches!(err, OutcomeError::TooManyResources { count } if count == MAX_RESOURCES + 1)
        );
        assert!(err.to_string().contains("10001 resources"), "{err}");
    }

    #[test]
    fn outcome_with_unknown_field_is_refused() {
        let r: Result<Outcome, _> = serde_json::from_value(json!({"resorces": []}));
        assert!(r.is_err());
    }

    #[test]
    fn conditions_and_events_cross_as_json_and_must_be_what_kubernetes_takes() {
        let o: Outcome = serde_json::from_value(json!({
            "conditions": [{"type": "Linked", "status": "True", "reason": "Found"}],
            "events": [{"reason": "Linked", "message": "found it"}],
        }))
        .expect("an outcome");
        assert_eq!(o.conditions, [Condition::new("Linked", true, "Found", "")]);
        assert_eq!(o.events, [Event::normal("Linked", "found it")]);
        assert_eq!(o.check(), Ok(()));
        let refused = |o: Outcome| match o.check() {
            Err(OutcomeError::Report { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let bad = |status: &str| {
            Outcome::new().condition(Condition {
                status: status.into(),
                ..Condition::new("Linked", true, "", "")
            })
        };
        assert_eq!(refused(bad("Maybe")), "conditions[0].status");
        assert_eq!(bad("Unknown").check(), Ok(()));
        assert_eq!(
            refused(Outcome::new().condition(Condition::new("not a type!", true, "", ""))),
            "conditions[0].type"
        );
        assert_eq!(
            refused(Outcome::new().condition(Condition::new("A", true, "has space", ""))),
            "conditions[0].reason"
        );
        assert!(is_condition_type("example.com/Degraded"));
        assert!(!is_condition_type("Example.com/Degraded"));
        assert_eq!(
            refused(Outcome::new().event(Event {
                kind: "Loud".into(),
                ..Event::normal("A", "")
            })),
            "events[0].type"
        );
        assert_eq!(
            refused(Outcome::new().event(Event::normal("", ""))),
            "events[0].reason"
        );
        assert_eq!(
            refused(Outcome::new().event(Event::normal("ReconcileError", "forged"))),
            "events[0].reason"
        );
        let many = (0..=MAX_EVENTS).fold(Outcome::new(), |o, _| o.event(Event::normal("A", "")));
        assert_eq!(refused(many), "events");
        // A later condition of the same type replaces the earlier one.
        let o = Outcome::new()
            .condition(Condition::new("A", true, "", ""))
            .condition(Condition::unknown("A", "Later", ""));
        assert_eq!(o.conditions, [Condition::unknown("A", "Later", "")]);
    }
}
