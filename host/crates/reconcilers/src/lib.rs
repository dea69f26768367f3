//! Reconcilers turn a Request into an Outcome; none of them writes to the API server.
//! Beside the five kinds (declarative templates, Wasm hooks and constructors, remote
//! endpoints, infrastructure packages) live what they are built from: plugin sources and
//! slots, secrets, the HTTP client they share, `reconcile.external` calls, the
//! [`assemble`]d Blueprint that ties them to CRDs, and the [`plan`] steps over it that
//! need no cluster.
//!
//! Start reading at [`Reconciler`] and [`assemble::Assembly`]; then [`plan`], whose steps
//! the pass calls in order: `route.rs`, `checks.rs`, `request.rs`, `status.rs`.

pub mod api;
pub mod assemble;
pub mod declarative;
pub mod egress;
pub mod external;
pub mod http;
pub mod infrastructure;
pub mod plan;
pub mod plugins;
pub mod remote;
mod remote_error;
pub mod replies;
pub mod secrets;
pub mod sources;
pub mod wasm;

use async_trait::async_trait;
use inrun_contract::intent::{self, IntentDefaults};
use inrun_contract::{Outcome, Request};

pub use inrun_blueprint::ReconcilerKind;

/// Why a reconcile failed. The message is safe to put in an event: it never holds secrets.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A template in the Blueprint failed to render.
    #[error("rendering {what}")]
    Template {
        /// Which template, e.g. `reconcile.onReconcile[0]`.
        what: String,
        /// The template engine's error.
        #[source]
        source: inrun_template::TemplateError,
    },
    /// A resource in the intent form could not be expanded.
    #[error("expanding resources[{index}]")]
    Intent {
        /// Position in `resources`.
        index: usize,
        /// Why.
        #[source]
        source: inrun_contract::intent::IntentError,
    },
    /// The plugin failed: trap, deadline, memory cap, error result, or bad output.
    #[error(transparent)]
    Plugin(#[from] inrun_wasm::CallError),
    /// The remote reconciler failed: connection, timeout, HTTP status, bad or error reply.
    #[error(transparent)]
    Remote(#[from] remote_error::RemoteError),
    /// The outcome broke the contract.
    #[error("invalid outcome")]
    Outcome(#[from] inrun_contract::OutcomeError),
    /// The reconcile was cut short by the host (e.g. its task was cancelled at shutdown).
    #[error("reconcile aborted: {0}")]
    Aborted(String),
}

/// Decides what a CR should become. One trait for every kind, so the runtime never knows
/// which kind it is calling.
#[async_trait]
pub trait Reconciler: Send + Sync {
    /// The kind, for reporting.
    fn kind(&self) -> ReconcilerKind;

    /// Returns the outcome for `req`, with intent-form resources expanded.
    ///
    /// # Errors
    /// [`ReconcileError`] when the reconcile failed; the CR gets a `ReconcileError` event
    /// and a retry with backoff.
    async fn reconcile(&self, req: &Request) -> Result<Outcome, ReconcileError>;
}

/// The last step every reconciler shares: the contract's rules checked and intent-form
/// resources expanded, defaulting names and namespaces from the CR.
///
/// # Errors
/// [`ReconcileError::Outcome`] for a broken rule, [`ReconcileError::Intent`] for an intent
/// that cannot be expanded.
pub fn finish(mut outcome: Outcome, req: &Request) -> Result<Outcome, ReconcileError> {
    outcome.check()?;
    let meta = &req.object["metadata"];
    let defaults = IntentDefaults {
        name: meta["name"].as_str().unwrap_or_default().to_string(),
        namespace: meta["namespace"].as_str().map(str::to_string),
    };
    for (index, resource) in outcome.resources.iter_mut().enumerate() {
        *resource = intent::expand(resource, &defaults)
            .map_err(|source| ReconcileError::Intent { index, source })?;
    }
    Ok(outcome)
}
