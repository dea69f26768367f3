//! Start-up of the control plane: files, keys and ports, the two processes with the
//! envtest flags, and the wait for `/readyz`.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::binaries::{self, Binaries};
use crate::controlplane::{ADMIN_USER, ControlPlane, UNPRIVILEGED_USER};
use crate::supervisor::{self, Supervisor, format_tails};

/// How long the API server may take from spawn to a ready `/readyz`. Generous because the
/// machines that run tests are small and shared; a healthy start takes a few seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Context names in the written kubeconfig.
const ADMIN_CONTEXT: &str = "inrun";
const UNPRIVILEGED_CONTEXT: &str = "inrun-unprivileged";

/// Failures to start the control plane.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The binaries could not be found or built.
    #[error("no control plane binaries")]
    Binaries(#[from] binaries::Error),
    /// A file in the temporary directory could not be written.
    #[error("could not write {}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// `openssl` could not generate the service-account signing key.
    #[error("`openssl ecparam -genkey` failed to make the service-account key ({0})")]
    Keygen(String),
    /// A process failed to start or exited during start-up.
    #[error("control plane process failed")]
    Process(#[from] supervisor::Error),
    /// The written kubeconfig could not be loaded back.
    #[error("could not load the kubeconfig {}", path.display())]
    Kubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// `/readyz` did not answer `ok` in time.
    #[error("kube-apiserver was not ready after {after:?} (last answer: {last}){logs}")]
    NotReady {
        /// How long we waited.
        after: Duration,
        /// The last error or answer from `/readyz`.
        last: String,
        /// The end of both logs.
        logs: String,
    },
    /// No free loopback port could be found.
    #[error("could not find a free port on 127.0.0.1")]
    Port(#[source] io::Error),
    /// `/dev/urandom` could not be read for the bearer tokens.
    #[error("could not read /dev/urandom for a token")]
    Random(#[source] io::Error),
    /// The start-up thread's Tokio runtime could not be built.
    #[error("could not build a Tokio runtime for start-up")]
    Runtime(#[source] io::Error),
}

/// Starts the control plane, trying again with new ports when one was taken between
/// choosing it and binding it (another test binary may be starting at the same time).
pub(crate) fn start_with_retries() -> Result<ControlPlane, StartError> {
    let binaries = Binaries::locate()?;
    let mut attempts = 0;
    loop {
        attempts += 1;
        match start_once(&binaries) {
            Err(StartError::Process(supervisor::Error::Exited { ref tail, .. }))
                if attempts < 3 && tail.contains("address already in use") => {}
            result => return result,
        }
    }
}

/// The namespace whose ServiceAccounts' writes the API server's audit log records.
pub const AUDITED_NAMESPACE: &str = "inrun-audited";

/// The audit log's file name in the control plane's directory.
pub(crate) const AUDIT_LOG: &str = "audit.log";

/// Every write (with its request body) by a ServiceAccount of [`AUDITED_NAMESPACE`], once
/// answered; nothing else.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Request
    userGroups: ["system:serviceaccounts:inrun-audited"]
    verbs: ["create", "update", "patch", "delete"]
  - level: None
"#;

fn start_once(binaries: &Binaries) -> Result<ControlPlane, StartError> {
    let dir = tempfile::Builder::new()
        .prefix("inrun-controlplane-")
        .tempdir()
        .map_err(|source| StartError::Write {
            path: std::env::temp_dir(),
            source,
        })?
        // Removed by the supervisor's watchdog, which outlives us if we are killed.
        .keep();
    let mut supervisor = Supervisor::new(&dir)?;

    let [etcd_port, apiserver_port] = free_ports()?;
    let server = format!("https://127.0.0.1:{apiserver_port}");
    let admin_token = random_token()?;
    let unprivileged_token = random_token()?;

    let tokens = dir.join("tokens.csv");
    write_private(
        &tokens,
        &format!(
            "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
             {unprivileged_token},{UNPRIVILEGED_USER},{UNPRIVILEGED_USER}\n"
        ),
    )?;
    let sa_key = dir.join("service-account.key");
    generate_service_account_key(&sa_key)?;
    let audit_policy = dir.join("audit-policy.yaml");
    write_private(&audit_policy, AUDIT_POLICY)?;
    let cert_dir = dir.join("certs");
    let kubeconfig = dir.join("kubeconfig");
    write_private(
        &kubeconfig,
        &kubeconfig_json(&server, &cert_dir, &admin_token, &unprivileged_token),
    )?;

    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let mut etcd = Command::new(&binaries.etcd);
    etcd.arg("--name=inrun")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={etcd_url}"))
        .arg(format!("--advertise-client-urls={etcd_url}"))
        // Port 0: a single member never talks to peers, and a fixed port would collide.
        .arg("--listen-peer-urls=http://127.0.0.1:0")
        // Throwaway data: durability buys nothing and fsync is slow on shared disks.
        .arg("--unsafe-no-fsync")
        // Info level is a page per start-up; warnings are what a failing test needs.
        .arg("--log-level=warn");
    supervisor.spawn("etcd", etcd)?;

    let mut apiserver = Command::new(&binaries.kube_apiserver);
    apiserver
        .arg(format!("--etcd-servers={etcd_url}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={apiserver_port}"))
        // The API server writes a self-signed serving certificate and its CA here; the
        // kubeconfig trusts that file.
        .arg(format!("--cert-dir={}", cert_dir.display()))
        .arg(format!("--token-auth-file={}", tokens.display()))
        .arg("--authorization-mode=RBAC")
        .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
        .arg(format!("--service-account-key-file={}", sa_key.display()))
        .arg(format!(
            "--service-account-signing-key-file={}",
            sa_key.display()
        ))
        .arg("--service-cluster-ip-range=10.0.0.0/24")
        .arg("--allow-privileged=true")
        // No controller manager makes default service accounts, so Pods could not be
        // admitted with this plugin on.
        .arg("--disable-admission-plugins=ServiceAccount")
        // KEP-5866 sharded list and watch (`shardSelector`), alpha in v1.36: the sharding
        // tests check the server keeps the CRs Inrun's buckets name.
        .arg("--feature-gates=ShardedListAndWatch=true")
        // Writes of ServiceAccounts in AUDITED_NAMESPACE only, for tests that check who
        // wrote what, in the API server's own order.
        .arg(format!("--audit-policy-file={}", audit_policy.display()))
        .arg(format!(
            "--audit-log-path={}",
            dir.join(AUDIT_LOG).display()
        ))
        .arg("--audit-log-format=json");
    let spawned = Instant::now();
    supervisor.spawn("kube-apiserver", apiserver)?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let (admin, unprivileged) = runtime.block_on(wait_ready(&kubeconfig, &mut supervisor))?;
    let startup_time = spawned.elapsed();
    tracing::info!(%server, ?startup_time, "control plane ready");

    Ok(ControlPlane {
        dir,
        kubeconfig,
        server,
        admin_token,
        admin,
        unprivileged,
        startup_time,
        supervisor: Mutex::new(supervisor),
    })
}

/// Polls `/readyz` until it answers `ok`, a process exits, or [`READY_TIMEOUT`] passes.
/// Returns the admin and unprivileged configs, loaded once the CA file exists.
pub(crate) async fn wait_ready(
    kubeconfig_path: &Path,
    supervisor: &mut Supervisor,
) -> Result<(Config, Config), StartError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(20);
    loop {
        supervisor.check_running()?;
        // The config is reloaded each round: it reads the CA file, which the API server
        // writes only once it is starting to serve.
        let last = match load_config(kubeconfig_path, ADMIN_CONTEXT).await {
            Ok(config) => match probe_readyz(config.clone()).await {
                Ok(()) => {
                    let unprivileged = load_config(kubeconfig_path, UNPRIVILEGED_CONTEXT).await?;
                    return Ok((config, unprivileged));
                }
                Err(answer) => answer,
            },
            Err(err) => chain(&err),
        };
        if started.elapsed() > READY_TIMEOUT {
            return Err(StartError::NotReady {
                after: READY_TIMEOUT,
                last,
                logs: format_tails(&supervisor.logs()),
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
}

/// `Ok` when `/readyz` answers `ok`; otherwise the answer or error, for the report.
async fn probe_readyz(config: Config) -> Result<(), String> {
    let client = Client::try_from(config).map_err(|e| chain(&e))?;
    // `Request::list` is a plain GET of the path (with an empty query), which is all
    // `/readyz` needs; it saves a direct dependency on the `http` crate.
    let request = kube::core::Request::new("/readyz")
        .list(&ListParams::default())
        .map_err(|e| chain(&e))?;
    match tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await {
        Ok(Ok(body)) if body.trim() == "ok" => Ok(()),
        Ok(Ok(body)) => Err(body),
        Ok(Err(err)) => Err(chain(&err)),
        Err(_) => Err("/readyz did not answer within 5s".to_owned()),
    }
}

async fn load_config(path: &Path, context: &str) -> Result<Config, StartError> {
    let to_error = |source| StartError::Kubeconfig {
        path: path.to_owned(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(to_error)?;
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..KubeConfigOptions::default()
    };
    Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(to_error)
}

/// A kubeconfig in JSON (which kubectl reads like YAML) with an admin context (current)
/// and an unprivileged one.
fn kubeconfig_json(server: &str, cert_dir: &Path, admin: &str, unprivileged: &str) -> String {
    let context = |name: &str, user: &str| {
        serde_json::json!({
            "name": name,
            "context": { "cluster": "inrun", "user": user, "namespace": "default" },
        })
    };
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "inrun",
            "cluster": {
                "server": server,
                "certificate-authority": cert_dir.join("apiserver.crt"),
            },
        }],
        "users": [
            { "name": ADMIN_USER, "user": { "token": admin } },
            { "name": UNPRIVILEGED_USER, "user": { "token": unprivileged } },
        ],
        "contexts": [
            context(ADMIN_CONTEXT, ADMIN_USER),
            context(UNPRIVILEGED_CONTEXT, UNPRIVILEGED_USER),
        ],
        "current-context": ADMIN_CONTEXT,
    });
    format!("{kubeconfig:#}\n")
}

/// An EC P-256 key: quicker to make than RSA, and accepted for service-account tokens
/// (ES256). The API server reads the public half from the same file.
fn generate_service_account_key(path: &Path) -> Result<(), StartError> {
    let output = Command::new("openssl")
        .args([
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
        ])
        .arg(path)
        .output()
        .map_err(|e| StartError::Keygen(format!("could not run openssl: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(StartError::Keygen(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

fn write_private(path: &Path, contents: &str) -> Result<(), StartError> {
    let write = || -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(contents.as_bytes())
    };
    write().map_err(|source| StartError::Write {
        path: path.to_owned(),
        source,
    })
}

/// `N` distinct ports that were free a moment ago (the listeners are held together so the
/// kernel cannot hand out one twice). Another process may take one before the server
/// binds it; [`start_with_retries`] handles that.
fn free_ports<const N: usize>() -> Result<[u16; N], StartError> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<io::Result<Vec<_>>>()
        .map_err(StartError::Port)?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(StartError::Port)?.port();
    }
    Ok(ports)
}

/// 128 random bits in hex, for bearer tokens.
fn random_token() -> Result<String, StartError> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(StartError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// An error and its sources, joined by `: `.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_has_a_current_admin_context_and_an_unprivileged_one() {
        let json = kubeconfig_json("https://127.0.0.1:1", Path::new("/certs"), "adm", "unp");
        let kubeconfig = Kubeconfig::from_yaml(&json).expect("the kubeconfig parses");
        assert_eq!(kubeconfig.current_context.as_deref(), Some(ADMIN_CONTEXT));
        let users: Vec<_> = kubeconfig
            .contexts
            .iter()
            .filter_map(|c| Some((c.name.as_str(), c.context.as_ref()?.user.clone()?)))
            .collect();
        assert_eq!(
            users,
            [
                (ADMIN_CONTEXT, ADMIN_USER.to_owned()),
                (UNPRIVILEGED_CONTEXT, UNPRIVILEGED_USER.to_owned())
            ]
        );
        let cluster = kubeconfig.clusters[0].cluster.as_ref().expect("a cluster");
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/certs/apiserver.crt")
        );
    }

    #[test]
    fn free_ports_are_distinct() {
        let [a, b] = free_ports().expect("two free ports");
        assert_ne!(a, b);
    }
}
