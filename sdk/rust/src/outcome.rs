//! The typed [`Outcome`]: what a reconciler declares a CR should become, with a builder.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::bindings::types as wit;
use crate::request::parse_json;

/// What a reconciler declares the CR should become. The host does every write.
///
/// Build one with the chaining methods, starting from [`Outcome::new`]:
///
/// ```
/// use std::time::Duration;
/// use inrun_sdk::Outcome;
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
///
/// The fields are public too, so a hook can edit the outcome it is given in place.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Merged into the CR's status after the Blueprint's `emit.status` (this wins).
    pub status: Option<Map<String, Value>>,
    /// Objects to apply: full Kubernetes objects, or the intent form
    /// `{"type": "deployment", "fields": {...}}`.
    pub resources: Vec<Value>,
    /// Labels to set on the CR; a key dropped from a later outcome is removed. Keys under
    /// `inrun.dev/` are reserved for the host.
    pub labels: BTreeMap<String, String>,
    /// Annotations to set on the CR, with the same rules as [`labels`](Self::labels).
    pub annotations: BTreeMap<String, String>,
    /// Reconcile again after the host's default delay (or [`requeue_after`](Self::requeue_after)).
    /// While the CR is being deleted, this holds the deletion.
    pub requeue: bool,
    /// Reconcile again after this long. On its own it is a refresh: it does not hold a
    /// deletion.
    pub requeue_after: Option<Duration>,
    /// Ask the host to delete the CR after this grace period; an outcome without it
    /// withdraws a pending one. Crosses the boundary in whole seconds, rounded up.
    pub cleanup_after: Option<Duration>,
}

impl Outcome {
    /// An empty outcome: no resources, status or metadata, no requeue.
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
        self.resources.push(json!({"type": kind, "fields": fields}));
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

    /// Asks to be reconciled again after `delay` (crosses the boundary in milliseconds).
    #[must_use]
    pub fn requeue_after(mut self, delay: Duration) -> Self {
        self.requeue_after = Some(delay);
        self
    }

    /// Asks the host to delete the CR after `grace` (in whole seconds, rounded up).
    #[must_use]
    pub fn cleanup_after(mut self, grace: Duration) -> Self {
        self.cleanup_after = Some(grace);
        self
    }

    /// Whether the outcome declares nothing to write: no resources, status, labels or
    /// annotations.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
            && self.status.as_ref().is_none_or(Map::is_empty)
            && self.labels.is_empty()
            && self.annotations.is_empty()
    }
}

/// Whole seconds in `d`, rounded up so a short grace period never becomes zero.
fn ceil_secs(d: Duration) -> u32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

impl From<Outcome> for wit::Outcome {
    /// Writes the outcome as the WIT record, its JSON values as text.
    fn from(outcome: Outcome) -> Self {
        wit::Outcome {
            status: outcome.status.map(|s| Value::Object(s).to_string()),
            resources: outcome.resources.iter().map(Value::to_string).collect(),
            labels: outcome.labels.into_iter().collect(),
            annotations: outcome.annotations.into_iter().collect(),
            requeue: outcome.requeue,
            requeue_after_ms: outcome
                .requeue_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            cleanup: outcome.cleanup_after.map(|d| wit::Cleanup {
                after_seconds: ceil_secs(d),
            }),
        }
    }
}

impl TryFrom<wit::Outcome> for Outcome {
    type Error = String;

