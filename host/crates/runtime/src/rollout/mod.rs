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
//! - `preflight.rs`: the plan `rollout.requirePlan` runs before the first CR moves;
//! - [`record`]: the Lease that shows the rollout to people and `inrun rollout`, and
//!   carries their commands (pause, resume, promote, abort) to the driver.

mod analysis;
mod drive;
mod moves;
mod preflight;
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
    /// What the old version records as `status.reconciledBy`, in the blocks the change
    /// touches (comma-separated when it touches several: the CRD's and serve targets').
    pub from: String,
    /// What the new version records there.
    pub to: String,
    /// The old version's `status.reconciledBy` of each block the change touches.
    old_versions: Vec<String>,
    /// The new version's.
    new_versions: Vec<String>,
    previous: Arc<Assembly>,
    previous_index: usize,
    /// The version before as a Blueprint of this CRD alone, its plugins pinned by digest,
    /// kept with the record so that a host started mid-rollout can load it again:
    /// (the file its relative locations resolve against, the Blueprint as JSON).
    pub previous_blueprint: (String, String),
    /// The `Blueprint` resource whose status shows the rollout too (`status.rollouts`),
    /// when its tenant came as one.
    pub shown_on: std::sync::OnceLock<String>,
    state: Mutex<State>,
}

/// What changes as a rollout proceeds.
struct State {
    phase: Phase,
    /// Index into `spec.steps`.
    step: usize,
    step_started: Instant,
    /// The same, as a wall-clock time (seconds since the epoch), for the record.
    step_started_at: u64,
    /// The uids of the CRs on the new version.
    moved: HashSet<String>,
    /// Those moved that the new version has not run a pass on yet: a step is over only
    /// once it ran on every CR it moved.
    pending: HashSet<String>,
    /// Whether any CR moved (after a restart: the rollout was under way).
    began: bool,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// When its step started (seconds since the epoch).
    #[serde(default)]
    pub step_started_at: u64,
}

/// What each reconcile block of `plan` records as `status.reconciledBy`: the CRD's own,
/// then each serve target's.
fn versions(plan: &CrdPlan) -> Vec<String> {
    std::iter::once(&plan.default)
        .chain(plan.targets.iter().map(|(_, t)| t))
        .map(inrun_pass::status::reconciled_by)
        .collect()
}

/// What a change from `old` to `new` touches: the versions only `old` records, and those
/// only `new` records (a block both record alike is not the change's).
pub fn changed(old: &CrdPlan, new: &CrdPlan) -> (Vec<String>, Vec<String>) {
    let (before, after) = (versions(old), versions(new));
    let only = |these: &[String], those: &[String]| {
        let mut out: Vec<String> = Vec::new();
        for v in these {
            if !those.contains(v) && !out.contains(v) {
                out.push(v.clone());
            }
        }
        out
    };
    (only(&before, &after), only(&after, &before))
}

/// The instant `at` (seconds since the epoch) was, as this process's clock reads it.
fn instant_of(at: u64) -> Instant {
    let ago = now_secs().saturating_sub(at);
    Instant::now()
        .checked_sub(std::time::Duration::from_secs(ago))
        .unwrap_or_else(Instant::now)
}

/// Seconds since the epoch, now.
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The CRD `index` of `previous` as a Blueprint of its own, each plugin fetched from an
/// HTTPS URL pinned to the digest it serves now (a path or an OCI tag cannot be pinned:
/// whoever loads it again checks what it serves against the record's `from`): the file
/// its relative locations resolve against, and the Blueprint as JSON.
fn pinned(previous: &Assembly, index: usize) -> (String, String) {
    let plan = &previous.crds()[index];
    let mut spec = plan.spec.clone();
    pin(&mut spec.reconcile, &plan.default);
    if let Some(serve) = &mut spec.serve {
        for target in &mut serve.targets {
            if let Some((_, p)) = plan.targets.iter().find(|(n, _)| *n == target.name) {
                pin(&mut target.reconcile, p);
            }
        }
    }
    let mut blueprint = previous.blueprint.clone();
    blueprint.spec.crds = vec![spec];
    (
        plan.spec.source.file.display().to_string(),
        serde_json::to_string(&blueprint).unwrap_or_default(),
    )
}

