//! One wasmtime engine for the whole host: Cranelift, the pooling allocator, epoch
//! interruption driven by a ticker thread that runs only while a call is in flight (an
//! idle host wakes for nothing), and components cached by digest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::component::{Component, Linker};

use super::budget::{self, Budgets, HostMemory, TenantBudget, TenantUsage};
use super::cache::{self, CompileCache};
use super::compiler::{CompileFailure, Compiler, compiled_max};
use super::config::{CompileConfig, PoolTuning, kept_slots, wasmtime_engine};
use super::error::LoadError;
use super::id::PluginId;
use super::limits::Limits;
use super::observer::{Observer, Unobserved};
use super::shelf::Shelf;
use super::state::State;
use super::ticker::{Busy, Ticker};

/// The default of [`EngineSettings::make_ahead_over`]: Go and Python guests instantiate in
/// 0.3–0.5 ms and gain that on each call; Rust, C and JavaScript ones in 5–30 µs, less
/// than what an instance made on another core costs the call that takes it.
pub const MAKE_AHEAD_OVER: Duration = Duration::from_micros(100);

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Where compiled components are kept; `None` compiles every load.
    pub cache: Option<CompileCache>,
    /// Instances that may be alive at once (concurrent calls). Pool slots are reserved
    /// up front; a call beyond this fails with a host error rather than growing memory.
    pub max_instances: u32,
    /// The largest linear memory any plugin may be allowed (a ceiling over per-plugin
    /// limits), in bytes.
    pub max_memory_bytes: usize,
    /// Use the pooling allocator (fast instantiation). Off falls back to on-demand.
    pub pooling: bool,
    /// How the pool keeps the slots of finished instances warm for the next ones.
    pub pool: PoolTuning,
    /// Where loads and host calls are reported.
    pub observer: Arc<dyn Observer>,
    /// The limits of the calls a load makes (a hooks component's `functions()`): the
    /// defaults, or the operator's ceilings where those are lower.
    pub load_limits: Limits,
    /// What tenants share and what one may hold; `None`: [`Budgets::for_pool`] of
    /// `max_instances`.
    pub budgets: Option<Budgets>,
    /// Compile in a child process under a time and memory limit; `None`: in this process,
    /// unbounded (offline commands, tests of the engine itself).
    pub compiler: Option<Compiler>,
    /// After a call, make the next instance of a plugin whose instantiation takes at least
    /// this long in the background, so that the next call starts in an instance already
    /// there (`ahead.rs`): a call's latency without instantiation, the same work in all.
    /// Below it, taking an instance made on another core costs about what it saves.
    /// `None`: every instance is made on its call's path. Default [`MAKE_AHEAD_OVER`].
    pub make_ahead_over: Option<Duration>,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            cache: None,
            max_instances: 64,
            max_memory_bytes: 1 << 30,
            pooling: true,
            pool: PoolTuning::default(),
            observer: Arc::new(Unobserved),
            load_limits: Limits::default(),
            budgets: None,
            compiler: None,
            make_ahead_over: Some(MAKE_AHEAD_OVER),
        }
    }
}

/// The engine, its linker (host imports + sealed WASI), and the loaded components.
///
/// Cloning is cheap and shares everything; [`Engine::observed_by`] shares everything but
/// where loads and calls are reported.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    observer: Arc<dyn Observer>,
    /// The tenant whose budget calls through this handle use; `None`: the host's own.
    tenant: Option<Arc<budget::Tenant>>,
}

