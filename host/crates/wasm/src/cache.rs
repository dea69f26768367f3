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
/// Loading an entry runs its code, so the directory is one only the host's user may write
/// to: given one that others may write (a pod's `emptyDir` is 0777), the cache uses a
/// private subdirectory of it (`uid-<euid>`, 0700). Entries are mapped when loaded, not
/// read, and only entries the host's user alone could have written are
/// ([`CompileCache::owned_entry`]).
///
/// The directory holds at most [`CompileCache::max_bytes`] of entries: storing one evicts
/// the least recently used others (a load marks an entry used), and an entry larger than
/// the cap is not stored. A pod's cache volume (an `emptyDir` with a size limit) is never
/// filled until the kubelet evicts the pod, however many plugins tenants load.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// The default cap: half the chart's 512 MiB cache volume.
pub const DEFAULT_CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// Temporary files older than this were left by a writer that died.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(3600);

impl CompileCache {
    /// Uses `dir`, creating it if needed, with the default cap (`DEFAULT_CACHE_BYTES`).
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        let dir = if is_private(&dir) {
            dir
        } else {
            private_subdir(&dir)?
        };
        Ok(CompileCache {
            dir,
            max_bytes: DEFAULT_CACHE_BYTES,
        })
    }

    /// The same cache holding at most `max_bytes` of entries.
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The most bytes of entries the directory holds.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Marks the entry at `path` used now (its modification time), so eviction keeps it
    /// longer than entries unused since.
    pub(super) fn touch(&self, path: &Path) {
        if let Ok(file) = std::fs::File::options().append(true).open(path) {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
    }

    /// Removes the least recently used entries but `keep` until the entries take at most
    /// the cap, and temporary files a dead writer left. Returns how many entries went.
    pub(super) fn evict(&self, keep: &Path) -> usize {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = std::time::SystemTime::now();
        let mut entries = Vec::new();
        for entry in read.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(now);
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".tmp-") {
                if now.duration_since(modified).unwrap_or_default() > STALE_TEMP {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if name.ends_with(".cwasm") && meta.is_file() {
                entries.push((modified, meta.len(), path));
            }
        }
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        entries.sort();
        let mut evicted = 0;
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
                evicted += 1;
            }
        }
        evicted
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

    /// Whether the entry at `path` can only have been written by this process's user:
    /// it is a regular file of that user, writable by no one else, in a directory of that
    /// user that no one else may write to. Only such an entry is mapped when loaded.
    pub(super) fn owned_entry(&self, path: &Path) -> bool {
        is_private(&self.dir)
            && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && private(&m))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file for a module digest under an engine.
    pub(super) fn entry(&self, module_digest: &str, engine_key: &str) -> PathBuf {
        self.dir.join(format!("{module_digest}-{engine_key}.cwasm"))
    }

    /// Writes `bytes` as the entry at `path`, atomically, then evicts what the cap asks.
    /// An entry larger than the cap is not written.
    ///
    /// # Errors
    /// The entry could not be written; [`std::io::ErrorKind::FileTooLarge`] when it alone
    /// exceeds the cap.
    pub(super) fn store(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.len() as u64 > self.max_bytes {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "the compiled plugin ({} bytes) is larger than the cache's cap of {} bytes",
                    bytes.len(),
                    self.max_bytes
                ),
            ));
        }
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(bytes)?;
        tmp.1.sync_all()?;
        drop(tmp.1);
        std::fs::rename(&tmp.0, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp.0);
        })?;
        self.evict(path);
        Ok(())
    }
}

/// Whether a file or directory belongs to this process's user and no one else may write it.
fn private(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.uid() == rustix::process::geteuid().as_raw() && meta.mode() & 0o022 == 0
}

/// Whether `dir` is a directory only this process's user may write to.
fn is_private(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && private(&m))
}

