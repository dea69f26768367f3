//! Connecting to the API server and waiting for a shutdown signal: the edges `inrun run`
//! needs before the runtime starts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig file could not be read.
    #[error("reading kubeconfig {}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig is not usable.
    #[error("loading kubeconfig")]
    Load(#[source] kube::config::KubeconfigError),
    /// The kubeconfig has no usable context of that name.
    #[error("kubeconfig context {name:?}")]
    Context {
        /// The context asked for.
        name: String,
        /// Why it cannot be used.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor in-cluster configuration was found.
    #[error("no kubeconfig given and none found (KUBECONFIG, ~/.kube/config, in-cluster)")]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built.
    #[error("building the Kubernetes client")]
    Client(#[source] kube::Error),
    /// Several contexts, none named, and no in-cluster credentials: which cluster to act
    /// on is not guessed.
    #[error(
        "the kubeconfig has {} contexts ({}) and none is named: say which cluster to act on with --context",
        .0.len(),
        .0.join(", ")
    )]
    AmbiguousContext(Vec<String>),
}

/// Whether in-cluster credentials are there (a pod's ServiceAccount token and the API
/// server's address in the environment).
fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
}

/// Refuses `options` that name no context when the kubeconfig they would read has more
/// than one and there are no in-cluster credentials: a host acting on the wrong cluster
/// writes there, so the choice is the operator's, not the kubeconfig's current context.
///
/// # Errors
/// [`ConnectError::AmbiguousContext`] naming the contexts; a kubeconfig that cannot be
/// read is left to [`connect`] to report.
pub fn ensure_explicit_context(options: &ConnectOptions) -> Result<(), ConnectError> {
    if options.context.is_some() || (options.kubeconfig.is_none() && in_cluster()) {
        return Ok(());
    }
    let read = match &options.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    };
    let Ok(kubeconfig) = read else {
        return Ok(());
    };
    let names: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    if names.len() > 1 {
        return Err(ConnectError::AmbiguousContext(names));
    }
    Ok(())
}

/// How to reach the API server.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// A kubeconfig file; else `$KUBECONFIG`, `~/.kube/config`, or in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current one.
    pub context: Option<String>,
    /// How long a request may take (every request but a watch); `None`: no bound beyond
    /// the client's own read timeout.
    pub request_timeout: Option<Duration>,
}

impl ConnectOptions {
    /// Options reading `path` (or the environment), nothing else set.
    pub fn file(path: Option<&Path>) -> Self {
        ConnectOptions {
            kubeconfig: path.map(Path::to_path_buf),
            ..ConnectOptions::default()
        }
    }
}

/// A client from `path`, or from the environment (`KUBECONFIG`, `~/.kube/config`, in-cluster
/// service account). A token file (`tokenFile` in the kubeconfig, or the in-cluster
/// service-account token) is read again as it rotates.
///
/// # Errors
/// [`ConnectError`].
pub async fn client(path: Option<&Path>) -> Result<Client, ConnectError> {
    connect(&ConnectOptions::file(path)).await.map(|c| c.client)
}

/// A connection to the API server: the client, the configuration it was built from (for
/// clients that act as tenants' ServiceAccounts), and the addresses the API server is
/// reached at.
#[derive(Clone)]
pub struct Connection {
    /// The host's client; it writes only while `fence` is open.
    pub client: Client,
    /// The same credentials without the fence: for the leader-election Lease only.
    pub lease_client: Client,
    /// What leader election closes when this replica does not lead.
    pub fence: inrun_ring::fence::Fence,
    /// Its configuration.
    pub config: Config,
    /// The API server's addresses: what tenants' calls may not reach.
    pub apiserver: Vec<std::net::IpAddr>,
}

/// [`client`], its configuration, and the addresses the API server is reached at (its
/// URL's host resolved, and `$KUBERNETES_SERVICE_HOST` in a pod).
///
/// # Errors
/// [`ConnectError`].
pub async fn connect(options: &ConnectOptions) -> Result<Connection, ConnectError> {
    connect_recording(options, None).await
}

/// [`connect`], every client built on the connection (the Lease's, and those acting as
/// tenants' ServiceAccounts) counting its requests into `metrics`.
///
/// # Errors
/// [`ConnectError`].
pub async fn connect_recording(
    options: &ConnectOptions,
    metrics: Option<&inrun_observe::metrics::Metrics>,
) -> Result<Connection, ConnectError> {
    let kubeconfig = match (&options.kubeconfig, &options.context) {
        (Some(path), _) => {
            Some(
                Kubeconfig::read_from(path).map_err(|source| ConnectError::Read {
                    path: path.clone(),
                    source,
                })?,
            )
        }
        // A context names an entry of the environment's kubeconfig.
        (None, Some(_)) => Some(Kubeconfig::read().map_err(ConnectError::Load)?),
        (None, None) => None,
    };
    let config = match kubeconfig {
        Some(kc) => {
            let chosen = KubeConfigOptions {
                context: options.context.clone(),
                ..KubeConfigOptions::default()
            };
            Config::from_custom_kubeconfig(kc, &chosen)
                .await
                .map_err(|source| match &options.context {
                    Some(name) => ConnectError::Context {
                        name: name.clone(),
                        source,
                    },
                    None => ConnectError::Load(source),
                })?
        }
        None => Config::infer().await.map_err(ConnectError::Infer)?,
    };
    let mut hosts: Vec<String> = config
        .cluster_url
        .host()
        .map(str::to_string)
        .into_iter()
        .collect();
    hosts.extend(std::env::var("KUBERNETES_SERVICE_HOST").ok());
    let mut addresses = Vec::new();
    for host in hosts {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse() {
            Ok(ip) => addresses.push(ip),
            Err(_) => {
                if let Ok(found) = tokio::net::lookup_host((bare, 0)).await {
                    addresses.extend(found.map(|a| a.ip()));
                }
            }
        }
    }
    let requests = match (metrics, config.cluster_url.authority()) {
        (Some(m), Some(host)) => m.count_requests(host.as_str()),
        _ => inrun_observe::metrics::CountRequests::none(),
    };
    let fence = inrun_ring::fence::Fence::default()
        .with_request_timeout(options.request_timeout)
        .counting(requests.clone());
    let client = inrun_ring::fence::client(config.clone(), &fence).map_err(ConnectError::Client)?;
    let lease_client = kube::client::ClientBuilder::try_from(config.clone())
        .map_err(ConnectError::Client)?
        .with_layer(&requests)
        .build();
    Ok(Connection {
        client,
        lease_client,
        fence,
        config,
        apiserver: addresses,
    })
}

/// Resolves on the first SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
