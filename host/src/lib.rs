//! Inrun: a Kubernetes reconciler host.
//!
//! A Blueprint declares custom resource types and how each is reconciled; the host runs
//! the reconcile pass and asks a [`reconcilers::Reconciler`] only what a CR should become.

pub mod assemble;
pub mod external;
pub mod fleet;
pub mod generate;
pub mod kubeconfig;
pub mod leader;
pub mod metrics;
pub mod pass;
pub mod plugins;
pub mod reconcilers;
pub mod render;
pub mod runtime;
pub mod scaffold;
pub mod secrets;
pub mod server;
pub mod sources;
pub mod telemetry;

pub use inrun_blueprint as blueprint;
pub use inrun_contract as contract;
pub use inrun_contract::{duration, errors, intent};
pub use inrun_template as template;
pub use inrun_wasm as wasm;
