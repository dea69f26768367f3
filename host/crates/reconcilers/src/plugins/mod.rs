//! The plugins a tenant's Blueprint names, each in a hot-swappable slot.
//!
//! A [`PluginSlot`] holds the version of a component that calls use now. Reconcilers keep
//! the slot, not the component, and take [`PluginSlot::current`] at the start of each call,
//! so a call in flight finishes on the version it started with while the next one runs the
//! new version. [`PluginSet::poll`] checks every slot's source (a file's content, an OCI
//! tag's manifest digest), compiles a changed module off the async workers, checks it
//! still serves what the Blueprint asks of it, and swaps it in; a version that fails to
//! load leaves the old one serving and is recorded in the slot's [`SlotStatus`].

mod slot;

pub use slot::{Expect, PluginSlot, SlotStatus};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::egress::Egress;
use crate::sources::{Location, PullSecret, Sources};
use inrun_wasm::{Engine, LoadError, Module, Plugin};

/// A lock's data, even when a thread panicked holding it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a thread panicked mid-update of plain data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What happened to one slot in a [`PluginSet::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new version serves calls now.
    Swapped {
        /// The location.
        location: String,
        /// The new component's digest.
        digest: String,
    },
    /// A new version could not load; the old one keeps serving.
    Failed {
        /// The location.
        location: String,
        /// Why.
        error: String,
    },
}

/// What one tenant may compile: modules of at most `module_bytes`, and at most
/// `bytes_per_hour` of modules and their compiled forms loaded (compiled, or read from
/// the compile cache) an hour, so a tenant re-tagging a large plugin at every check
/// cannot keep the host compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// The largest module.
    pub module_bytes: u64,
    /// Bytes of modules and their compiled forms loaded an hour (a burst of as much at
    /// first).
    pub bytes_per_hour: u64,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            module_bytes: 32 * 1024 * 1024,
            bytes_per_hour: 512 * 1024 * 1024,
        }
    }
}

/// The slots of one tenant, by location, and how to fetch and compile their modules.
pub struct PluginSet {
    engine: Engine,
    sources: Sources,
    slots: Mutex<BTreeMap<String, Arc<PluginSlot>>>,
    /// The tenant's compile limits and what is left of its hour's bytes; `None`: none.
    compiles: Option<(CompileLimits, Mutex<inrun_wasm::TokenRate>)>,
}

