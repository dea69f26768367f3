//! The epoch ticker: a thread that advances the engine's epoch only while a call is in
//! flight, so deadlines fire inside tight loops and an idle host wakes for nothing.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How often the epoch advances; deadlines are rounded up to this.
pub(super) const TICK: Duration = Duration::from_millis(1);

/// Calls in flight, which the epoch ticker waits for.
#[derive(Default)]
pub(super) struct Ticker {
    state: Mutex<TickerState>,
    wake: Condvar,
}

#[derive(Default)]
struct TickerState {
    active: usize,
    stop: bool,
}

impl Ticker {
    /// A ticker for `engine`, its thread started and asleep until a call is in flight.
    pub(super) fn start(engine: wasmtime::Engine) -> Arc<Ticker> {
        let ticker = Arc::new(Ticker::default());
        spawn_ticker(engine, ticker.clone());
        ticker
    }

    /// Marks a call in flight until the guard drops; the ticker runs meanwhile.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        self.lock().active += 1;
        self.wake.notify_one();
        Busy(self.clone())
    }

    /// Ends the ticker's thread (the engine is dropped).
    pub(super) fn stop(&self) {
        self.lock().stop = true;
        self.wake.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, TickerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A call in flight: while one is alive, the epoch advances and deadlines fire.
pub(super) struct Busy(Arc<Ticker>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.active = state.active.saturating_sub(1);
    }
}

/// Advances the engine's epoch every [`TICK`] while a call is in flight, so a call's
/// deadline interrupts it even inside a tight loop; sleeps on a condition variable
/// otherwise; ends when the engine is dropped.
fn spawn_ticker(engine: wasmtime::Engine, ticker: Arc<Ticker>) {
    let spawned = std::thread::Builder::new()
        .name("inrun-epoch".into())
        .spawn(move || {
            loop {
                let state = ticker.lock();
                let state = ticker
                    .wake
                    .wait_while(state, |s| s.active == 0 && !s.stop)
                    .unwrap_or_else(|p| p.into_inner());
                if state.stop {
                    break;
                }
                drop(state);
                std::thread::sleep(TICK);
                engine.increment_epoch();
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the Wasm epoch ticker; deadlines will not fire");
    }
}
