//! The loop that carries a rollout: every [`TICK`] it reads the CRs the controller's cache
//! holds, moves the step's share of them to the new version (waking only those), judges
//! the new version against the old, and advances, rolls back or pauses — recording each
//! turn as an event on the CRD, and a rollback on each CR moved back.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc::UnboundedSender;

use super::analysis::{self, Numbers};
use super::moves::{self, Cr};
use super::record::{Command, Record};
use super::{Phase, Rollout, Version};
use crate::cached::CachedCr;
use crate::context::Ctx;
use crate::events::Reason;
use inrun_blueprint::OnFailure;

/// How often the rollout looks at its CRs.
const TICK: Duration = Duration::from_secs(1);

/// What one turn decided.
#[derive(Debug, Default)]
struct Turn {
    /// CRs whose version changed: each runs a pass now.
    woken: Vec<String>,
    /// What to record on the CRD.
    said: Option<(Reason, String)>,
    /// CRs moved back to the old version, and why.
    back: Option<(Vec<String>, String)>,
    /// The rollout is over (complete or rolled back).
    over: bool,
}

/// What a driver keeps between its looks.
struct Driver {
    ctx: Arc<Ctx>,
    rollout: Arc<Rollout>,
    woken: UnboundedSender<ObjectRef<CachedCr>>,
    /// The CRD, as its events name it.
    on_crd: Option<ObjectReference>,
    /// Where the rollout is kept (`None`: this host keeps no Leases).
    record: Option<Record>,
    /// Events on the CRD and the Blueprint: the host's, whoever the tenant acts as.
    host_events: crate::events::Events,
    written: bool,
    planned: bool,
    /// The rollout as last written, and when: numbers that changed are written again at
    /// most every [`REWRITE`].
    last: Option<(String, Instant)>,
}

/// How often the record is written again while only the numbers change.
const REWRITE: Duration = Duration::from_secs(5);

/// Carries `rollout` for the controller of `ctx`, whose cache is `crs` (complete once
/// `synced`); CRs whose version changes are sent on `woken`. Ends when the rollout is over;
/// the controller aborts it when it stops.
///
/// It reads `synced` rather than waiting on the cache: a cache wakes one waiter only, and
/// the controller waits on it.
pub async fn drive(
    ctx: Arc<Ctx>,
    rollout: Arc<Rollout>,
    crs: Store<CachedCr>,
    synced: Arc<AtomicBool>,
    woken: UnboundedSender<ObjectRef<CachedCr>>,
) {
    let mut driver = Driver {
        on_crd: crd_reference(&ctx, &rollout.crd).await,
        // Kept where people and `inrun rollout` read it: the host's namespace, as the host.
        record: ctx
            .locks
            .as_ref()
            .map(|l| Record::new(l.host_client(), l.namespace(), &rollout.crd)),
        host_events: ctx.locks.as_ref().map_or_else(
            || ctx.events.clone(),
            |l| ctx.events.through(l.host_client()),
        ),
        written: false,
        planned: false,
        last: None,
        ctx,
        rollout,
        woken,
    };
    let rollout = driver.rollout.clone();
    tracing::info!(crd = %rollout.crd, from = %rollout.from, to = %rollout.to, "rollout started");
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !synced.load(Ordering::Acquire) {
            continue;
        }
        let all = crs.state();
        // Under sharding the ring's leader decides; the others follow its record.
        let leads = driver
            .ctx
            .leading
            .as_ref()
            .is_none_or(inrun_ring::fence::Fence::is_open);
        let turn = driver.look(&all, leads).await;
        driver.carry_out(&turn, &all, leads).await;
        if turn.over {
            tracing::info!(crd = %rollout.crd, phase = ?rollout.view().phase, "rollout over");
            return;
        }
    }
}

