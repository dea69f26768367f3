//! Test guest: a reconciler that never returns, so the host's CPU deadline must stop it.

use inrun_sdk::{Outcome, Reconciler, Request};

/// Spins forever.
pub struct Spin;

impl Reconciler for Spin {
    fn reconcile(_req: Request) -> Result<Outcome, String> {
        let mut turns: u64 = 0;
        loop {
            // `black_box` keeps the optimiser from proving the loop pointless.
            turns = core::hint::black_box(turns.wrapping_add(1));
        }
    }
}

inrun_sdk::export_reconciler!(Spin);
