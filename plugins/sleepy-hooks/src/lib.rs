//! Test guest: hooks that, asked at load time which functions they serve, sleep for an
//! hour in a WASI clock wait. Only the host's outer deadline on the call stops it, and the
//! load fails instead of hanging.

use inrun_sdk::{Hooks, Outcome, Request};

/// Never finishes saying what it serves.
pub struct SleepyHooks;

impl Hooks for SleepyHooks {
    fn functions() -> Vec<String> {
        std::thread::sleep(std::time::Duration::from_secs(3600));
        Vec::new()
    }

    fn call(_function: &str, _req: Request, current: Outcome) -> Result<Outcome, String> {
        Ok(current)
    }
}

inrun_sdk::export_hooks!(SleepyHooks);
