//! Test guest: a reconciler that reads through the `cluster` capability, so end-to-end
//! tests can check what a grant allows and what it refuses.
//!
//! - `spec.configMap` (with `spec.namespace`, default the CR's own): a ConfigMap to read;
//!   its `data[spec.key]` becomes `status.value` and the child ConfigMap `<cr>-copy`.
//! - `spec.selector`: ConfigMaps in that namespace matching this label selector are listed;
//!   their count becomes `status.matched`.
//! - `spec.read: {apiVersion, kind, name, namespace}`: another object to get; its presence
//!   becomes `status.readFound`. A refusal fails the reconcile with the host's message.
//!
//! A finalizing CR gets an empty outcome.

use inrun_sdk::{Outcome, Reconciler, Request, Value, cluster, json};

/// Reads what the spec names and reports it.
pub struct Reader;

impl Reconciler for Reader {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        let mut outcome = Outcome::new();
        if req.finalizing {
            return Ok(outcome);
        }
        let spec = req.spec();
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let namespace = text(&spec["namespace"]);
        if let Some(name) = text(&spec["configMap"]) {
            let key = text(&spec["key"]).unwrap_or_else(|| "value".to_owned());
            let found = cluster::get("v1", "ConfigMap", namespace.as_deref(), &name)?;
            let value = found
                .as_ref()
                .and_then(|cm| cm["data"][key.as_str()].as_str())
                .unwrap_or_default()
                .to_owned();
            outcome = outcome
                .resource(json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": format!("{}-copy", req.name())},
                    "data": {"value": value},
                }))
                .status("value", value)
                .status("found", found.is_some());
        }
        if let Some(selector) = text(&spec["selector"]) {
            let items = cluster::list("v1", "ConfigMap", namespace.as_deref(), Some(&selector))?;
            outcome = outcome.status("matched", items.len());
        }
        if spec["read"].is_object() {
            let read = &spec["read"];
            let found = cluster::get(
                read["apiVersion"].as_str().unwrap_or("v1"),
                read["kind"].as_str().unwrap_or_default(),
                read["namespace"].as_str(),
                read["name"].as_str().unwrap_or_default(),
            )?;
            outcome = outcome.status("readFound", found.is_some());
        }
        Ok(outcome)
    }
}

inrun_sdk::export_reconciler!(Reader);
