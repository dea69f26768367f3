//! Test guest: a reconciler whose outcome breaks the contract, a resource that is not
//! JSON. It speaks the raw WIT types, since the SDK's typed outcome cannot express that.

use inrun_sdk::bindings::reconciler::Guest;
use inrun_sdk::bindings::types::{Outcome, Request};

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
        })
    }
}

inrun_sdk::export_raw_reconciler!(Garbage);
