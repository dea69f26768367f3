//! Finds the etcd and kube-apiserver binaries, building them with the repo's script when
//! they are missing.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Environment variable naming a directory that holds `etcd` and `kube-apiserver`; when it
/// is set the build script is not run.
pub const BIN_DIR_ENV: &str = "INRUN_CONTROLPLANE_BIN";

/// The command that builds the binaries, as a person would type it from the repo root.
pub const BUILD_COMMAND: &str = "tests/controlplane/build.sh";

/// Failures to find or build the control plane binaries.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The build script could not be run at all.
    #[error(
        "could not run {script} (needs bash and go); build the binaries with `{BUILD_COMMAND}`"
    )]
    RunBuild {
        /// The script.
        script: PathBuf,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// The build script failed; its output went to stderr above.
    #[error("`{BUILD_COMMAND}` failed ({status}); its output is above")]
    BuildFailed {
        /// How the script exited.
        status: ExitStatus,
    },
    /// A binary is not where it should be.
    #[error(
        "{} is missing or not executable; build it with `{BUILD_COMMAND}`, or point {BIN_DIR_ENV} at a directory holding etcd and kube-apiserver",
        path.display()
    )]
    Missing {
        /// Where the binary was looked for.
        path: PathBuf,
    },
}

/// Paths of the two control plane binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The etcd server.
    pub etcd: PathBuf,
    /// The Kubernetes API server.
    pub kube_apiserver: PathBuf,
}

impl Binaries {
    /// Uses `$INRUN_CONTROLPLANE_BIN` when set; otherwise runs the build script, which
    /// builds what is missing into a cache outside the clone and prints the directory.
    ///
    /// # Errors
    ///
    /// When the script fails or a binary is missing; the message names the build command.
    pub fn locate() -> Result<Self, Error> {
        let dir = match std::env::var_os(BIN_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => run_build_script()?,
        };
        let binaries = Self {
            etcd: dir.join("etcd"),
            kube_apiserver: dir.join("kube-apiserver"),
        };
        for path in [&binaries.etcd, &binaries.kube_apiserver] {
            if !is_executable(path) {
                return Err(Error::Missing { path: path.clone() });
            }
        }
        Ok(binaries)
    }
}

/// Runs the build script with its progress on our stderr and returns the directory it
/// prints last.
fn run_build_script() -> Result<PathBuf, Error> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../controlplane/build.sh");
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| Error::RunBuild {
            script: script.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::BuildFailed {
            status: output.status,
        });
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    Ok(PathBuf::from(OsString::from(dir.trim())))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
