//! The fair gate before the cores that run guest code: turns handed round-robin across
//! tenants' lanes, each lasting a short while unless its guest ticks on; the time a turn
//! is held is charged to its tenant's CPU cap ([`super::cpu`]), and a tenant past it gives
//! its turns up until its share has refilled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::cpu::Cpu;
use super::lanes::Lanes;
use crate::ticker::TICK;

/// How long a turn at the gate lasts unless renewed: a guest running Wasm code renews it
/// at every epoch tick; one waiting in a host call (a sleep, an HTTP request) does not,
/// and its turn passes to another after this.
const TURN: Duration = Duration::from_millis(3);

/// The most CPU one stretch between two ticks is charged: a longer one was a guest away in
/// a host call (a sleep, an HTTP request) or a thread the OS set aside, not one burning.
const STRETCH_MAX: Duration = Duration::from_millis(2);

/// The cores guests may use, handed out in turns of a few ticks, round-robin across lanes
/// (tenants) that wait, first come first served within a lane.
pub(super) struct Gate {
    slots: usize,
    state: Mutex<GateState>,
    seats: AtomicU64,
}

#[derive(Default)]
struct GateState {
    /// Turns handed out: seat, lane, and until when (`None`: handed to a waiting seat that
    /// has not taken it up yet; such a turn does not end until it does, or the seat goes).
    turns: Vec<(u64, u64, Option<Instant>)>,
    /// Seats waiting, by lane.
    waiting: Lanes<(u64, Arc<Notify>)>,
}

