//! What people see of an Inrun host: the Prometheus registry the controllers, the fleet,
//! the ring and the Wasm engine record into ([`metrics`]), the console's state
//! ([`console`]: recent reconciles with their timelines, events, plugin calls, each CR as
//! the console shows it), and the health probes ([`health`]). It writes nothing to
//! Kubernetes and starts no task: the host's HTTP server (`host/src/server/`) serves what
//! it holds.
//!
//! # Where to start reading
//!
//! - [`metrics::Metrics`]: one per process, handed to everything that records; its
//!   families are controller-runtime's names and buckets, plus Inrun's own for plugins.
//! - [`console`]: what the console's page reads ([`metrics::Metrics::snapshot`]).
//! - [`health::Health`]: what `/healthz` and `/readyz` answer.

pub mod console;
pub mod health;
pub mod metrics;
