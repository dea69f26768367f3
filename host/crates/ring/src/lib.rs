//! Inrun's replicas: which of several hosts may write, and which CRs each serves.
//!
//! - [`leader`]: leader election on a Lease (active-passive), and the lease arithmetic the
//!   ring and the identity locks share ([`leader::lease_seconds`]).
//! - [`sharding`]: the ring (active-active) — members, buckets, who holds which, and the
//!   keeper loop that moves buckets in two steps so no bucket ever has two writers.
//! - [`fence`]: the layer every writing client is built through: a replica that does not
//!   (or no longer) leads, or does not hold a CR's bucket, cannot write.
//! - [`settings`]: the host-wide settings of `inrun run` these depend on, resolved from the
//!   command line, the host's own Blueprint and the environment.
//!
//! Where to start: [`leader::run`] for election, [`sharding::keeper`] for the ring's loop,
//! [`fence::client`] for how a write is held back. The controllers (`inrun_runtime`) read
//! the ring through [`sharding::shard::Shard`] and never change it.

pub mod fence;
pub mod leader;
pub mod settings;
pub mod sharding;
