//! The typed [`Request`]: what the host asks a reconciler about one CR.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bindings::types as wit;

/// What the host asks a reconciler about one custom resource (CR).
///
/// The host sends the CR and the rendered `reconcile.args` as JSON text; this type holds
/// them parsed, so a reconciler reads fields with `serde_json` or deserializes them into
/// its own types with [`Request::spec_as`] and [`Request::arg`].
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `"namespace/name"`, or `"name"` for a cluster-scoped CR.
    pub key: String,
    /// The CR's apiVersion, e.g. `"demo.inrun.dev/v1alpha1"`.
    pub api_version: String,
    /// The CR's kind, e.g. `"WebApp"`.
    pub kind: String,
    /// The CR, minus the paths the Blueprint excludes (`request.object.exclude`).
    pub object: Value,
    /// The rendered `reconcile.args` (an empty object when none are declared).
    pub args: Value,
    /// True while the CR is being deleted: writes in the outcome are then ignored, and
    /// asking to requeue holds the deletion.
    pub finalizing: bool,
    /// The serve target the CR came through, when it has one.
    pub target: Option<String>,
    /// The children the host observes, grouped by kind then name, when the Blueprint
    /// sets `request.children`.
    pub children: Option<Value>,
}

/// Returned by [`Request::spec`] when the CR has no spec.
static NULL: Value = Value::Null;

impl Request {
    /// Builds a request for `object`, taking the key, apiVersion and kind from the object
    /// itself. Handy in tests of a reconciler.
    pub fn for_object(object: Value, args: Value) -> Self {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
        let name = text(object.pointer("/metadata/name"));
        let key = match object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name,
        };
        Request {
            key,
            api_version: text(object.get("apiVersion")),
            kind: text(object.get("kind")),
            object,
            args,
            finalizing: false,
            target: None,
            children: None,
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

/// Parses one JSON text field of a request or outcome sent by the host.
pub(crate) fn parse_json(field: &str, text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{field} is not valid JSON: {e}"))
}

impl TryFrom<wit::Request> for Request {
    type Error = String;

    /// Parses the JSON text fields of the request the host sent.
    fn try_from(req: wit::Request) -> Result<Self, String> {
        Ok(Request {
            object: parse_json("request.object", &req.object)?,
            args: parse_json("request.args", &req.args)?,
            children: req
                .children
                .as_deref()
                .map(|text| parse_json("request.children", text))
                .transpose()?,
            key: req.key,
            api_version: req.api_version,
            kind: req.kind,
            finalizing: req.finalizing,
            target: req.target,
        })
    }
}

impl From<&Request> for wit::Request {
    /// Writes the request back as the WIT record, its JSON fields as text.
    fn from(req: &Request) -> Self {
        wit::Request {
            key: req.key.clone(),
            api_version: req.api_version.clone(),
            kind: req.kind.clone(),
            object: req.object.to_string(),
            args: req.args.to_string(),
            finalizing: req.finalizing,
            target: req.target.clone(),
            children: req.children.as_ref().map(Value::to_string),
        }
    }
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

    fn wit_request(object: &str) -> wit::Request {
        wit::Request {
            key: "prod/shop".into(),
            api_version: "demo.inrun.dev/v1alpha1".into(),
            kind: "WebApp".into(),
            object: object.into(),
            args: "{}".into(),
            finalizing: true,
            target: Some("main".into()),
            children: Some(r#"{"Deployment": {}}"#.into()),
        }
    }

    #[test]
    fn for_object_takes_key_and_type_from_the_object() {
        let req = webapp();
        assert_eq!(req.key, "prod/shop");
        assert_eq!(req.api_version, "demo.inrun.dev/v1alpha1");
        assert_eq!(req.kind, "WebApp");
    }

    #[test]
    fn name_and_namespace_come_from_metadata() {
        let req = webapp();
        assert_eq!(req.name(), "shop");
        assert_eq!(req.namespace(), Some("prod"));
    }

    #[test]
    fn name_and_namespace_fall_back_to_the_key() {
        let mut req = webapp();
        req.object = json!({});
        assert_eq!(req.name(), "shop");
        assert_eq!(req.namespace(), Some("prod"));
        req.key = "cluster-thing".into();
        assert_eq!(req.name(), "cluster-thing");
        assert_eq!(req.namespace(), None);
    }

    #[test]
    fn spec_is_null_when_the_cr_has_none() {
        let mut req = webapp();
        assert_eq!(req.spec()["image"], "nginx:1.27");
        req.object = json!({"metadata": {"name": "x"}});
        assert!(req.spec().is_null());
    }

    #[test]
    fn spec_as_names_the_spec_in_its_error() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Spec {
            replicas: String,
        }
        let err = webapp().spec_as::<Spec>().err().unwrap_or_default();
        assert!(err.starts_with("spec: invalid type"), "{err}");
    }

    #[test]
    fn arg_deserializes_a_present_argument() {
        let req = webapp();
        assert_eq!(req.arg::<String>("team"), Ok("payments".to_owned()));
        assert_eq!(req.arg::<u32>("size"), Ok(3));
    }

    #[test]
    fn arg_reports_a_missing_or_null_argument_as_required() {
        let req = webapp();
        assert_eq!(
            req.arg::<String>("owner"),
            Err("args.owner is required".to_owned())
        );
        assert_eq!(
            req.arg::<String>("nothing"),
            Err("args.nothing is required".to_owned())
        );
    }

    #[test]
    fn arg_of_the_wrong_type_names_the_argument() {
        let err = webapp().arg::<u32>("team").err().unwrap_or_default();
        assert!(err.starts_with("args.team: invalid type"), "{err}");
    }

    #[test]
    fn optional_arg_is_none_when_missing() {
        let req = webapp();
        assert_eq!(req.optional_arg::<String>("owner"), Ok(None));
        assert_eq!(
            req.optional_arg::<String>("team"),
            Ok(Some("payments".to_owned()))
        );
    }

    #[test]
    fn a_wit_request_parses_its_json_fields() {
        let req = Request::try_from(wit_request(r#"{"spec": {"a": 1}}"#)).expect("valid request");
        assert_eq!(req.spec(), &json!({"a": 1}));
        assert_eq!(req.args, json!({}));
        assert_eq!(req.children, Some(json!({"Deployment": {}})));
        assert!(req.finalizing);
        assert_eq!(req.target.as_deref(), Some("main"));
    }

    #[test]
    fn a_wit_request_with_bad_json_is_an_error_naming_the_field() {
        let err = Request::try_from(wit_request("{not json"))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("request.object is not valid JSON"), "{err}");
        let mut bad_children = wit_request("{}");
        bad_children.children = Some("[".into());
        let err = Request::try_from(bad_children).err().unwrap_or_default();
        assert!(
            err.starts_with("request.children is not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn a_request_round_trips_through_the_wit_record() {
        let mut req = webapp();
        req.children = Some(json!({"Service": {"shop": {}}}));
        let back = Request::try_from(wit::Request::from(&req)).expect("round trip");
        assert_eq!(back, req);
    }
}