impl std::fmt::Debug for PluginSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSet")
            .field("slots", &lock(&self.slots).keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Why a plugin could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// Fetching the module failed.
    #[error(transparent)]
    Source(#[from] crate::sources::SourceError),
    /// Compiling or linking failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The module is past the tenant's compile limits ([`CompileLimits`]).
    #[error("{location}: {message}")]
    Budget {
        /// The location.
        location: String,
        /// Which limit, and by how much.
        message: String,
    },
    /// The compile task died.
    #[error("compiling {location}: the compile task failed: {message}")]
    Task {
        /// The location.
        location: String,
        /// Why.
        message: String,
    },
}

impl PluginSet {
    /// An empty set fetching through `sources` and compiling with `engine`.
    pub fn new(engine: Engine, sources: Sources) -> Self {
        PluginSet {
            engine,
            sources,
            slots: Mutex::new(BTreeMap::new()),
            compiles: None,
        }
    }

    /// The same set holding its tenant to `limits`.
    #[must_use]
    pub fn with_compile_limits(mut self, limits: CompileLimits) -> Self {
        let per_second = u32::try_from(limits.bytes_per_hour / 3600)
            .unwrap_or(u32::MAX)
            .max(1);
        let burst = u32::try_from(limits.bytes_per_hour).unwrap_or(u32::MAX);
        self.compiles = Some((
            limits,
            Mutex::new(inrun_wasm::TokenRate::new(per_second, burst)),
        ));
        self
    }

    /// Charges `len` module bytes to the tenant's compile limits, or says which it passes.
    fn charge(&self, location: &Location, len: usize) -> Result<(), SlotError> {
        let Some((limits, _)) = &self.compiles else {
            return Ok(());
        };
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        if len > limits.module_bytes {
            return Err(SlotError::Budget {
                location: location.to_string(),
                message: format!(
                    "the module is {}; a tenant's plugin may be at most {} (--max-tenant-module-size)",
                    size(len),
                    size(limits.module_bytes)
                ),
            });
        }
        self.take(location, len, "")
    }

    /// Takes `len` bytes of the tenant's hour's budget, or says how long until there is
    /// room for them; `what` says what they are, after "loading its … ".
    fn take(&self, location: &Location, len: u64, what: &str) -> Result<(), SlotError> {
        let Some((limits, bucket)) = &self.compiles else {
            return Ok(());
        };
        match lock(bucket).take_n(len, std::time::Instant::now()) {
            Ok(()) => Ok(()),
            Err(wait) => Err(SlotError::Budget {
                location: location.to_string(),
                message: format!(
                    "loading its {}{what} would pass the tenant's budget of {} of plugins loaded an hour (--tenant-compile-budget); there is room for it in {} s",
                    size(len),
                    size(limits.bytes_per_hour),
                    wait.as_secs().max(1)
                ),
            }),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn key(location: &Location, pull: Option<&PullSecret>) -> String {
        match pull {
            Some(p) => format!("{location} (pull secret {}/{})", p.namespace, p.name),
            None => location.to_string(),
        }
    }

    /// The slot for `location`, fetching and compiling it the first time it is asked for;
    /// fetches (this one and the slot's reloads) held to `egress`, the Blueprint's egress
    /// rules, checked even when the slot is already there.
    ///
    /// # Errors
    /// [`SlotError`] when the module cannot be fetched or compiled, or its location is
    /// outside `egress`.
    pub async fn slot(
        &self,
        location: Location,
        pull: Option<PullSecret>,
        egress: Option<&Egress>,
    ) -> Result<Arc<PluginSlot>, SlotError> {
        let sources = self.sources.with_egress(egress.cloned());
        sources.allowed(&location)?;
        let key = Self::key(&location, pull.as_ref());
        if let Some(slot) = lock(&self.slots).get(&key) {
            return Ok(slot.clone());
        }
        let fetched = sources.fetch(&location, pull.as_ref()).await?;
        let plugin = self
            .compile(&location, location.name(), fetched.module)
            .await?;
        let slot = PluginSlot::fetched(location, pull, egress.cloned(), plugin, fetched.version);
        // Two tenants racing for one location: the first slot stored wins.
        Ok(lock(&self.slots).entry(key).or_insert(slot).clone())
    }

    /// A set whose slots serve what this one's serve now, never reloaded (nobody polls
    /// it): assembled with it, a Blueprint is the version before a plugin reload, which a
    /// rollout keeps for the CRs it has not moved.
    pub fn frozen(&self) -> PluginSet {
        let slots = lock(&self.slots)
            .iter()
            .map(|(key, slot)| (key.clone(), slot.frozen()))
            .collect();
        PluginSet {
            engine: self.engine.clone(),
            sources: self.sources.clone(),
            slots: Mutex::new(slots),
            compiles: None,
        }
    }

    /// Every slot, by location.
    pub fn slots(&self) -> Vec<Arc<PluginSlot>> {
        lock(&self.slots).values().cloned().collect()
    }

    /// Forgets slots no Blueprint reference holds any more, and their compiled code the
    /// engine keeps for new loads (calls in flight keep theirs; a later load of the same
    /// digest reads the disk cache), so plugins a tenant stopped using hold no memory.
    pub fn retain_used(&self) {
        let mut dropped = Vec::new();
        lock(&self.slots).retain(|_, slot| {
            let used = Arc::strong_count(slot) > 1;
            if !used {
                dropped.push(slot.current().id().digest.clone());
            }
            used
        });
        let kept: std::collections::HashSet<String> = self
            .slots()
            .iter()
            .map(|s| s.current().id().digest.clone())
            .collect();
        for digest in dropped.into_iter().filter(|d| !kept.contains(d)) {
            self.engine.forget_digest(&digest);
        }
    }

    async fn compile(
        &self,
        location: &Location,
        name: String,
        module: Module,
    ) -> Result<Plugin, SlotError> {
        self.charge(location, module.len())?;
        let engine = self.engine.clone();
        let task = tokio::task::spawn_blocking(move || engine.load_module(&name, &module));
        let plugin = match task.await {
            Ok(loaded) => loaded?,
            Err(e) => {
                return Err(SlotError::Task {
                    location: location.to_string(),
                    message: e.to_string(),
                });
            }
        };
        // Its compiled form counts too: a small module may compile to much more.
        self.charge_compiled(location, plugin.info().compiled_size)?;
        Ok(plugin)
    }

    /// Charges the `len` bytes of a loaded plugin's compiled form to the tenant's hourly
    /// budget, or says it passes it.
    fn charge_compiled(&self, location: &Location, len: usize) -> Result<(), SlotError> {
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        self.take(location, len, " of compiled code")
    }

    /// Checks every unpinned slot's source once; swaps in versions that load and meet the
    /// Blueprint's expectations, and records the ones that do not. Checks run one at a
    /// time so a reload never takes both cores from reconciles.
    pub async fn poll(&self) -> Vec<Change> {
        let mut changes = Vec::new();
        for slot in self.slots() {
            if slot.location.is_pinned() {
                continue;
            }
            if let Some(change) = self.check(&slot).await {
                changes.push(change);
            }
        }
        changes
    }

    async fn check(&self, slot: &PluginSlot) -> Option<Change> {
        let location = slot.location.to_string();
        let sources = self.sources.with_egress(slot.egress.clone());
        let version = match sources.version(&slot.location, slot.pull.as_ref()).await {
            Ok(v) => v,
            Err(e) => {
                // The source is unreachable for now (registry down, file mid-replace):
                // keep serving and look again next time, without marking a version bad.
                tracing::debug!(plugin = %location, error = %inrun_contract::errors::chain(&e),
                    "plugin source not readable; keeping the serving version");
                return None;
            }
        };
        {
            let status = slot.status();
            if status.version == version || status.failed_version.as_deref() == Some(&version) {
                return None;
            }
        }
        let started = std::time::Instant::now();
        let result = async {
            let fetched = sources.fetch(&slot.location, slot.pull.as_ref()).await?;
            let plugin = self
                .compile(&slot.location, slot.location.name(), fetched.module)
                .await?;
            Ok::<_, SlotError>((plugin, fetched.version))
        }
        .await;
        let change = match result {
            Ok((plugin, version)) => {
                let digest = plugin.id().digest_ref();
                if slot.offer(plugin, version) {
                    tracing::info!(plugin = %location, %digest, took = ?started.elapsed(),
                        "plugin reloaded; new calls use the new version");
                    Change::Swapped { location, digest }
                } else {
                    let error = slot.status().last_error.unwrap_or_default();
                    Change::Failed { location, error }
                }
            }
            Err(e) => {
                let error = inrun_contract::errors::chain(&e);
                slot.refuse(version, error.clone());
                Change::Failed { location, error }
            }
        };
        match &change {
            Change::Swapped { .. } => self.engine.observer().plugin_reloaded(true),
            Change::Failed { location, error } => {
                self.engine.observer().plugin_reloaded(false);
                tracing::error!(plugin = %location, %error,
                    "new plugin version failed to load; the previous version keeps serving");
            }
        }
        Some(change)
    }
}

/// `bytes` as people read them: KiB below a MiB, else MiB, rounded up.
fn size(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{} MiB", bytes.div_ceil(1024 * 1024))
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// How often sources are checked when nothing says otherwise.
pub const DEFAULT_POLL: Duration = Duration::from_secs(10);
