//! References to Secrets a Blueprint may name: one key of a Secret (`secretRef`, for
//! remote auth and external inputs) and a registry pull secret (`pullSecret`).

use serde::{Deserialize, Serialize};

/// A key of a Secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
    /// The key within its data.
    pub key: String,
    /// The Secret's namespace; the CR's namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `pullSecret`: a Secret of type `kubernetes.io/dockerconfigjson` (key `.dockerconfigjson`).
/// Plugins load once for the whole host, so the namespace is always written out.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullSecretRef {
    /// The Secret's namespace.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
}
