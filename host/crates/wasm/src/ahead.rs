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
//! - Waiting instances hold pool slots of their own ([`super::config::kept_slots`] more),
//!   within bounds in all and per tenant ([`super::shelf::Shelf`]): a tenant holds at most
//!   a quarter of them. Its place is taken before anything is made, its memory counted
//!   before its admission goes: a call never finds the pool's slots held by instances
//!   waiting, and nothing is made only to be thrown away.
//! - It goes with its plugin (a new version is a new [`Plugin`](crate::Plugin)), and is
//!   made only inside a Tokio runtime: outside one (a test polling by hand) every call
//!   instantiates its own.
//!
//! This file holds the plugin's slot for it ([`Ahead`]); `call.rs` makes the instance
//! (`Plugin::make_ahead`, after the call it follows) and hands it to the next call
//! (`Plugin::store`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime::Store;

use super::guest::Guest;
use super::shelf::Ticket;
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

impl Made {
    /// `guest` in its parked `store`, holding its place on the shelf by `ticket`.
    pub(super) fn new(store: Store<State>, guest: Guest, ticket: Ticket) -> Self {
        Made {
            store,
            guest,
            _ticket: ticket,
        }
    }
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

    /// How long the plugin's last instantiation took.
    pub(super) fn instantiation_time(&self) -> Duration {
        Duration::from_micros(self.instantiation_us.load(Ordering::Relaxed))
    }

    /// Counts a call served by an instance made ahead.
    pub(super) fn served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls an instance made ahead has served.
    pub(super) fn calls_served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Whether an instance is ready.
    pub(super) fn ready(&self) -> bool {
        self.slot().ready.is_some()
    }

    /// Whether the next instance is being made.
    pub(super) fn making(&self) -> bool {
        self.slot().making
    }

    /// Claims the making of the next instance: false when one is ready or being made.
    pub(super) fn claim(&self) -> bool {
        let mut slot = self.slot();
        if slot.ready.is_some() || slot.making {
            return false;
        }
        slot.making = true;
        true
    }

    /// Ends a making with `made`: the claim and the instance change hands at once, so that
    /// no second making starts in between.
    pub(super) fn made(&self, made: Option<Made>) {
        let mut slot = self.slot();
        slot.making = false;
        slot.ready = made;
    }

    /// Gives up a claim that made nothing.
    pub(super) fn abandon(&self) {
        self.slot().making = false;
    }
}
