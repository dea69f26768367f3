//! Host-side bindings generated from `wit/reconciler.wit`, one module per world. The
//! `hooks` world reuses the `reconciler` world's interfaces so one host implementation of
//! `host`, `cluster` and `http` serves both. The `cluster` and `http` imports are async:
//! they wait on the network while the guest is suspended.

/// The `reconciler` world (Inrun's constructor kind).
pub mod reconciler {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "reconciler",
        imports: {
            "inrun:reconciler/cluster": async,
            "inrun:reconciler/http": async,
        },
        exports: { default: async },
    });
}

/// The `hooks` world.
pub mod hooks {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "hooks",
        exports: { default: async },
        with: {
            "inrun:reconciler/types": super::reconciler::inrun::reconciler::types,
            "inrun:reconciler/host": super::reconciler::inrun::reconciler::host,
            "inrun:reconciler/cluster": super::reconciler::inrun::reconciler::cluster,
            "inrun:reconciler/http": super::reconciler::inrun::reconciler::http,
        },
    });
}

/// The `package` world of `inrun:reconciler@0.2.0` (an infrastructure package). Its
/// `host` and `http` imports are the 0.1.0 interfaces, served by the same implementation.
pub mod package {
    wasmtime::component::bindgen!({
        path: "../../wit/0.2.0",
        world: "%package",
        exports: { default: async },
        with: {
            "inrun:reconciler/host@0.1.0": super::reconciler::inrun::reconciler::host,
            "inrun:reconciler/http@0.1.0": super::reconciler::inrun::reconciler::http,
        },
    });
}

pub use reconciler::inrun::reconciler::types::{Cleanup, Level, Outcome, Request};
