//! What the console shows of the CRs: each CR the controllers cache, with its Ready
//! condition and the children its last pass recorded (`status.resources`, each with its
//! state), read from the cache the controllers keep anyway — a view costs the API server
//! nothing.

use serde::Serialize;
use serde_json::Value;

/// The CRs shown per CRD at most (the first, by namespace and name).
pub const SHOWN_PER_CRD: usize = 500;

/// One CR as the console shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrView {
    /// Its CRD (`plural.group`).
    pub crd: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace; `None` for a cluster-scoped CR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The Ready condition's status (`True`, `False`, `Unknown`); `Unknown` before the
    /// host wrote one.
    pub ready: String,
    /// The Ready condition's reason.
    pub reason: String,
    /// The Ready condition's message, whole.
    pub message: String,
    /// `observedGeneration/generation`.
    pub generation: String,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// What reconciled it (`status.reconciledBy`: its plugins' digests, or its block's
    /// kind and digest); empty before the host wrote it.
    pub reconciled_by: String,
    /// Every condition of its status (type, status, reason, message, since).
    pub conditions: Vec<Value>,
    /// Its children as its last pass recorded them: apiVersion, kind, name, namespace,
    /// state (`Current`, `InProgress`, `Failed`) and message.
    pub children: Vec<Value>,
}

/// `object` (a CR of the CRD `crd`, whole) as the console shows it.
pub fn view(crd: &str, object: &Value) -> CrView {
    let text = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let ready = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    let generation = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_i64)
            .map_or_else(|| "-".to_string(), |g| g.to_string())
    };
    CrView {
        crd: crd.to_string(),
        kind: text(object, "/kind"),
        namespace: object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string),
        name: text(object, "/metadata/name"),
        ready: Some(text(&ready, "/status"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "Unknown".into()),
        reason: text(&ready, "/reason"),
        message: text(&ready, "/message"),
        generation: format!(
            "{}/{}",
            generation("/status/observedGeneration"),
            generation("/metadata/generation")
        ),
        deleting: object.pointer("/metadata/deletionTimestamp").is_some(),
        reconciled_by: text(object, "/status/reconciledBy"),
        conditions: object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        children: object
            .pointer("/status/resources")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cr_shows_its_ready_condition_and_the_children_its_pass_recorded() {
        let cr = json!({
            "apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "team-a", "generation": 2},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 2,
                "conditions": [{"type": "Ready", "status": "False", "reason": "Progressing",
                                "message": "Deployment shop: 0/2 replicas available"}],
                "resources": [
                    {"apiVersion": "v1", "kind": "Service", "name": "shop", "state": "Current"},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop",
                     "state": "InProgress", "message": "0/2 replicas available"}]},
        });
        let v = view("webapps.demo.inrun.dev", &cr);
        assert_eq!(
            (v.ready.as_str(), v.reason.as_str(), v.generation.as_str()),
            ("False", "Progressing", "2/2")
        );
        assert_eq!(v.message, "Deployment shop: 0/2 replicas available");
        assert_eq!(v.children[1]["state"], "InProgress");
        assert_eq!(v.conditions[0]["reason"], "Progressing");
        let new = json!({
            "apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
            "metadata": {"name": "fresh", "namespace": "team-a", "generation": 1},
        });
        let v = view("webapps.demo.inrun.dev", &new);
        assert_eq!(
            (v.ready.as_str(), v.generation.as_str()),
            ("Unknown", "-/1")
        );
        assert!(v.children.is_empty());
    }
}
