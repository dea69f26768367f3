//! `inrun render` from a test: the helpers the guest-language tests share to compare a
//! language's plugin with the Rust one through the CLI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One compile cache for every render and engine in this test binary, kept under
/// `target/tmp/<test binary>-cache` between runs (compiled code is keyed by digest);
/// entries untouched for a day are pruned, so rebuilt components do not pile up.
pub fn cache_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}-cache", env!("CARGO_CRATE_NAME")));
        std::fs::create_dir_all(&dir).expect("cache dir");
        let day_ago = std::time::SystemTime::now() - Duration::from_secs(24 * 3600);
        for entry in std::fs::read_dir(&dir).expect("read cache").flatten() {
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < day_ago);
            if stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        dir
    })
}

/// Runs `inrun render -o json` of `cr` (YAML) through `blueprint` (YAML), with the
/// [`cache_dir`]: the JSON output, or the error text.
pub fn render(blueprint: &str, cr: &str, extra: &[&str]) -> Result<Value, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let bp = dir.path().join("blueprint.yaml");
    let object = dir.path().join("cr.yaml");
    std::fs::write(&bp, blueprint).expect("write blueprint");
    std::fs::write(&object, cr).expect("write cr");
    let out = Command::new(env!("CARGO_BIN_EXE_inrun"))
        .args(["render", "-b"])
        .arg(&bp)
        .arg("-f")
        .arg(&object)
        .args(["-o", "json"])
        .args(extra)
        .env("INRUN_CACHE_DIR", cache_dir())
        .output()
        .expect("run inrun");
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).expect("render prints JSON"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The plugin's own message in a render error, without the plugin's name and digest.
pub fn returned_error(stderr: &str) -> &str {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or(stderr);
    match line.split_once("returned an error: ") {
        Some((_, message)) => message.trim(),
        None => panic!("not a returned error: {stderr}"),
    }
}
