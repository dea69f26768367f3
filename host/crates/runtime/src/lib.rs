//! Inrun's controllers and their writes — the only crate that changes CRs and their
//! children: each CRD's controller watches its CRs and the children they own, queues
//! changes with a bounded worker pool, and runs [`inrun_pass`] with effects against the API
//! server (apply, prune, status, events); it also owns whom the controllers act as
//! (impersonation, access reviews, the write rate) and packages' identity locks. The
//! tenants that start controller sets are `inrun_fleet`'s; the ring and the write fence
//! `inrun_ring`'s; metrics and the console `inrun_observe`'s.
//!
//! # Where to start reading
//!
//! - [`controller()`] (`controller.rs`): one CRD's controller, wired step by step; its
//!   reconcile fn is in `reconcile.rs`, which runs the pass with the effects of `effects.rs`
//!   against the API server.
//! - `startup.rs`: what is checked before a controller starts ([`prepare`]).
//! - `apply.rs` and `teardown.rs`: how children are written, and pruned or released;
//!   `children.rs` holds what both share, [`safeguard`] what holds a deletion.
//! - [`Shared`] (`shared.rs`): what every controller of a host shares.
//! - [`rollout`]: a new version of what reconciles a CRD reaching its CRs step by step;
//!   the reconcile fn asks it which version serves each CR.
//!
//! One CR's way through: a watch event (`controller.rs`, `child_watches.rs`,
//! [`sharded_watch`]) wakes it unless the host wrote the change itself (`triggers.rs`); the
//! reconcile fn (`reconcile.rs`) runs [`inrun_pass`], whose reads and writes are
//! `effects.rs`, which applies children (`apply.rs`), prunes or releases them
//! (`teardown.rs`, guarded by `safeguard.rs`) and records events (`events.rs`).

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
pub mod events;
mod reconcile;
pub mod safeguard;
mod stores;
mod teardown;
mod triggers;

// Whom the controllers act as, what they may write, and the cluster-wide pieces.
pub mod access;
mod cache;
pub mod crds;
pub mod impersonation;
pub mod kinds;
pub mod kubeconfig;
pub mod locks;
pub mod rollout;
pub mod sharded_watch;
pub mod write_limit;

pub use apply::{Owner, shaped_object};
pub use cache::WatchCache;
pub use cached::{
    DEFAULT_MAX_BODY as DEFAULT_MAX_CR_BYTES, set_max_body_bytes as set_max_cr_bytes,
};
pub use controller::{controller, run};
pub use events::Reason;
pub use inrun_pass::meta::{APPLIED_HASH, CLEANUP_AT, FINALIZER, OWNER_UID, RECONCILER_MANAGER};
pub use kinds::{Kind, Kinds};
pub use shared::{RunOptions, Shared, TraceIds};
pub use startup::{ChildKinds, CrdKinds, RunError, prepare};
