//! Host-side bindings generated from `wit/reconciler.wit` (0.1.0) and `wit/0.2.0`, one
//! module per world. The
//! `hooks` world reuses the `reconciler` world's interfaces so one host implementation of
//! `host`, `cluster` and `http` serves both. The `cluster` and `http` imports are async:
//! they wait on the network while the guest is suspended.

/// The `reconciler` world (Inrun's constructor kind).
pub mod reconciler {
    wasmtime::component::bindgen!({
        path: "../../../wit",
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
        path: "../../../wit",
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
/// `host` and `http` imports are the 0.1.0 interfaces, served by the same implementation;
/// `credentials` is its own, async (it waits on the API server).
pub mod package {
    wasmtime::component::bindgen!({
        path: "../../../wit/0.2.0",
        world: "%package",
        imports: { "inrun:reconciler/credentials": async },
        exports: { default: async },
        with: {
            "inrun:reconciler/host@0.1.0": super::reconciler::inrun::reconciler::host,
            "inrun:reconciler/http@0.1.0": super::reconciler::inrun::reconciler::http,
        },
    });
}

/// The `reconciler` world of `inrun:reconciler@0.2.0`: the 0.1.0 request, an outcome
/// that carries conditions and events. Its imports are the 0.1.0 interfaces.
pub mod reconciler2 {
    wasmtime::component::bindgen!({
        path: "../../../wit/0.2.0",
        world: "reconciler",
        exports: { default: async },
        with: {
            "inrun:reconciler/types@0.1.0": super::reconciler::inrun::reconciler::types,
            "inrun:reconciler/host@0.1.0": super::reconciler::inrun::reconciler::host,
            "inrun:reconciler/cluster@0.1.0": super::reconciler::inrun::reconciler::cluster,
            "inrun:reconciler/http@0.1.0": super::reconciler::inrun::reconciler::http,
        },
    });
}

/// The `hooks` world of `inrun:reconciler@0.2.0`, sharing the 0.2.0 outcome with
/// [`reconciler2`].
pub mod hooks2 {
    wasmtime::component::bindgen!({
        path: "../../../wit/0.2.0",
        world: "hooks",
        exports: { default: async },
        with: {
            "inrun:reconciler/types@0.1.0": super::reconciler::inrun::reconciler::types,
            "inrun:reconciler/host@0.1.0": super::reconciler::inrun::reconciler::host,
            "inrun:reconciler/cluster@0.1.0": super::reconciler::inrun::reconciler::cluster,
            "inrun:reconciler/http@0.1.0": super::reconciler::inrun::reconciler::http,
            "inrun:reconciler/types@0.2.0": super::reconciler2::inrun::reconciler0_2_0::types,
        },
    });
}

pub use reconciler::inrun::reconciler::types::{Cleanup, Level, Outcome, Request};
/// The 0.2.0 outcome and what it adds.
pub use reconciler2::inrun::reconciler0_2_0::types::{
    Condition as Condition2, Event as Event2, EventType, Outcome as Outcome2,
};
