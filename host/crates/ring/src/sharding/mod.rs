//! Sharding CRs across replicas (active-active): the pieces every replica computes alike
//! from what the API server shows it, with no coordination of their own.
//!
//! - [`buckets`]: a CR's bucket, a fixed function of its uid that matches the API server's
//!   own sharded list and watch (`shardSelector`, KEP-5866), so a replica watching by
//!   server-side selector and one filtering client-side agree on every CR.
//! - [`assign`]: which live member holds which bucket (rendezvous hashing with a cap), a
//!   function of the membership alone, so every replica computes the same table and a
//!   membership change moves only the buckets it must.
//! - [`members`]: who is in the ring — a member Lease per replica, renewed, released on
//!   stop, judged live on each replica's own clock.
//! - [`ownership`]: who holds each bucket, one Lease per bucket changed only by
//!   compare-and-swap, its transitions the bucket's epoch.
//! - [`moves`]: what one member gives up and takes next, so that a bucket moves in two
//!   steps (released, then taken) and never has two writers.
//! - [`shard`]: what this replica holds, and the per-bucket fence every write made while
//!   reconciling a CR passes.
//!
//! Each controller's watch of the CRs of the buckets held only is the controllers' own
//! (`inrun_runtime`'s `sharded_watch.rs`).
//! - [`keeper`]: the loop that keeps it all: renews the member Lease, follows the ring,
//!   gives up and takes buckets.

pub mod assign;
pub mod buckets;
pub mod keeper;
pub mod members;
pub mod moves;
pub mod ownership;
pub mod shard;
