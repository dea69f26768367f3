//! Test guest: a reconciler that sleeps for an hour. The sleep is a wait in the host's
//! WASI clock, where no Wasm code runs, so only the host's outer deadline on the whole call
//! can stop it.

use inrun_sdk::{Outcome, Reconciler, Request};

/// Sleeps, then answers (it never should get there).
pub struct Sleepy;

impl Reconciler for Sleepy {
    fn reconcile(_req: Request) -> Result<Outcome, String> {
        std::thread::sleep(std::time::Duration::from_secs(3600));
        Ok(Outcome::new())
    }
}

inrun_sdk::export_reconciler!(Sleepy);