struct Inner {
    engine: wasmtime::Engine,
    linker: Linker<State>,
    cache: Option<CompileCache>,
    engine_key: String,
    compiled: Mutex<HashMap<String, Component>>,
    /// What the engine was built from, for a compiling child to build the same.
    compile: CompileConfig,
    compiler: Option<Compiler>,
    ticker: Arc<Ticker>,
    load_limits: Limits,
    budgets: Arc<budget::Shared>,
    /// The bounds on instances kept idle for reuse.
    shelf: Arc<Shelf>,
    /// The bounds on instances made ahead and the instantiation time past which they are;
    /// `None`: none are (`ahead.rs`).
    ahead: Option<(Arc<Shelf>, Duration)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker.stop();
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cache", &self.inner.cache)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Builds the engine and starts its epoch ticker.
    ///
    /// # Errors
    /// [`LoadError::Engine`] when wasmtime refuses the configuration (e.g. the pool cannot
    /// be reserved).
    pub fn new(settings: EngineSettings) -> Result<Self, LoadError> {
        let budgets = settings
            .budgets
            .unwrap_or_else(|| Budgets::for_pool(settings.max_instances));
        let compile = CompileConfig {
            pooling: settings.pooling.then_some(settings.max_instances),
            max_memory_bytes: settings.max_memory_bytes,
            threads: budgets.running,
        };
        let engine = wasmtime_engine(&compile, &settings.pool).map_err(LoadError::Engine)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(LoadError::Engine)?;
        super::bindings::reconciler::Reconciler::add_to_linker::<
            State,
            wasmtime::component::HasSelf<State>,
        >(&mut linker, |s| s)
        .map_err(LoadError::Engine)?;
        super::bindings::package::inrun::reconciler0_2_0::credentials::add_to_linker::<
            State,
            wasmtime::component::HasSelf<State>,
        >(&mut linker, |s| s)
        .map_err(LoadError::Engine)?;

        let ticker = Ticker::start(engine.clone());
        let engine_key = cache::engine_key(&engine);
        Ok(Engine {
            inner: Arc::new(Inner {
                engine,
                linker,
                cache: settings.cache,
                engine_key,
                compiled: Mutex::new(HashMap::new()),
                compile,
                compiler: settings.compiler,
                ticker,
                load_limits: settings.load_limits,
                shelf: Arc::new(Shelf::new(
                    kept_slots(settings.max_instances) as usize,
                    budgets.memory_bytes / 4,
                )),
                ahead: settings.make_ahead_over.map(|over| {
                    let slots = kept_slots(settings.max_instances) as usize;
                    (Arc::new(Shelf::new(slots, budgets.memory_bytes / 4)), over)
                }),
                budgets: Arc::new(budget::Shared::new(budgets)),
            }),
            observer: settings.observer,
            tenant: None,
        })
    }

    /// Marks a call in flight until the guard drops; the epoch ticker runs meanwhile.
    pub(super) fn busy(&self) -> Busy {
        self.inner.ticker.busy()
    }

    /// The limits of the calls a load makes ([`EngineSettings::load_limits`]).
    pub fn load_limits(&self) -> &Limits {
        &self.inner.load_limits
    }

    /// Where this engine reports loads and host calls.
    pub fn observer(&self) -> &Arc<dyn Observer> {
        &self.observer
    }

    /// The same engine (its compiled components, pool and ticker) reporting to
    /// `observer` instead: what plugins load through it, and their calls, are reported
    /// there. A host serving several tenants gives each its own, so their plugins'
    /// metrics stay apart.
    #[must_use]
    pub fn observed_by(&self, observer: Arc<dyn Observer>) -> Engine {
        Engine {
            inner: self.inner.clone(),
            observer,
            tenant: self.tenant.clone(),
        }
    }

    /// The same engine whose calls count against tenant `name`'s budget: `budget`, or the
    /// engine's default share. Every handle of one tenant shares one budget, however
    /// many are made; other tenants' calls never wait on it.
    #[must_use]
    pub fn for_tenant(&self, name: &str, budget: Option<TenantBudget>) -> Engine {
        Engine {
            inner: self.inner.clone(),
            observer: self.observer.clone(),
            tenant: Some(self.inner.budgets.tenant(name, budget)),
        }
    }

    /// The host memory this handle's tenant's reconciles may hold for what reconcilers
    /// return ([`HostMemory`]: a pass runs in its scope); `None` for the host's own handle.
    pub fn host_memory(&self) -> Option<HostMemory> {
        self.tenant.as_ref().map(|t| t.held.clone())
    }

