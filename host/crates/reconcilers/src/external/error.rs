//! Why an external call failed, or did not compile: typed, and never holding a secret
//! value.

use std::time::Duration;

use crate::secrets::SecretError;
use inrun_template::TemplateError;

/// A call that failed, by name: the reconcile fails with this.
#[derive(Debug, thiserror::Error)]
#[error("external call {name:?} ({kind}) failed")]
pub struct ExternalError {
    /// The call's `name`.
    pub name: String,
    /// `http`, `prometheus`, `postgres` or `redis`.
    pub kind: &'static str,
    /// Why.
    #[source]
    pub source: CallError,
}

/// Why one call failed. Messages never hold secret values.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The call would go where the operator's egress policy does not allow.
    #[error(transparent)]
    Egress(#[from] crate::egress::EgressError),
    /// A template of the call failed to render.
    #[error("rendering {what}")]
    Template {
        /// Which field.
        what: String,
        /// Why.
        #[source]
        source: TemplateError,
    },
    /// A templated part of a token-bearing URL is one the token may not go to.
    #[error("rendering url: {0}")]
    BadUrlPart(String),
    /// A credential could not be read.
    #[error("reading credentials")]
    Secret(#[source] SecretError),
    /// The connection URL read from a Secret may not be reached; the message names the
    /// Secret and key, never the URL (which may hold a password).
    #[error("the URL in Secret {secret} key {key:?} {reason}")]
    SecretTarget {
        /// `namespace/name`.
        secret: String,
        /// The key.
        key: String,
        /// What the egress policy refused, without the URL.
        reason: &'static str,
    },
    /// The bearer token holds characters an HTTP header cannot carry.
    #[error("the token is not a valid HTTP header value")]
    BadToken,
    /// The call took longer than its `timeout`.
    #[error("no answer within {}", inrun_contract::duration::format(*.0))]
    Timeout(Duration),
    /// The HTTP request failed (connection, TLS, ...).
    #[error("HTTP request failed")]
    Http(#[source] reqwest::Error),
    /// The reply is larger than the host reads.
    #[error("the reply is larger than {0} bytes")]
    TooLarge(usize),
    /// Holding the reply would pass the tenant's host-memory budget: the rest of it was
    /// not read.
    #[error("the reply was not read whole")]
    Budget(#[source] inrun_wasm::HeldHit),
    /// A query returned more rows than the host reads.
    #[error("the query returned more than {0} rows")]
    TooManyRows(usize),
    /// The server answered with a status other than 2xx.
    #[error("HTTP {status}: {excerpt}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        excerpt: String,
    },
    /// The reply is not JSON.
    #[error("the reply is not JSON: {excerpt}")]
    NotJson {
        /// The start of the body.
        excerpt: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// Prometheus answered with an error or an unexpected shape.
    #[error("prometheus: {0}")]
    Prometheus(String),
    /// Connecting to or querying PostgreSQL failed.
    #[error("postgres")]
    Postgres(#[source] tokio_postgres::Error),
    /// The database's address could not be dialled.
    #[error("connecting to the database")]
    Dial(#[source] std::io::Error),
    /// A query parameter cannot be sent as the type the query expects.
    #[error("parameter ${index}: {message}")]
    Param {
        /// 1-based placeholder number.
        index: usize,
        /// Why.
        message: String,
    },
    /// A result column has a type the host does not convert.
    #[error("column {column:?} has type {type_}; cast it in the query (e.g. {column}::text)")]
    Column {
        /// Column name.
        column: String,
        /// Its PostgreSQL type.
        type_: String,
    },
    /// Connecting to or querying Redis failed.
    #[error("redis")]
    Redis(#[source] ::redis::RedisError),
    /// The Redis command may write; only read commands are allowed.
    #[error("redis command {0:?} is not a read command")]
    NotReadOnly(String),
    /// The canned answers (`inrun render --external-fixture`) make this call fail.
    #[error("{0}")]
    Canned(String),
    /// Canned answers are given, but none for this call: it fails whatever its `onError`
    /// says, since nothing is called instead.
    #[error("{source_name} has no result for this call; add an entry named after it")]
    NotCanned {
        /// Where the canned answers come from (a file name).
        source_name: String,
    },
}

/// A template of an external call that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("{field}")]
pub struct CompileError {
    /// The Blueprint field, e.g. `spec.crds[0].reconcile.external[1].http.url`.
    pub field: String,
    /// Why.
    #[source]
    pub source: TemplateError,
}
