//! Compiled components on disk, keyed by the module's sha256 and the engine's settings,
//! so a restart (or another replica sharing the directory) does not compile again.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A directory of precompiled components (`<module sha256>-<engine hash>.cwasm`).
///
/// # Guarantees
/// Entries are written to a temporary file in the same directory and renamed into place,
/// so a reader never sees a torn file and concurrent writers of one entry are harmless.
/// An entry that fails to load is recompiled and replaced.
///
/// The directory must be writable only by the host: loading an entry runs its code.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    /// Uses `dir`, creating it if needed.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(CompileCache { dir })
    }

    /// The default location: `$INRUN_CACHE_DIR`, else `$XDG_CACHE_HOME/inrun/wasm`, else
    /// `~/.cache/inrun/wasm`.
    pub fn default_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("INRUN_CACHE_DIR") {
            return PathBuf::from(dir);
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("inrun").join("wasm")
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file for a module digest under an engine.
    pub(super) fn entry(&self, module_digest: &str, engine_key: &str) -> PathBuf {
        self.dir.join(format!("{module_digest}-{engine_key}.cwasm"))
    }

    /// Writes `bytes` as the entry at `path`, atomically.
    pub(super) fn store(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(bytes)?;
        tmp.1.sync_all()?;
        drop(tmp.1);
        std::fs::rename(&tmp.0, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp.0);
        })
    }
}

/// A uniquely named temporary file in `dir` (process id + counter + time).
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!(".tmp-{}-{n}-{nanos}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

/// Lowercase hex sha256 of `bytes`.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A stable key for everything about an engine that makes compiled code incompatible:
/// wasmtime's own compatibility hash, fed through sha256 so it is the same across runs.
pub(super) fn engine_key(engine: &wasmtime::Engine) -> String {
    struct ShaHasher(Sha256);
    impl Hasher for ShaHasher {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(&h.0.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_replaces_an_entry_atomically_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap();
        let path = cache.entry("abc", "def");
        cache.store(&path, b"one").unwrap();
        cache.store(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "only the entry remains: {names:?}");
    }

    #[test]
    fn engine_key_is_stable_for_one_engine_config() {
        let a = wasmtime::Engine::default();
        let b = wasmtime::Engine::default();
        assert_eq!(engine_key(&a), engine_key(&b));
    }
}
