//! Real PostgreSQL, Redis and Prometheus servers for tests of external inputs: each
//! started from its Debian package's binary on a free 127.0.0.1 port, in a temp dir,
//! and stopped (with its data) when dropped or when the test binary ends.
//!
//! A missing binary is an error naming [`INSTALL_COMMAND`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::supervisor::{self, Supervisor};
use crate::wait::wait_for;

/// The command that installs the servers, as a person would type it from the repo root.
pub const INSTALL_COMMAND: &str = "tests/services/install.sh";

/// How long a server may take to accept connections.
const READY: Duration = Duration::from_secs(30);

/// Failures to start a server.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The server's binary is not installed.
    #[error("{binary} is not installed; run `{INSTALL_COMMAND}`")]
    Missing {
        /// What was looked for.
        binary: String,
    },
    /// Preparing the server's directory or files failed.
    #[error("preparing {what}")]
    Io {
        /// What was being prepared.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A setup command (initdb, psql, redis-cli) failed.
    #[error("{command} failed: {output}")]
    Command {
        /// The command.
        command: String,
        /// Its output.
        output: String,
    },
    /// The process could not be started or exited.
    #[error(transparent)]
    Process(#[from] supervisor::Error),
    /// The server did not become ready in time.
    #[error("{name} did not become ready; the end of its log:\n{tail}")]
    NotReady {
        /// Which server.
        name: &'static str,
        /// The end of its log.
        tail: String,
    },
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}

/// A port nothing listens on right now.
pub(crate) fn free_port() -> Result<u16, ServiceError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("a free port"))?;
    Ok(l.local_addr().map_err(io("a free port"))?.port())
}

pub(crate) fn which(binary: &str) -> Result<PathBuf, ServiceError> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(binary))
        .find(|p| p.is_file())
        .ok_or_else(|| ServiceError::Missing {
            binary: binary.to_string(),
        })
}

pub(crate) fn run(mut command: Command) -> Result<String, ServiceError> {
    let text = format!("{command:?}");
    let out = command.output().map_err(io(text.clone()))?;
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(output)
    } else {
        Err(ServiceError::Command {
            command: text,
            output,
        })
    }
}

pub(crate) async fn until_connects(
    name: &'static str,
    port: u16,
    sup: &mut Supervisor,
) -> Result<(), ServiceError> {
    let ready = wait_for(name, READY, || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    sup.check_running()?;
    ready.map_err(|_| ServiceError::NotReady {
        name,
        tail: supervisor::format_tails(&sup.logs()),
    })
}

/// A PostgreSQL server; user `postgres`, trust authentication, database `postgres`.
pub struct Postgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub url: String,
    /// The server's version line.
    pub version: String,
    bin: PathBuf,
    port: u16,
    _supervisor: Supervisor,
    _dir: tempfile::TempDir,
}

impl Postgres {
    /// Runs `initdb` and starts `postgres`. As root, both run as the `postgres` user
    /// (`setpriv`), since PostgreSQL refuses to run as root.
    ///
    /// # Errors
    /// [`ServiceError`], naming the install command when PostgreSQL is missing.
    pub async fn start() -> Result<Self, ServiceError> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").is_file())
            .max()
            .ok_or_else(|| ServiceError::Missing {
                binary: "postgresql (initdb)".into(),
            })?;
        let dir = tempfile::tempdir().map_err(io("a temp dir"))?;
        let data = dir.path().join("data");
        let as_postgres = as_user_command(dir.path())?;
        let mut initdb = as_postgres(&bin.join("initdb"));
        initdb.args(["-D"]).arg(&data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ]);
        run(initdb)?;
        let port = free_port()?;
        let mut sup = Supervisor::new(dir.path())?;
        let mut postgres = as_postgres(&bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]);
        sup.spawn("postgres", postgres)?;
        until_connects("postgres", port, &mut sup).await?;
        let pg = Postgres {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            version: String::new(),
            bin,
            port,
            _supervisor: sup,
            _dir: dir,
        };
        // Accepting TCP is not accepting queries: the server may still be starting up.
        let version = wait_for("postgres to answer queries", READY, || async {
            pg.psql("SHOW server_version").ok()
        })
        .await
        .map_err(|_| ServiceError::NotReady {
            name: "postgres",
            tail: String::new(),
        })?;
        Ok(Postgres {
            version: format!("PostgreSQL {}", version.trim()),
            ..pg
        })
    }

    /// Runs SQL with `psql` and returns its unaligned output.
    ///
    /// # Errors
    /// [`ServiceError::Command`] with psql's output.
    pub fn psql(&self, sql: &str) -> Result<String, ServiceError> {
        let psql = self.bin.join("psql");
        let mut cmd = Command::new(if psql.is_file() { psql } else { "psql".into() });
        cmd.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h"])
            .args(["127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres"])
            .args(["-d", "postgres", "-c", sql]);
        run(cmd)
    }
}

