//! The WIT form of [`Request`], the contract type the host uses too: the CR, the args and
//! the children cross as JSON text.

use serde_json::Value;

use crate::bindings::types as wit;
pub use inrun_contract::Request;

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
            external: None,
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
        let mut req = Request::for_object(
            json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
                   "metadata": {"name": "shop", "namespace": "prod"}}),
            json!({"team": "payments"}),
        );
        req.children = Some(json!({"Service": {"shop": {}}}));
        let back = Request::try_from(wit::Request::from(&req)).expect("round trip");
        assert_eq!(back, req);
    }
}