    /// The tenant whose budget this handle's calls use; `None`: the host's own.
    pub(super) fn tenant_name(&self) -> Option<&str> {
        self.tenant.as_ref().map(|t| t.name.as_str())
    }

    /// The bounds on instances kept idle for reuse.
    pub(super) fn shelf(&self) -> &Arc<Shelf> {
        &self.inner.shelf
    }

    /// Instances kept idle for reuse, engine-wide.
    pub fn idle_instances(&self) -> usize {
        self.inner.shelf.held()
    }

    /// The bounds on instances made ahead, and the instantiation time past which a
    /// plugin's are; `None` when the engine makes none.
    pub(super) fn ahead(&self) -> Option<(&Arc<Shelf>, Duration)> {
        self.inner
            .ahead
            .as_ref()
            .map(|(shelf, over)| (shelf, *over))
    }

    /// Instances made ahead and waiting for a call, engine-wide.
    pub fn instances_ahead(&self) -> usize {
        self.inner
            .ahead
            .as_ref()
            .map_or(0, |(shelf, _)| shelf.held())
    }

    /// The host-wide budgets and a tenant's default share.
    pub fn budgets(&self) -> Budgets {
        self.inner.budgets.budgets
    }

    /// What tenant `name` uses of its share now (its calls in flight and their memory);
    /// `None` when no handle of it is alive.
    pub fn tenant_usage(&self, name: &str) -> Option<TenantUsage> {
        self.inner.budgets.usage(name)
    }

    /// Bytes of linear memory and tables held by all calls in flight.
    pub fn memory_in_use(&self) -> usize {
        self.inner.budgets.memory_in_use()
    }

    /// Admits one call through this handle, under its tenant's budget ([`budget`]).
    pub(super) async fn admit(
        &self,
        deadline: std::time::Instant,
    ) -> Result<budget::Admission, budget::Hit> {
        budget::Admission::enter(&self.inner.budgets, self.tenant.as_ref(), deadline).await
    }

    /// Admits one call through this handle only with what is free now
    /// ([`budget::Admission::try_enter`]).
    pub(super) fn try_admit(&self) -> Option<budget::Admission> {
        budget::Admission::try_enter(&self.inner.budgets, self.tenant.as_ref())
    }

    pub(super) fn wasmtime(&self) -> &wasmtime::Engine {
        &self.inner.engine
    }

    pub(super) fn linker(&self) -> &Linker<State> {
        &self.inner.linker
    }

    /// Compiles `bytes` without caching anything, for measuring cold compiles.
    ///
    /// # Errors
    /// [`LoadError::Compile`] when the bytes are not a valid component.
    pub fn compile_uncached(&self, name: &str, bytes: &[u8]) -> Result<(), LoadError> {
        let id = PluginId {
            name: name.to_string(),
            digest: cache::sha256_hex(bytes),
        };
        Component::new(&self.inner.engine, bytes)
            .map(drop)
            .map_err(|source| LoadError::Compile { plugin: id, source })
    }

    /// Forgets the compiled component of one module digest kept in memory (plugins already
    /// loaded from it keep working; the disk cache stays). Called when a reload replaces a
    /// version, so a host that reloads often does not keep every version it ever ran.
    pub fn forget_digest(&self, digest: &str) {
        self.compiled_map().remove(digest);
    }

    /// Forgets components kept in memory (the disk cache stays), for measuring cached loads.
    pub fn forget_loaded(&self) {
        self.compiled_map().clear();
    }

