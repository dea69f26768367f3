//! One call into a plugin: a fresh store with a deadline and a memory cap, the call, and
//! the translation of whatever happened into an outcome or a [`CallError`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings;
use super::grants::Grants;
use super::plugin::{Plugin, Pre};
use super::state::State;
use super::{CallError, CallFailure, Limits};
use inrun_contract::{Cleanup, Outcome, Request};

impl Plugin {
    /// Calls a `reconciler` component's `reconcile`. The plugin may use what `grants`
    /// allows, for the CR in `req`.
    ///
    /// # Errors
    /// [`CallError`] naming the plugin and what happened: deadline, memory cap, trap
    /// (with a panic's message), an error the plugin returned, or a bad outcome.
    pub async fn reconcile(
        &self,
        req: &Request,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Outcome, CallError> {
        self.observed(async {
            let wit_req = to_wit_request(req);
            let call = async |store: &mut Store<State>, pre: &Pre| match pre {
                Pre::Reconciler(pre) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    let answer = guest.call_reconcile(store, &wit_req).await?;
                    Ok(answer.map(Answer::V1))
                }
                Pre::Reconciler2(pre) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    let answer = guest.call_reconcile(store, &wit_req).await?;
                    Ok(answer.map(Answer::V2))
                }
                Pre::Hooks(_) | Pre::Hooks2(_) | Pre::Package(_) => Err(self.lacks("`reconcile`")),
            };
            let raw = self
                .in_fresh_store(limits, grants, cr_namespace(req), call)
                .await?;
            self.finish(raw, limits, None)
        })
        .await
    }

    /// Calls hook `function` of a `hooks` component with the outcome so far.
    ///
    /// # Errors
    /// As [`Plugin::reconcile`].
    pub async fn call_hook(
        &self,
        function: &str,
        req: &Request,
        current: &Outcome,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Outcome, CallError> {
        self.observed(async {
            let wit_req = to_wit_request(req);
            let call = async |store: &mut Store<State>, pre: &Pre| match pre {
                Pre::Hooks(pre) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    let current = to_wit_outcome(current);
                    let answer = guest.call_call(store, function, &wit_req, &current).await?;
                    Ok(answer.map(Answer::V1))
                }
                Pre::Hooks2(pre) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    let current = to_wit_outcome2(current);
                    let answer = guest.call_call(store, function, &wit_req, &current).await?;
                    Ok(answer.map(Answer::V2))
                }
                Pre::Reconciler(_) | Pre::Reconciler2(_) | Pre::Package(_) => {
                    Err(self.lacks("hooks"))
                }
            };
            let raw = self
                .in_fresh_store(limits, grants, cr_namespace(req), call)
                .await?;
            self.finish(raw, limits, Some(current))
        })
        .await
    }

    /// Asks a hooks component which functions it serves.
    pub(super) async fn call_functions(&self, limits: &Limits) -> Result<Vec<String>, CallError> {
        self.observed(async {
            let call = async |store: &mut Store<State>, pre: &Pre| match pre {
                Pre::Hooks(pre) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    guest.call_functions(store).await
                }
                Pre::Hooks2(pre) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    guest.call_functions(store).await
                }
                Pre::Reconciler(_) | Pre::Reconciler2(_) | Pre::Package(_) => Ok(Vec::new()),
            };
            self.in_fresh_store(limits, &Grants::default(), None, call)
                .await
        })
        .await
    }

    /// One call in a fresh store ([`Plugin::store`]): `call` instantiates the component in
    /// it and calls an export, within the deadline ([`bounded`]); then what the guest
    /// printed is logged and a failure becomes a [`CallError`] ([`Plugin::settle`]).
    pub(super) async fn in_fresh_store<R>(
        &self,
        limits: &Limits,
        grants: &Grants,
        cr_namespace: Option<String>,
        call: impl AsyncFnOnce(&mut Store<State>, &Pre) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let (mut store, pre, _busy) = self.store(limits, grants, cr_namespace).await?;
        let result = bounded(limits, call(&mut store, pre)).await;
        self.settle(result, &mut store, limits)
    }

    /// The error of a call to an export this plugin's world does not have.
    pub(super) fn lacks(&self, export: &str) -> wasmtime::Error {
        wasmtime::format_err!("a {} component has no {export}", self.world().name())
    }

    /// Runs one call, telling the engine's observer how it ended and how long it took:
    /// from the fresh store to the checked output, the rest of a reconcile excluded.
    pub(super) async fn observed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let started = Instant::now();
        let result = call.await;
        let outcome = result
            .as_ref()
            .map_or_else(|e| e.failure.outcome(), |_| "ok");
        self.inner()
            .engine
            .observer()
            .plugin_called(&self.id().name, outcome, started.elapsed());
        result
    }

    /// A fresh store armed with the plugin's limits and grants, once the call is admitted
    /// under its tenant's budget. The guest yields to the async runtime at every epoch
    /// tick, and to another tenant's waiting guest when the cores guests may use are all
    /// taken; it is interrupted at the first tick past its deadline; host imports it
    /// awaits stop waiting at the same deadline.
    ///
    /// # Errors
    /// [`CallFailure::Budget`] when the tenant's calls in flight stay taken until the
    /// deadline.
    pub(super) async fn store(
        &self,
        limits: &Limits,
        grants: &Grants,
        cr_namespace: Option<String>,
    ) -> Result<(Store<State>, &Pre, super::ticker::Busy), CallError> {
        let inner = self.inner();
        let deadline = Instant::now() + limits.deadline;
        let admission = inner
            .engine
            .admit(deadline)
            .await
            .map_err(|hit| CallError {
                plugin: self.id().clone(),
                failure: CallFailure::Budget(hit.to_string()),
            })?;
        let busy = inner.engine.busy();
        let mut store = Store::new(
            inner.engine.wasmtime(),
            State::new(
                inner.id.clone(),
                limits.memory_bytes,
                Some(admission),
                grants.clone(),
                cr_namespace,
                deadline,
                inner.engine.observer().clone(),
            ),
        );
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_callback(move |store| {
            if Instant::now() >= deadline {
                return Err(Trap::Interrupt.into());
            }
            let wait = store
                .data()
                .limiter
                .admission
                .as_ref()
                .and_then(|a| a.seat.as_ref())
                .and_then(super::budget::Seat::at_tick);
            Ok(match wait {
                Some(wait) => UpdateDeadline::YieldCustom(1, Box::pin(wait)),
                None => UpdateDeadline::Yield(1),
            })
        });
        store.set_epoch_deadline(1);
        Ok((store, &inner.pre, busy))
    }

    /// Logs what the guest printed (as far as its tenant's log budget allows) and turns a
    /// failed call into a [`CallError`].
    pub(super) fn settle<R>(
        &self,
        result: wasmtime::Result<R>,
        store: &mut Store<State>,
        limits: &Limits,
    ) -> Result<R, CallError> {
        store.data_mut().flush_stdio();
        store.data().report_dropped_logs();
        result.map_err(|err| CallError {
            plugin: self.id().clone(),
            failure: classify(err, store.data(), limits),
        })
    }

    /// The outcome a call returned, checked. A 0.1.0 hook cannot see or return
    /// conditions and events: those of `current` (the outcome it was given) go on.
    fn finish(
        &self,
        raw: Result<Answer, String>,
        limits: &Limits,
        current: Option<&Outcome>,
    ) -> Result<Outcome, CallError> {
        let fail = |failure| CallError {
            plugin: self.id().clone(),
            failure,
        };
        let answer = raw.map_err(|msg| fail(CallFailure::Returned(truncate_owned(msg, 500))))?;
        let outcome = match answer {
            Answer::V1(wit) => from_wit_outcome(wit, limits).map(|mut o| {
                if let Some(current) = current {
                    o.conditions = current.conditions.clone();
                    o.events = current.events.clone();
                }
                o
            }),
            Answer::V2(wit) => from_wit_outcome2(wit, limits),
        };
        outcome.map_err(|why| fail(CallFailure::BadOutput(why)))
    }
}