impl Driver {
    /// What this look at `all` decides: a person's command or the leader's record read,
    /// the plan `requirePlan` asks for run once, then the turn.
    async fn look(&mut self, all: &[Arc<CachedCr>], leads: bool) -> Turn {
        let rollout = &self.rollout;
        let (command, followed) = match (&self.record, leads) {
            // A command left for another rollout of the CRD (an earlier one) is dropped.
            (Some(r), true) if self.written => (
                r.take_command()
                    .await
                    .filter(|(_, to)| *to == rollout.to)
                    .map(|(c, _)| c),
                None,
            ),
            (Some(r), false) => (None, r.read().await.map(|(view, _, _)| view)),
            _ => (None, None),
        };
        if leads && !self.planned && rollout.spec.require_plan && rollout.at_start() {
            self.planned = true;
            if let Some(why) = super::preflight::plan(&self.ctx, rollout, all).await {
                return refuse(rollout, why);
            }
        }
        if let Some(turn) = followed.and_then(|view| follow(rollout, &view, all)) {
            return turn;
        }
        turn(rollout, all, Instant::now(), command, leads)
    }

    /// Carries `turn` out: wakes the CRs whose version changed, records the metrics, the
    /// events (a leader's) and the record.
    async fn carry_out(&mut self, turn: &Turn, all: &[Arc<CachedCr>], leads: bool) {
        let (ctx, rollout) = (&self.ctx, &self.rollout);
        let by_uid: HashMap<&str, &Arc<CachedCr>> = all
            .iter()
            .filter_map(|cr| cr.metadata.uid.as_deref().map(|u| (u, cr)))
            .collect();
        for uid in &turn.woken {
            if let Some(cr) = by_uid.get(uid.as_str()) {
                let _ = self.woken.send(ObjectRef::from_obj_with(
                    cr.as_ref(),
                    ctx.cr_resource.clone(),
                ));
            }
        }
        let view = rollout.view();
        let (step, on_new) = match view.phase {
            Phase::RolledBack => (0, 0),
            Phase::Complete => (view.step, all.len()),
            _ => (view.step, view.on_new),
        };
        ctx.metrics.rollout_at(
            &rollout.crd,
            i64::try_from(step).unwrap_or(i64::MAX),
            i64::from(view.percent),
            all.len().saturating_sub(on_new),
            on_new,
        );
        if let Some((reason, note)) = turn.said.as_ref().filter(|_| leads) {
            self.say(*reason, note).await;
        }
        if let Some((uids, why)) = &turn.back {
            let note = format!(
                "reconciled again by {} after the rollout to {} was rolled back: {why}",
                rollout.from, rollout.to
            );
            for cr in uids.iter().filter_map(|u| by_uid.get(u.as_str())) {
                let on = reference(ctx, cr);
                ctx.events
                    .record(&on, Reason::RolledBack, note.clone())
                    .await;
            }
        }
        let text = serde_json::to_string(&view).unwrap_or_default();
        let stale = self
            .last
            .as_ref()
            .is_none_or(|(was, at)| *was != text && at.elapsed() >= REWRITE);
        if let Some(record) = &self.record
            && leads
            && (turn.said.is_some() || stale)
        {
            record.write(&view, &rollout.previous_blueprint).await;
            if let Some(blueprint) = rollout.shown_on.get() {
                record.show_on(blueprint, &view).await;
            }
            self.written = true;
            self.last = Some((text, Instant::now()));
        }
    }

    /// Records `note` for `reason` on the CRD, and on the tenant's Blueprint resource
    /// when it came as one.
    async fn say(&self, reason: Reason, note: &str) {
        tracing::info!(crd = %self.rollout.crd, reason = reason.as_str(), "{note}");
        if let Some(on) = &self.on_crd {
            self.host_events.record(on, reason, note).await;
        }
        if let Some(name) = self.rollout.shown_on.get() {
            let on = ObjectReference {
                api_version: Some("inrun.dev/v1alpha1".into()),
                kind: Some("Blueprint".into()),
                name: Some(name.clone()),
                ..ObjectReference::default()
            };
            self.host_events.record(&on, reason, note).await;
        }
    }
}

