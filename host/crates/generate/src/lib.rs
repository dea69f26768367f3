//! Manifests an operator applies before running the host: the Blueprint's CRDs, the
//! minimal RBAC the host needs for it, the roles of the people who create its CRs, and the
//! API Priority and Fairness objects that give each tenant a flow of its own ([`apf`]).
//! Pure functions of the Blueprint and flags; nothing here talks to a cluster.
//!
//! Start reading at [`rbac`] (`rbac/mod.rs`: the permissions a Blueprint needs, with the
//! host's and a tenant's in `host.rs` and `tenant.rs`).

pub mod apf;
mod blueprint_crd;
pub mod rbac;
pub mod roles;

use serde_json::Value;

pub use blueprint_crd::{blueprint_crd, spec_schema};

use inrun_blueprint::Blueprint;

/// The CRD manifests of every CRD the Blueprint declares, in Blueprint order: schema,
/// status subresource and printer columns, exactly as `inrun run --install-crds` applies them.
pub fn crds(blueprint: &Blueprint) -> Vec<Value> {
    blueprint
        .spec
        .crds
        .iter()
        .map(inrun_blueprint::CrdSpec::manifest)
        .collect()
}

/// Why manifests could not be written as YAML.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A manifest could not be serialized.
    #[error("writing a manifest as YAML")]
    Yaml(#[source] serde_yaml_ng::Error),
}

/// A multi-document YAML stream (`---` between documents), as `kubectl apply -f -` reads.
///
/// # Errors
/// [`GenerateError::Yaml`] when a document cannot be serialized.
pub fn yaml_stream(docs: &[Value]) -> Result<String, GenerateError> {
    let mut out = String::new();
    for doc in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(doc).map_err(GenerateError::Yaml)?);
    }
    Ok(out)
}
