//! What several commands set up alike: the Wasm engine with its compile cache, and files
//! read with the flag that named them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use inrun::wasm::{
    Budgets, CompileCache, Compiler, Engine, EngineSettings, Limits, Observer, Unobserved,
};

/// The engine of a one-shot command: nothing observes it, loads run under the default
/// limits, calls share the engine's default budgets, compiles run in this process, and no
/// instance is made ahead of a call that may never come.
pub(super) fn quiet_engine(cache: &CacheArgs) -> anyhow::Result<Engine> {
    engine(
        cache,
        Arc::new(Unobserved),
        Limits::default(),
        None,
        None,
        false,
    )
}

/// The engine, with its compile cache as `cache` says, reporting plugin loads and host
/// calls to `observer`; the calls a load makes run under `load_limits`; calls share what
/// `budgets` says (`None`: the engine's defaults); compiles run in a child process under
/// `compiler`'s limits (`None`: in this process); `make_ahead`: after a call, the next
/// instance of a plugin slow to instantiate is made in the background
/// ([`EngineSettings::make_ahead_over`], at its default threshold).
pub(super) fn engine(
    cache: &CacheArgs,
    observer: Arc<dyn Observer>,
    load_limits: Limits,
    budgets: Option<Budgets>,
    compiler: Option<Compiler>,
    make_ahead: bool,
) -> anyhow::Result<Engine> {
    let dir = cache.dir.clone().unwrap_or_else(CompileCache::default_dir);
    let mut compiled = CompileCache::new(&dir)
        .with_context(|| format!("creating compile cache {}", dir.display()))?;
    if let Some(max) = cache.max_bytes {
        compiled = compiled.with_max_bytes(max as u64);
    }
    let cache = compiled;
    Ok(Engine::new(EngineSettings {
        cache: Some(cache),
        observer,
        load_limits,
        budgets,
        compiler,
        make_ahead_over: make_ahead.then_some(inrun::wasm::MAKE_AHEAD_OVER),
        ..EngineSettings::default()
    })?)
}

/// Where compiled plugins are kept: `--cache-dir` and `--cache-max-size`.
#[derive(Debug, Clone, Default)]
pub(super) struct CacheArgs {
    /// The directory (default: the user's cache directory).
    pub(super) dir: Option<PathBuf>,
    /// The most bytes it holds (default: the cache's own).
    pub(super) max_bytes: Option<usize>,
}

/// The bytes of `path`, named by the flag that gave it when it cannot be read.
pub(super) fn read(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {flag} {}", path.display()))
}
