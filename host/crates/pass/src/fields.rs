//! What a field manager owns of an object, read from its `metadata.managedFields`: the
//! server-side apply bookkeeping that tells the pass whether a write would change anything.

use std::collections::BTreeSet;

use serde_json::Value;

/// The keys of the map at `path` (e.g. `["metadata", "labels"]`) that `manager` owns
/// through an `Apply` on `subresource` (`""` for the object itself). Items of a set-like
/// list (finalizers) come back as their values.
///
/// An object without managed fields (one that never reached the API server, as in
/// `inrun render`) owns nothing.
pub fn owned_keys(
    object: &Value,
    manager: &str,
    subresource: &str,
    path: &[&str],
) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let entries = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for entry in entries {
        let sub = entry["subresource"].as_str().unwrap_or_default();
        if entry["manager"] != manager || entry["operation"] != "Apply" || sub != subresource {
            continue;
        }
        let node = path
            .iter()
            .try_fold(&entry["fieldsV1"], |node, key| node.get(format!("f:{key}")));
        let Some(Value::Object(children)) = node else {
            continue;
        };
        for key in children.keys() {
            if let Some(field) = key.strip_prefix("f:") {
                keys.insert(field.to_string());
            } else if let Some(value) = key.strip_prefix("v:") {
                // A set item: its value as JSON (`v:"inrun.dev/cleanup"`).
                match serde_json::from_str::<Value>(value) {
                    Ok(Value::String(s)) => keys.insert(s),
                    _ => keys.insert(value.to_string()),
                };
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object() -> Value {
        json!({"metadata": {"managedFields": [
            {"manager": "inrun-finalizer", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, "v:\"inrun.dev/cleanup\"": {}},
                                         "f:labels": {"f:app.kubernetes.io/managed-by": {}}}}},
            {"manager": "inrun-status", "operation": "Apply", "subresource": "status",
             "fieldsV1": {"f:status": {".": {}, "f:phase": {}, "f:conditions": {}}}},
            {"manager": "kubectl", "operation": "Update",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}
        ]}})
    }

    #[test]
    fn owned_keys_reads_maps_and_set_items_of_one_manager_and_subresource() {
        let o = object();
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            owned_keys(&o, "inrun-finalizer", "", &["metadata", "finalizers"]),
            set(&["inrun.dev/cleanup"])
        );
        assert_eq!(
            owned_keys(&o, "inrun-finalizer", "", &["metadata", "labels"]),
            set(&["app.kubernetes.io/managed-by"])
        );
        assert_eq!(
            owned_keys(&o, "inrun-status", "status", &["status"]),
            set(&["conditions", "phase"])
        );
        // Another manager's fields, an Update, or the wrong subresource are not ours.
        assert!(owned_keys(&o, "inrun-status", "", &["status"]).is_empty());
        assert!(owned_keys(&o, "kubectl", "", &["metadata", "labels"]).is_empty());
        assert!(owned_keys(&json!({}), "inrun-finalizer", "", &["metadata"]).is_empty());
    }
}
