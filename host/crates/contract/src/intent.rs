//! Expands the intent form of a resource (`{"type": "deployment", "fields": {...}}`) into a
//! full Kubernetes object.
//!
//! Reconcilers may return short intents instead of full objects; the host expands them
//! before applying. A resource with `apiVersion` or `kind`, or without `type`, is a full
//! object and is returned unchanged (a full Secret has a top-level `type` of its own).
//!
//! Every type takes the common fields:
//!
//! | field | default |
//! |---|---|
//! | `name` | the CR's name |
//! | `namespace` | the CR's namespace ([`IntentDefaults::namespace`]) |
//! | `labels` | merged over `app.kubernetes.io/name: <name>` and `app.kubernetes.io/managed-by: inrun` |
//! | `annotations` | none |
//!
//! and these of its own (a field not listed is an error):
//!
//! | type | fields (default) |
//! |---|---|
//! | `deployment` | `image` (required), `replicas` (1), `port` or `ports` (number or list; a single port is named `http`), `env` (map or list), `command`, `args`, `resources`, `serviceAccountName` |
//! | `service` | `port` (80), `targetPort` (= `port`; number or name), `type` (`ClusterIP`), `selector` (`app.kubernetes.io/name: <name label>`) |
//! | `configmap` | `data` |
//! | `secret` | `stringData`, `data` (base64 values), `type` (`Opaque`) |
//! | `serviceaccount` | — |
//! | `job` | `image` (required), `command`, `args`, `env`, `resources`, `serviceAccountName`, `backoffLimit` (3), `restartPolicy` (`Never`), `ttlSecondsAfterFinished` |
//! | `ingress` | `host`, `path` (`/`), `pathType` (`Prefix`), `serviceName` (name), `servicePort` (80; number or name), `ingressClassName`, `tls` (a secret name or `{secretName, hosts}`) |
//!
//! A deployment's selector and pod labels, and a service's default selector, use the
//! object's `app.kubernetes.io/name` label, so a deployment and a service with the same
//! name find each other. `docs/intent.md` has the same tables for users.

mod build;
mod fields;

use serde_json::{Map, Value};

/// What an intent falls back to when its fields leave something out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentDefaults {
    /// The CR's name: the default `name` of every expanded object.
    pub name: String,
    /// The CR's namespace: the default namespace of expanded objects (none for a
    /// cluster-scoped CR).
    pub namespace: Option<String>,
}

/// An intent (or a full object) that cannot become a Kubernetes object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntentError {
    /// The resource is not a JSON object.
    #[error("a resource must be an object")]
    NotAnObject,
    /// A full object lacks one of `apiVersion`, `kind`, `metadata.name`.
    #[error("a full resource needs `{missing}`")]
    Incomplete {
        /// The missing path.
        missing: &'static str,
    },
    /// The intent has a top-level key other than `type` and `fields`.
    #[error("an intent has only `type` and `fields`, not `{key}`")]
    UnknownKey {
        /// The unexpected key.
        key: String,
    },
    /// The intent's `type` is not one Inrun expands.
    #[error("unknown intent type `{kind}` (known types: {known})")]
    UnknownType {
        /// The type as written.
        kind: String,
        /// The types Inrun knows.
        known: String,
    },
    /// A field the type does not take.
    #[error("{kind}: unknown field `{field}` (known fields: {known})")]
    UnknownField {
        /// The intent type.
        kind: &'static str,
        /// The field as written.
        field: String,
        /// The fields the type takes.
        known: String,
    },
    /// A field the type cannot do without.
    #[error("{kind}: field `{field}` is required")]
    MissingField {
        /// The intent type.
        kind: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// A field with a value of the wrong shape.
    #[error("{kind}: field `{field}` must be {expected}")]
    InvalidField {
        /// The intent type.
        kind: &'static str,
        /// The field (with an index or key inside it where that helps).
        field: String,
        /// What the field accepts.
        expected: &'static str,
    },
    /// Two fields that say the same thing in different ways.
    #[error("{kind}: fields `{first}` and `{second}` cannot be used together")]
    Conflict {
        /// The intent type.
        kind: &'static str,
        /// One field.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
}

/// Expands `resource` into a full Kubernetes object.
///
/// An intent (`{"type": ..., "fields": {...}}`) becomes the object its type describes, in
/// `defaults.namespace` unless `fields.namespace` says otherwise. Anything else is taken
/// as a full object and returned unchanged once it is known to have `apiVersion`, `kind`
/// and `metadata.name`.
///
/// # Errors
///
/// [`IntentError`] naming the type, the field and what was expected; an unknown type or
/// field lists the known ones.
pub fn expand(resource: &Value, defaults: &IntentDefaults) -> Result<Value, IntentError> {
    let object = resource.as_object().ok_or(IntentError::NotAnObject)?;
    if !is_intent(object) {
        check_full_object(object)?;
        return Ok(resource.clone());
    }
    if let Some(key) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "type" | "fields"))
    {
        return Err(IntentError::UnknownKey { key: key.clone() });
    }
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let empty = Map::new();
    let fields = match object.get("fields") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(IntentError::InvalidField {
                kind: "intent",
                field: "fields".to_owned(),
                expected: "an object",
            });
        }
    };
    build::expand_kind(kind, fields, defaults)
}

/// An intent has `type` and neither `apiVersion` nor `kind`.
fn is_intent(object: &Map<String, Value>) -> bool {
    object.contains_key("type")
        && !object.contains_key("apiVersion")
        && !object.contains_key("kind")
}

fn check_full_object(object: &Map<String, Value>) -> Result<(), IntentError> {
    let present = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    if !present(object.get("apiVersion")) {
        return Err(IntentError::Incomplete {
            missing: "apiVersion",
        });
    }
    if !present(object.get("kind")) {
        return Err(IntentError::Incomplete { missing: "kind" });
    }
    if !present(object.get("metadata").and_then(|m| m.get("name"))) {
        return Err(IntentError::Incomplete {
            missing: "metadata.name",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
