//! `reconcile.external`: calls made before the reconciler, whose results templates read.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::refs::SecretRef;

/// One `external` entry. Exactly one of `http`, `prometheus`, `postgres`, `redis` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalCall {
    /// The result appears as `.external.<name>`; an identifier.
    pub name: String,
    /// An HTTP request whose JSON reply is the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpCall>,
    /// A Prometheus instant query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusCall>,
    /// A PostgreSQL query; rows become a list of objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresCall>,
    /// A Redis command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisCall>,
    /// Cap on the call (default 5s, at most 5m).
    #[serde(
        default = "default_external_timeout",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// What a failed call does to the reconcile.
    #[serde(default)]
    pub on_error: OnError,
    /// The result used when the call fails; required iff `onError: default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any")]
    pub default: Option<Value>,
}

fn default_external_timeout() -> Duration {
    Duration::from_secs(5)
}

impl ExternalCall {
    /// The kind of call, when exactly one is set.
    pub fn call(&self) -> Option<ExternalKind<'_>> {
        match (&self.http, &self.prometheus, &self.postgres, &self.redis) {
            (Some(c), None, None, None) => Some(ExternalKind::Http(c)),
            (None, Some(c), None, None) => Some(ExternalKind::Prometheus(c)),
            (None, None, Some(c), None) => Some(ExternalKind::Postgres(c)),
            (None, None, None, Some(c)) => Some(ExternalKind::Redis(c)),
            _ => None,
        }
    }

    /// How many call kinds are set (1 on a valid Blueprint).
    pub fn kinds_set(&self) -> usize {
        [
            self.http.is_some(),
            self.prometheus.is_some(),
            self.postgres.is_some(),
            self.redis.is_some(),
        ]
        .iter()
        .filter(|set| **set)
        .count()
    }
}

/// The one call an [`ExternalCall`] makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExternalKind<'a> {
    /// `http`.
    Http(&'a HttpCall),
    /// `prometheus`.
    Prometheus(&'a PrometheusCall),
    /// `postgres`.
    Postgres(&'a PostgresCall),
    /// `redis`.
    Redis(&'a RedisCall),
}

/// What a failed external call does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// The reconcile fails (the default).
    #[default]
    Fail,
    /// The call's `default` value is used instead.
    Default,
}

/// `external[].http`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpCall {
    /// Template of the URL, `http://` or `https://`.
    pub url: String,
    /// `GET` (default) or `POST`.
    #[serde(default)]
    pub method: HttpMethod,
    /// Header name → template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// JSON body (strings rendered as templates); only with `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any")]
    pub body: Option<Value>,
    /// A bearer token read from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// HTTP methods an external call may use.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// `GET`.
    #[default]
    Get,
    /// `POST`.
    Post,
}

/// `external[].prometheus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusCall {
    /// Base URL of the Prometheus server.
    pub url: String,
    /// PromQL, as a template.
    pub query: String,
}

/// `external[].postgres`: exactly one of `url` and `secretRef` names the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostgresCall {
    /// A `postgres://` connection URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A Secret key holding the connection URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// SQL with `$1`, `$2`, ... placeholders.
    pub query: String,
    /// Templates bound to the placeholders, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
}

/// `external[].redis`: exactly one of `url` and `secretRef` names the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedisCall {
    /// A `redis://` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A Secret key holding the URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// The command and its arguments, each a template (`[GET, "{{ .spec.key }}"]`).
    pub command: Vec<String>,
}
