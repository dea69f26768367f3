//! Connecting to the API server and waiting for a shutdown signal: the edges `inrun run`
//! needs before the runtime starts.

use std::path::Path;

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
    /// Neither a kubeconfig nor in-cluster configuration was found.
    #[error("no kubeconfig given and none found (KUBECONFIG, ~/.kube/config, in-cluster)")]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built.
    #[error("building the Kubernetes client")]
    Client(#[source] kube::Error),
}

/// A client from `path`, or from the environment (`KUBECONFIG`, `~/.kube/config`, in-cluster
/// service account, whose token file is re-read as it rotates).
///
/// # Errors
/// [`ConnectError`].
pub async fn client(path: Option<&Path>) -> Result<Client, ConnectError> {
    connect(path).await.map(|c| c.client)
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
    pub fence: crate::fence::Fence,
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
pub async fn connect(path: Option<&Path>) -> Result<Connection, ConnectError> {
    let config = match path {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ConnectError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(ConnectError::Load)?
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
    let fence = crate::fence::Fence::default();
    let client = crate::fence::client(config.clone(), &fence).map_err(ConnectError::Client)?;
    let lease_client = Client::try_from(config.clone()).map_err(ConnectError::Client)?;
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