/// An outcome as a 0.1.0 or a 0.2.0 component returned it.
enum Answer {
    V1(bindings::Outcome),
    V2(bindings::Outcome2),
}

/// How long past its deadline a call may take in all before it is dropped: the epoch
/// interrupt stops Wasm code at the deadline, and this catches what it cannot see — a
/// guest waiting in a host call (a WASI sleep, a poll) or a slow instantiation.
const OUTER_GRACE: Duration = Duration::from_millis(100);

/// Runs `call` to its end, or drops it (and the store with it) once the deadline and
/// [`OUTER_GRACE`] have passed: then it is an interrupt, reported as the deadline. Outside
/// a Tokio runtime (a test polling by hand) only the epoch deadline applies.
pub(super) async fn bounded<R>(
    limits: &Limits,
    call: impl std::future::Future<Output = wasmtime::Result<R>>,
) -> wasmtime::Result<R> {
    if tokio::runtime::Handle::try_current().is_err() {
        return call.await;
    }
    match tokio::time::timeout(limits.deadline + OUTER_GRACE, call).await {
        Ok(result) => result,
        Err(_) => Err(Trap::Interrupt.into()),
    }
}

fn classify(err: wasmtime::Error, state: &State, limits: &Limits) -> CallFailure {
    if let Some(hit) = &state.limiter.budget {
        return CallFailure::Budget(hit.to_string());
    }
    if state.limiter.hit {
        return CallFailure::Memory(limits.memory_bytes);
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => CallFailure::Deadline(limits.deadline),
        Some(trap) => CallFailure::Trap {
            reason: trap.to_string(),
            stderr: state.first_stderr_line(),
        },
        None => CallFailure::Host(err),
    }
}

