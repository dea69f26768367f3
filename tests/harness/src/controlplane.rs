//! The running control plane: the shared instance, clients for its users, namespaces for
//! tests.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::AuthInfo;
use kube::{Client, Config, ResourceExt};

use crate::startup::{StartError, chain, start_with_retries, wait_ready};
use crate::supervisor::{Supervisor, format_tails};

/// The user name behind [`ControlPlane::unprivileged_client`]; no RBAC rule names it.
pub const UNPRIVILEGED_USER: &str = "inrun-unprivileged";

/// The user name behind [`ControlPlane::client`], in group `system:masters`.
pub const ADMIN_USER: &str = "inrun-admin";

/// The control plane of [`ControlPlane::shared`], once started.
static SHARED: OnceLock<Result<ControlPlane, StartError>> = OnceLock::new();

/// The shared control plane if this process has started it (successfully).
pub(crate) fn shared_if_started() -> Option<&'static ControlPlane> {
    SHARED.get().and_then(|started| started.as_ref().ok())
}

/// A running etcd and kube-apiserver on 127.0.0.1, with a kubeconfig and two users: an
/// admin (group `system:masters`) and an unprivileged user with no RBAC grants.
///
/// The processes are not tied to any Tokio runtime; clients are made fresh for each
/// caller, so every `#[tokio::test]` (each with its own runtime) can use the same
/// control plane.
///
/// # Guarantees
///
/// The processes stop and the temporary directory is removed when the value is dropped
/// or when the process that started them exits or is killed, whichever comes first.
pub struct ControlPlane {
    pub(crate) dir: PathBuf,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) server: String,
    pub(crate) admin_token: String,
    pub(crate) admin: Config,
    pub(crate) unprivileged: Config,
    pub(crate) startup_time: Duration,
    pub(crate) supervisor: Mutex<Supervisor>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("server", &self.server)
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// The control plane shared by every test in this test binary, started on first use.
    /// Installs a panic hook that prints the end of the etcd and kube-apiserver logs when
    /// a test fails.
    ///
    /// # Panics
    ///
    /// When the control plane cannot start; the message says what failed (for missing
    /// binaries, the command that builds them). Every later call panics the same way.
    pub fn shared() -> &'static ControlPlane {
        let started = SHARED.get_or_init(|| {
            let started = ControlPlane::start();
            if let Ok(control_plane) = &started {
                control_plane.print_logs_on_panic();
            }
            started
        });
        match started {
            Ok(control_plane) => control_plane,
            Err(err) => panic!("could not start the test control plane: {}", chain(err)),
        }
    }

    /// Starts a new control plane and waits until `/readyz` answers `ok`. Blocks; may be
    /// called from inside or outside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// When the binaries are missing, a process exits early, or the API server is not
    /// ready in time (the error carries the end of the logs).
    pub fn start() -> Result<ControlPlane, StartError> {
        // A thread of its own: start-up needs a runtime for the readiness probe, and a
        // runtime cannot be started on a thread that is already inside one.
        match std::thread::spawn(start_with_retries).join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Stops kube-apiserver (SIGKILL), leaves it down for `down`, starts it again on the
    /// same port, etcd and certificates, and waits until `/readyz` answers `ok`. Returns how
    /// long the API server was away. Blocks; call it from outside a runtime's async code
    /// (`spawn_blocking`). Meant for a control plane of the test's own
    /// ([`ControlPlane::start`]), not the shared one.
    ///
    /// # Errors
    /// When it does not start again or is not ready in time.
    pub fn restart_apiserver(&self, down: Duration) -> Result<Duration, StartError> {
        let stopped = std::time::Instant::now();
        let mut supervisor = self.supervisor.lock().unwrap_or_else(|p| p.into_inner());
        supervisor.restart("kube-apiserver", down)?;
        let kubeconfig = self.kubeconfig.clone();
        let supervisor: &mut Supervisor = &mut supervisor;
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(StartError::Runtime)?;
                    runtime.block_on(wait_ready(&kubeconfig, supervisor))
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        Ok(stopped.elapsed())
    }

    /// A new client authenticated as the admin (`system:masters`).
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime (the client spawns a task).
    pub fn client(&self) -> Client {
        client_from(self.admin.clone())
    }

    /// The admin's client configuration (`system:masters`), e.g. to build clients that
    /// impersonate someone.
    pub fn admin_config(&self) -> Config {
        self.admin.clone()
    }

    /// A new client authenticated as [`UNPRIVILEGED_USER`], who has no RBAC grants: every
    /// request beyond discovery is refused with 403 until a test grants something.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime.
    pub fn unprivileged_client(&self) -> Client {
        client_from(self.unprivileged.clone())
    }

    /// A new client that sends `token` as its bearer token, e.g. a service account's
    /// token from the TokenRequest API.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime.
    pub fn client_with_token(&self, token: &str) -> Client {
        client_from(self.config_with_token(token))
    }

    /// The configuration of a client that sends `token` as its bearer token (the admin's
    /// server and CA, no other credentials).
    pub fn config_with_token(&self, token: &str) -> Config {
        let mut config = self.admin.clone();
        config.auth_info = token_auth(token);
        config
    }

    /// Creates a namespace named `<prefix>-<random suffix>` and returns its name. Give
    /// each test its own. Namespaces are never deleted: there is no namespace controller
    /// to finish a deletion, and everything goes away with the control plane.
    ///
    /// `prefix` must be a DNS label (lower case, digits, `-`).
    ///
    /// # Errors
    ///
    /// When the API server refuses the namespace.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime.
    pub async fn namespace(&self, prefix: &str) -> Result<String, kube::Error> {
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &namespace)
            .await?;
        Ok(created.name_any())
    }

    /// The kubeconfig file; its current context is the admin, and context
    /// `inrun-unprivileged` is the unprivileged user.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The admin's bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The API server's audit log (JSON lines): every write a ServiceAccount of
    /// [`crate::startup::AUDITED_NAMESPACE`] made, with its request, user and timestamps.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join(crate::startup::AUDIT_LOG)
    }

    /// The temporary directory holding the logs (`etcd.log`, `kube-apiserver.log`), the
    /// certificates and etcd's data; removed when the control plane stops.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long kube-apiserver took from being spawned to answering `/readyz` with `ok`.
    pub fn startup_time(&self) -> Duration {
        self.startup_time
    }

    /// The end of each process's log, as printed when a test fails.
    pub fn log_tails(&self) -> String {
        let logs = match self.supervisor.lock() {
            Ok(supervisor) => supervisor.logs(),
            Err(poisoned) => poisoned.into_inner().logs(),
        };
        format_tails(&logs)
    }

    fn print_logs_on_panic(&self) {
        let logs = match self.supervisor.lock() {
            Ok(supervisor) => supervisor.logs(),
            Err(poisoned) => poisoned.into_inner().logs(),
        };
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            // In a test thread this goes to the test's captured output, shown only
            // for the failing test.
            eprintln!("{}", format_tails(&logs));
        }));
    }
}

fn client_from(config: Config) -> Client {
    Client::try_from(config).expect(
        "this config already built a client that reached /readyz; a Tokio runtime is needed",
    )
}

fn token_auth(token: &str) -> AuthInfo {
    // `AuthInfo::token` is a `secrecy::SecretString`; deserializing avoids depending on
    // that crate just to build one.
    serde_json::from_value(serde_json::json!({ "token": token }))
        .expect("an object with a string token is a valid AuthInfo")
}
