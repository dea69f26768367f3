//! Test guest: a reconciler that only asks the host what to do next, so end-to-end tests
//! can drive the Result's `cleanup` and `requeue_after` from the CR's spec.
//!
//! - `spec.cleanup: true` asks for the CR to be deleted after `spec.graceSeconds` (2 by
//!   default); any other value withdraws a pending cleanup.
//! - `spec.requeueAfterMs: n` asks to be reconciled again after `n` milliseconds.
//!
//! A finalizing CR gets an empty outcome, so neither ever holds a deletion.

use std::time::Duration;

use inrun_sdk::{Outcome, Reconciler, Request};

/// Grace period when the spec does not name one.
const DEFAULT_GRACE_SECONDS: u64 = 2;

/// Turns `spec.cleanup` and `spec.requeueAfterMs` into the outcome's cleanup and requeue.
pub struct Cleanup;

impl Reconciler for Cleanup {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        let mut outcome = Outcome::new();
        if req.finalizing {
            return Ok(outcome);
        }
        let spec = req.spec();
        if spec["cleanup"].as_bool() == Some(true) {
            let grace = spec["graceSeconds"]
                .as_u64()
                .unwrap_or(DEFAULT_GRACE_SECONDS);
            outcome = outcome.cleanup_after(Duration::from_secs(grace));
        }
        if let Some(ms) = spec["requeueAfterMs"].as_u64() {
            outcome = outcome.requeue_after(Duration::from_millis(ms));
        }
        Ok(outcome)
    }
}

inrun_sdk::export_reconciler!(Cleanup);
