//! The file source: reading a component from a local path, and telling its version (the
//! sha256 of its content) without reading it again while the file is unchanged.
//!
//! Hot reload asks every few seconds. Hashing the whole file each time cost a Python
//! guest's 18 MB buffer and ~15 ms of CPU per poll, per tenant. A file whose metadata
//! (device, inode, size, modification and change times) is what it was when it was hashed
//! keeps its digest; one written in the last moments is hashed again on each ask, since a
//! second write within the filesystem's timestamp granularity could leave its metadata as
//! it was (git's "racy" index entries).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::{MAX_MODULE_SIZE, SourceError};

/// How long after its last write a file's metadata is trusted to name its content.
const SETTLE: Duration = Duration::from_secs(2);

/// A file's metadata from before a [`FileDigests::read`].
#[derive(Debug)]
pub(super) struct Before(Option<Stamp>);

/// What a file's metadata says about its content: when any of it changed, so may have the
/// bytes. Replacing a file by rename gives a new inode; writing it in place, new times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    #[cfg(unix)]
    fn of(meta: &std::fs::Metadata) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        Some(Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    #[cfg(not(unix))]
    fn of(_meta: &std::fs::Metadata) -> Option<Stamp> {
        None
    }

    /// Whether the file's last write is at least `settle` old, so a later write shows in
    /// its times.
    fn settled(&self, settle: Duration) -> bool {
        let newest = self.modified.max(self.changed);
        let Ok(now) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let written = Duration::new(
            u64::try_from(newest.0).unwrap_or(0),
            u32::try_from(newest.1).unwrap_or(0),
        );
        now.checked_sub(written).is_some_and(|age| age >= settle)
    }
}

/// The digests of the files read or hashed, by path, with the metadata they were taken
/// under. Shared by every clone of [`super::Sources`] (tenants included: a digest is of
/// the bytes, whoever asks).
#[derive(Debug)]
pub(super) struct FileDigests {
    known: Mutex<HashMap<PathBuf, (Stamp, String)>>,
    settle: Duration,
    hashed: AtomicU64,
}

impl Default for FileDigests {
    fn default() -> Self {
        FileDigests::new(SETTLE)
    }
}

impl FileDigests {
    fn new(settle: Duration) -> Self {
        FileDigests {
            known: Mutex::new(HashMap::new()),
            settle,
            hashed: AtomicU64::new(0),
        }
    }

    /// `sha256:<hex>` of the file's content: remembered while its metadata is unchanged,
    /// else hashed a buffer at a time (never held whole).
    pub(super) async fn version(&self, path: &Path) -> Result<String, SourceError> {
        let meta = metadata(path).await?;
        let stamp = Stamp::of(&meta);
        if let Some(stamp) = stamp
            && let Some((known, digest)) = self.lock().get(path)
            && *known == stamp
        {
            return Ok(digest.clone());
        }
        let owned = path.to_path_buf();
        let digest = tokio::task::spawn_blocking(move || hash_file(&owned))
            .await
            .map_err(|e| read_error(path, std::io::Error::other(e.to_string())))??;
        self.hashed.fetch_add(1, Ordering::Relaxed);
        self.remember(path, stamp, &digest).await;
        Ok(digest)
    }

    /// The whole file, at most [`MAX_MODULE_SIZE`] bytes, and its metadata before the
    /// read, for [`FileDigests::read_as`] once the caller has hashed the bytes.
    pub(super) async fn read(&self, path: &Path) -> Result<(Vec<u8>, Before), SourceError> {
        let before = Before(Stamp::of(&metadata(path).await?));
        let owned = path.to_path_buf();
        // At most one byte past the limit is read, whatever the file's size said.
        let bytes = tokio::task::spawn_blocking(move || {
            let mut bytes = Vec::new();
            std::fs::File::open(&owned)?
                .take(MAX_MODULE_SIZE + 1)
                .read_to_end(&mut bytes)
                .map(|_| bytes)
        })
        .await
        .map_err(|e| read_error(path, std::io::Error::other(e.to_string())))?
        .map_err(|source| read_error(path, source))?;
        if bytes.len() as u64 > MAX_MODULE_SIZE {
            return Err(too_large(path));
        }
        Ok((bytes, before))
    }

    /// Remembers `digest` as the version of the bytes [`FileDigests::read`] returned, so
    /// the next [`FileDigests::version`] need not hash them again.
    pub(super) async fn read_as(&self, path: &Path, before: Before, digest: &str) {
        self.remember(path, before.0, digest).await;
    }

