// Shared body of the `stamp-v1` and `stamp-v2` test guests; each defines `VERSION` first.

use inrun_sdk::{Outcome, Reconciler, Request, json};

/// Declares one ConfigMap, `<cr name>-stamp`, whose `data.version` says which build of
/// the plugin reconciled the CR, and the same in the CR's status.
pub struct Stamp;

impl Reconciler for Stamp {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        if req.finalizing {
            return Ok(Outcome::new());
        }
        let name = format!("{}-stamp", req.name());
        Ok(Outcome::new()
            .resource(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"version": VERSION},
            }))
            .status("version", VERSION))
    }
}

inrun_sdk::export_reconciler!(Stamp);
