//! The reconcile pass for one CR, over plain values: the steps in their order, with the
//! writes going through [`Effects`]. The steps ask the reconciler what the CR should
//! become, and `inrun_reconcilers::plan` which block serves it, whether it may pass, its
//! Request, its status and when it runs again; the pass itself decides what is written
//! when, whether children are ready, and the waves they are applied and deleted in.
//! `inrun run` carries the writes out against the API server (`inrun_runtime`'s
//! `ApiEffects`); `inrun render` prints them ([`render`]). Both call [`run`](fn@run), so they
//! cannot disagree.
//!
//! Start reading at [`run`](fn@run) (`run.rs`): it routes a CR to the package steps
//! ([`infrastructure`]), the deletion steps (`finalize.rs`) or the reconcile steps
//! (`reconcile.rs`, numbered 1–7). Each step takes a [`Pass`] and ends with a [`Done`]
//! (`pass.rs`).

mod effects;
pub mod failpoint;
mod failure;
pub mod fields;
mod finalize;
pub mod fixtures;
pub mod infrastructure;
pub mod meta;
mod package;
mod pass;
pub mod readiness;
mod reason;
mod reconcile;
pub mod record;
pub mod render;
mod run;
pub mod status;
pub mod waves;

pub use effects::{
    Applied, AppliedChild, ChildKey, Claimed, EffectError, Effects, Observed, Pruned, Teardown,
    Written,
};
pub use failure::Failure;
pub use infrastructure::retry_bounds;
pub use inrun_reconcilers::plan::{DEFAULT_REQUEUE, Next, StepError};
pub use package::Infrastructure;
pub use pass::{Done, GATE_RECHECK, Pass, SAFEGUARD_RECHECK, WAVE_RECHECK, route};
pub use reason::{ConditionReason, Reason};
pub use reconcile::{held_back, refuse};
pub use run::run;

#[cfg(test)]
mod tests;
