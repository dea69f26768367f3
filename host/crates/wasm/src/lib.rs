//! The Wasm plugin host: one engine, components compiled once and cached by digest, a
//! fresh sandboxed store per call with a deadline and a memory cap, and the capabilities a
//! Blueprint grants (cluster reads through a [`ClusterReader`], outbound HTTP). Nothing here
//! knows about Kubernetes types; plugins see only the WIT contract.
//!
//! Start reading at [`Engine`] (`engine.rs`) and [`Plugin`] (`plugin.rs`: a compiled
//! component and its calls); `call.rs` is one call in its fresh store (the deadline and
//! memory cap), `imports.rs` and `grants.rs` what a plugin may reach.

mod ahead;
mod bindings;
mod budget;
mod cache;
mod call;
pub mod compiler;
mod convert;
mod engine;
mod error;
mod grants;
mod imports;
mod package;
mod plugin;
mod reuse;
mod state;
mod ticker;

pub use budget::{
    Budgets, COMPILE_PAUSE, Held, HeldHit, HostMemory, Millicores, PARSED_PER_TOKEN, TenantBudget,
    TenantUsage, TokenBucket, container_memory_limit, default_cpu_cap, held_by_pass, hold,
    parsed_bound, value_bound,
};
pub use cache::CompileCache;
pub use compiler::{CompileConfig, CompileFailure, Compiler};
pub use engine::{Engine, EngineSettings, MAKE_AHEAD_OVER, PoolTuning};
pub use error::{CallError, CallFailure, LoadError};
pub use grants::{
    CannedHttp, CannedReply, ClusterGrant, ClusterReader, CredentialGrant, Grants, HttpGrant,
    Namespaces, NoCluster, ReadGrant, Scope, SecretReader, http_client, parse_label_selector,
};
pub use plugin::{Module, Plugin, PluginInfo, World};

/// What the engine reports as it loads plugins and serves their host calls. The host's
/// metrics implement it; it is handed to [`Engine::new`] in [`EngineSettings`], so nothing
/// here records into a global.
pub trait Observer: Send + Sync + fmt::Debug {
    /// A plugin was loaded: from `memory` (already compiled), the on-disk `cache`, or
    /// `compiled` anew.
    fn plugin_loaded(&self, source: &'static str);
    /// A host import answered: `capability` is `cluster` or `http`; `outcome` is `ok`,
    /// `refused` (not granted) or `error`.
    fn host_call(&self, capability: &'static str, outcome: &'static str);
    /// A changed plugin source was checked: `ok` when the new version swapped in, false when
    /// the previous version keeps serving.
    fn plugin_reloaded(&self, ok: bool);
    /// A call into `plugin` ended after `elapsed` (a fresh instance, the call, the check of
    /// its output): `outcome` is `ok` or [`CallFailure::outcome`]. Records nothing unless
    /// implemented.
    fn plugin_called(&self, plugin: &str, outcome: &'static str, elapsed: Duration) {
        let _ = (plugin, outcome, elapsed);
    }
    /// `plugin` started (`true`) or finished (`false`) loading: compiling, or reading the
    /// compile cache. What is loading is what readiness waits for. Records nothing unless
    /// implemented.
    fn plugin_loading(&self, plugin: &str, loading: bool) {
        let _ = (plugin, loading);
    }
    /// `lines` log lines of one call of `plugin` were dropped: its tenant was over its
    /// log budget. Records nothing unless implemented.
    fn plugin_logs_dropped(&self, plugin: &str, lines: u64) {
        let _ = (plugin, lines);
    }
}

/// An [`Observer`] that records nothing.
#[derive(Debug, Default)]
pub struct Unobserved;

impl Observer for Unobserved {
    fn plugin_loaded(&self, _source: &'static str) {}
    fn host_call(&self, _capability: &'static str, _outcome: &'static str) {}
    fn plugin_reloaded(&self, _ok: bool) {}
}

use std::fmt;
use std::time::Duration;

/// What one call of a plugin may use. Every field is overridable per plugin in a Blueprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for one call, instantiation included.
    pub deadline: Duration,
    /// Linear memory the plugin may grow to, in bytes, summed over its memories.
    pub memory_bytes: usize,
    /// Total size of the JSON the plugin returns, in bytes.
    pub output_bytes: usize,
    /// How many resources one outcome may hold.
    pub max_resources: usize,
    /// Calls one instance of the plugin may serve before it is discarded: 1 (the
    /// default) is a fresh instance for every call. More keeps an instance between the
    /// calls of one tenant (and one namespace where the grants are scoped to it): faster,
    /// at the price of state the guest keeps between CRs (`reuse.rs` says what is
    /// kept, what is fresh in every call, and when an instance is discarded).
    pub reuse_calls: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(2),
            memory_bytes: 64 << 20,
            output_bytes: 1 << 20,
            max_resources: 100,
            reuse_calls: 1,
        }
    }
}

impl Limits {
    /// The most a Blueprint may ask for when the operator sets no ceiling: the ranges the
    /// Blueprint schema accepts.
    pub fn ceilings() -> Self {
        Limits {
            deadline: Duration::from_secs(300),
            memory_bytes: 4 << 30,
            output_bytes: 64 << 20,
            max_resources: 10_000,
            reuse_calls: MAX_REUSE_CALLS,
        }
    }
}

impl Limits {
    /// The most a Blueprint resource (a tenant) may ask for when the operator sets no
    /// ceiling: enough for any reconciler, small enough that one call cannot take a
    /// small pod's memory or hold a call for minutes.
    pub fn tenant_ceilings() -> Self {
        Limits {
            deadline: Duration::from_secs(30),
            memory_bytes: 256 << 20,
            output_bytes: 16 << 20,
            max_resources: 1_000,
            reuse_calls: MAX_REUSE_CALLS,
        }
    }
}

/// The most calls one instance may serve ([`Limits::reuse_calls`]).
pub const MAX_REUSE_CALLS: u32 = 10_000;

/// A plugin's name and the sha256 of its bytes, as it appears in logs and errors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PluginId {
    /// A short name, usually the file stem (`webapp`).
    pub name: String,
    /// Lowercase hex sha256 of the component's bytes.
    pub digest: String,
}

impl PluginId {
    /// `sha256:<hex>`.
    pub fn digest_ref(&self) -> String {
        format!("sha256:{}", self.digest)
    }
}

impl fmt::Display for PluginId {
    /// `webapp@sha256:ab12cd34ef56…`: enough of the digest to tell versions apart.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.digest.get(..12).unwrap_or(&self.digest);
        write!(f, "{}@sha256:{short}…", self.name)
    }
}
