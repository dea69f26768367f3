//! Test guest: a reconciler whose Result labels and annotations are whatever its args say
//! (`args.labels`, `args.annotations`, maps of strings), beside one ConfigMap
//! `<name>-meta`. Tests drive it through `reconcile.args` to make the host drop a key, or
//! to try a key the host reserves (`inrun.dev/...`).

use std::collections::BTreeMap;

use inrun_sdk::{Outcome, Reconciler, Request, json};

/// Echoes its args' labels and annotations onto the CR.
pub struct Metadata;

impl Reconciler for Metadata {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        let labels: BTreeMap<String, String> = req.optional_arg("labels")?.unwrap_or_default();
        let annotations: BTreeMap<String, String> =
            req.optional_arg("annotations")?.unwrap_or_default();
        let mut outcome = Outcome::new().resource(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": format!("{}-meta", req.name())},
            "data": {"labels": labels.len().to_string()},
        }));
        for (key, value) in &labels {
            outcome = outcome.label(key, value);
        }
        for (key, value) in &annotations {
            outcome = outcome.annotation(key, value);
        }
        Ok(outcome)
    }
}

inrun_sdk::export_reconciler!(Metadata);
