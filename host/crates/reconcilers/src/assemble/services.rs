//! What assembled reconcilers reach outside the host with: HTTP clients, a source of
//! secret values, plugin sources, and the reader that serves plugins' cluster reads.

use std::sync::Arc;

use crate::external::{CannedExternal, Clients};
use crate::secrets::{Secrets, StaticSecrets};
use crate::sources::{SourceOptions, Sources};
use inrun_wasm::{CannedHttp, ClusterReader, NoCluster};

/// Shared clients for remote reconcilers and `reconcile.external` calls.
#[derive(Clone)]
pub struct Services {
    /// Where bearer tokens and connection URLs come from.
    pub secrets: Arc<dyn Secrets>,
    /// The HTTP client (rustls), shared so connections are reused.
    pub http: reqwest::Client,
    /// Where plugin modules are fetched from (files, pinned HTTPS, OCI registries).
    pub sources: Sources,
    /// Where plugins granted `capabilities.cluster` read objects from: the watch cache
    /// under `inrun run`, nothing offline.
    pub cluster: Arc<dyn ClusterReader>,
    /// The client for plugins granted `capabilities.http`: it follows no redirects.
    pub plugin_http: reqwest::Client,
    /// Canned answers for plugins' HTTP requests (offline testing): when set, no plugin
    /// request is sent; the grants still decide which are allowed.
    pub canned_http: Option<Arc<dyn CannedHttp>>,
    /// Canned results for `reconcile.external` calls (offline testing): when set, no call
    /// reaches anything.
    pub canned_external: Option<Arc<dyn CannedExternal>>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services").finish_non_exhaustive()
    }
}

impl Services {
    /// Services reading secrets from `secrets`, fetching plugins with default options
    /// (public roots, HTTPS registries only).
    ///
    /// # Panics
    /// Never in practice: the default options hold nothing that could be refused.
    pub fn new(secrets: Arc<dyn Secrets>) -> Self {
        Self::with_sources(secrets, SourceOptions::default())
            .expect("the default plugin source client builds")
    }

    /// Services reading secrets from `secrets`, fetching plugins with `options` (extra
    /// trusted roots, registries spoken over plain HTTP).
    ///
    /// # Errors
    /// [`SourceError`](crate::sources::SourceError) when `options` cannot be used (a trusted root that is not PEM): the
    /// operator's option is refused, never replaced by defaults.
    pub fn with_sources(
        secrets: Arc<dyn Secrets>,
        options: SourceOptions,
    ) -> Result<Self, crate::sources::SourceError> {
        // Building a rustls client with bundled roots does not fail in practice; should it,
        // the default client is the same minus the user agent.
        let http = crate::http::http_client().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "building the HTTP client; using the default one");
            reqwest::Client::new()
        });
        let sources = Sources::new(secrets.clone(), options)?;
        let plugin_http = inrun_wasm::http_client().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "building the plugin HTTP client; using a plain one");
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default()
        });
        Ok(Services {
            secrets,
            http,
            sources,
            cluster: Arc::new(NoCluster),
            plugin_http,
            canned_http: None,
            canned_external: None,
        })
    }

    /// The same services, with plugins' cluster reads served by `reader`.
    #[must_use]
    pub fn with_cluster(mut self, reader: Arc<dyn ClusterReader>) -> Self {
        self.cluster = reader;
        self
    }

    /// The same services, with plugins' HTTP requests answered by `canned` instead of
    /// sent.
    #[must_use]
    pub fn with_canned_http(mut self, canned: Arc<dyn CannedHttp>) -> Self {
        self.canned_http = Some(canned);
        self
    }

    /// The same services, with `reconcile.external` calls answered by `canned` instead of
    /// made.
    #[must_use]
    pub fn with_canned_external(mut self, canned: Arc<dyn CannedExternal>) -> Self {
        self.canned_external = Some(canned);
        self
    }

    /// No secret values and no cluster: for validation, and rendering without `--secret`.
    pub fn offline() -> Self {
        Services::new(Arc::new(StaticSecrets::new()))
    }

    /// The clients external calls use.
    pub fn clients(&self) -> Clients {
        Clients {
            http: self.http.clone(),
            secrets: self.secrets.clone(),
            egress: None,
            canned: self.canned_external.clone(),
        }
    }
}
