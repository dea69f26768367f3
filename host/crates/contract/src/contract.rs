//! The Request a reconciler receives and the Outcome it returns, whatever its kind.
//!
//! The JSON shapes here are the remote protocol's and `inrun render`'s: camelCase keys,
//! `target` / `children` only when they apply, `finalizing` only when true.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The prefix of label and annotation keys the host keeps for itself.
pub const RESERVED_PREFIX: &str = "inrun.dev/";

/// Annotation on a resource from `onCreate` templates: the host creates it when it is
/// missing and never updates it afterwards. The host removes the annotation before applying.
pub const CREATE_ONLY_ANNOTATION: &str = "inrun.dev/create-only";

/// The most resources one Result may hold, whatever the reconciler kind (a Wasm plugin's
/// `limits.resources` may set a lower bound for it).
pub const MAX_RESOURCES: usize = 10_000;

/// What the host asks a reconciler about one CR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// "namespace/name", or "name" for a cluster-scoped CR.
    pub key: String,
    /// The CR's apiVersion.
    pub api_version: String,
    /// The CR's kind.
    pub kind: String,
    /// The CR, minus the paths in `request.object.exclude`.
    pub object: Value,
    /// The rendered `reconcile.args` (an object; empty when none are declared).
    pub args: Value,
    /// True while the CR is being deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finalizing: bool,
    /// The serve target the CR came through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The observed children, grouped by kind then name, when `request.children` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<Value>,
    /// Results of `reconcile.external` calls, for templates (`.external.<name>`). Not part
    /// of the wire contract: plugins see them only through `args`.
    #[serde(skip)]
    pub external: Option<Value>,
}

impl Request {
    /// Builds a request for `object`, taking key, apiVersion and kind from the object itself.
    pub fn for_object(object: Value, args: Value) -> Self {
        let text = |path: &[&str]| {
            let mut v = &object;
            for p in path {
                v = v.get(p).unwrap_or(&Value::Null);
            }
            v.as_str().unwrap_or_default().to_string()
        };
        let name = text(&["metadata", "name"]);
        let namespace = text(&["metadata", "namespace"]);
        let key = if namespace.is_empty() {
            name
        } else {
            format!("{namespace}/{name}")
        };
        Request {
            key,
            api_version: text(&["apiVersion"]),
            kind: text(&["kind"]),
            object,
            args,
            finalizing: false,
            target: None,
            children: None,
            external: None,
        }
    }

    /// The CR's name: `metadata.name`, or the name part of [`key`](Self::key) when the
    /// object lacks one.
    pub fn name(&self) -> &str {
        match self
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
        {
            Some(name) => name,
            None => self.key.rsplit('/').next().unwrap_or(&self.key),
        }
    }

    /// The CR's namespace: `metadata.namespace`, or the namespace part of
    /// [`key`](Self::key); `None` for a cluster-scoped CR.
    pub fn namespace(&self) -> Option<&str> {
        match self
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            Some(ns) if !ns.is_empty() => Some(ns),
            _ => self.key.split_once('/').map(|(ns, _)| ns),
        }
    }

    /// The CR's `spec`, or `Value::Null` when it has none.
    pub fn spec(&self) -> &Value {
        self.object.get("spec").unwrap_or(&NULL)
    }

    /// Deserializes the CR's `spec` into `T` (a missing spec reads as `null`).
    ///
    /// # Errors
    /// A message naming `spec` and what did not fit, ready to return from a reconciler.
    pub fn spec_as<T: DeserializeOwned>(&self) -> Result<T, String> {
        T::deserialize(self.spec()).map_err(|e| format!("spec: {e}"))
    }

    /// Deserializes the argument `name` of the rendered `reconcile.args` into `T`.
    ///
    /// # Errors
    /// When the argument is missing or null (`args.NAME is required`), or does not
    /// deserialize into `T` (`args.NAME: <why>`).
    pub fn arg<T: DeserializeOwned>(&self, name: &str) -> Result<T, String> {
        self.optional_arg(name)?
            .ok_or_else(|| format!("args.{name} is required"))
    }

    /// Like [`arg`](Self::arg), but a missing or null argument is `Ok(None)`.
    ///
    /// # Errors
    /// When the argument is present but does not deserialize into `T`.
    pub fn optional_arg<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, String> {
        match self.args.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => T::deserialize(value)
                .map(Some)
                .map_err(|e| format!("args.{name}: {e}")),
        }
    }
}

/// Returned by [`Request::spec`] when the CR has no spec.
static NULL: Value = Value::Null;

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

/// Conditions only the host sets: a reconciler's condition of one of these types is
/// dropped.
pub const HOST_CONDITIONS: [&str; 2] = ["Reconciled", "Ready"];

/// The reasons of the host's own events; a reconciler's event may not take one, so what
/// the host says cannot be forged.
pub const HOST_EVENT_REASONS: [&str; 14] = [
    "Reconciled",
    "ReconcileError",
    "Pruned",
    "Finalized",
    "FinalizeTimeout",
    "Invalid",
    "Gated",
    "CleanedUp",
    "DeletionBlocked",
    "DeletionFailed",
    "Ready",
    "Progressing",
    "ResourceFailed",
    "Released",
];

/// Most conditions one Result may set.
pub const MAX_CONDITIONS: usize = 16;
/// Most events one Result may ask for.
pub const MAX_EVENTS: usize = 8;