    fn compiled_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Component>> {
        // A poisoned map only means another thread panicked mid-insert; the map is still valid.
        self.inner
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn component(&self, id: &PluginId, bytes: &[u8]) -> Result<Component, LoadError> {
        if let Some(c) = self.compiled_map().get(&id.digest) {
            self.observer.plugin_loaded("memory");
            return Ok(c.clone());
        }
        // A large guest takes seconds to compile (minutes unoptimised): say so, and let
        // readiness name it while it runs.
        tracing::info!(plugin = %id.name, digest = %id.digest_ref(), bytes = bytes.len(), "loading plugin");
        let loading = Loading::new(self.observer.as_ref(), &id.name);
        let started = std::time::Instant::now();
        let loaded = match &self.inner.cache {
            Some(cache) => self.component_via_cache(cache, id, bytes),
            None => self.compile(id, bytes).map(|c| (c.component, "compiled")),
        };
        drop(loading);
        let (component, source) = loaded?;
        tracing::info!(plugin = %id.name, took_ms = started.elapsed().as_millis() as u64,
            from = if source == "cache" { "the compile cache" } else { "a fresh compile" },
            "plugin loaded");
        self.compiled_map()
            .insert(id.digest.clone(), component.clone());
        Ok(component)
    }

    /// Compiles `bytes`, one compile at a time host-wide, in turns handed round-robin
    /// across tenants ([`budget::Compiles`]), on the compile threads (`compile_threads` in
    /// `config.rs`): a tenant's large or numerous plugins queue behind each other, delay
    /// another tenant's by one compile at most, and never take more cores than guests may.
    /// With a [`Compiler`], in a child process under its time and memory limits, its output
    /// read only up to what the module may compile to; the compiled code comes back
    /// serialized too. A tenant whose compile was stopped at a limit may not compile for a
    /// while.
    fn compile(&self, id: &PluginId, bytes: &[u8]) -> Result<Compiled, LoadError> {
        let lane = self.tenant.as_ref().map(|t| t.lane);
        let compiles = &self.inner.budgets.compiles;
        let _turn =
            compiles
                .enter(lane.unwrap_or(0))
                .map_err(|until| LoadError::CompilePaused {
                    plugin: id.clone(),
                    for_secs: until
                        .saturating_duration_since(std::time::Instant::now())
                        .as_secs()
                        .max(1),
                })?;
        let compiled = match &self.inner.compiler {
            Some(compiler) => self.compile_in_child(compiler, id, bytes),
            None => self.compile_here(id, bytes),
        };
        if let (Err(LoadError::CompileStopped { source, .. }), Some(lane)) = (&compiled, lane)
            && matches!(
                source,
                CompileFailure::Time(_)
                    | CompileFailure::Memory(_)
                    | CompileFailure::TooLarge { .. }
            )
        {
            compiles.pause(lane);
        }
        let compiled = compiled?;
        self.observer.plugin_loaded("compiled");
        Ok(compiled)
    }

    /// Compiles `bytes` in this process (no [`Compiler`]: offline commands, tests of the
    /// engine): unbounded while it runs, but a compiled form past [`compiled_max`] is
    /// refused all the same.
    fn compile_here(&self, id: &PluginId, bytes: &[u8]) -> Result<Compiled, LoadError> {
        let component =
            Component::new(&self.inner.engine, bytes).map_err(|source| LoadError::Compile {
                plugin: id.clone(),
                source,
            })?;
        let range = component.image_range();
        let size = (range.end as usize).saturating_sub(range.start as usize);
        let max = compiled_max(bytes.len());
        if size > max {
            return Err(LoadError::CompileStopped {
                plugin: id.clone(),
                source: CompileFailure::TooLarge {
                    module: bytes.len(),
                    max,
                },
            });
        }
        Ok(Compiled {
            component,
            serialized: None,
        })
    }

    fn compile_in_child(
        &self,
        compiler: &Compiler,
        id: &PluginId,
        bytes: &[u8],
    ) -> Result<Compiled, LoadError> {
        let serialized = compiler
            .compile(&self.inner.compile, &self.inner.engine_key, bytes)
            .map_err(|failure| match failure {
                CompileFailure::Invalid(text) => LoadError::Compile {
                    plugin: id.clone(),
                    source: wasmtime::Error::msg(text),
                },
                limit => LoadError::CompileStopped {
                    plugin: id.clone(),
                    source: limit,
                },
            })?;
        // SAFETY: the bytes are `Engine::precompile_component` of an engine the child built
        // from this engine's own settings (it checked the compatibility key), written by
        // the host's own program; the module's author never handles them. Wasmtime still
        // checks their header and version.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(&self.inner.engine, &serialized) }
            .map_err(|source| LoadError::Compile {
                plugin: id.clone(),
                source,
            })?;
        Ok(Compiled {
            component,
            serialized: Some(serialized),
        })
    }

    /// The component from the compile cache, or compiled (and stored there); says which.
    fn component_via_cache(
        &self,
        cache: &CompileCache,
        id: &PluginId,
        bytes: &[u8],
    ) -> Result<(Component, &'static str), LoadError> {
        let path = cache.entry(&id.digest, &self.inner.engine_key);
        if let Some(loaded) = self.cached(cache, &path) {
            match loaded {
                Ok(c) => {
                    self.observer.plugin_loaded("cache");
                    cache.touch(&path);
                    return Ok((c, "cache"));
                }
                Err(e) => tracing::warn!(plugin = %id, path = %path.display(), error = %e,
                    "compiled plugin in cache is unusable; compiling again"),
            }
        }
        let Compiled {
            component,
            serialized,
        } = self.compile(id, bytes)?;
        match serialized.map_or_else(|| component.serialize(), Ok) {
            Ok(serialized) => match cache.store(&path, &serialized) {
                // Served from the entry just written, mapped: its code and memory images
                // are then pages of the file, which the kernel may drop and read again,
                // not a copy in the host's own memory for as long as the plugin lives.
                Ok(()) => {
                    drop(serialized);
                    if let Some(Ok(mapped)) = self.cached(cache, &path) {
                        return Ok((mapped, "compiled"));
                    }
                }
                Err(e) => {
                    tracing::warn!(plugin = %id, path = %path.display(), error = %e,
                        "could not write the compile cache; continuing without it");
                }
            },
            Err(e) => {
                tracing::warn!(plugin = %id, error = %e, "could not serialize compiled plugin")
            }
        }
        Ok((component, "compiled"))
    }
}

impl Engine {
    /// The compiled component in the cache entry at `path`; `None` when there is none.
    ///
    /// An entry the host alone could have written ([`CompileCache::owned_entry`]) is mapped,
    /// not read: the code and the memory images are used from the page cache in place, so
    /// loading an 18 MB component costs milliseconds and every process that maps it shares
    /// its pages. Entries are only ever renamed into place whole, never rewritten, so a
    /// mapping never sees its file change under it. Any other entry is read into memory.
    fn cached(
        &self,
        cache: &CompileCache,
        path: &std::path::Path,
    ) -> Option<wasmtime::Result<Component>> {
        let engine = &self.inner.engine;
        if cache.owned_entry(path) {
            // SAFETY: the entry was written by `Component::serialize` of an engine with the
            // same compatibility key (it is in the file name), by this host's user, into a
            // directory only that user may write, and renamed into place whole: nobody else
            // can have written it, or can truncate it while it is mapped. Wasmtime still
            // checks its header and version, and an entry it rejects is recompiled.
            #[allow(unsafe_code)]
            return Some(unsafe { Component::deserialize_file(engine, path) });
        }
        let compiled = std::fs::read(path).ok()?;
        // SAFETY: as above, but for the ownership of the directory, which the operator
        // chose (`--cache-dir`): the bytes are copied first, so a later change to the file
        // cannot reach code already loaded. Wasmtime checks the header and version.
        #[allow(unsafe_code)]
        Some(unsafe { Component::deserialize(engine, &compiled) })
    }
}

/// A fresh compile: the component, and its serialized form when it came that way.
struct Compiled {
    component: Component,
    serialized: Option<Vec<u8>>,
}

/// A plugin load in progress, told to the observer when it starts and when it ends, a
/// panic in the compiler included: readiness must never wait on a load that is over.
struct Loading<'a> {
    observer: &'a dyn Observer,
    plugin: &'a str,
}

impl<'a> Loading<'a> {
    fn new(observer: &'a dyn Observer, plugin: &'a str) -> Self {
        observer.plugin_loading(plugin, true);
        Loading { observer, plugin }
    }
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        self.observer.plugin_loading(self.plugin, false);
    }
}
