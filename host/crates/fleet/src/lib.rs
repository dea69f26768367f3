//! Several Blueprints (tenants) in one host, each reloaded without a restart.
//!
//! A tenant is one Blueprint: the `--blueprint` file or directory, one file of a
//! `--tenants` directory, or one cluster-scoped `Blueprint` custom resource. Each tenant has
//! its own plugin slots, limits policy, CRDs and controllers (one worker pool per CRD).
//! One supervisor task owns every change: it reloads a tenant whose source changed (the
//! new Blueprint is assembled and checked before anything stops, so a broken edit leaves
//! the old one serving), starts and stops the controllers of CRDs added, changed or
//! removed, checks plugin sources and re-queues the CRDs whose plugin was swapped, and
//! refuses a Blueprint that claims a CRD another tenant already serves.
//!
//! # Where to start reading
//!
//! - [`Fleet::run`] (here): the supervisor loop; [`Fleet::new`] what it is made of.
//! - `load.rs`: one tenant's Blueprint loaded in named steps (build → prepare outside the
//!   lock → install → record).
//! - `lanes.rs`: one lane of jobs per tenant, so one tenant's slow source holds up no other.
//! - `files.rs`, `resource_tenants.rs` and `resources.rs`: where tenants come from;
//!   `consent.rs`: whom each acts as; `shares.rs`: its shares of the host's budgets;
//!   `claims.rs`: one tenant per CRD; `serving.rs`: its controllers started and stopped;
//!   [`release`]: a removed CRD's CRs let go.

mod claims;
mod consent;
mod files;
mod lanes;
mod load;
pub mod release;
mod resource_tenants;
mod resources;
mod serving;
mod shares;
mod state;
mod supervisor;
#[cfg(test)]
mod testing;

pub use inrun_runtime::kinds::blueprint_resource;
pub use resources::{BLUEPRINT_CRD, blueprint_crd};
pub use state::{Fleet, FleetError, FleetOptions, TenantSource, TenantView};