/// A condition of the reconciler's on the CR, as the Kubernetes API conventions shape it;
/// the host adds `observedGeneration` and `lastTransitionTime`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Condition {
    /// CamelCase type, e.g. `Degraded`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason; the type when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// For people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Condition {
    /// A condition of `kind` that is True (`true`) or False, with `reason` and `message`.
    pub fn new(kind: &str, status: bool, reason: &str, message: &str) -> Self {
        Condition {
            kind: kind.to_owned(),
            status: if status { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// A condition of `kind` whose status is Unknown.
    pub fn unknown(kind: &str, reason: &str, message: &str) -> Self {
        Condition {
            status: "Unknown".to_owned(),
            ..Condition::new(kind, false, reason, message)
        }
    }

    /// A condition whose status is `truth`, as WIT carries it: `Some(true)` True,
    /// `Some(false)` False, `None` Unknown.
    pub fn of(kind: String, truth: Option<bool>, reason: String, message: String) -> Self {
        let status = match truth {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        };
        Condition {
            kind,
            status: status.to_owned(),
            reason,
            message,
        }
    }

    /// The status as WIT carries it (see [`Condition::of`]).
    pub fn truth(&self) -> Option<bool> {
        match self.status.as_str() {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        }
    }
}

/// An event to record on the CR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Event {
    /// `Normal` (the default) or `Warning`.
    #[serde(rename = "type", default = "normal")]
    pub kind: String,
    /// CamelCase reason, e.g. `BackupStarted`.
    pub reason: String,
    /// For people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn normal() -> String {
    "Normal".to_owned()
}

impl Event {
    /// A `Normal` event.
    pub fn normal(reason: &str, message: &str) -> Self {
        Event {
            kind: normal(),
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// A `Warning` event.
    pub fn warning(reason: &str, message: &str) -> Self {
        Event {
            kind: "Warning".to_owned(),
            ..Event::normal(reason, message)
        }
    }

    /// A `Warning` event when `warning`, else a `Normal` one.
    pub fn of(warning: bool, reason: String, message: String) -> Self {
        Event {
            kind: if warning { "Warning" } else { "Normal" }.to_owned(),
            reason,
            message,
        }
    }

    /// Whether it is a `Warning`.
    pub fn is_warning(&self) -> bool {
        self.kind == "Warning"
    }
}

/// Whether `text` is a reason as Kubernetes takes one for a condition or an event:
/// a letter, then letters, digits, `_`, `,` or `:`, not ending in `,` or `:`; at most 128
/// characters (Kubernetes allows 1024 for a condition's, 128 for an event's).
pub fn is_reason(text: &str) -> bool {
    let mut chars = text.chars();
    text.len() <= 128
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        && !text.ends_with([',', ':'])
}

/// Whether `text` is a condition type: a reason-like name (`Degraded`), or one under a
/// DNS prefix (`example.com/Degraded`); at most 316 characters.
pub fn is_condition_type(text: &str) -> bool {
    let name = text.rsplit_once('/').map_or(text, |(prefix, name)| {
        if prefix.is_empty()
            || prefix.len() > 253
            || !prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        {
            ""
        } else {
            name
        }
    });
    text.len() <= 316
        && !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
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

    fn webapp() -> Request {
        Request::for_object(
            json!({
                "apiVersion": "demo.inrun.dev/v1alpha1",
                "kind": "WebApp",
                "metadata": {"name": "shop", "namespace": "prod"},
                "spec": {"image": "nginx:1.27", "replicas": 2},
            }),
            json!({"team": "payments", "size": 3, "nothing": null}),
        )
    }

    #[test]
    fn name_and_namespace_come_from_metadata_else_from_the_key() {
        let mut req = webapp();
        assert_eq!((req.name(), req.namespace()), ("shop", Some("prod")));
        req.object = json!({});
        assert_eq!((req.name(), req.namespace()), ("shop", Some("prod")));
        req.key = "cluster-thing".into();
        assert_eq!((req.name(), req.namespace()), ("cluster-thing", None));
    }

    #[test]
    fn spec_is_null_when_the_cr_has_none_and_spec_as_names_the_spec() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Spec {
            replicas: String,
        }
        let mut req = webapp();
        assert_eq!(req.spec()["image"], "nginx:1.27");
        let err = req.spec_as::<Spec>().err().unwrap_or_default();
        assert!(err.starts_with("spec: invalid type"), "{err}");
        req.object = json!({"metadata": {"name": "x"}});
        assert!(req.spec().is_null());
    }

    #[test]
    fn arg_is_required_typed_and_named_in_its_errors_and_optional_arg_is_not_required() {
        let req = webapp();
        assert_eq!(req.arg::<String>("team"), Ok("payments".to_owned()));
        assert_eq!(req.arg::<u32>("size"), Ok(3));
        assert_eq!(
            req.arg::<String>("owner"),
            Err("args.owner is required".to_owned())
        );
        assert_eq!(
            req.arg::<String>("nothing"),
            Err("args.nothing is required".to_owned())
        );
        let err = req.arg::<u32>("team").err().unwrap_or_default();
        assert!(err.starts_with("args.team: invalid type"), "{err}");
        assert_eq!(req.optional_arg::<String>("owner"), Ok(None));
    }

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
    fn request_serializes_only_the_fields_that_apply() {
        let req = Request::for_object(
            json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": "web", "namespace": "team-a"}}),
            json!({"image": "nginx"}),
        );
        let text = serde_json::to_value(&req).unwrap();
        assert_eq!(text["key"], "team-a/web");
        let keys: Vec<_> = text.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["key", "apiVersion", "kind", "object", "args"]);
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
