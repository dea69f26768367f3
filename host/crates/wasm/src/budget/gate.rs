//! The fair gate before the cores that run guest code: turns handed round-robin across
//! tenants' lanes, each lasting a short while unless its guest ticks on.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::ticker::TICK;

/// How long a turn at the gate lasts unless renewed: a guest running Wasm code renews it
/// at every epoch tick; one waiting in a host call (a sleep, an HTTP request) does not,
/// and its turn passes to another after this.
const TURN: Duration = Duration::from_millis(3);

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
    waiting: BTreeMap<u64, VecDeque<(u64, Arc<Notify>)>>,
    /// The lane served last, where round-robin goes on from.
    last: u64,
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
            let next = self
                .waiting
                .range(self.last + 1..)
                .chain(self.waiting.range(..=self.last))
                .map(|(&lane, _)| lane)
                .next();
            let Some(lane) = next else { break };
            let queue = self.waiting.get_mut(&lane).expect("lane just seen");
            let (seat, notify) = queue.pop_front().expect("lanes kept only with waiters");
            if queue.is_empty() {
                self.waiting.remove(&lane);
            }
            self.turns.push((seat, lane, None));
            self.last = lane;
            notify.notify_one();
        }
    }

    fn others_waiting(&self, lane: u64) -> bool {
        self.waiting.keys().any(|&l| l != lane)
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
        self.waiting.values().flatten().any(|(s, _)| *s == seat)
    }

    fn forget(&mut self, seat: u64) {
        self.turns.retain(|&(s, _, _)| s != seat);
        for queue in self.waiting.values_mut() {
            queue.retain(|(s, _)| *s != seat);
        }
        self.waiting.retain(|_, q| !q.is_empty());
    }
}

/// One call's place at the gate.
pub(crate) struct Seat {
    gate: Arc<Gate>,
    id: u64,
    lane: u64,
    notify: Arc<Notify>,
}

impl Seat {
    pub(super) fn new(gate: Arc<Gate>, lane: u64) -> Self {
        let id = gate.seats.fetch_add(1, Ordering::Relaxed);
        Seat {
            gate,
            id,
            lane,
            notify: Arc::new(Notify::new()),
        }
    }

    /// At an epoch tick: `None` when the call may go on (its turn renewed, or a free
    /// slot), else the wait for its next turn (another tenant was waiting, or its turn
    /// had passed while it waited in a host call).
    pub(crate) fn at_tick(&self) -> Option<impl Future<Output = ()> + Send + 'static> {
        let now = Instant::now();
        let mut state = self.gate.lock();
        state.hand_out(self.gate.slots, now);
        let holds = state.turns.iter().any(|t| t.0 == self.id);
        if holds {
            if !state.others_waiting(self.lane) {
                state.take_up(self.id, now);
                return None;
            }
            state.turns.retain(|t| t.0 != self.id);
        }
        if !state.queued(self.id) {
            state
                .waiting
                .entry(self.lane)
                .or_default()
                .push_back((self.id, self.notify.clone()));
        }
        state.hand_out(self.gate.slots, now);
        if state.take_up(self.id, now) {
            return None;
        }
        drop(state);
        Some(wait_turn(
            self.gate.clone(),
            self.id,
            self.lane,
            self.notify.clone(),
        ))
    }

    /// Takes a turn only when a slot is free now and no seat waits for one: never queues.
    pub(super) fn try_take(&self) -> bool {
        let now = Instant::now();
        let mut state = self.gate.lock();
        state.hand_out(self.gate.slots, now);
        if !state.waiting.is_empty() || state.turns.len() >= self.gate.slots {
            return false;
        }
        state.turns.push((self.id, self.lane, Some(now + TURN)));
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
        let mut state = self.gate.lock();
        state.forget(self.id);
        state.hand_out(self.gate.slots, Instant::now());
    }
}

/// Waits until `seat` holds a turn, and takes it up. Turns that end without a word (a
/// guest gone into a host call) are noticed at the next tick.
async fn wait_turn(gate: Arc<Gate>, seat: u64, lane: u64, notify: Arc<Notify>) {
    loop {
        let _ = tokio::time::timeout(TICK * 2, notify.notified()).await;
        let now = Instant::now();
        let mut state = gate.lock();
        state.hand_out(gate.slots, now);
        if state.take_up(seat, now) {
            return;
        }
        if !state.queued(seat) {
            // Never left waiting without a place in the queue.
            state
                .waiting
                .entry(lane)
                .or_default()
                .push_back((seat, notify.clone()));
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
        let a = Seat::new(gate.clone(), 1);
        assert!(a.try_take(), "the slot is free");
        hold_long(&gate, &a);
        let b = Seat::new(gate.clone(), 2);
        assert!(!b.try_take(), "a holds the slot");
        assert!(!gate.lock().queued(b.id), "b did not queue for it");
        // c waits for the slot; when a goes it is c's, not b's.
        let c = Seat::new(gate.clone(), 3);
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
        let a1 = Seat::new(gate.clone(), 1);
        let a2 = Seat::new(gate.clone(), 1);
        let b = Seat::new(gate.clone(), 2);
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
        let a = Seat::new(gate.clone(), 1);
        a.take_turn().await;
        hold_long(&gate, &a);
        let b = Seat::new(gate.clone(), 2);
        let b_wait = b.at_tick().expect("b waits");
        // a ends; the turn goes to b, whose wait is busy elsewhere for longer than a turn.
        drop(a);
        std::thread::sleep(TURN * 3);
        tokio::time::timeout(Duration::from_secs(1), b_wait)
            .await
            .expect("b still gets its turn");
    }

    #[tokio::test]
    async fn a_turn_not_renewed_passes_on() {
        let gate = Arc::new(Gate::new(1));
        let sleeper = Seat::new(gate.clone(), 1);
        sleeper.take_turn().await;
        // The sleeper waits in a host call and never ticks; the other gets a turn anyway.
        let other = Seat::new(gate.clone(), 2);
        tokio::time::timeout(Duration::from_secs(1), other.take_turn())
            .await
            .expect("the turn passed on");
        // Back from its host call, the sleeper waits for its turn.
        assert!(sleeper.at_tick().is_some());
    }
}
