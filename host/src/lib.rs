//! Inrun: a Kubernetes reconciler host.
//!
//! A Blueprint declares custom resource types and how each is reconciled; the host runs
//! the reconcile pass and asks a [`reconcilers::Reconciler`] only what a CR should become.

pub mod golden;
pub mod scaffold;
pub mod server;
pub mod telemetry;

pub use inrun_blueprint as blueprint;
pub use inrun_contract as contract;
pub use inrun_contract::{duration, errors, intent};
pub use inrun_fleet as fleet;
pub use inrun_generate as generate;
pub use inrun_observe::{self as observe, console, health, metrics};
pub use inrun_pass::{self as pass, render};
pub use inrun_reconcilers::{
    self as reconcilers, assemble, egress, external, plugins, secrets, sources,
};
pub use inrun_ring::{self as ring, fence, leader};
pub use inrun_runtime::{self as runtime, kubeconfig};
pub use inrun_template as template;
pub use inrun_wasm as wasm;
