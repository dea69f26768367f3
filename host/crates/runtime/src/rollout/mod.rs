//! A rollout: a new version of what reconciles a CRD reaching its CRs step by step
//! (`reconcile.rollout`), judged against the version it replaces, and undone when it does
//! harm.
//!
//! The controller of the new version holds the old one too ([`Rollout::previous`]); each
//! pass asks [`Rollout::version_of`] which serves the CR. Which CRs are on the new version
//! is decided by the driver ([`drive`]) from the CRs the controller's cache holds:
//!
//! - `moves.rs`: which CRs a step moves (the `select`ed ones first, then by a hash of the
//!   uid: the same on every replica and after a restart; a CR moved stays moved);
//! - `analysis.rs`: the passes and Ready CRs of each version over the window, and the
//!   verdict;
//! - `drive.rs`: the loop that moves CRs, judges each step, advances, and rolls back or
//!   pauses, waking only the CRs whose version changes and recording events;
//! - [`record`]: the Lease that shows the rollout to people and `inrun rollout`, and
//!   carries their commands (pause, resume, promote, abort) to the driver.

mod analysis;
mod drive;
mod moves;
pub mod record;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use inrun_blueprint::RolloutSpec;
use inrun_reconcilers::assemble::Assembly;
use inrun_reconcilers::plan::CrdPlan;

pub use analysis::Numbers;
pub use drive::drive;

/// Which version serves a CR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The version the rollout replaces.
    Old,
    /// The version it brings.
    New,
}

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Phase {
    /// Moving CRs step by step.
    Progressing,
    /// Stopped where it was: the new version failed its analysis (`onFailure: pause`).
    Paused,
    /// Every CR went back to the old version: the new one failed its analysis.
    RolledBack,
    /// Every CR is on the new version.
    Complete,
}

/// One CRD's rollout, shared by its controller's passes and its driver.
pub struct Rollout {
    /// How it proceeds.
    pub spec: RolloutSpec,
    /// The CRD (`plural.group`).
    pub crd: String,
    /// What the old version records as `status.reconciledBy`.
    pub from: String,
    /// What the new version records.
    pub to: String,
    previous: Arc<Assembly>,
    previous_index: usize,
    state: Mutex<State>,
}

/// What changes as a rollout proceeds.
struct State {
    phase: Phase,
    /// Index into `spec.steps`.
    step: usize,
    step_started: Instant,
    /// The uids of the CRs on the new version.
    moved: HashSet<String>,
    passes: analysis::Tally,
    /// Why it stopped, when it did.
    verdict: Option<String>,
    /// The numbers of each version at the last look.
    numbers: (Numbers, Numbers),
}

/// A rollout as people see it (the console, a tenant's status).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The CRD.
    pub crd: String,
    /// The old version (`status.reconciledBy`).
    pub from: String,
    /// The new version.
    pub to: String,
    /// Where it stands.
    pub phase: Phase,
    /// The step (1-based) and its share of CRs, in percent.
    pub step: usize,
    /// The share of CRs on the new version at this step.
    pub percent: u8,
    /// Steps in all.
    pub steps: usize,
    /// CRs on the new version.
    pub on_new: usize,
    /// The numbers of each version at the last look.
    pub old: Numbers,
    /// The new version's.
    pub new: Numbers,
    /// Why it stopped, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
}

impl Rollout {
    /// A rollout from `previous` (whose CRD `previous_index` is this one) to the version
    /// the controller serves, as `spec` says; it starts at its first step.
    pub fn new(
        spec: RolloutSpec,
        previous: Arc<Assembly>,
        previous_index: usize,
        new: &CrdPlan,
    ) -> Arc<Rollout> {
        let old = &previous.crds()[previous_index];
        Arc::new(Rollout {
            crd: new.spec.crd_name(),
            from: inrun_pass::status::reconciled_by(&old.default),
            to: inrun_pass::status::reconciled_by(&new.default),
            spec,
            previous_index,
            state: Mutex::new(State {
                phase: Phase::Progressing,
                step: 0,
                step_started: Instant::now(),
                moved: HashSet::new(),
                passes: analysis::Tally::default(),
                verdict: None,
                numbers: (Numbers::default(), Numbers::default()),
            }),
            previous,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The old version's plan of the CRD.
    pub fn previous_plan(&self) -> &CrdPlan {
        &self.previous.crds()[self.previous_index]
    }

    /// The version that serves the CR `uid` now.
    pub fn version_of(&self, uid: Option<&str>) -> Version {
        let state = self.state();
        match state.phase {
            Phase::Complete => Version::New,
            Phase::RolledBack => Version::Old,
            Phase::Progressing | Phase::Paused => {
                if uid.is_some_and(|u| state.moved.contains(u)) {
                    Version::New
                } else {
                    Version::Old
                }
            }
        }
    }

    /// Records a pass of `version` that succeeded or failed (an error, a trap, a deadline,
    /// a refusal), for the analysis.
    pub fn record(&self, version: Version, ok: bool) {
        let window = self.spec.analysis.window;
        self.state()
            .passes
            .record(version, ok, Instant::now(), window);
    }

    /// Where it stands.
    pub fn view(&self) -> RolloutView {
        let state = self.state();
        RolloutView {
            crd: self.crd.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            phase: state.phase,
            step: state.step + 1,
            percent: self.spec.steps.get(state.step).map_or(100, |s| s.percent),
            steps: self.spec.steps.len(),
            on_new: state.moved.len(),
            old: state.numbers.0.clone(),
            new: state.numbers.1.clone(),
            verdict: state.verdict.clone(),
        }
    }
}
