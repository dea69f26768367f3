//! The Blueprint: a typed model of the document, loading from files, and its validation.
//!
//! This crate is a pure model: it reads YAML and checks it, and knows nothing of the
//! runtime, the reconcilers or Wasm. Everything a Blueprint gets wrong is reported at load
//! time, every problem at once, each naming its file, its CRD and its field:
//!
//! ```text
//! blueprints/web.yaml: crd WebApp: spec.crds[0].reconcile.prune.kep: unknown field `kep`, expected one of `enabled`, `keep`, `allowEmpty` at line 12 column 9
//! ```
//!
//! Start reading at [`load`] (`load.rs`: files to a checked [`Blueprint`]); the model is in
//! `model.rs`, `crd.rs` and `reconcile.rs`, and each family of checks in a file of
//! `validate/`.

mod capabilities;
pub mod compat;
mod crd;
mod error;
mod external;
pub mod fieldpath;
mod load;
pub mod location;
mod manifest;
mod model;
mod parse;
mod plugins;
mod quantity;
mod reconcile;
mod refs;
mod rollout;
mod runtime;
mod schema;
mod validate;

#[cfg(test)]
mod testing;

/// The name of the CRD of `Blueprint` resources (tenants that arrive as custom resources).
pub const BLUEPRINT_CRD: &str = "blueprints.inrun.dev";

pub use capabilities::{Capabilities, ClusterCapability, HttpCapability, ReadKind};
pub use crd::{
    CATEGORY, CrdSource, CrdSpec, DEFAULT_TARGET_ANNOTATION, EmitSpec, GateCondition,
    NamespaceFilter, PrinterColumn, Scope, ServeSpec, ServeTarget, TargetSelector, ValidationRule,
};
pub use error::{BlueprintError, Problem};
pub use external::{
    ExternalCall, ExternalKind, HttpCall, HttpMethod, OnError, PostgresCall, PrometheusCall,
    RedisCall,
};
pub use fieldpath::{FieldPath, FieldPathError};
pub use load::{from_str, load, load_all};
pub use model::{
    API_VERSION, AccountError, AccountPattern, Blueprint, BlueprintSpec, KIND, Metadata,
    ServiceAccountRef,
};
pub use plugins::{PluginRef, PluginRole};
pub use quantity::{Quantity, QuantityError};
pub use reconcile::{
    HookSpec, ManagedResource, ManagedType, ObjectFilter, PluginLimits, PluginSpec, PruneSpec,
    ReconcileSpec, ReconcilerKind, RemoteAuth, RemoteSpec, RequestSpec, RequeueSpec, Reuse,
    TYPE_DEFINING, default_plural,
};
pub use refs::{PullSecretRef, SecretRef};
pub use rollout::{OnFailure, RolloutAnalysis, RolloutSelect, RolloutSpec, RolloutStep};
pub use runtime::{
    BackoffSpec, BudgetSpec, FinalizersSpec, LeaderElectionSpec, RuntimeSpec, ShardWatch,
    ShardingSpec,
};
