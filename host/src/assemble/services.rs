//! What assembled reconcilers reach outside the host with: an HTTP client and a source of
//! secret values.

use std::sync::Arc;

use crate::external::Clients;
use crate::secrets::{Secrets, StaticSecrets};

/// Shared clients for remote reconcilers and `reconcile.external` calls.
#[derive(Clone)]
pub struct Services {
    /// Where bearer tokens and connection URLs come from.
    pub secrets: Arc<dyn Secrets>,
    /// The HTTP client (rustls), shared so connections are reused.
    pub http: reqwest::Client,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services").finish_non_exhaustive()
    }
}

impl Services {
    /// Services reading secrets from `secrets`.
    pub fn new(secrets: Arc<dyn Secrets>) -> Self {
        // Building a rustls client with bundled roots does not fail in practice; should it,
        // the default client is the same minus the user agent.
        let http = crate::reconcilers::remote::http_client().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "building the HTTP client; using the default one");
            reqwest::Client::new()
        });
        Services { secrets, http }
    }

    /// No secret values at all: for validation, and rendering without `--secret`.
    pub fn offline() -> Self {
        Services::new(Arc::new(StaticSecrets::new()))
    }

    /// The clients external calls use.
    pub fn clients(&self) -> Clients {
        Clients {
            http: self.http.clone(),
            secrets: self.secrets.clone(),
        }
    }
}
