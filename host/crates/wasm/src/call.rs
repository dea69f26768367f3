//! One call into a plugin: a fresh store with a deadline and a memory cap, the call, and
//! the translation of whatever happened into an outcome or a [`CallError`]. The outcome
//! crosses from its WIT form in `convert`. Where the call's instance comes from (kept for
//! reuse, made ahead, or fresh) and where it goes after (kept, or the next one made ahead)
//! is decided here too.

use std::time::{Duration, Instant};

use wasmtime::{Store, Trap, UpdateDeadline};

use super::ahead::Made;
use super::bindings;
use super::budget::{Admission, Held};
use super::convert::{
    from_wit_outcome, from_wit_outcome2, outcome_bound, outcome2_bound, to_wit_outcome,
    to_wit_outcome2, to_wit_request, within_limits, within_limits2,
};
use super::error::{CallError, CallFailure};
use super::grants::Grants;
use super::guest::Guest;
use super::limits::Limits;
use super::plugin::Plugin;
use super::reuse::Key;
use super::shelf::Ticket;
use super::state::State;
use inrun_contract::{Outcome, Request};

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
            let mut held = self.hold_outcome(limits).await?;
            let wit_req = to_wit_request(req);
            let call = async |store: &mut Store<State>, guest: &Guest| match guest {
                Guest::Reconciler(guest) => {
                    Ok(guest.call_reconcile(store, &wit_req).await?.map(Answer::V1))
                }
                Guest::Reconciler2(guest) => {
                    Ok(guest.call_reconcile(store, &wit_req).await?.map(Answer::V2))
                }
                Guest::Hooks(_) | Guest::Hooks2(_) | Guest::Package(_) => {
                    Err(self.lacks("`reconcile`"))
                }
            };
            let finish = |raw| self.finish(raw, limits, None, &mut held);
            let ns = cr_namespace(req);
            let key = Key::of(self.tenant(), limits.reuse_calls, grants, ns.as_deref());
            let outcome = self.in_store(limits, grants, ns, key, call, finish).await?;
            held.keep();
            Ok(outcome)
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
            let mut held = self.hold_outcome(limits).await?;
            let wit_req = to_wit_request(req);
            let call = async |store: &mut Store<State>, guest: &Guest| match guest {
                Guest::Hooks(guest) => {
                    let current = to_wit_outcome(current);
                    let answer = guest.call_call(store, function, &wit_req, &current).await?;
                    Ok(answer.map(Answer::V1))
                }
                Guest::Hooks2(guest) => {
                    let current = to_wit_outcome2(current);
                    let answer = guest.call_call(store, function, &wit_req, &current).await?;
                    Ok(answer.map(Answer::V2))
                }
                Guest::Reconciler(_) | Guest::Reconciler2(_) | Guest::Package(_) => {
                    Err(self.lacks("hooks"))
                }
            };
            let finish = |raw| self.finish(raw, limits, Some(current), &mut held);
            let ns = cr_namespace(req);
            let key = Key::of(self.tenant(), limits.reuse_calls, grants, ns.as_deref());
            let outcome = self.in_store(limits, grants, ns, key, call, finish).await?;
            held.keep();
            Ok(outcome)
        })
        .await
    }

    /// Holds, before the call, the most its outcome may take of the host's memory while
    /// it is lifted out of the guest (what [`lift_fuel`] lets through), against its
    /// tenant's share ([`super::budget::hold`]); waits for room until the call's deadline.
    async fn hold_outcome(&self, limits: &Limits) -> Result<Held, CallError> {
        let deadline = Instant::now() + limits.deadline;
        super::budget::hold(lift_fuel(limits), deadline)
            .await
            .map_err(|hit| CallError {
                plugin: self.id().clone(),
                failure: CallFailure::Budget(hit.to_string()),
            })
    }

    /// Asks a hooks component which functions it serves.
    pub(super) async fn call_functions(&self, limits: &Limits) -> Result<Vec<String>, CallError> {
        self.observed(async {
            let call = async |store: &mut Store<State>, guest: &Guest| match guest {
                Guest::Hooks(guest) => guest.call_functions(store).await,
                Guest::Hooks2(guest) => guest.call_functions(store).await,
                Guest::Reconciler(_) | Guest::Reconciler2(_) | Guest::Package(_) => Ok(Vec::new()),
            };
            self.in_store(limits, &Grants::default(), None, None, call, Ok)
                .await
        })
        .await
    }

    /// One call in a fresh instance, in a fresh store ([`Plugin::store`]): `call` calls an
    /// export of it, within the deadline ([`bounded`]); then what the guest printed is
    /// logged, a failure becomes a [`CallError`] ([`Plugin::settle`]), and `finish` checks
    /// what the guest answered. With a `key` (the plugin's limits allow reuse: [`Key::of`]),
    /// an idle instance of the same tenant (and namespace, where the grants are scoped to
    /// it) serves the call if there is one, and afterwards the instance is kept for the
    /// next call only if the answer passed `finish` and the instance has calls left
    /// ([`super::reuse`]). After an answer that passed, an instance not kept makes way for
    /// the next one, made ahead ([`Plugin::make_ahead`]).
    pub(super) async fn in_store<R, T>(
        &self,
        limits: &Limits,
        grants: &Grants,
        cr_namespace: Option<String>,
        key: Option<Key>,
        call: impl AsyncFnOnce(&mut Store<State>, &Guest) -> wasmtime::Result<R>,
        finish: impl FnOnce(R) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        let (mut store, kept, _busy) = self
            .store(limits, grants, cr_namespace, key.as_ref())
            .await?;
        let (guest, served) = match kept {
            Some((guest, served)) => (Some(guest), served),
            None => (None, 0),
        };
        let pre = &self.inner().pre;
        let result = bounded(limits, async {
            let guest = match guest {
                Some(guest) => guest,
                None => {
                    let started = Instant::now();
                    let guest = pre.instantiate(&mut store).await?;
                    self.inner().ahead.instantiated(started.elapsed());
                    guest
                }
            };
            let answer = call(&mut store, &guest).await?;
            Ok((guest, answer))
        })
        .await;
        let (guest, answer) = self.settle(result, &mut store, limits)?;
        let checked = finish(answer);
        if let Some(key) = key
            && checked.is_ok()
            && served + 1 < limits.reuse_calls
            && store.data().stdio_left()
        {
            self.inner()
                .kept
                .keep(self.inner().engine.shelf(), key, store, guest, served + 1);
        } else if checked.is_ok() {
            drop(_busy);
            let finished = Finished {
                _store: store,
                _guest: guest,
            };
            self.make_ahead(limits, finished);
        }
        checked
    }

    /// The error of a call to an export this plugin's world does not have.
    fn lacks(&self, export: &str) -> wasmtime::Error {
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

    /// A store armed with the plugin's limits and grants, once the call is admitted under
    /// its tenant's budget: a kept instance's for `key` (with the instance and the calls it
    /// has served) when there is one that can take the call, else that of an instance made
    /// ahead ([`super::ahead`], 0 calls served), else a fresh one. The guest
    /// yields to the async runtime at every epoch tick, and to another tenant's waiting
    /// guest when the cores guests may use are all taken; it is interrupted at the first
    /// tick past its deadline; host imports it awaits stop waiting at the same deadline.
    ///
    /// # Errors
    /// [`CallFailure::Budget`] when the tenant's calls in flight stay taken until the
    /// deadline.
    #[allow(clippy::type_complexity)]
    pub(super) async fn store(
        &self,
        limits: &Limits,
        grants: &Grants,
        cr_namespace: Option<String>,
        key: Option<&Key>,
    ) -> Result<(Store<State>, Option<(Guest, u32)>, super::ticker::Busy), CallError> {
        let inner = self.inner();
        let deadline = Instant::now() + limits.deadline;
        let admission = self.admit(deadline).await?;
        let busy = inner.engine.busy();
        let mut admission = Some(admission);
        let kept = std::iter::from_fn(|| key.and_then(|key| inner.kept.take(key)))
            .map(|kept| (kept.store, kept.guest, kept.served));
        // Then an instance made ahead ([`super::ahead`]): fresh, it has served no call.
        let made = std::iter::from_fn(|| inner.ahead.take()).map(|made| {
            let Made { store, guest, .. } = made;
            (store, guest, 0)
        });
        for (mut store, guest, served) in kept.chain(made) {
            let state = store.data_mut();
            if state.rearm(
                limits.memory_bytes,
                admission.take(),
                grants.clone(),
                cr_namespace.clone(),
                deadline,
            ) {
                arm(&mut store, deadline, limits);
                if served == 0 {
                    inner.ahead.served();
                }
                return Ok((store, Some((guest, served)), busy));
            }
            // It holds more than this call may: it goes, and the admission comes back.
            admission = state.limiter.admission.take();
        }
        let store = self.new_store(limits, admission, grants, cr_namespace, deadline);
        Ok((store, None, busy))
    }

    /// One call's place in its tenant's budget, waited for until `deadline`.
    async fn admit(&self, deadline: Instant) -> Result<Admission, CallError> {
        self.inner()
            .engine
            .admit(deadline)
            .await
            .map_err(|hit| CallError {
                plugin: self.id().clone(),
                failure: CallFailure::Budget(hit.to_string()),
            })
    }

    /// A store armed with `limits` and `grants`, holding `admission`.
    pub(super) fn new_store(
        &self,
        limits: &Limits,
        admission: Option<Admission>,
        grants: &Grants,
        cr_namespace: Option<String>,
        deadline: Instant,
    ) -> Store<State> {
        let inner = self.inner();
        let mut store = Store::new(
            inner.engine.wasmtime(),
            State::new(
                inner.id.clone(),
                limits.memory_bytes,
                admission,
                grants.clone(),
                cr_namespace,
                deadline,
                inner.engine.observer().clone(),
            ),
        );
        store.limiter(|s| &mut s.limiter);
        arm(&mut store, deadline, limits);
        store
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

    /// The outcome a call returned, checked: what its parsed form may keep is held first
    /// (`held`, which held its text while it was copied out of the guest), and an outcome
    /// that does not fit its tenant's share is not parsed. A 0.1.0 hook cannot see or
    /// return conditions and events: those of `current` (the outcome it was given) go on.
    fn finish(
        &self,
        raw: Result<Answer, String>,
        limits: &Limits,
        current: Option<&Outcome>,
        held: &mut Held,
    ) -> Result<Outcome, CallError> {
        let fail = |failure| CallError {
            plugin: self.id().clone(),
            failure,
        };
        let answer = raw.map_err(|msg| fail(CallFailure::Returned(truncate_owned(msg, 500))))?;
        let bound = match &answer {
            Answer::V1(wit) => within_limits(wit, limits).map(|()| outcome_bound(wit)),
            Answer::V2(wit) => within_limits2(wit, limits).map(|_| outcome2_bound(wit)),
        }
        .map_err(|why| fail(CallFailure::BadOutput(why)))?;
        held.resize(bound)
            .map_err(|hit| fail(CallFailure::Budget(hit.to_string())))?;
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

/// After a call: the next instance made ahead (`ahead.rs`).
impl Plugin {
    /// After a call that succeeded: starts making the next instance in the background,
    /// with these limits, and tears the `finished` one down there first (its slot goes back
    /// to the pool warm for the next; its admission, inside, goes with it, so the slot is
    /// never free of both). Where nothing is made, the finished instance goes here: when
    /// the engine makes none, the plugin's last instantiation took less than the engine's
    /// threshold, one is ready or being made, the tenant's place among waiting instances is
    /// taken (checked before anything is made), or there is no Tokio runtime to run on.
    fn make_ahead(&self, limits: &Limits, finished: Finished) {
        // Most calls stop at the first check: a plugin quick to instantiate.
        let engine = &self.inner().engine;
        let Some((shelf, over)) = engine.ahead() else {
            return;
        };
        if self.instantiation_time() < over {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.inner().ahead.claim() {
            return;
        }
        let making = Making(Some(self.clone()));
        let Some(place) = shelf.reserve(engine.tenant_name(), 0) else {
            return;
        };
        let (plugin, limits) = (self.clone(), *limits);
        runtime.spawn(async move {
            drop(finished);
            let made = plugin.make(&limits, place).await;
            making.made(made);
        });
    }

    /// One instance, admitted and instantiated like a call's, then parked in `place`.
    /// `None` when the budget has nothing free now, the instantiation fails, or the
    /// instance holds more memory than the bounds on waiting instances leave.
    async fn make(&self, limits: &Limits, mut place: Ticket) -> Option<Made> {
        let engine = &self.inner().engine;
        // Only what the tenant and the host have free now: a call waiting for its turn
        // never waits behind an instance made for a later one.
        let admission = engine.try_admit()?;
        let _busy = engine.busy();
        let deadline = Instant::now() + limits.deadline;
        let mut store = self.new_store(limits, Some(admission), &Grants::default(), None, deadline);
        let pre = &self.inner().pre;
        let started = Instant::now();
        let guest = bounded(limits, pre.instantiate(&mut store)).await.ok()?;
        self.inner().ahead.instantiated(started.elapsed());
        // Its memory on the shelf before its admission goes: the slot it holds is never
        // one a call was admitted to.
        if !place.hold(store.data().limiter.used) {
            return None;
        }
        store.data_mut().park();
        Some(Made::new(store, guest, place))
    }
}

/// A call's store (its admission inside) and instance, done with.
struct Finished {
    _store: Store<State>,
    _guest: Guest,
}

/// The claim of one making: given back with what it made, or when it is dropped half way
/// (a runtime shut down drops the task).
struct Making(Option<Plugin>);

impl Making {
    /// Ends the making with `made`: the claim and the instance change hands at once, so
    /// that no second making starts in between.
    fn made(mut self, made: Option<Made>) {
        if let Some(plugin) = self.0.take() {
            plugin.inner().ahead.made(made);
        }
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        if let Some(plugin) = &self.0 {
            plugin.inner().ahead.abandon();
        }
    }
}

/// The most a call may copy out of its guest at once, in bytes: its outcome (or one host
/// call's arguments) as text, plus the host's bookkeeping of each string and list element
/// of it (up to a thousand beside its resources). Wasmtime refuses to lift more
/// (`Store::set_hostcall_fuel`), so a guest cannot make the host allocate more than this
/// for it, whatever its outcome claims — strings that overlap in guest memory included.
pub(super) fn lift_fuel(limits: &Limits) -> usize {
    const PER_ELEMENT: usize = 64;
    limits
        .output_bytes
        .saturating_add(PER_ELEMENT * limits.max_resources.saturating_add(1024))
}

/// Arms `store` for a call ending at `deadline`: it yields at every epoch tick (and waits
/// for its turn when the cores guests may use are taken) and is interrupted at the first
/// tick past the deadline; it may copy out of the guest at most [`lift_fuel`] bytes at
/// once.
fn arm(store: &mut Store<State>, deadline: Instant, limits: &Limits) {
    store.set_hostcall_fuel(lift_fuel(limits));
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
    if state.limiter.capped {
        return CallFailure::Memory(limits.memory_bytes);
    }
    // Wasmtime's refusal to lift more than the store's hostcall fuel has no type of its
    // own to match: its message is the only mark.
    if err.chain().any(|e| {
        e.to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    }) {
        return CallFailure::BadOutput(format!(
            "it copied more than its limit of {} bytes out of the guest at once ({} with the host's bookkeeping of its strings and lists)",
            limits.output_bytes,
            lift_fuel(limits)
        ));
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

pub(super) fn truncate_owned(mut s: String, max: usize) -> String {
    if s.len() > max {
        let cut = super::state::truncate(&s, max).len();
        s.truncate(cut);
        s.push('…');
    }
    s
}
