//! Test guest: a reconciler whose outcome breaks the contract, a resource that is not
//! JSON. It speaks the raw WIT types, since the SDK's typed outcome cannot express that.

use inrun_sdk::bindings::reconciler2::Guest;
use inrun_sdk::bindings::types::Request;
use inrun_sdk::bindings::types2::Outcome;

/// Returns one valid resource and one that is not JSON.
pub struct Garbage;

impl Guest for Garbage {
    fn reconcile(_req: Request) -> Result<Outcome, String> {
        Ok(Outcome {
            status: None,
            resources: vec![
                r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fine"}}"#.into(),
                "this is not JSON {".into(),
            ],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
            conditions: vec![],
            events: vec![],
        })
    }
}

inrun_sdk::export_raw_reconciler!(Garbage);
