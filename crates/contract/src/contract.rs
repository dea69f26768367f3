//! The Request a reconciler receives and the Outcome it returns, whatever its kind.
//!
//! The JSON shapes here are the remote protocol's and `inrun render`'s: camelCase keys,
//! `target` / `children` only when they apply, `finalizing` only when true.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The prefix of label and annotation keys the host keeps for itself.
pub const RESERVED_PREFIX: &str = "inrun.dev/";

/// Annotation on a resource from `onCreate` templates: the host creates it when it is
/// missing and never updates it afterwards. The host removes the annotation before applying.
pub const CREATE_ONLY_ANNOTATION: &str = "inrun.dev/create-only";

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
}

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
}

impl Outcome {
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
        if let Some(index) = self.resources.iter().position(|r| !r.is_object()) {
            return Err(OutcomeError::NotAnObject { index });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn outcome_with_unknown_field_is_refused() {
        let r: Result<Outcome, _> = serde_json::from_value(json!({"resorces": []}));
        assert!(r.is_err());
    }
}