/// As root: a command that runs `program` as the `postgres` user, with `dir` handed to
/// it. Otherwise: the program as it is.
fn as_user_command(dir: &Path) -> Result<impl Fn(&Path) -> Command + use<>, ServiceError> {
    let root = run({
        let mut c = Command::new("id");
        c.arg("-u");
        c
    })?
    .trim()
        == "0";
    if root {
        let mut chown = Command::new("chown");
        chown.arg("-R").arg("postgres:").arg(dir);
        run(chown)?;
    }
    Ok(move |program: &Path| {
        if root {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ])
            .arg(program);
            c
        } else {
            Command::new(program)
        }
    })
}

/// A Redis server with no persistence.
pub struct Redis {
    /// `redis://127.0.0.1:PORT/`.
    pub url: String,
    /// The server's version line.
    pub version: String,
    port: u16,
    _supervisor: Supervisor,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Starts `redis-server` on a free port.
    ///
    /// # Errors
    /// [`ServiceError`], naming the install command when Redis is missing.
    pub async fn start() -> Result<Self, ServiceError> {
        let server = which("redis-server")?;
        let version = run({
            let mut c = Command::new(&server);
            c.arg("--version");
            c
        })?;
        let dir = tempfile::tempdir().map_err(io("a temp dir"))?;
        let port = free_port()?;
        let mut sup = Supervisor::new(dir.path())?;
        let mut cmd = Command::new(server);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path());
        sup.spawn("redis", cmd)?;
        until_connects("redis", port, &mut sup).await?;
        Ok(Redis {
            url: format!("redis://127.0.0.1:{port}/"),
            version: version.trim().to_string(),
            port,
            _supervisor: sup,
            _dir: dir,
        })
    }

    /// Runs one command with `redis-cli`.
    ///
    /// # Errors
    /// [`ServiceError`] when redis-cli is missing or fails.
    pub fn cli(&self, args: &[&str]) -> Result<String, ServiceError> {
        let mut cmd = Command::new(which("redis-cli")?);
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args);
        run(cmd)
    }
}

/// A Prometheus server that scrapes itself every second, so instant queries have data.
pub struct Prometheus {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The server's version line.
    pub version: String,
    port: u16,
    _supervisor: Supervisor,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts `prometheus` on a free port and waits until its first scrape is stored.
    ///
    /// # Errors
    /// [`ServiceError`], naming the install command when Prometheus is missing.
    pub async fn start() -> Result<Self, ServiceError> {
        let server = which("prometheus")?;
        let version = run({
            let mut c = Command::new(&server);
            c.arg("--version");
            c
        })?;
        let dir = tempfile::tempdir().map_err(io("a temp dir"))?;
        let port = free_port()?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: prometheus\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            ),
        )
        .map_err(io("prometheus.yml"))?;
        let mut sup = Supervisor::new(dir.path())?;
        let mut cmd = Command::new(server);
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
        sup.spawn("prometheus", cmd)?;
        until_connects("prometheus", port, &mut sup).await?;
        let prom = Prometheus {
            url: format!("http://127.0.0.1:{port}"),
            version: version.lines().next().unwrap_or_default().to_string(),
            port,
            _supervisor: sup,
            _dir: dir,
        };
        let has_data = wait_for("prometheus's first scrape", READY, || async {
            let body = prom.get("/api/v1/query?query=up").await?;
            body.contains("\"job\":\"prometheus\"").then_some(())
        })
        .await;
        match has_data {
            Ok(()) => Ok(prom),
            Err(_) => Err(ServiceError::NotReady {
                name: "prometheus",
                tail: supervisor::format_tails(&prom._supervisor.logs()),
            }),
        }
    }

    /// A plain HTTP/1.0 GET of `path`; the body, or `None` on any failure.
    async fn get(&self, path: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    }
}