/// The CR's namespace, from its key (`namespace/name`); `None` for a cluster-scoped CR.
fn cr_namespace(req: &Request) -> Option<String> {
    req.key
        .split_once('/')
        .map(|(ns, _)| ns.to_string())
        .filter(|ns| !ns.is_empty())
}

fn to_wit_request(req: &Request) -> bindings::Request {
    bindings::Request {
        key: req.key.clone(),
        api_version: req.api_version.clone(),
        kind: req.kind.clone(),
        object: req.object.to_string(),
        args: req.args.to_string(),
        finalizing: req.finalizing,
        target: req.target.clone(),
        children: req.children.as_ref().map(Value::to_string),
    }
}

fn to_wit_outcome(o: &Outcome) -> bindings::Outcome {
    bindings::Outcome {
        status: o
            .status
            .as_ref()
            .map(|s| Value::Object(s.clone()).to_string()),
        resources: o.resources.iter().map(Value::to_string).collect(),
        labels: o
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        annotations: o
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        requeue: o.requeue,
        requeue_after_ms: o
            .requeue_after
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        cleanup: o.cleanup.map(|c| bindings::Cleanup {
            after_seconds: u32::try_from(c.after.as_secs()).unwrap_or(u32::MAX),
        }),
    }
}

fn to_wit_outcome2(o: &Outcome) -> bindings::Outcome2 {
    let v1 = to_wit_outcome(o);
    bindings::Outcome2 {
        status: v1.status,
        resources: v1.resources,
        labels: v1.labels,
        annotations: v1.annotations,
        requeue: v1.requeue,
        requeue_after_ms: v1.requeue_after_ms,
        cleanup: v1.cleanup,
        conditions: o
            .conditions
            .iter()
            .map(|c| bindings::Condition2 {
                type_: c.kind.clone(),
                status: c.truth(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        events: o
            .events
            .iter()
            .map(|e| bindings::Event2 {
                type_: if e.is_warning() {
                    bindings::EventType::Warning
                } else {
                    bindings::EventType::Normal
                },
                reason: e.reason.clone(),
                message: e.message.clone(),
            })
            .collect(),
    }
}

/// A 0.2.0 outcome: the 0.1.0 checks, then its conditions and events (their text counted
/// in the output size).
fn from_wit_outcome2(o: bindings::Outcome2, limits: &Limits) -> Result<Outcome, String> {
    let reports: usize = o
        .conditions
        .iter()
        .map(|c| c.type_.len() + c.reason.len() + c.message.len())
        .chain(o.events.iter().map(|e| e.reason.len() + e.message.len()))
        .sum();
    let v1 = bindings::Outcome {
        status: o.status,
        resources: o.resources,
        labels: o.labels,
        annotations: o.annotations,
        requeue: o.requeue,
        requeue_after_ms: o.requeue_after_ms,
        cleanup: o.cleanup,
    };
    if reports > limits.output_bytes {
        return Err(format!(
            "{reports} bytes of conditions and events, more than its output limit of {} bytes",
            limits.output_bytes
        ));
    }
    let budget = Limits {
        output_bytes: limits.output_bytes - reports,
        ..*limits
    };
    let mut outcome = from_wit_outcome(v1, &budget)?;
    outcome.conditions = o
        .conditions
        .into_iter()
        .map(|c| inrun_contract::Condition::of(c.type_, c.status, c.reason, c.message))
        .collect();
    outcome.events = o
        .events
        .into_iter()
        .map(|e| {
            let warning = matches!(e.type_, bindings::EventType::Warning);
            inrun_contract::Event::of(warning, e.reason, e.message)
        })
        .collect();
    Ok(outcome)
}

/// Checks sizes and parses the JSON a plugin returned. The reason names the first problem.
fn from_wit_outcome(o: bindings::Outcome, limits: &Limits) -> Result<Outcome, String> {
    let size: usize = o.status.as_ref().map_or(0, String::len)
        + o.resources.iter().map(String::len).sum::<usize>()
        + o.labels
            .iter()
            .chain(&o.annotations)
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    if size > limits.output_bytes {
        return Err(format!(
            "{size} bytes of output, more than its limit of {} bytes",
            limits.output_bytes
        ));
    }
    if o.resources.len() > limits.max_resources {
        return Err(format!(
            "{} resources, more than its limit of {}",
            o.resources.len(),
            limits.max_resources
        ));
    }
    let status = match o.status {
        None => None,
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => Some(map),
            Ok(Value::Null) => None,
            Ok(_) => return Err("status is not a JSON object".into()),
            Err(e) => return Err(format!("status is not JSON: {e}")),
        },
    };
    let mut resources = Vec::with_capacity(o.resources.len());
    for (i, text) in o.resources.iter().enumerate() {
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => resources.push(v),
            Ok(_) => return Err(format!("resources[{i}] is not a JSON object")),
            Err(e) => return Err(format!("resources[{i}] is not JSON: {e}")),
        }
    }
    let to_map = |pairs: Vec<(String, String)>| pairs.into_iter().collect::<BTreeMap<_, _>>();
    Ok(Outcome {
        status: status
            .filter(|m: &Map<String, Value>| !m.is_empty())
            .or(None),
        resources,
        labels: to_map(o.labels),
        annotations: to_map(o.annotations),
        requeue: o.requeue,
        requeue_after: o.requeue_after_ms.map(Duration::from_millis),
        cleanup: o.cleanup.map(|c| Cleanup {
            after: Duration::from_secs(u64::from(c.after_seconds)),
        }),
        ..Outcome::default()
    })
}

pub(super) fn truncate_owned(mut s: String, max: usize) -> String {
    if s.len() > max {
        let cut = super::state::truncate(&s, max).len();
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Property tests over what a guest hands back: any strings in the WIT outcome decode to an
/// outcome within the limits, or to a reason, never a panic. `PROPTEST_CASES` sets how
/// many (256 by default; `make fuzz` runs many more).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "{}".to_string(),
                "null".into(),
                "[]".into(),
                r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}"#.into(),
                "[".repeat(200),
                "{\"a\": ".repeat(50),
                "\u{0}".into(),
                "1e999999".into(),
                r#""\ud800""#.into(),
            ]),
            ".{0,64}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256)
        ))]
        #[test]
        fn any_guest_outcome_decodes_within_limits_or_is_refused(
            status in proptest::option::of(text()),
            resources in prop::collection::vec(text(), 0..8),
            labels in prop::collection::vec((".{0,16}", ".{0,16}"), 0..4),
            requeue_after_ms in proptest::option::of(any::<u64>()),
            after_seconds in proptest::option::of(any::<u32>()),
            max_resources in 0usize..6,
        ) {
            let limits = Limits { max_resources, output_bytes: 512, ..Limits::default() };
            let o = bindings::Outcome {
                status,
                resources,
                labels: labels.clone(),
                annotations: labels,
                requeue: false,
                requeue_after_ms,
                cleanup: after_seconds.map(|after_seconds| bindings::Cleanup { after_seconds }),
            };
            if let Ok(outcome) = from_wit_outcome(o, &limits) {
                prop_assert!(outcome.resources.len() <= max_resources);
                prop_assert!(outcome.resources.iter().all(Value::is_object));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_over_the_size_limit_is_refused() {
        let limits = Limits {
            output_bytes: 10,
            ..Limits::default()
        };
        let o = bindings::Outcome {
            status: None,
            resources: vec![r#"{"kind":"ConfigMap","data":"0123456789"}"#.into()],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
        };
        let err = from_wit_outcome(o, &limits).unwrap_err();
        assert!(err.contains("more than its limit of 10 bytes"), "{err}");
    }

    #[test]
    fn resource_that_is_not_json_is_named() {
        let o = bindings::Outcome {
            status: Some("{}".into()),
            resources: vec!["{}".into(), "not json".into()],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
        };
        let err = from_wit_outcome(o, &Limits::default()).unwrap_err();
        assert!(err.starts_with("resources[1] is not JSON"), "{err}");
    }

    #[test]
    fn outcome_round_trips_through_wit() {
        let o = Outcome {
            status: serde_json::json!({"phase": "Ready"}).as_object().cloned(),
            resources: vec![serde_json::json!({"kind": "ConfigMap"})],
            labels: [("a".to_string(), "b".to_string())].into(),
            requeue_after: Some(Duration::from_millis(1500)),
            cleanup: Some(Cleanup {
                after: Duration::from_secs(30),
            }),
            ..Outcome::default()
        };
        let back = from_wit_outcome(to_wit_outcome(&o), &Limits::default()).unwrap();
        assert_eq!(back, o);
    }
}