impl Gate {
    pub(super) fn new(slots: usize) -> Self {
        Gate {
            slots,
            state: Mutex::new(GateState::default()),
            seats: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl GateState {
    /// Ends turns past their time and hands free slots to waiting seats, one lane after
    /// another.
    fn hand_out(&mut self, slots: usize, now: Instant) {
        self.turns
            .retain(|&(_, _, until)| until.is_none_or(|until| until > now));
        while self.turns.len() < slots {
            let Some((lane, (seat, notify))) = self.waiting.pop() else {
                break;
            };
            self.turns.push((seat, lane, None));
            notify.notify_one();
        }
    }

    fn others_waiting(&self, lane: u64) -> bool {
        self.waiting.others_than(lane)
    }

    /// Whether `seat` holds a turn; one handed to it is taken up (it runs from now on).
    fn take_up(&mut self, seat: u64, now: Instant) -> bool {
        match self.turns.iter_mut().find(|t| t.0 == seat) {
            Some(turn) => {
                turn.2 = Some(now + TURN);
                true
            }
            None => false,
        }
    }

    fn queued(&self, seat: u64) -> bool {
        self.waiting.iter().any(|(s, _)| *s == seat)
    }

    fn forget(&mut self, seat: u64) {
        self.turns.retain(|&(s, _, _)| s != seat);
        self.waiting.retain(|(s, _)| *s != seat);
    }
}

/// One call's place at the gate.
pub(crate) struct Seat {
    gate: Arc<Gate>,
    id: u64,
    lane: u64,
    notify: Arc<Notify>,
    /// Its tenant's CPU cap, when it has one.
    cpu: Option<Meter>,
}

/// A seat's side of its tenant's CPU cap: the cap, and since when the stretch it runs now
/// was last charged (`None` while it waits).
#[derive(Clone)]
struct Meter {
    cpu: Arc<Cpu>,
    since: Arc<Mutex<Option<Instant>>>,
}

impl Meter {
    /// Charges the stretch run since the last charge; how long the tenant must now wait,
    /// when it is past its share.
    fn charge(&self, now: Instant) -> Option<Duration> {
        let since = self.since.lock().unwrap_or_else(|p| p.into_inner()).take();
        match since {
            Some(since) => self
                .cpu
                .charge(now.saturating_duration_since(since).min(STRETCH_MAX), now),
            None => self.cpu.wait(now),
        }
    }

    /// The seat runs from `now` on: its next stretch is charged from here.
    fn running(&self, now: Instant) {
        *self.since.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
    }
}

impl Seat {
    pub(super) fn new(gate: Arc<Gate>, lane: u64, cpu: Option<Arc<Cpu>>) -> Self {
        let id = gate.seats.fetch_add(1, Ordering::Relaxed);
        Seat {
            gate,
            id,
            lane,
            notify: Arc::new(Notify::new()),
            cpu: cpu.map(|cpu| Meter {
                cpu,
                since: Arc::default(),
            }),
        }
    }

    /// Charges the stretch run since the last charge to the tenant's CPU cap; how long
    /// the tenant must now wait, when it is past its share.
    fn charge(&self, now: Instant) -> Option<Duration> {
        self.cpu.as_ref()?.charge(now)
    }

    /// The seat runs from `now` on: its next stretch is charged from here.
    fn running(&self, now: Instant) {
        if let Some(meter) = &self.cpu {
            meter.running(now);
        }
    }

    /// At an epoch tick: `None` when the call may go on (its turn renewed, or a free
    /// slot), else the wait for its next turn (another tenant was waiting, its turn had
    /// passed while it waited in a host call, or its tenant is past its CPU cap: then it
    /// gives the turn up and waits until its share has refilled).
    pub(crate) fn at_tick(&self) -> Option<impl Future<Output = ()> + Send + 'static> {
        let now = Instant::now();
        if let Some(owed) = self.charge(now) {
            let mut state = self.gate.lock();
            state.forget(self.id);
            state.hand_out(self.gate.slots, now);
            drop(state);
            return Some(wait_turn(self.waiter(), Some(owed)));
        }
        let mut state = self.gate.lock();
        state.hand_out(self.gate.slots, now);
        let holds = state.turns.iter().any(|t| t.0 == self.id);
        if holds {
            if !state.others_waiting(self.lane) {
                state.take_up(self.id, now);
                self.running(now);
                return None;
            }
            state.turns.retain(|t| t.0 != self.id);
        }
        if !state.queued(self.id) {
            state
                .waiting
                .push(self.lane, (self.id, self.notify.clone()));
        }
        state.hand_out(self.gate.slots, now);
        if state.take_up(self.id, now) {
            self.running(now);
            return None;
        }
        drop(state);
        Some(wait_turn(self.waiter(), None))
    }

    /// What waiting for a turn needs of this seat, apart from it.
    fn waiter(&self) -> Waiter {
        Waiter {
            gate: self.gate.clone(),
            seat: self.id,
            lane: self.lane,
            notify: self.notify.clone(),
            cpu: self.cpu.clone(),
        }
    }

    /// Takes a turn only when a slot is free now, no seat waits for one and its tenant is
    /// within its CPU cap: never queues.
    pub(super) fn try_take(&self) -> bool {
        let now = Instant::now();
        if self.charge(now).is_some() {
            return false;
        }
        let mut state = self.gate.lock();
        state.hand_out(self.gate.slots, now);
        if !state.waiting.is_empty() || state.turns.len() >= self.gate.slots {
            return false;
        }
        state.turns.push((self.id, self.lane, Some(now + TURN)));
        self.running(now);
        true
    }

    /// Waits for a turn before the call starts.
    pub(super) async fn take_turn(&self) {
        if let Some(wait) = self.at_tick() {
            wait.await;
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let now = Instant::now();
        // The last stretch is the tenant's too.
        let _ = self.charge(now);
        let mut state = self.gate.lock();
        state.forget(self.id);
        state.hand_out(self.gate.slots, now);
    }
}

/// A seat's side of a wait for its turn.
struct Waiter {
    gate: Arc<Gate>,
    seat: u64,
    lane: u64,
    notify: Arc<Notify>,
    cpu: Option<Meter>,
}

/// Waits until the seat holds a turn, and takes it up; first, while its tenant is past
/// its CPU cap (`owed`), until its share has refilled, out of the queue so that no turn
/// is handed to it meanwhile. Turns that end without a word (a guest gone into a host
/// call) are noticed at the next tick.
async fn wait_turn(w: Waiter, mut owed: Option<Duration>) {
    while let Some(pause) = owed {
        tokio::time::sleep(pause).await;
        if let Some(meter) = &w.cpu {
            meter.cpu.throttled(pause);
            // Other calls of the tenant may have run meanwhile.
            owed = meter.cpu.wait(Instant::now());
        } else {
            owed = None;
        }
    }
    loop {
        let _ = tokio::time::timeout(TICK * 2, w.notify.notified()).await;
        let now = Instant::now();
        let mut state = w.gate.lock();
        state.hand_out(w.gate.slots, now);
        if state.take_up(w.seat, now) {
            if let Some(meter) = &w.cpu {
                meter.running(now);
            }
            return;
        }
        if !state.queued(w.seat) {
            // Never left waiting without a place in the queue.
            state.waiting.push(w.lane, (w.seat, w.notify.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Makes `seat`'s turn last as long as a test needs: a loaded machine may take longer
    /// than a turn's few milliseconds between two of its lines.
    fn hold_long(gate: &Gate, seat: &Seat) {
        for turn in gate.lock().turns.iter_mut().filter(|t| t.0 == seat.id) {
            turn.2 = Some(Instant::now() + Duration::from_secs(60));
        }
    }

    #[tokio::test]
    async fn a_seat_that_only_tries_takes_a_free_turn_and_never_queues_or_jumps_one() {
        let gate = Arc::new(Gate::new(1));
        let a = Seat::new(gate.clone(), 1, None);
        assert!(a.try_take(), "the slot is free");
        hold_long(&gate, &a);
        let b = Seat::new(gate.clone(), 2, None);
        assert!(!b.try_take(), "a holds the slot");
        assert!(!gate.lock().queued(b.id), "b did not queue for it");
        // c waits for the slot; when a goes it is c's, not b's.
        let c = Seat::new(gate.clone(), 3, None);
        let c_wait = c.at_tick().expect("c waits");
        drop(a);
        assert!(!b.try_take(), "c was waiting first");
        tokio::time::timeout(Duration::from_secs(1), c_wait)
            .await
            .expect("c's turn");
        drop(c);
        assert!(b.try_take(), "free again");
    }

    #[tokio::test]
    async fn the_gate_hands_turns_to_the_other_tenant_first() {
        let gate = Arc::new(Gate::new(1));
        let a1 = Seat::new(gate.clone(), 1, None);
        let a2 = Seat::new(gate.clone(), 1, None);
        let b = Seat::new(gate.clone(), 2, None);
        a1.take_turn().await;
        // Nobody else waits: a1 goes on.
        assert!(a1.at_tick().is_none());
        hold_long(&gate, &a1);
        // a2 and then b wait; at a1's next tick, b (another lane) goes first.
        let a2_wait = a2.at_tick().expect("a2 waits");
        let b_wait = b.at_tick().expect("b waits");
        let a1_wait = a1.at_tick().expect("a1 yields to the waiting lanes");
        tokio::time::timeout(Duration::from_secs(1), b_wait)
            .await
            .expect("b gets the turn");
        drop(b);
        tokio::time::timeout(Duration::from_secs(1), a2_wait)
            .await
            .expect("then a2");
        drop(a2);
        tokio::time::timeout(Duration::from_secs(1), a1_wait)
            .await
            .expect("then a1 again");
    }

    #[tokio::test]
    async fn a_turn_handed_to_a_waiting_seat_lasts_until_it_is_taken_up() {
        let gate = Arc::new(Gate::new(1));
        let a = Seat::new(gate.clone(), 1, None);
        a.take_turn().await;
        hold_long(&gate, &a);
        let b = Seat::new(gate.clone(), 2, None);
        let b_wait = b.at_tick().expect("b waits");
        // a ends; the turn goes to b, whose wait is busy elsewhere for longer than a turn.
        drop(a);
        std::thread::sleep(TURN * 3);
        tokio::time::timeout(Duration::from_secs(1), b_wait)
            .await
            .expect("b still gets its turn");
    }

    #[tokio::test]
    async fn a_tenant_past_its_cpu_cap_gives_its_turn_up_until_its_share_refills() {
        let gate = Arc::new(Gate::new(1));
        // A cap of a thousandth of a core: a millisecond at once, then one a second.
        let cpu = Arc::new(Cpu::new(super::super::cpu::Millicores::new(1)));
        let a = Seat::new(gate.clone(), 1, Some(cpu.clone()));
        a.take_turn().await;
        hold_long(&gate, &a);
        // Its guest ran 2 ms since its turn began (as far as the clock is concerned).
        if let Some(meter) = &a.cpu {
            *meter.since.lock().unwrap() = Some(Instant::now() - Duration::from_millis(2));
        }
        let waits = a.at_tick().expect("past its share: it waits");
        // The only slot is free at once for another tenant, though nobody else waited.
        let b = Seat::new(gate.clone(), 2, None);
        assert!(b.try_take(), "a gave its turn up");
        drop(b);
        // A's wait lasts until its share has refilled: about a second.
        let early = tokio::time::timeout(Duration::from_millis(200), waits).await;
        assert!(early.is_err(), "a waited for its share");
        assert!(cpu.wait(Instant::now()).is_some());
    }

    #[tokio::test]
    async fn a_turn_not_renewed_passes_on() {
        let gate = Arc::new(Gate::new(1));
        let sleeper = Seat::new(gate.clone(), 1, None);
        sleeper.take_turn().await;
        // The sleeper waits in a host call and never ticks; the other gets a turn anyway.
        let other = Seat::new(gate.clone(), 2, None);
        tokio::time::timeout(Duration::from_secs(1), other.take_turn())
            .await
            .expect("the turn passed on");
        // Back from its host call, the sleeper waits for its turn.
        assert!(sleeper.at_tick().is_some());
    }
}
