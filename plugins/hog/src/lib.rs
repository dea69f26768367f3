//! Test guest: a reconciler that allocates without bound, so the host's memory cap must
//! stop it.

use inrun_sdk::{Outcome, Reconciler, Request};

/// Allocates 1 MiB blocks until the host refuses to grow memory.
pub struct Hog;

/// The size of each block.
const BLOCK: usize = 1 << 20;

impl Reconciler for Hog {
    fn reconcile(_req: Request) -> Result<Outcome, String> {
        let mut kept: Vec<Vec<u8>> = Vec::new();
        loop {
            // Filling with a non-zero byte writes every page, so the memory is really
            // committed rather than reserved; `black_box` keeps the writes and blocks alive.
            let mut block = Vec::with_capacity(BLOCK);
            block.resize(BLOCK, 0xA5);
            kept.push(core::hint::black_box(block));
        }
    }
}

inrun_sdk::export_reconciler!(Hog);
