//! Fresh instances made ahead: after a call, the next instance of the plugin is
//! instantiated in the background, so the next call starts in an instance that is already
//! there instead of paying for instantiation on its own path.
//!
//! An instance made ahead has served no call: the call it serves sees exactly what a
//! freshly instantiated one would (its memory is the component's initial image, its
//! globals and tables as instantiation left them), so nothing one call leaves behind ever
//! reaches another. What changes is where instantiation runs: off the call's path, while
//! the host is otherwise idle. The work is the same (every call still uses an instance of
//! its own, and one instance waits made ahead when calls stop), so it lowers a call's
//! latency, not the CPU a call costs; a host busy on every core gains nothing from it.
//!
//! - It is made under the tenant's budget like a call: admitted (a call in flight of the
//!   tenant, a slot of the pool, a turn at the gate), then parked; but only with what is
//!   free at once and never queueing ([`super::budget::Admission::try_enter`]), so a call
//!   that waits for its turn never waits behind an instance made for a later one.
//! - Only after a call that succeeded: a plugin nobody calls, or whose calls fail, makes
//!   nothing. At most one waits per plugin handle (one tenant's).
//! - Waiting instances hold pool slots of their own ([`super::reuse::kept_slots`] more),
//!   within bounds in all and per tenant ([`super::reuse::Shelf`]): a tenant holds at most
//!   a quarter of them. Its place is taken before anything is made, its memory counted
//!   before its admission goes: a call never finds the pool's slots held by instances
//!   waiting, and nothing is made only to be thrown away.
//! - It goes with its plugin (a new version is a new [`Plugin`]), and is made only inside
//!   a Tokio runtime: outside one (a test polling by hand) every call instantiates its own.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::Limits;
use super::call::bounded;
use super::grants::Grants;
use super::plugin::Plugin;
use super::reuse::{Guest, Ticket};
use super::state::State;

/// A plugin's instance made ahead, if any, and whether one is being made.
#[derive(Default)]
pub(super) struct Ahead {
    state: Mutex<Slot>,
    /// Calls an instance made ahead has served.
    served: AtomicU64,
    /// How long the plugin's last instantiation took, in microseconds.
    instantiation_us: AtomicU64,
}

#[derive(Default)]
struct Slot {
    ready: Option<Made>,
    making: bool,
}

/// An instance that has served no call, parked: no admission, no grants.
pub(super) struct Made {
    pub(super) store: Store<State>,
    pub(super) guest: Guest,
    _ticket: Ticket,
}

impl Ahead {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The instance made ahead, if one is ready.
    pub(super) fn take(&self) -> Option<Made> {
        self.slot().ready.take()
    }

    /// Records how long an instantiation of the plugin took.
    pub(super) fn instantiated(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.instantiation_us.store(micros, Ordering::Relaxed);
    }

    /// Counts a call served by an instance made ahead.
    pub(super) fn served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether an instance is ready.
    pub(super) fn ready(&self) -> bool {
        self.slot().ready.is_some()
    }

    /// Claims the making of the next instance: false when one is ready or being made.
    fn claim(&self) -> bool {
        let mut slot = self.slot();
        if slot.ready.is_some() || slot.making {
            return false;
        }
        slot.making = true;
        true
    }
}

/// A call's store (its admission inside) and instance, done with.
pub(super) struct Finished {
    pub(super) _store: Store<State>,
    pub(super) _guest: Guest,
}

/// The claim of one making: given back with what it made, or when it is dropped half way
/// (a runtime shut down drops the task).
struct Making(Option<Plugin>);

impl Making {
    /// Ends the making with `made`: the claim and the instance change hands at once, so
    /// that no second making starts in between.
    fn made(mut self, made: Option<Made>) {
        if let Some(plugin) = self.0.take() {
            let mut slot = plugin.inner().ahead.slot();
            slot.making = false;
            slot.ready = made;
        }
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        if let Some(plugin) = &self.0 {
            plugin.inner().ahead.slot().making = false;
        }
    }
}

impl Plugin {
    /// After a call that succeeded: starts making the next instance in the background,
    /// with these limits, and tears the `finished` one down there first (its slot goes back
    /// to the pool warm for the next; its admission, inside, goes with it, so the slot is
    /// never free of both). Where nothing is made, the finished instance goes here: when
    /// the engine makes none, the plugin's last instantiation took less than the engine's
    /// threshold, one is ready or being made, the tenant's place among waiting instances is
    /// taken (checked before anything is made), or there is no Tokio runtime to run on.
    pub(super) fn make_ahead(&self, limits: &Limits, finished: Finished) {
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
        Some(Made {
            store,
            guest,
            _ticket: place,
        })
    }

    /// Whether an instance made ahead waits for this plugin's next call.
    pub fn ready_ahead(&self) -> bool {
        self.inner().ahead.ready()
    }

    /// How long the plugin's last instantiation took, on a call's path or made ahead.
    pub fn instantiation_time(&self) -> Duration {
        Duration::from_micros(self.inner().ahead.instantiation_us.load(Ordering::Relaxed))
    }

    /// Whether the next instance is being made now.
    pub fn making_ahead(&self) -> bool {
        self.inner().ahead.slot().making
    }

    /// Calls of this plugin an instance made ahead has served.
    pub fn calls_made_ahead(&self) -> u64 {
        self.inner().ahead.served.load(Ordering::Relaxed)
    }
}
