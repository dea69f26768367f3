//! Inrun's runtime, the only crate that writes to Kubernetes: the controller (it watches
//! every CRD a Blueprint declares and the children its CRs own, queues changes per CRD with
//! a bounded worker pool, and runs [`inrun_pass`] with effects against the API server), the
//! tenant [`fleet`] that starts and stops one controller set per Blueprint, [`leader`]
//! election, the client's [`kubeconfig`], and the [`metrics`] they all record into.
//!
//! # Where to start reading
//!
//! - [`controller()`] (`controller.rs`): one CRD's controller, wired step by step; its
//!   reconcile fn is in `reconcile.rs`, which runs the pass with the effects of `effects.rs`
//!   against the API server.
//! - `startup.rs`: what is checked before a controller starts ([`prepare`]).
//! - `apply.rs` and `teardown.rs`: how children are written, and pruned or released;
//!   `children.rs` holds what both share.
//! - [`fleet`]: the tenants, one controller set per Blueprint, loaded and reloaded.
//! - [`Shared`] (`shared.rs`): what every controller of a host shares.
//!
//! One CR's way through: a watch event (`controller.rs`, `child_watches.rs`) wakes it
//! unless the host wrote the change itself (`triggers.rs`); the reconcile fn (`reconcile.rs`)
//! runs [`inrun_pass`], whose reads and writes are `effects.rs`, which applies children
//! (`apply.rs`), prunes or releases them (`teardown.rs`, guarded by `safeguard.rs`) and
//! records events (`events.rs`).

// Start-up and wiring.
mod controller;
mod shared;
mod startup;

// One CRD's controller: its watches, queue, and the pass's effects.
mod apply;
mod backoff;
mod cached;
mod child_watches;
mod children;
mod context;
mod effects;
mod events;
mod reconcile;
mod safeguard;
mod stores;
mod teardown;
mod triggers;

// Tenants, identities and the cluster-wide pieces they share.
pub mod access;
mod cache;
pub mod crds;
pub mod crs_view;
pub mod fence;
pub mod fleet;
pub mod impersonation;
pub mod kinds;
pub mod locks;
pub mod release;
pub mod write_limit;

// The host process: client, election, settings, health and metrics.
pub mod health;
pub mod kubeconfig;
pub mod leader;
pub mod metrics;
pub mod settings;
pub mod sharding;
pub mod timeline;

/// The module's former name, kept for callers outside this crate.
/// Reads the trace id of a span when the process exports traces (set once at start-up by
/// whoever installed the exporter): each reconcile's span records it, so its log lines
/// carry the id the collector shows.
pub static TRACE_ID: std::sync::OnceLock<fn(&tracing::Span) -> Option<String>> =
    std::sync::OnceLock::new();

pub use apply::APPLIED_HASH;
pub use cache::WatchCache;
pub use cached::{
    DEFAULT_MAX_BODY as DEFAULT_MAX_CR_BYTES, set_max_body_bytes as set_max_cr_bytes,
};
pub use controller::{controller, run};
pub use events::Reason;
pub use inrun_pass::meta::{CLEANUP_AT, FINALIZER, OWNER_UID, RECONCILER_MANAGER};
pub use kinds::{Kind, Kinds};
pub use shared::{RunOptions, Shared};
pub use startup::{ChildKinds, CrdKinds, RunError, prepare};
