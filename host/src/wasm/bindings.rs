//! Host-side bindings generated from `wit/reconciler.wit`, one module per world. The
//! `hooks` world reuses the `reconciler` world's interface types so one host
//! implementation of `host.log` serves both.

/// The `reconciler` world (Inrun's constructor kind).
pub mod reconciler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "reconciler",
    });
}

/// The `hooks` world.
pub mod hooks {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "hooks",
        with: {
            "inrun:reconciler/types": super::reconciler::inrun::reconciler::types,
            "inrun:reconciler/host": super::reconciler::inrun::reconciler::host,
        },
    });
}

pub use reconciler::inrun::reconciler::types::{Cleanup, Level, Outcome, Request};
