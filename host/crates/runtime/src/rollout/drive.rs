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
    let on_crd = crd_reference(&ctx, &rollout.crd).await;
    // Kept where people and `inrun rollout` read it: the host's namespace, as the host.
    let record = ctx
        .locks
        .as_ref()
        .map(|l| Record::new(l.host_client(), l.namespace(), &rollout.crd));
    let mut written = false;
    let mut planned = false;
    // Events on the CRD and the Blueprint are the host's, whoever the tenant acts as.
    let host_events = ctx.locks.as_ref().map_or_else(
        || ctx.events.clone(),
        |l| ctx.events.through(l.host_client()),
    );
    tracing::info!(crd = %rollout.crd, from = %rollout.from, to = %rollout.to, "rollout started");
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !synced.load(Ordering::Acquire) {
            tracing::debug!(crd = %rollout.crd, "rollout: the CRs' cache is not synced yet");
            continue;
        }
        let all = crs.state();

        // Under sharding the ring's leader decides; the others follow its record.
        let leads = ctx
            .leading
            .as_ref()
            .is_none_or(inrun_ring::fence::Fence::is_open);
        let (command, followed) = match (&record, leads) {
            (Some(r), true) if written => (r.take_command().await, None),
            (Some(r), false) => (None, r.read().await.map(|(view, _, _)| view)),
            _ => (None, None),
        };
        // `requirePlan`: the new version planned over every CR before the first moves.
        let refused = if leads && !planned && rollout.spec.require_plan && rollout.at_start() {
            planned = true;
            match super::preflight::plan(&ctx, &rollout, &all).await {
                Some(why) => Some(refuse(&rollout, why)),
                None => None,
            }
        } else {
            None
        };
        let turn = match refused.or_else(|| followed.and_then(|view| follow(&rollout, &view, &all)))
        {
            Some(turn) => turn,
            None => turn(&rollout, &all, Instant::now(), command, leads),
        };
        tracing::trace!(crd = %rollout.crd, crs = all.len(), leads, woken = turn.woken.len(), "rollout: a look");
        let by_uid: HashMap<&str, &Arc<CachedCr>> = all
            .iter()
            .filter_map(|cr| cr.metadata.uid.as_deref().map(|u| (u, cr)))
            .collect();
        for uid in &turn.woken {
            if let Some(cr) = by_uid.get(uid.as_str()) {
                let _ = woken.send(ObjectRef::from_obj_with(
                    cr.as_ref(),
                    ctx.cr_resource.clone(),
                ));
            }
        }
        let view = rollout.view();
        let on_old = all.len().saturating_sub(view.on_new);
        let (step, on_new, on_old) = match view.phase {
            Phase::RolledBack => (0, 0, all.len()),
            Phase::Complete => (view.step, all.len(), 0),
            _ => (view.step, view.on_new, on_old),
        };
        ctx.metrics.rollout_at(
            &rollout.crd,
            i64::try_from(step).unwrap_or(i64::MAX),
            i64::from(view.percent),
            on_old,
            on_new,
        );
        if let Some((reason, note)) = turn.said.as_ref().filter(|_| leads) {
            tracing::info!(crd = %rollout.crd, reason = reason.as_str(), "{note}");
            if let Some(on) = &on_crd {
                host_events.record(on, *reason, note.clone()).await;
            }
            // And on its tenant's Blueprint resource, when it came as one.
            if let Some(name) = rollout.shown_on.get() {
                let on = ObjectReference {
                    api_version: Some("inrun.dev/v1alpha1".into()),
                    kind: Some("Blueprint".into()),
                    name: Some(name.clone()),
                    ..ObjectReference::default()
                };
                host_events.record(&on, *reason, note.clone()).await;
            }
        }
        if let Some((uids, why)) = &turn.back {
            let note = format!(
                "reconciled again by {} after the rollout to {} was rolled back: {why}",
                rollout.from, rollout.to
            );
            for uid in uids {
                if let Some(cr) = by_uid.get(uid.as_str()) {
                    let on = reference(&ctx, cr);
                    ctx.events
                        .record(&on, Reason::RolledBack, note.clone())
                        .await;
                }
            }
        }
        if let Some(record) = &record
            && leads
            && (!written || turn.said.is_some())
        {
            let view = rollout.view();
            record.write(&view, &rollout.previous_blueprint).await;
            if let Some(blueprint) = rollout.shown_on.get() {
                record.show_on(blueprint, &view).await;
            }
            written = true;
        }
        if turn.over {
            tracing::info!(crd = %rollout.crd, phase = ?view.phase, "rollout over");
            return;
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
    let facts: Vec<(&str, Option<&str>, Option<String>, bool)> = all
        .iter()
        .filter_map(|cr| {
            let uid = cr.metadata.uid.as_deref()?;
            let (by, ready) = cr.reconciled_by_and_ready();
            Some((uid, cr.metadata.namespace.as_deref(), by, ready))
        })
        .collect();
    let spec = &rollout.spec;
    let window = spec.analysis.window;
    let mut state = rollout.state();
    if matches!(state.phase, Phase::Complete | Phase::RolledBack) {
        return Turn {
            over: true,
            ..Turn::default()
        };
    }
    let numbers = |state: &mut super::State, version: Version, by: &str| {
        let (passes, failures) = state.passes.counts(version, now, window);
        let mine = facts.iter().filter(|f| f.2.as_deref() == Some(by));
        Numbers {
            passes,
            failures,
            reconciled: mine.clone().count(),
            ready: mine.filter(|f| f.3).count(),
        }
    };
    let old = numbers(&mut state, Version::Old, &rollout.from);
    let new = numbers(&mut state, Version::New, &rollout.to);
    state.numbers = (old.clone(), new.clone());
    if let Some(command) = command {
        let uids = facts.iter().map(|f| f.0.to_string());
        if let Some(turn) = commanded(rollout, &mut state, command, uids, now) {
            return turn;
        }
    }
    if state.phase == Phase::Paused {
        return Turn::default();
    }
    // A CR whose status says the new version reconciled it is on it: after a restart, or
    // taken over from another replica under sharding.
    let ran_new = facts
        .iter()
        .filter(|f| f.2.as_deref() == Some(rollout.to.as_str()))
        .map(|f| f.0.to_string());
    state.moved.extend(ran_new);
    let step = spec.steps[state.step];
    let crs: Vec<Cr<'_>> = facts
        .iter()
        .map(|f| Cr {
            uid: f.0,
            namespace: f.1,
        })
        .collect();
    let moved = moves::moved(&crs, spec.select.as_ref(), step.percent, &state.moved);
    let woken: Vec<String> = moved.difference(&state.moved).cloned().collect();
    state.moved = moved;
    if !leads {
        return Turn {
            woken,
            ..Turn::default()
        };
    }
    // A step is over once its pause passed and none of its CRs moved at this look.
    let step_over = woken.is_empty()
        && now.duration_since(state.step_started) >= step.pause.unwrap_or_default();
    if let Some(why) = analysis::judge(&spec.analysis, &old, &new, step_over) {
        state.verdict = Some(why.clone());
        let at = format!(
            "the rollout of {} from {} to {} at step {} of {} ({} % of CRs)",
            rollout.crd,
            rollout.from,
            rollout.to,
            state.step + 1,
            spec.steps.len(),
            step.percent
        );
        return match spec.on_failure {
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
        };
    }
    if !step_over {
        return Turn {
            woken,
            ..Turn::default()
        };
    }
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
                    inrun_contract::duration::format(window),
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
        state.step_started_at = view.step_started_at;
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
