//! Which API resource serves an apiVersion/kind, and whether it is namespaced: asked of
//! the API server once per kind and remembered; and the resources the host knows without
//! asking (a Blueprint's CRs, Blueprint resources).

use std::collections::HashMap;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use tokio::sync::RwLock;

/// A CRD's CR resource, from the Blueprint.
pub fn cr_resource(crd: &inrun_blueprint::CrdSpec) -> ApiResource {
    ApiResource {
        group: crd.group.clone(),
        version: crd.version.clone(),
        api_version: crd.api_version(),
        kind: crd.kind.clone(),
        plural: crd.plural(),
    }
}

/// How to address `Blueprint` resources.
pub fn blueprint_resource() -> ApiResource {
    ApiResource {
        group: "inrun.dev".into(),
        version: "v1alpha1".into(),
        api_version: "inrun.dev/v1alpha1".into(),
        kind: "Blueprint".into(),
        plural: "blueprints".into(),
    }
}

/// A kind the API server does not serve.
#[derive(Debug, thiserror::Error)]
#[error("the API server does not serve kind {kind} in apiVersion {api_version}")]
pub struct UnknownKind {
    /// The apiVersion asked for.
    pub api_version: String,
    /// The kind asked for.
    pub kind: String,
    /// The discovery error.
    #[source]
    pub source: inrun_reconcilers::api::ApiFailure,
}

impl UnknownKind {
    /// Whether the API server answered that it does not serve the kind (rather than
    /// failing to answer).
    pub fn not_served(&self) -> bool {
        match &self.source.0 {
            kube::Error::Api(status) => status.code == 404,
            kube::Error::Discovery(_) => true,
            _ => false,
        }
    }
}

/// A resolved kind.
#[derive(Debug, Clone)]
pub struct Kind {
    /// How to address it.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// A cache of discovered kinds, shared by every CRD's controller.
#[derive(Debug, Default)]
pub struct Kinds {
    known: RwLock<HashMap<(String, String), Kind>>,
}

impl Kinds {
    /// Resolves `api_version`/`kind`, asking the API server the first time.
    ///
    /// # Errors
    /// [`UnknownKind`] when the server does not serve it (or cannot be asked).
    pub async fn resolve(
        &self,
        client: &Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Kind, UnknownKind> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(k) = self.known.read().await.get(&key) {
            return Ok(k.clone());
        }
        let (group, version) = inrun_contract::api_version::split(api_version);
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) =
            kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|source| UnknownKind {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                    source: source.into(),
                })?;
        let resolved = Kind {
            resource,
            namespaced: matches!(caps.scope, Scope::Namespaced),
        };
        self.known.write().await.insert(key, resolved.clone());
        Ok(resolved)
    }
}