/// One look at `all` (the CRs cached now) at `now`: the numbers of each version, the
/// step's CRs moved, the verdict, and the next step.
fn turn(
    rollout: &Rollout,
    all: &[Arc<CachedCr>],
    now: Instant,
    command: Option<Command>,
    leads: bool,
) -> Turn {
    // Paused, nothing moves until a person says so: no CR is read.
    if command.is_none() && rollout.phase() == Phase::Paused {
        return Turn::default();
    }
    let facts: Vec<Facts<'_>> = all
        .iter()
        .filter_map(|cr| {
            let (by, ready) = cr.reconciled_by_and_ready();
            Some(Facts {
                uid: cr.metadata.uid.as_deref()?,
                namespace: cr.metadata.namespace.as_deref(),
                by,
                ready,
            })
        })
        .collect();
    let spec = &rollout.spec;
    let mut state = rollout.state();
    if matches!(state.phase, Phase::Complete | Phase::RolledBack) {
        return Turn {
            over: true,
            ..Turn::default()
        };
    }
    // A CR whose status says the new version reconciled it is on it: after a restart, or
    // taken over from another replica under sharding.
    let ran_new: Vec<String> = facts
        .iter()
        .filter(|f| f.by.as_deref().is_some_and(|b| rollout.is_new(b)))
        .map(|f| f.uid.to_string())
        .collect();
    state.began |= !ran_new.is_empty();
    state.moved.extend(ran_new);
    let old = numbers(&mut state, &facts, Version::Old, rollout, now);
    let new = numbers(&mut state, &facts, Version::New, rollout, now);
    state.numbers = (old.clone(), new.clone());
    if let Some(command) = command {
        let uids = facts.iter().map(|f| f.uid.to_string());
        if let Some(turn) = commanded(rollout, &mut state, command, uids, now) {
            return turn;
        }
    }
    if state.phase == Phase::Paused {
        return Turn::default();
    }
    let step = spec.steps[state.step];
    // A step is over once its pause passed and the new version ran on every CR it moved
    // before this look (those this look moves are the next look's).
    let step_over = state.pending.is_empty()
        && now.duration_since(state.step_started) >= step.pause.unwrap_or_default();
    let crs: Vec<Cr<'_>> = facts
        .iter()
        .map(|f| Cr {
            uid: f.uid,
            namespace: f.namespace,
        })
        .collect();
    let moved = moves::moved(&crs, spec.select.as_ref(), step.percent, &state.moved);
    let woken: Vec<String> = moved.difference(&state.moved).cloned().collect();
    state.moved = moved;
    state.pending.extend(woken.iter().cloned());
    state.began |= !woken.is_empty();
    if !leads {
        return Turn {
            woken,
            ..Turn::default()
        };
    }
    if let Some(why) = analysis::judge(&spec.analysis, &old, &new, step_over) {
        return halt(rollout, &mut state, why, woken);
    }
    if !step_over {
        return Turn {
            woken,
            ..Turn::default()
        };
    }
    advance(rollout, &mut state, &new, woken, now)
}

/// What the driver reads of one CR.
struct Facts<'a> {
    uid: &'a str,
    namespace: Option<&'a str>,
    /// Its `status.reconciledBy`.
    by: Option<String>,
    ready: bool,
}