    /// Kept only when the file was written long enough ago and still is as it was before
    /// it was read (else the read may have seen a write half done).
    async fn remember(&self, path: &Path, stamp: Option<Stamp>, digest: &str) {
        let Some(stamp) = stamp.filter(|s| s.settled(self.settle)) else {
            self.lock().remove(path);
            return;
        };
        let now = metadata(path).await.ok().as_ref().and_then(Stamp::of);
        if now != Some(stamp) {
            self.lock().remove(path);
            return;
        }
        self.lock()
            .insert(path.to_path_buf(), (stamp, digest.to_string()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (Stamp, String)>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many times a file was hashed (read whole or a buffer at a time) to tell its
    /// version.
    #[cfg(test)]
    fn hashed(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }
}

fn read_error(path: &Path, source: std::io::Error) -> SourceError {
    SourceError::Read {
        path: path.to_path_buf(),
        source,
    }
}

fn too_large(path: &Path) -> SourceError {
    SourceError::TooLarge {
        location: path.display().to_string(),
        limit: MAX_MODULE_SIZE,
    }
}

async fn metadata(path: &Path) -> Result<std::fs::Metadata, SourceError> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|source| read_error(path, source))?;
    if !meta.is_file() {
        // A device or a pipe could be read forever, or block the read for good.
        return Err(read_error(
            path,
            std::io::Error::other("not a regular file"),
        ));
    }
    if meta.len() > MAX_MODULE_SIZE {
        return Err(too_large(path));
    }
    Ok(meta)
}

/// `sha256:<hex>` of the file, read 256 KiB at a time, refused past [`MAX_MODULE_SIZE`].
fn hash_file(path: &Path) -> Result<String, SourceError> {
    let mut file = std::fs::File::open(path).map_err(|source| read_error(path, source))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(read_error(path, source)),
        };
        total += n as u64;
        if total > MAX_MODULE_SIZE {
            return Err(too_large(path));
        }
        hasher.update(&buffer[..n]);
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(bytes: &[u8]) -> String {
        super::super::sha256(bytes)
    }

    #[tokio::test]
    async fn an_unchanged_file_is_hashed_once_and_a_replaced_one_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin.wasm");
        std::fs::write(&path, b"version one").expect("write");
        // Trust metadata at once (the settle window is the next test's subject).
        let files = FileDigests::new(Duration::ZERO);
        for _ in 0..3 {
            assert_eq!(
                files.version(&path).await.expect("version"),
                digest_of(b"version one")
            );
        }
        assert_eq!(files.hashed(), 1, "hashed once while unchanged");

        // Replaced as a deploy replaces it: written beside it, renamed over it.
        let next = dir.path().join("plugin.wasm.new");
        std::fs::write(&next, b"version two").expect("write");
        std::fs::rename(&next, &path).expect("rename");
        assert_eq!(
            files.version(&path).await.expect("version"),
            digest_of(b"version two")
        );
        // Rewritten in place with a different length.
        std::fs::write(&path, b"version three, longer").expect("write");
        assert_eq!(
            files.version(&path).await.expect("version"),
            digest_of(b"version three, longer")
        );
        assert_eq!(files.hashed(), 3);
    }

    #[tokio::test]
    async fn a_file_written_moments_ago_is_hashed_on_every_ask() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin.wasm");
        std::fs::write(&path, b"one").expect("write");
        let files = FileDigests::new(Duration::from_secs(3600));
        for _ in 0..2 {
            files.version(&path).await.expect("version");
        }
        assert_eq!(files.hashed(), 2);
        // An in-place rewrite of the same length in the same timestamp tick could keep
        // every field of the metadata; it is still seen, because nothing was remembered.
        std::fs::write(&path, b"two").expect("write");
        assert_eq!(
            files.version(&path).await.expect("version"),
            digest_of(b"two")
        );
    }

    #[tokio::test]
    async fn a_read_names_the_version_so_the_next_ask_hashes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin.wasm");
        std::fs::write(&path, b"component").expect("write");
        let files = FileDigests::new(Duration::ZERO);
        let (bytes, before) = files.read(&path).await.expect("read");
        assert_eq!(bytes, b"component");
        files.read_as(&path, before, &digest_of(&bytes)).await;
        assert_eq!(
            files.version(&path).await.expect("version"),
            digest_of(b"component")
        );
        assert_eq!(files.hashed(), 0);
    }

    #[tokio::test]
    async fn a_device_or_a_directory_is_refused_not_read() {
        let files = FileDigests::default();
        for path in ["/dev/zero", "/tmp"] {
            let path = Path::new(path);
            let err = files.version(path).await.expect_err("refused");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
            let err = files.read(path).await.expect_err("refused");
            assert!(
                inrun_contract::errors::chain(&err).contains("not a regular file"),
                "{}",
                inrun_contract::errors::chain(&err)
            );
        }
    }

    #[tokio::test]
    async fn a_file_over_the_limit_or_missing_is_refused_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = FileDigests::default();
        let missing = dir.path().join("gone.wasm");
        let err = files.version(&missing).await.expect_err("missing");
        assert!(err.to_string().contains("gone.wasm"), "{err}");

        let big = dir.path().join("big.wasm");
        let file = std::fs::File::create(&big).expect("create");
        file.set_len(MAX_MODULE_SIZE + 1).expect("sparse file");
        let err = files.version(&big).await.expect_err("too large");
        assert!(matches!(err, SourceError::TooLarge { .. }), "{err}");
        let err = files.read(&big).await.expect_err("too large");
        assert!(matches!(err, SourceError::TooLarge { .. }), "{err}");
    }
}