    /// Parses an outcome the host sent (a hook's `current` outcome). A `null` status
    /// reads as no status.
    ///
    /// # Errors
    /// When the status is neither a JSON object nor `null`, or a resource is not JSON.
    fn try_from(outcome: wit::Outcome) -> Result<Self, String> {
        let status = match outcome
            .status
            .as_deref()
            .map(|s| parse_json("outcome.status", s))
        {
            None => None,
            Some(Ok(Value::Null)) => None,
            Some(Ok(Value::Object(map))) => Some(map),
            Some(Ok(_)) => return Err("outcome.status is not a JSON object".to_owned()),
            Some(Err(e)) => return Err(e),
        };
        let resources = outcome
            .resources
            .iter()
            .enumerate()
            .map(|(i, text)| parse_json(&format!("outcome.resources[{i}]"), text))
            .collect::<Result<_, _>>()?;
        Ok(Outcome {
            status,
            resources,
            labels: outcome.labels.into_iter().collect(),
            annotations: outcome.annotations.into_iter().collect(),
            requeue: outcome.requeue,
            requeue_after: outcome.requeue_after_ms.map(Duration::from_millis),
            cleanup_after: outcome
                .cleanup
                .map(|c| Duration::from_secs(c.after_seconds.into())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wit_outcome() -> wit::Outcome {
        wit::Outcome {
            status: None,
            resources: vec![],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
        }
    }

    #[test]
    fn intent_wraps_the_fields_with_their_type() {
        let outcome = Outcome::new().intent("deployment", json!({"image": "nginx"}));
        assert_eq!(
            outcome.resources,
            vec![json!({"type": "deployment", "fields": {"image": "nginx"}})]
        );
    }

    #[test]
    fn status_keys_and_objects_merge_with_the_later_winning() {
        let mut extra = Map::new();
        extra.insert("phase".into(), json!("Ready"));
        extra.insert("url".into(), json!("http://x"));
        let outcome = Outcome::new()
            .status("phase", "Pending")
            .status("replicas", 2)
            .status_object(extra);
        assert_eq!(
            Value::Object(outcome.status.unwrap_or_default()),
            json!({"phase": "Ready", "replicas": 2, "url": "http://x"})
        );
    }

    #[test]
    fn a_repeated_label_keeps_the_last_value() {
        let outcome = Outcome::new()
            .label("a", "1")
            .label("a", "2")
            .annotation("b", "3");
        assert_eq!(outcome.labels.get("a").map(String::as_str), Some("2"));
        assert_eq!(outcome.annotations.get("b").map(String::as_str), Some("3"));
    }

    #[test]
    fn an_outcome_without_writes_is_empty_even_when_it_requeues() {
        assert!(Outcome::new().requeue().is_empty());
        assert!(!Outcome::new().status("a", 1).is_empty());
        assert!(!Outcome::new().resource(json!({})).is_empty());
    }

    #[test]
    fn durations_cross_as_milliseconds_and_rounded_up_seconds() {
        let wit: wit::Outcome = Outcome::new()
            .requeue()
            .requeue_after(Duration::from_millis(1500))
            .cleanup_after(Duration::from_millis(200))
            .into();
        assert!(wit.requeue);
        assert_eq!(wit.requeue_after_ms, Some(1500));
        assert_eq!(wit.cleanup.map(|c| c.after_seconds), Some(1));
    }

    #[test]
    fn an_outcome_becomes_json_text_in_the_wit_record() {
        let wit: wit::Outcome = Outcome::new()
            .resource(json!({"kind": "ConfigMap"}))
            .status("ok", true)
            .label("l", "v")
            .into();
        assert_eq!(wit.resources, vec![r#"{"kind":"ConfigMap"}"#.to_owned()]);
        assert_eq!(wit.status.as_deref(), Some(r#"{"ok":true}"#));
        assert_eq!(wit.labels, vec![("l".to_owned(), "v".to_owned())]);
        assert_eq!(wit.cleanup.map(|c| c.after_seconds), None);
    }

    #[test]
    fn an_outcome_round_trips_through_the_wit_record() {
        let outcome = Outcome::new()
            .resource(json!({"apiVersion": "v1", "kind": "Service"}))
            .intent("deployment", json!({"replicas": 3}))
            .status("url", "http://a")
            .label("a", "b")
            .annotation("c", "d")
            .requeue()
            .requeue_after(Duration::from_secs(30))
            .cleanup_after(Duration::from_secs(600));
        let back = Outcome::try_from(wit::Outcome::from(outcome.clone())).expect("round trip");
        assert_eq!(back, outcome);
    }

    #[test]
    fn a_resource_that_is_not_json_is_an_error_naming_its_index() {
        let mut wit = wit_outcome();
        wit.resources = vec!["{}".into(), "not json".into()];
        let err = Outcome::try_from(wit).err().unwrap_or_default();
        assert!(
            err.starts_with("outcome.resources[1] is not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn a_status_must_be_an_object_or_null() {
        let mut wit = wit_outcome();
        wit.status = Some("null".into());
        assert_eq!(Outcome::try_from(wit.clone()).map(|o| o.status), Ok(None));
        wit.status = Some("[1]".into());
        assert_eq!(
            Outcome::try_from(wit.clone()),
            Err("outcome.status is not a JSON object".to_owned())
        );
        wit.status = Some("{".into());
        let err = Outcome::try_from(wit).err().unwrap_or_default();
        assert!(err.starts_with("outcome.status is not valid JSON"), "{err}");
    }
}
