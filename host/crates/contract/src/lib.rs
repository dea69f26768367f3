//! The contract between the host and every reconciler: the Request, the Result (outcome)
//! and the intent form of resources, with the duration format they share. No I/O, no
//! engine, no client: the lowest layer, which everything else builds on.
//!
//! Start reading at [`Request`] (`request.rs`: what a reconciler receives) and [`Outcome`]
//! (`outcome.rs`: what it answers, with `report.rs` for its conditions and events); the
//! resources it returns are in the intent form of [`intent`].

pub mod api_version;
pub mod cpu;
pub mod duration;
pub mod errors;
pub mod intent;
mod outcome;
pub mod package;
mod report;
mod request;

pub use outcome::*;
pub use report::*;
pub use request::*;
