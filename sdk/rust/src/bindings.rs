//! The raw bindings wit-bindgen generates from the crate's own copy of the WIT (`wit/`:
//! `inrun:reconciler@0.2.0` with its 0.1.0 dependency), one module per world.
//!
//! Most plugins never touch these: [`Request`](crate::Request), [`Outcome`](crate::Outcome)
//! and the export macros wrap them. They are public for guests that must speak the raw
//! contract, such as a test guest that returns output the typed layer cannot express.
//!
//! Every world shares the 0.1.0 interfaces (`types`, `host`, `cluster`, `http`) of the
//! `reconciler` module, and the 0.2.0 worlds the 0.2.0 outcome of `reconciler2`, so a value
//! converts the same way whichever world a plugin exports. Each world's export macro
//! carries that world's component-type section, so a plugin embeds the description of the
//! world it actually exports and nothing else.

#![allow(missing_docs, unsafe_code, clippy::all)]

/// Bindings for the 0.1.0 interfaces every world imports (`types`, `host`, `cluster`,
/// `http`), from the 0.2.0 `interfaces` world, which exports nothing: a plugin that links
/// them is asked for no export it does not make.
pub mod reconciler {
    wit_bindgen::generate!({
        path: "wit",
        world: "interfaces",
        generate_all,
    });
}

/// Bindings for the `package` world of `inrun:reconciler@0.2.0` (an infrastructure
/// package). Its `host` and `http` imports are the 0.1.0 interfaces, shared with the
/// other worlds' bindings.
pub mod package {
    wit_bindgen::generate!({
        path: "wit",
        world: "%package",
        pub_export_macro: true,
        export_macro_name: "__export_package_world",
        default_bindings_module: "$crate::bindings::package",
        with: {
            "inrun:reconciler/types@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::types,
            "inrun:reconciler/host@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::host,
            "inrun:reconciler/http@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::http,
        },
    });
}

/// Bindings for the `reconciler` world of `inrun:reconciler@0.2.0`: the 0.1.0 request, an
/// outcome that carries conditions and events. What [`export_reconciler!`](crate::export_reconciler)
/// exports.
pub mod reconciler2 {
    wit_bindgen::generate!({
        path: "wit",
        world: "reconciler",
        pub_export_macro: true,
        export_macro_name: "__export_reconciler2_world",
        default_bindings_module: "$crate::bindings::reconciler2",
        with: {
            "inrun:reconciler/types@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::types,
            "inrun:reconciler/host@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::host,
            "inrun:reconciler/cluster@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::cluster,
            "inrun:reconciler/http@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::http,
        },
    });
}

/// Bindings for the `hooks` world of `inrun:reconciler@0.2.0`, sharing the 0.2.0 outcome
/// with [`reconciler2`]. What [`export_hooks!`](crate::export_hooks) exports.
pub mod hooks2 {
    wit_bindgen::generate!({
        path: "wit",
        world: "hooks",
        pub_export_macro: true,
        export_macro_name: "__export_hooks2_world",
        default_bindings_module: "$crate::bindings::hooks2",
        with: {
            "inrun:reconciler/types@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::types,
            "inrun:reconciler/host@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::host,
            "inrun:reconciler/cluster@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::cluster,
            "inrun:reconciler/http@0.1.0": crate::bindings::reconciler::inrun::reconciler0_1_0::http,
            "inrun:reconciler/types@0.2.0": crate::bindings::reconciler2::inrun::reconciler0_2_0::types,
        },
    });
}

/// The WIT types shared by the 0.1.0 worlds (the request is the same in 0.2.0).
pub use reconciler::inrun::reconciler0_1_0::types;
/// The 0.2.0 outcome, with conditions and events.
pub use reconciler2::inrun::reconciler0_2_0::types as types2;
