//! Test guest: a reconciler that panics, which aborts (traps) in the component.

use inrun_sdk::{Outcome, Reconciler, Request};

/// Panics on every call.
pub struct Panic;

impl Reconciler for Panic {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        panic!(
            "test guest panicked on purpose while reconciling {}",
            req.key
        );
    }
}

inrun_sdk::export_reconciler!(Panic);
