//! The Request a reconciler receives about one CR, whatever its kind.
//!
//! The JSON shapes here are the remote protocol's and `inrun render`'s: camelCase keys,
//! `target` / `children` only when they apply, `finalizing` only when true.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
}
