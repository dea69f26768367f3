//! What several commands set up alike: the Wasm engine with its compile cache, and files
//! read with the flag that named them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use inrun::wasm::{CompileCache, Engine, EngineSettings, Observer};

/// The engine, with its compile cache in `cache_dir` (default: the user's cache
/// directory), reporting plugin loads and host calls to `observer`.
pub(super) fn engine(
    cache_dir: Option<PathBuf>,
    observer: Arc<dyn Observer>,
) -> anyhow::Result<Engine> {
    let dir = cache_dir.unwrap_or_else(CompileCache::default_dir);
    let cache = CompileCache::new(&dir)
        .map_err(|e| anyhow::anyhow!("creating compile cache {}: {e}", dir.display()))?;
    Ok(Engine::new(EngineSettings {
        cache: Some(cache),
        observer,
        ..EngineSettings::default()
    })?)
}

/// The bytes of `path`, named by the flag that gave it when it cannot be read.
pub(super) fn read(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {flag} {}: {e}", path.display()))
}
