//! Why a call to a remote reconciler (`remote.rs`) failed ([`RemoteError`]), and the most
//! it may answer ([`REPLY_MAX`]). [`ReconcileError`](crate::ReconcileError), which every
//! reconciler returns, names it, so it stands below them all.

use std::time::Duration;

use crate::secrets::SecretError;

/// Largest reply accepted, in bytes.
pub const REPLY_MAX: usize = 16 * 1024 * 1024;

/// Why a remote call failed. Messages never hold the bearer token.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The token could not be read.
    #[error("reading the remote reconciler's token")]
    Token(#[source] SecretError),
    /// Nothing answered at the endpoint (refused, unreachable, DNS, TLS).
    #[error("cannot connect to remote reconciler {endpoint}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The call took longer than `timeout`.
    #[error("remote reconciler {endpoint} did not answer within {}", inrun_contract::duration::format(*after))]
    Timeout {
        /// The endpoint.
        endpoint: String,
        /// The timeout.
        after: Duration,
    },
    /// Any other transport failure.
    #[error("calling remote reconciler {endpoint}")]
    Transport {
        /// The endpoint.
        endpoint: String,
        /// The client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The endpoint answered with a status other than 2xx.
    #[error("remote reconciler {endpoint} answered HTTP {status}: {excerpt}")]
    Status {
        /// The endpoint.
        endpoint: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the reply body.
        excerpt: String,
    },
    /// The reply is larger than [`REPLY_MAX`].
    #[error("remote reconciler {endpoint} replied with more than {REPLY_MAX} bytes")]
    TooLarge {
        /// The endpoint.
        endpoint: String,
    },
    /// The reply is not JSON.
    #[error("remote reconciler {endpoint} replied with something that is not JSON: {excerpt}")]
    NotJson {
        /// The endpoint.
        endpoint: String,
        /// The start of the reply body.
        excerpt: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The reply is JSON but not a Result.
    #[error("remote reconciler {endpoint} replied with a malformed Result: {problem}")]
    Shape {
        /// The endpoint.
        endpoint: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `result` is neither `ok` nor `error`.
    #[error(
        "remote reconciler {endpoint} replied with unknown result {result:?} (expected \"ok\" or \"error\")"
    )]
    UnknownResult {
        /// The endpoint.
        endpoint: String,
        /// What it said.
        result: String,
    },
    /// The reconciler answered `"result": "error"`.
    #[error("remote reconciler {endpoint} reported an error: {message}")]
    Reported {
        /// The endpoint.
        endpoint: String,
        /// Its `error` message.
        message: String,
    },
    /// Holding the reply would pass the tenant's host-memory budget: the rest of it was
    /// not read.
    #[error("remote reconciler {endpoint}'s reply was not read whole")]
    Budget {
        /// The endpoint.
        endpoint: String,
        /// The budget.
        #[source]
        source: inrun_wasm::HeldHit,
    },
}