/// One version's numbers now: its passes over the window, and the CRs of `facts` whose
/// status says it reconciled them (and how many of those are Ready).
fn numbers(
    state: &mut super::State,
    facts: &[Facts<'_>],
    version: Version,
    rollout: &Rollout,
    now: Instant,
) -> Numbers {
    let window = rollout.spec.analysis.window;
    let (passes, failures) = state.passes.counts(version, now, window);
    let ours = |by: &str| match version {
        Version::Old => rollout.is_old(by),
        Version::New => rollout.is_new(by),
    };
    let mine = facts.iter().filter(|f| f.by.as_deref().is_some_and(ours));
    Numbers {
        passes,
        failures,
        reconciled: mine.clone().count(),
        ready: mine.filter(|f| f.ready).count(),
    }
}

/// The new version failed its analysis (`why`): rolled back (every CR moved woken to go
/// back) or paused, as `onFailure` says.
fn halt(rollout: &Rollout, state: &mut super::State, why: String, woken: Vec<String>) -> Turn {
    let spec = &rollout.spec;
    state.verdict = Some(why.clone());
    let at = format!(
        "the rollout of {} from {} to {} at step {} of {} ({} % of CRs)",
        rollout.crd,
        rollout.from,
        rollout.to,
        state.step + 1,
        spec.steps.len(),
        spec.steps[state.step].percent
    );
    match spec.on_failure {
        OnFailure::Rollback => {
            state.phase = Phase::RolledBack;
            let back: Vec<String> = state.moved.iter().cloned().collect();
            Turn {
                woken: back.clone(),
                said: Some((Reason::RolledBack, format!("{at} was rolled back: {why}"))),
                back: Some((back, why)),
                over: true,
            }
        }
        OnFailure::Pause => {
            state.phase = Phase::Paused;
            Turn {
                woken,
                said: Some((Reason::RolloutPaused, format!("{at} paused: {why}"))),
                ..Turn::default()
            }
        }
    }
}

/// The step is over and the new version passed: the next step, or the end.
fn advance(
    rollout: &Rollout,
    state: &mut super::State,
    new: &Numbers,
    woken: Vec<String>,
    now: Instant,
) -> Turn {
    let spec = &rollout.spec;
    if state.step + 1 == spec.steps.len() {
        state.phase = Phase::Complete;
        return Turn {
            woken,
            said: Some((
                Reason::RolloutComplete,
                format!(
                    "the rollout of {} reached every CR: {} replaces {} ({} passes in the last {}, {} failed)",
                    rollout.crd,
                    rollout.to,
                    rollout.from,
                    new.passes,
                    inrun_contract::duration::format(spec.analysis.window),
                    new.failures
                ),
            )),
            over: true,
            ..Turn::default()
        };
    }
    state.step += 1;
    state.step_started = now;
    state.step_started_at = super::now_secs();
    let next = spec.steps[state.step];
    Turn {
        woken,
        said: Some((
            Reason::RolloutStep,
            format!(
                "the rollout of {} to {}: step {} of {}, {} % of CRs (the new version so far: {} passes, {} failed; {} of {} CRs Ready)",
                rollout.crd,
                rollout.to,
                state.step + 1,
                spec.steps.len(),
                next.percent,
                new.passes,
                new.failures,
                new.ready,
                new.reconciled
            ),
        )),
        ..Turn::default()
    }
}

/// Ends `rollout` before any CR moved: the plan it required failed (`why`).
fn refuse(rollout: &Rollout, why: String) -> Turn {
    let mut state = rollout.state();
    state.phase = Phase::RolledBack;
    state.verdict = Some(why.clone());
    Turn {
        said: Some((
            Reason::RolledBack,
            format!(
                "the rollout of {} from {} to {} was refused before any CR moved: {why}",
                rollout.crd, rollout.from, rollout.to
            ),
        )),
        over: true,
        ..Turn::default()
    }
}

/// A replica that does not lead its ring follows the leader's record `view`: its step,
/// when that started, and its phase. A rollout the leader ended ends here too, waking the
/// CRs of `all` whose version that changes (`None` while it goes on: the turn moves this
/// replica's share of CRs for the step).
fn follow(rollout: &Rollout, view: &super::RolloutView, all: &[Arc<CachedCr>]) -> Option<Turn> {
    if view.to != rollout.to || view.from != rollout.from {
        return None;
    }
    let mut state = rollout.state();
    let last = rollout.spec.steps.len().saturating_sub(1);
    let step = view.step.saturating_sub(1).min(last);
    if step > state.step {
        state.step = step;
    }
    // When the leader's step began (a resume sets it again): a replica that comes to
    // lead goes on with the pause left, not a pause of its own.
    if view.step_started_at != state.step_started_at {
        state.step_started_at = view.step_started_at;
        state.step_started = super::instant_of(view.step_started_at);
    }
    match (view.phase, state.phase) {
        (Phase::RolledBack, Phase::Progressing | Phase::Paused) => {
            state.phase = Phase::RolledBack;
            state.verdict.clone_from(&view.verdict);
            let back: Vec<String> = state.moved.iter().cloned().collect();
            Some(Turn {
                woken: back.clone(),
                back: Some((back, view.verdict.clone().unwrap_or_default())),
                over: true,
                ..Turn::default()
            })
        }
        (Phase::Complete, Phase::Progressing | Phase::Paused) => {
            state.phase = Phase::Complete;
            let woken = all
                .iter()
                .filter_map(|cr| cr.metadata.uid.clone())
                .filter(|u| !state.moved.contains(u))
                .collect();
            Some(Turn {
                woken,
                over: true,
                ..Turn::default()
            })
        }
        (Phase::Paused | Phase::Progressing, Phase::Paused | Phase::Progressing) => {
            state.phase = view.phase;
            None
        }
        _ => None,
    }
}

/// What a person's `command` does to the rollout of `state` (whose CRs are `uids`), or
/// `None` when it does nothing where the rollout stands (resuming one not paused).
fn commanded(
    rollout: &Rollout,
    state: &mut super::State,
    command: Command,
    uids: impl Iterator<Item = String>,
    now: Instant,
) -> Option<Turn> {
    let by_hand = format!(
        "{} by hand (inrun rollout {})",
        match command {
            Command::Pause => "paused",
            Command::Resume => "resumed",
            Command::Promote => "promoted",
            Command::Abort => "aborted",
        },
        command.as_str()
    );
    let at = format!("the rollout of {} to {}", rollout.crd, rollout.to);
    match (command, state.phase) {
        (Command::Pause, Phase::Progressing) => {
            state.phase = Phase::Paused;
            state.verdict = Some(by_hand.clone());
            Some(Turn {
                said: Some((Reason::RolloutPaused, format!("{at}: {by_hand}"))),
                ..Turn::default()
            })
        }
        (Command::Resume, Phase::Paused) => {
            state.phase = Phase::Progressing;
            state.step_started = now;
            state.step_started_at = super::now_secs();
            state.verdict = None;
            Some(Turn {
                said: Some((Reason::RolloutStep, format!("{at}: {by_hand}"))),
                ..Turn::default()
            })
        }
        (Command::Promote, Phase::Progressing | Phase::Paused) => {
            state.phase = Phase::Complete;
            let woken = uids.filter(|u| !state.moved.contains(u)).collect();
            Some(Turn {
                woken,
                said: Some((Reason::RolloutComplete, format!("{at}: {by_hand}"))),
                over: true,
                ..Turn::default()
            })
        }
        (Command::Abort, Phase::Progressing | Phase::Paused) => {
            state.phase = Phase::RolledBack;
            state.verdict = Some(by_hand.clone());
            let back: Vec<String> = state.moved.iter().cloned().collect();
            Some(Turn {
                woken: back.clone(),
                said: Some((
                    Reason::RolledBack,
                    format!("{at} was rolled back: {by_hand}"),
                )),
                back: Some((back, by_hand)),
                over: true,
            })
        }
        _ => None,
    }
}

/// The CRD `name` as events name it (events of cluster-scoped objects go to `default`);
/// `None` when it cannot be read.
async fn crd_reference(ctx: &Ctx, name: &str) -> Option<ObjectReference> {
    let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    match api.get(name).await {
        Ok(crd) => Some(ObjectReference {
            api_version: Some("apiextensions.k8s.io/v1".into()),
            kind: Some("CustomResourceDefinition".into()),
            name: Some(name.to_string()),
            uid: crd.metadata.uid,
            ..ObjectReference::default()
        }),
        Err(e) => {
            tracing::warn!(crd = %name, error = %e, "a rollout's events will not be recorded on its CRD");
            None
        }
    }
}

/// `cr` as an event names it.
fn reference(ctx: &Ctx, cr: &CachedCr) -> ObjectReference {
    ObjectReference {
        api_version: Some(ctx.cr_resource.api_version.clone()),
        kind: Some(ctx.cr_resource.kind.clone()),
        name: cr.metadata.name.clone(),
        namespace: cr.metadata.namespace.clone(),
        uid: cr.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}
