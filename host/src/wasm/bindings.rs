//! Host-side bindings generated from `wit/reconciler.wit`, one module per world. The
//! `hooks` world reuses the `reconciler` world's interface types so one host
//! implementation of `host.log` serves both.

/// The `reconciler` world (Inrun's constructor kind).
pub mod reconciler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "reconciler",
        exports: { default: async },
    });
}

/// The `hooks` world.
pub mod hooks {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "hooks",
        exports: { default: async },
        with: {
            "inrun:reconciler/types": super::reconciler::inrun::reconciler::types,
            "inrun:reconciler/host": super::reconciler::inrun::reconciler::host,
        },
    });
}

pub use reconciler::inrun::reconciler::types::{Cleanup, Level, Outcome, Request};
