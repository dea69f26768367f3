//! A real OCI registry for tests of plugin pulls and pushes: Debian's `docker-registry`
//! (distribution v2.8) on a free 127.0.0.1 port, storing into a temp dir, stopped (with
//! its data) when dropped or when the test binary ends.
//!
//! [`Registry::start`] speaks plain http with no auth (clients list it as an insecure
//! registry); [`Registry::start_with_auth`] serves TLS with a certificate from a CA of its
//! own ([`Registry::ca_pem`]) and requires HTTP basic auth from an htpasswd file (bcrypt,
//! made with `htpasswd -B`). Distribution accepts htpasswd over plain http too; TLS is
//! there so the client's extra CA roots are exercised as in production.

use std::path::Path;
use std::process::Command;

use crate::services::{ServiceError, free_port, io, run, until_connects, which};
use crate::supervisor::Supervisor;
use crate::tls::TestCerts;

/// A running registry.
pub struct Registry {
    /// `127.0.0.1:PORT`, the host part of references (`127.0.0.1:PORT/repo:tag`).
    pub host: String,
    /// The CA to trust, when the registry serves TLS.
    pub ca_pem: Option<Vec<u8>>,
    /// The registry's version line.
    pub version: String,
    _supervisor: Supervisor,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry over plain http, open to anyone.
    ///
    /// # Errors
    /// [`ServiceError`], naming the install command when `docker-registry` is missing.
    pub async fn start() -> Result<Self, ServiceError> {
        Registry::start_inner(None).await
    }

    /// Starts a registry over TLS that requires `user` and `password` for every request.
    ///
    /// # Errors
    /// [`ServiceError`], naming the install command when `docker-registry`, `htpasswd` or
    /// `openssl` is missing.
    pub async fn start_with_auth(user: &str, password: &str) -> Result<Self, ServiceError> {
        Registry::start_inner(Some((user, password))).await
    }

    async fn start_inner(auth: Option<(&str, &str)>) -> Result<Self, ServiceError> {
        let server = which("docker-registry")?;
        let version = run({
            let mut c = Command::new(&server);
            c.arg("--version");
            c
        })?;
        let dir = tempfile::tempdir().map_err(io("a temp dir"))?;
        let port = free_port()?;
        let mut config = format!(
            "version: 0.1\n\
             log:\n  level: warn\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: inrun-test-only\n",
            data = dir.path().join("data").display(),
        );
        let mut ca_pem = None;
        if let Some((user, password)) = auth {
            let certs = TestCerts::generate(dir.path())?;
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                certs.cert_file.display(),
                certs.key_file.display()
            ));
            let htpasswd = dir.path().join("htpasswd");
            write_htpasswd(&htpasswd, user, password)?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: inrun-test\n    path: {}\n",
                htpasswd.display()
            ));
            ca_pem = Some(certs.ca_pem);
        }
        let config_file = dir.path().join("config.yml");
        std::fs::write(&config_file, config).map_err(io("config.yml"))?;
        let mut sup = Supervisor::new(dir.path())?;
        let mut cmd = Command::new(server);
        cmd.arg("serve").arg(&config_file);
        // The package's defaults must not leak in through the environment.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("REGISTRY_") {
                cmd.env_remove(key);
            }
        }
        sup.spawn("docker-registry", cmd)?;
        until_connects("docker-registry", port, &mut sup).await?;
        Ok(Registry {
            host: format!("127.0.0.1:{port}"),
            ca_pem,
            version: version.trim().to_string(),
            _supervisor: sup,
            _dir: dir,
        })
    }

    /// `oci://127.0.0.1:PORT/<path>`, e.g. `reference("team/webapp:1")`.
    pub fn reference(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.host)
    }
}

/// A bcrypt htpasswd file with one user, written by `htpasswd -B` (apache2-utils); the
/// password goes through stdin, not the command line.
fn write_htpasswd(path: &Path, user: &str, password: &str) -> Result<(), ServiceError> {
    use std::io::Write;
    let htpasswd = which("htpasswd")?;
    let mut child = Command::new(&htpasswd)
        .args(["-B", "-i", "-c"])
        .arg(path)
        .arg(user)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(io("running htpasswd"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(password.as_bytes())
            .map_err(io("writing to htpasswd"))?;
    }
    let out = child.wait_with_output().map_err(io("running htpasswd"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ServiceError::Command {
            command: format!("{} -B -i -c {} {user}", htpasswd.display(), path.display()),
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}