/// Pins the plugins of `block` to the digests `plan` serves now.
fn pin(block: &mut inrun_blueprint::ReconcileSpec, plan: &inrun_reconcilers::plan::ReconcilePlan) {
    let digests: Vec<String> = plan
        .slots
        .iter()
        .map(|s| format!("sha256:{}", s.current().id().digest))
        .collect();
    let pinnable = |location: &str| location.starts_with("https://");
    if !block.hooks.is_empty() && block.hooks.len() == digests.len() {
        for (hook, digest) in block.hooks.iter_mut().zip(&digests) {
            if pinnable(&hook.location) {
                hook.digest = Some(digest.clone());
            }
        }
    } else if let [digest] = digests.as_slice()
        && let Some(plugin) = block.constructor.as_mut().or(block.package.as_mut())
        && pinnable(&plugin.location)
    {
        plugin.digest = Some(digest.clone());
    }
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
        let (old_versions, new_versions) = changed(&previous.crds()[previous_index], new);
        Arc::new(Rollout {
            crd: new.spec.crd_name(),
            from: old_versions.join(","),
            to: new_versions.join(","),
            old_versions,
            new_versions,
            spec,
            previous_index,
            previous_blueprint: pinned(&previous, previous_index),
            shown_on: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                phase: Phase::Progressing,
                step: 0,
                step_started: Instant::now(),
                step_started_at: now_secs(),
                moved: HashSet::new(),
                pending: HashSet::new(),
                began: false,
                passes: analysis::Tally::default(),
                verdict: None,
                numbers: (Numbers::default(), Numbers::default()),
            }),
            previous,
        })
    }

    /// The rollout `recorded` continued by a host started mid-way: `previous` is the
    /// version before loaded again from the record (its CRD the first), and the rollout
    /// stands where the record says — its step, how long that step has run, paused or
    /// not. Its CRs on the new version are those whose status says so.
    pub fn resume(
        spec: RolloutSpec,
        previous: Arc<Assembly>,
        new: &CrdPlan,
        recorded: &RolloutView,
    ) -> Arc<Rollout> {
        let rollout = Rollout::new(spec, previous, 0, new);
        {
            let mut state = rollout.state();
            let last = rollout.spec.steps.len().saturating_sub(1);
            state.step = recorded.step.saturating_sub(1).min(last);
            state.phase = recorded.phase;
            state.verdict.clone_from(&recorded.verdict);
            state.step_started = instant_of(recorded.step_started_at);
            state.step_started_at = recorded.step_started_at;
            state.began = true;
        }
        rollout
    }

    /// The same rollout, carried on by a controller started again for another reason
    /// than a new version (the `rollout` block itself edited, a runtime setting, the
    /// schema): the version before, where it stands and the CRs it moved stay; `spec` and
    /// `new` are the Blueprint's now.
    pub fn carried(&self, spec: RolloutSpec, new: &CrdPlan) -> Arc<Rollout> {
        let rollout = Rollout::new(spec, self.previous.clone(), self.previous_index, new);
        {
            let was = self.state();
            let mut state = rollout.state();
            let last = rollout.spec.steps.len().saturating_sub(1);
            state.phase = was.phase;
            state.step = was.step.min(last);
            state.step_started = was.step_started;
            state.step_started_at = was.step_started_at;
            state.moved.clone_from(&was.moved);
            state.pending.clone_from(&was.pending);
            state.began = was.began;
            state.verdict.clone_from(&was.verdict);
        }
        if let Some(name) = self.shown_on.get() {
            let _ = rollout.shown_on.set(name.clone());
        }
        rollout
    }

    /// Where it stands.
    pub fn phase(&self) -> Phase {
        self.state().phase
    }

    /// The version before: its assembly (in which this CRD is found by name).
    pub fn previous(&self) -> &Arc<Assembly> {
        &self.previous
    }

    /// Whether `reconciled_by` names the new version.
    fn is_new(&self, reconciled_by: &str) -> bool {
        self.new_versions.iter().any(|v| v == reconciled_by)
    }

    /// Whether `reconciled_by` names the old version.
    fn is_old(&self, reconciled_by: &str) -> bool {
        self.old_versions.iter().any(|v| v == reconciled_by)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether it has not begun: at its first step, no CR moved, not resumed.
    fn at_start(&self) -> bool {
        let state = self.state();
        state.phase == Phase::Progressing
            && state.step == 0
            && state.moved.is_empty()
            && !state.began
    }

    /// The old version's plan of the CRD.
    pub fn previous_plan(&self) -> &CrdPlan {
        &self.previous.crds()[self.previous_index]
    }

    /// The version that serves the CR `uid` now, whose status says `reconciled_by` last
    /// reconciled it: one the rollout moved, or (under way) one the new version already
    /// reconciled — after a restart, or taken over from another replica, before the driver
    /// has looked.
    pub fn version_of(&self, uid: Option<&str>, reconciled_by: Option<&str>) -> Version {
        let state = self.state();
        match state.phase {
            Phase::Complete => Version::New,
            Phase::RolledBack => Version::Old,
            Phase::Progressing | Phase::Paused => {
                let ran_new = reconciled_by.is_some_and(|b| self.is_new(b));
                if ran_new || uid.is_some_and(|u| state.moved.contains(u)) {
                    Version::New
                } else {
                    Version::Old
                }
            }
        }
    }

    /// Records a pass of `version` over the CR `uid` that succeeded or failed (an error,
    /// a trap, a deadline, a refusal), for the analysis.
    pub fn record(&self, uid: Option<&str>, version: Version, ok: bool) {
        let window = self.spec.analysis.window;
        let mut state = self.state();
        state.passes.record(version, ok, Instant::now(), window);
        if let (Version::New, Some(uid)) = (version, uid) {
            state.pending.remove(uid);
        }
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
            step_started_at: state.step_started_at,
        }
    }
}
