//! A package's calls as the package steps (`infrastructure/`) make them
//! ([`Infrastructure`]), and how one fails ([`CallFailed`]). [`Pass`](crate::Pass) may
//! carry a stand-in for the package (`inrun render`'s dry run).

use async_trait::async_trait;

use inrun_contract::package::{Change, Identity, Observation, Options, Workflow};

/// A package call that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailed {
    /// Why, in the host's own words, when the host stopped the call or could not run it (a
    /// deadline, a memory cap, a budget): shown on the CR. `None` when the package failed
    /// in its own words, which may hold anything and go to the log only.
    pub cause: Option<String>,
    /// The whole account, the package's words included: for the log only.
    pub detail: String,
}

impl From<String> for CallFailed {
    /// A failure in the package's own words.
    fn from(detail: String) -> Self {
        CallFailed {
            cause: None,
            detail,
        }
    }
}

impl From<crate::failpoint::Injected> for CallFailed {
    /// A failpoint of a test build: in the host's words, so the CR shows it.
    fn from(injected: crate::failpoint::Injected) -> Self {
        CallFailed {
            cause: Some(injected.to_string()),
            detail: injected.to_string(),
        }
    }
}

impl From<&str> for CallFailed {
    /// A failure in the package's own words.
    fn from(detail: &str) -> Self {
        CallFailed::from(detail.to_string())
    }
}

impl std::fmt::Display for CallFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl From<inrun_wasm::CallError> for CallFailed {
    fn from(e: inrun_wasm::CallError) -> Self {
        use inrun_wasm::CallFailure as F;
        let cause = match &e.failure {
            F::Deadline(d) => Some(format!(
                "the call ran past its deadline of {} (package.limits.deadline)",
                inrun_contract::duration::format(*d)
            )),
            F::Memory(bytes) => Some(format!(
                "the call passed its memory cap of {} MiB (package.limits.memory)",
                bytes >> 20
            )),
            F::Budget(budget) => Some(format!("the call was stopped by {budget}")),
            F::Host(_) => Some("the host could not run the call".into()),
            F::Trap { .. } => Some("the package trapped (the host's log says where)".into()),
            F::BadOutput(_) => Some("the package's answer broke the contract".into()),
            F::Returned(_) => None,
        };
        CallFailed {
            cause,
            detail: inrun_contract::errors::chain(&e),
        }
    }
}

/// What the pass calls: the package, behind a trait so the decisions can be tested with a
/// scripted one.
#[async_trait]
pub trait Infrastructure: Send + Sync {
    /// `validate`.
    async fn validate(&self, opts: &Options) -> Result<Vec<String>, CallFailed>;
    /// `identity`.
    async fn identity(&self, opts: &Options) -> Result<Identity, CallFailed>;
    /// `observe`.
    async fn observe(&self, opts: &Options) -> Result<Observation, CallFailed>;
    /// `converge` or `delete`, as `change` says.
    async fn workflow(&self, change: Change, opts: &Options) -> Result<Workflow, CallFailed>;
}

#[async_trait]
impl Infrastructure for inrun_reconcilers::infrastructure::Package {
    async fn validate(&self, opts: &Options) -> Result<Vec<String>, CallFailed> {
        Ok(inrun_reconcilers::infrastructure::Package::validate(self, opts).await?)
    }
    async fn identity(&self, opts: &Options) -> Result<Identity, CallFailed> {
        Ok(inrun_reconcilers::infrastructure::Package::identity(self, opts).await?)
    }
    async fn observe(&self, opts: &Options) -> Result<Observation, CallFailed> {
        Ok(inrun_reconcilers::infrastructure::Package::observe(self, opts).await?)
    }
    async fn workflow(&self, change: Change, opts: &Options) -> Result<Workflow, CallFailed> {
        Ok(inrun_reconcilers::infrastructure::Package::workflow(self, change, opts).await?)
    }
}
