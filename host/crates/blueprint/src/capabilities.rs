//! `capabilities` on a hook, constructor or package: what the plugin may reach beyond its
//! sandbox.
//! A plugin without this block gets nothing: no cluster reads, no network.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::quantity::Quantity;

/// Grants to one plugin reference. Empty (the default) grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capabilities {
    /// Reading Kubernetes objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterCapability>,
    /// Outbound HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpCapability>,
    /// Keys of Secrets in the CR's namespace a package may read (packages only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
}

/// `capabilities.credentials[]`: one Secret in the CR's own namespace and the keys of it a
/// package may read through the `credentials` import, as the identity the Blueprint acts
/// as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credential {
    /// The Secret's name (in the CR's namespace).
    pub secret: String,
    /// The keys of it the package may read.
    pub keys: Vec<String>,
}

impl Capabilities {
    /// Whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.cluster.as_ref().is_none_or(|c| c.read.is_empty())
            && self.http.is_none()
            && self.credentials.is_empty()
    }

    /// The kinds the plugin may read (none without `cluster`).
    pub fn reads(&self) -> &[ReadKind] {
        self.cluster.as_ref().map_or(&[], |c| &c.read)
    }
}

/// `capabilities.cluster`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterCapability {
    /// Kinds the plugin may get and list (served from the host's watch cache).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<ReadKind>,
}

/// One kind a plugin may read, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadKind {
    /// `v1` or `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Namespaces besides the CR's own; `*` for any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// The kind is cluster-scoped (reads take no namespace).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_scoped: bool,
}

/// `capabilities.http`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpCapability {
    /// `host` or `host:port`, matched exactly; a host alone allows the scheme's default port.
    pub hosts: Vec<String>,
    /// Time for one request, body included (default 5s, at most 1m).
    #[serde(
        default,
        with = "inrun_contract::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
    /// Largest response body accepted (default 1Mi, at most 16Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_size: Option<Quantity>,
}

impl HttpCapability {
    /// Default for `timeout`.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    /// Most a Blueprint may set `timeout` to.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
    /// Default for `maxResponseSize`.
    pub const DEFAULT_RESPONSE_SIZE: Quantity = Quantity::MI;
    /// Most a Blueprint may set `maxResponseSize` to.
    pub const MAX_RESPONSE_SIZE: Quantity = Quantity::from_bytes(16 << 20);

    /// `timeout`, or its default.
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(Self::DEFAULT_TIMEOUT)
    }

    /// `maxResponseSize`, or its default.
    pub fn max_response_size(&self) -> Quantity {
        self.max_response_size
            .unwrap_or(Self::DEFAULT_RESPONSE_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_block_grants_nothing_and_defaults_fill_in() {
        let none: Capabilities = serde_yaml_ng::from_str("{}").expect("empty");
        assert!(none.is_empty());
        let caps: Capabilities = serde_yaml_ng::from_str(
            "{ cluster: { read: [ { apiVersion: v1, kind: ConfigMap, namespaces: [shared] } ] }, http: { hosts: ['127.0.0.1:8080'] } }",
        )
        .expect("capabilities");
        assert!(!caps.is_empty());
        assert_eq!(caps.reads()[0].namespaces, ["shared"]);
        let http = caps.http.expect("http");
        assert_eq!(http.timeout(), Duration::from_secs(5));
        assert_eq!(http.max_response_size(), Quantity::MI);
    }
}