/// `dir/uid-<euid>`, made (mode 0700) when missing: the cache's directory when `dir` is
/// one others may write to (a pod's `emptyDir` is 0777), so that entries are only ever
/// written by the host.
///
/// # Errors
/// It cannot be made, or exists and is someone else's or writable by others.
fn private_subdir(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let sub = dir.join(format!("uid-{}", rustix::process::geteuid().as_raw()));
    match std::fs::DirBuilder::new().mode(0o700).create(&sub) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    if is_private(&sub) {
        return Ok(sub);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "{} is not a directory of this user that only it may write to; \
             the compile cache runs the code it holds, so it refuses to use it",
            sub.display()
        ),
    ))
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
    fn the_least_recently_used_entries_go_when_the_cap_is_passed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap().with_max_bytes(250);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        let (a, b, c) = (
            cache.entry("a", "e"),
            cache.entry("b", "e"),
            cache.entry("c", "e"),
        );
        cache.store(&a, &[0; 100]).unwrap();
        cache.store(&b, &[0; 100]).unwrap();
        for p in [&a, &b] {
            std::fs::File::options()
                .append(true)
                .open(p)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        // `a` is used again: `b` is now the least recently used.
        cache.touch(&a);
        cache.store(&c, &[0; 100]).unwrap();
        assert!(a.exists() && c.exists());
        assert!(!b.exists(), "the least recently used entry is evicted");
        // An entry larger than the cap is not stored, and evicts nothing.
        let huge = cache.entry("huge", "e");
        let err = cache.store(&huge, &[0; 300]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(!huge.exists() && a.exists() && c.exists());
    }

    #[test]
    fn temporary_files_a_dead_writer_left_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path()).unwrap();
        let stale = dir.path().join(".tmp-1-2-3");
        let fresh = dir.path().join(".tmp-4-5-6");
        std::fs::write(&stale, b"x").unwrap();
        std::fs::write(&fresh, b"x").unwrap();
        std::fs::File::options()
            .append(true)
            .open(&stale)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - 2 * STALE_TEMP)
            .unwrap();
        let entry = cache.entry("a", "e");
        cache.store(&entry, b"one").unwrap();
        assert!(!stale.exists(), "a dead writer's file goes");
        assert!(fresh.exists(), "a writer's file in progress stays");
    }

    #[test]
    fn a_directory_others_may_write_gets_a_private_subdirectory_and_only_own_entries_map() {
        use std::os::unix::fs::PermissionsExt;
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let cache = CompileCache::new(shared.path()).unwrap();
        assert_ne!(cache.dir(), shared.path(), "entries go to a subdirectory");
        assert!(cache.dir().starts_with(shared.path()));
        let mode = std::fs::metadata(cache.dir()).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o700,
            "only the host's user may use it: {mode:o}"
        );
        // Made again, it is the same directory.
        assert_eq!(CompileCache::new(shared.path()).unwrap().dir(), cache.dir());

        let entry = cache.entry("a", "e");
        cache.store(&entry, b"compiled").unwrap();
        assert!(
            cache.owned_entry(&entry),
            "an entry the host wrote is mapped"
        );
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            !cache.owned_entry(&entry),
            "an entry others may write is only read"
        );
        let link = cache.entry("b", "e");
        std::os::unix::fs::symlink(&entry, &link).unwrap();
        assert!(!cache.owned_entry(&link), "a link is never mapped");
        assert!(!cache.owned_entry(&cache.entry("missing", "e")));
    }

    #[test]
    fn a_private_subdirectory_someone_else_opened_up_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let sub = shared
            .path()
            .join(format!("uid-{}", rustix::process::geteuid().as_raw()));
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = CompileCache::new(shared.path()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("refuses to use it"), "{err}");
    }

    #[test]
    fn engine_key_is_stable_for_one_engine_config() {
        let a = wasmtime::Engine::default();
        let b = wasmtime::Engine::default();
        assert_eq!(engine_key(&a), engine_key(&b));
    }
}
