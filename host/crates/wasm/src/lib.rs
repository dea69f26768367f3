//! The Wasm plugin host: one engine, components compiled once and cached by digest, a
//! fresh sandboxed store per call with a deadline and a memory cap, and the capabilities a
//! Blueprint grants (cluster reads through a [`ClusterReader`], outbound HTTP). Nothing here
//! knows about Kubernetes types; plugins see only the WIT contract.
//!
//! Start reading at [`Engine`] (`engine.rs`, its wasmtime settings in `config.rs`) and
//! [`Plugin`] (`plugin.rs`: a loaded component; `load.rs` loads one). `call.rs` is one call
//! in its fresh store (the deadline and memory cap), with the instances kept for reuse
//! (`reuse.rs`) and made ahead (`ahead.rs`); [`Limits`] is what one call may use, and
//! `budget/` what tenants share over time; `imports.rs` and `grants.rs` are what a plugin
//! may reach.

mod ahead;
mod bindings;
mod budget;
mod cache;
mod call;
pub mod compiler;
mod config;
mod convert;
mod engine;
mod error;
mod grants;
mod guest;
mod id;
mod imports;
mod limits;
mod load;
mod observer;
mod package;
mod plugin;
mod reuse;
mod shelf;
mod state;
mod ticker;

pub use budget::{
    Budgets, COMPILE_PAUSE, Held, HeldHit, HostMemory, Millicores, PARSED_PER_TOKEN, TenantBudget,
    TenantUsage, TokenRate, container_memory_limit, default_cpu_cap, held_by_pass, hold,
    parsed_bound, value_bound,
};
pub use cache::CompileCache;
pub use compiler::{CompileFailure, Compiler};
pub use config::{CompileConfig, PoolTuning};
pub use engine::{Engine, EngineSettings, MAKE_AHEAD_OVER};
pub use error::{CallError, CallFailure, LoadError};
pub use grants::{
    CannedHttp, CannedReply, ClusterGrant, ClusterReader, CredentialGrant, Grants, HttpGrant,
    Namespaces, NoCluster, ReadGrant, Scope, SecretReader, http_client, parse_label_selector,
};
pub use id::PluginId;
pub use limits::{Limits, MAX_REUSE_CALLS};
pub use load::Module;
pub use observer::{Observer, Unobserved};
pub use plugin::{Plugin, PluginInfo, World};
