//! A pass that failed, and the `Ready` reason it shows.

use inrun_reconcilers::ReconcileError;
use inrun_reconcilers::plan::StepError;

use crate::effects::EffectError;
use crate::reason::ConditionReason;

/// A pass that failed; it is retried with per-key backoff.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The reconciler failed.
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    /// A step around the reconciler failed (template, fence, external call).
    #[error(transparent)]
    Step(#[from] StepError),
    /// A read or write failed.
    #[error(transparent)]
    Effect(#[from] EffectError),
    /// An infrastructure package's call failed or reported failure. `detail` is the
    /// package's text: for the log, never for status or events.
    #[error("{reason}: {detail}")]
    Package {
        /// The generic reason on the CR (`ConvergeFailed`, `ObserveFailed`, ...).
        reason: ConditionReason,
        /// What the package said.
        detail: String,
    },
}

impl From<crate::failpoint::Injected> for Failure {
    /// A failpoint of a test build failed the step.
    fn from(injected: crate::failpoint::Injected) -> Self {
        Failure::Effect(injected.into())
    }
}

impl Failure {
    /// The `Ready` condition's reason for this failure.
    pub fn condition(&self) -> ConditionReason {
        match self {
            Failure::Effect(EffectError {
                condition: Some(c), ..
            }) => *c,
            Failure::Package { reason, .. } => *reason,
            _ if self.over_budget() => ConditionReason::BudgetExceeded,
            _ => ConditionReason::ReconcileError,
        }
    }

    /// Whether a budget the CR's tenant shares with others stopped it: a plugin call's
    /// (calls, memory, cores) or the host memory a reply would take.
    fn over_budget(&self) -> bool {
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            if e.is::<inrun_wasm::HeldHit>()
                || matches!(
                    e.downcast_ref::<inrun_wasm::CallFailure>(),
                    Some(inrun_wasm::CallFailure::Budget(_))
                )
            {
                return true;
            }
            cause = e.source();
        }
        false
    }
}
