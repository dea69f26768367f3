//! Compiles share the host like calls do: one runs at a time, host-wide (a compile fans
//! out on the cores guests may use), and the next turn goes round-robin across the tenants
//! waiting, first come first served within a tenant, so a tenant with many or slow
//! compiles delays another's by at most one compile. A tenant whose compile was stopped
//! at its time or memory limit is refused compiles for a while: it cannot keep the host
//! compiling, nor the loads of others waiting, by loading such modules again and again.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::lanes::Lanes;

/// How long a tenant whose compile was stopped at a limit is refused compiles.
pub const COMPILE_PAUSE: Duration = Duration::from_secs(10 * 60);

/// The turns at compiling.
#[derive(Default)]
pub(crate) struct Compiles {
    state: Mutex<Turns>,
    turned: Condvar,
}

#[derive(Default)]
struct Turns {
    /// Whether a compile runs now.
    busy: bool,
    /// Tickets waiting, by lane (tenant).
    waiting: Lanes<u64>,
    /// The ticket handed the next turn, not yet taken up.
    handed: Option<u64>,
    next_ticket: u64,
    /// Lanes refused compiles until then.
    paused: BTreeMap<u64, Instant>,
}

/// A compile's turn: the next one is handed out when it drops.
pub(crate) struct Turn<'a> {
    compiles: &'a Compiles,
}

impl Compiles {
    fn lock(&self) -> MutexGuard<'_, Turns> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (blocking: compiles run on blocking threads) for a turn of `lane`; when the
    /// lane is paused, the instant it may compile again instead.
    pub(crate) fn enter(&self, lane: u64) -> Result<Turn<'_>, Instant> {
        let mut turns = self.lock();
        let now = Instant::now();
        turns.paused.retain(|_, until| *until > now);
        if let Some(until) = turns.paused.get(&lane) {
            return Err(*until);
        }
        let ticket = turns.next_ticket;
        turns.next_ticket += 1;
        turns.waiting.push(lane, ticket);
        turns.hand_out();
        while turns.handed != Some(ticket) {
            turns = self.turned.wait(turns).unwrap_or_else(|p| p.into_inner());
        }
        turns.handed = None;
        turns.busy = true;
        Ok(Turn { compiles: self })
    }

    /// Refuses `lane` compiles for [`COMPILE_PAUSE`] from now.
    pub(crate) fn pause(&self, lane: u64) {
        self.lock()
            .paused
            .insert(lane, Instant::now() + COMPILE_PAUSE);
    }
}

impl Turns {
    /// Hands the next turn, when none runs or is handed, to the next lane after the last
    /// one served.
    fn hand_out(&mut self) {
        if self.busy || self.handed.is_some() {
            return;
        }
        if let Some((_, ticket)) = self.waiting.pop() {
            self.handed = Some(ticket);
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut turns = self.compiles.lock();
        turns.busy = false;
        turns.hand_out();
        drop(turns);
        self.compiles.turned.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::mpsc;

    /// Starts a compile of `lane` named `name` on a thread of its own; it tells `ran` its
    /// name when it gets its turn, then holds the turn until told to go on.
    fn compile(
        compiles: &Arc<Compiles>,
        lane: u64,
        name: &'static str,
        ran: &mpsc::Sender<&'static str>,
    ) -> mpsc::Sender<()> {
        let (go_on, told) = mpsc::channel::<()>();
        let (compiles, ran) = (compiles.clone(), ran.clone());
        std::thread::spawn(move || {
            let _turn = compiles.enter(lane).expect("not paused");
            ran.send(name).expect("told");
            let _ = told.recv();
        });
        go_on
    }

    /// Waits until `n` tickets wait in all.
    fn until_waiting(compiles: &Compiles, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while compiles.lock().waiting.iter().count() < n {
            assert!(Instant::now() < deadline, "{n} compiles never queued");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_tenant_with_many_compiles_delays_another_by_one_compile_at_most() {
        let compiles = Arc::new(Compiles::default());
        let (ran, order) = mpsc::channel();
        let a1 = compile(&compiles, 1, "a1", &ran);
        assert_eq!(order.recv().expect("a1"), "a1");
        // While a1 compiles, a queues three more, then b one.
        let a2 = compile(&compiles, 1, "a2", &ran);
        until_waiting(&compiles, 1);
        let a3 = compile(&compiles, 1, "a3", &ran);
        until_waiting(&compiles, 2);
        let a4 = compile(&compiles, 1, "a4", &ran);
        until_waiting(&compiles, 3);
        let b1 = compile(&compiles, 2, "b1", &ran);
        until_waiting(&compiles, 4);
        let mut seen = Vec::new();
        for go_on in [a1, b1, a2, a3, a4] {
            go_on.send(()).expect("go on");
            if seen.len() < 4 {
                seen.push(order.recv().expect("next"));
            }
        }
        assert_eq!(seen, ["b1", "a2", "a3", "a4"], "b's compile came next");
    }

    #[test]
    fn a_paused_tenant_is_refused_and_others_are_not() {
        let compiles = Compiles::default();
        compiles.pause(7);
        let until = compiles.enter(7).err().expect("paused");
        assert!(until > Instant::now() + COMPILE_PAUSE - Duration::from_secs(5));
        assert!(compiles.enter(8).is_ok());
    }
}
