//! The contract between the host and every reconciler: the Request, the Result (outcome)
//! and the intent form of resources, with the duration format they share. No I/O, no
//! engine, no client: the lowest layer, which everything else builds on.

pub mod api_version;
mod contract;
pub mod duration;
pub mod errors;
pub mod intent;
pub mod package;

pub use contract::*;
