//! What tenants share, divided so that none can take it all: the cores that run guest
//! code (a fair gate, round-robin across tenants), the instance pool (calls in flight per
//! tenant), and memory (linear memories and tables of calls in flight, per tenant and for
//! the host). A call that would pass a budget fails alone, naming the budget; a call that
//! finds its tenant's calls all taken waits for one, behind its own tenant's calls only.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::ticker::TICK;

/// Host-wide budgets and the default share of one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Calls that may run guest code at the same moment, host-wide: the cores guests may
    /// use. The rest stay free for the host's own work (watches, writes, probes).
    pub running: usize,
    /// Calls in flight, host-wide: the instance pool. More wait for one, until their
    /// deadline.
    pub calls: usize,
    /// Linear memory and tables of every call in flight, host-wide, in bytes.
    pub memory_bytes: usize,
    /// What one tenant may hold at once.
    pub tenant: TenantBudget,
}

/// What one tenant's calls may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantBudget {
    /// Calls in flight (instances of the shared pool). More wait for one of these.
    pub calls: usize,
    /// Linear memory and tables of its calls in flight, in bytes. Growth past it fails
    /// the growing call.
    pub memory_bytes: usize,
    /// Lines its plugins may log a second (`host.log`, stdout and stderr), with bursts of
    /// five seconds' worth; lines past it are dropped and counted.
    pub log_lines_per_second: u32,
}

impl Budgets {
    /// Budgets for a pool of `instances`: guests may run on half the cores (at least one);
    /// guest memory is half the container's memory limit (1 GiB when there is none); a
    /// tenant gets a quarter of the pool and of that memory.
    pub fn for_pool(instances: u32) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let memory_bytes = container_memory_limit().map_or(1 << 30, |limit| limit / 2);
        Budgets {
            running: (cores / 2).max(1),
            calls: (instances as usize).max(1),
            memory_bytes,
            tenant: TenantBudget {
                calls: (instances as usize / 4).max(1),
                memory_bytes: memory_bytes / 4,
                log_lines_per_second: 100,
            },
        }
    }
}

/// The memory limit of this process's cgroup (v2, then v1), if it has one.
pub(crate) fn container_memory_limit() -> Option<usize> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .and_then(|text| text.trim().parse::<u64>().ok())
    // cgroup v1 says "no limit" with a number near u64::MAX.
    .filter(|&n| n < (1 << 50))
    .and_then(|n| usize::try_from(n).ok())
}

/// Which budget a call hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Hit {
    /// Its tenant's memory across calls in flight.
    TenantMemory { tenant: String, bytes: usize },
    /// The host's memory across all calls in flight.
    HostMemory { bytes: usize },
    /// Its tenant's calls in flight stayed taken until the call's deadline.
    Calls { tenant: String, calls: usize },
    /// The host's calls in flight (the instance pool) stayed taken until the deadline.
    HostCalls { calls: usize },
    /// No turn on the cores guests may use came before the deadline.
    Turn,
}

impl std::fmt::Display for Hit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hit::TenantMemory { tenant, bytes } => write!(
                f,
                "tenant {tenant}'s memory budget of {} MiB across its calls in flight",
                bytes >> 20
            ),
            Hit::HostMemory { bytes } => write!(
                f,
                "the host's memory budget of {} MiB across all calls in flight",
                bytes >> 20
            ),
            Hit::Calls { tenant, calls } => write!(
                f,
                "tenant {tenant}'s budget of {calls} calls in flight (all stayed busy until the deadline)"
            ),
            Hit::HostCalls { calls } => write!(
                f,
                "the host's {calls} calls in flight (all stayed busy until the deadline)"
            ),
            Hit::Turn => write!(
                f,
                "the cores plugins may use (no turn came before the deadline)"
            ),
        }
    }
}

/// The host's side of the budgets: one per engine.
pub(super) struct Shared {
    pub(super) budgets: Budgets,
    calls: Arc<Semaphore>,
    memory: Counter,
    gate: Arc<Gate>,
    tenants: Mutex<HashMap<String, Weak<Tenant>>>,
    lanes: AtomicU64,
}

impl Shared {
    pub(super) fn new(budgets: Budgets) -> Self {
        Shared {
            budgets,
            calls: Arc::new(Semaphore::new(budgets.calls.max(1))),
            memory: Counter::new(budgets.memory_bytes),
            gate: Arc::new(Gate::new(budgets.running.max(1))),
            tenants: Mutex::new(HashMap::new()),
            lanes: AtomicU64::new(1),
        }
    }

    /// Tenant `name`'s share: the same one for every engine handle of that tenant alive.
    pub(super) fn tenant(&self, name: &str, budget: Option<TenantBudget>) -> Arc<Tenant> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants.retain(|_, t| t.strong_count() > 0);
        let budget = budget.unwrap_or(self.budgets.tenant);
        if let Some(t) = tenants.get(name).and_then(Weak::upgrade)
            && t.budget == budget
        {
            return t;
        }
        let tenant = Arc::new(Tenant {
            name: name.to_string(),
            budget,
            calls: Arc::new(Semaphore::new(budget.calls.max(1))),
            memory: Counter::new(budget.memory_bytes),
            lane: self.lanes.fetch_add(1, Ordering::Relaxed),
            logs: Mutex::new(TokenBucket::new(
                budget.log_lines_per_second,
                budget.log_lines_per_second.saturating_mul(5),
            )),
        });
        tenants.insert(name.to_string(), Arc::downgrade(&tenant));
        tenant
    }

    /// Guest memory of all calls in flight, in bytes.
    pub(super) fn memory_in_use(&self) -> usize {
        self.memory.used.load(Ordering::Relaxed)
    }
}

/// One tenant's share.
pub(super) struct Tenant {
    pub(super) name: String,
    budget: TenantBudget,
    calls: Arc<Semaphore>,
    memory: Counter,
    /// Its lane at the gate.
    lane: u64,
    logs: Mutex<TokenBucket>,
}

impl Tenant {
    /// Whether one more log line of this tenant's plugins may be written now.
    pub(super) fn log_line(&self) -> bool {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(Instant::now())
            .is_ok()
    }

    /// The tenant's budget of log lines a second.
    pub(super) fn log_lines_per_second(&self) -> u32 {
        self.budget.log_lines_per_second
    }
}

/// A token bucket: `rate` tokens a second, holding at most `burst` (and full at first).
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens, filling at `rate` a second.
    pub fn new(rate: u32, burst: u32) -> Self {
        TokenBucket {
            rate: f64::from(rate),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: Instant::now(),
        }
    }

    /// Takes a token at `now` (`Ok`), or says how long until one is there.
    ///
    /// # Errors
    /// The wait for the next token, when the bucket is empty.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.take_n(1, now)
    }

    /// Takes `n` tokens at `now` (`Ok`), or says how long until there are `n` (none are
    /// taken then; `Duration::MAX` when `n` is more than the bucket holds).
    ///
    /// # Errors
    /// The wait until `n` tokens are there.
    pub fn take_n(&mut self, n: u64, now: Instant) -> Result<(), Duration> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        #[allow(clippy::cast_precision_loss)] // a count of bytes or lines: f64 is exact enough
        let n = n as f64;
        if self.tokens >= n {
            self.tokens -= n;
            Ok(())
        } else if self.rate > 0.0 && n <= self.burst {
            Err(Duration::from_secs_f64((n - self.tokens) / self.rate))
        } else {
            Err(Duration::MAX)
        }
    }
}

/// Bytes in use against a cap.
struct Counter {
    used: AtomicUsize,
    max: usize,
}

impl Counter {
    fn new(max: usize) -> Self {
        Counter {
            used: AtomicUsize::new(0),
            max,
        }
    }

    fn try_add(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.max)
            })
            .is_ok()
    }

    fn sub(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// What one call holds while it is in flight; dropping it gives everything back.
pub(super) struct Admission {
    shared: Arc<Shared>,
    tenant: Option<Arc<Tenant>>,
    _call: Option<OwnedSemaphorePermit>,
    _host_call: Option<OwnedSemaphorePermit>,
    /// Bytes this call added to the counters.
    charged: usize,
    pub(super) seat: Option<Seat>,
}

impl Admission {
    /// Admits one call of `tenant` (or of the host itself): waits until `deadline` for one
    /// of the tenant's calls in flight, then for its turn at the gate.
    pub(super) async fn enter(
        shared: &Arc<Shared>,
        tenant: Option<&Arc<Tenant>>,
        deadline: Instant,
    ) -> Result<Admission, Hit> {
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        // Its tenant's share first, then the host's pool: a tenant waits behind its own
        // calls, and holds at most its share of the pool while it does.
        let call =
            match tenant {
                Some(t) => Some(acquire(&t.calls, deadline, in_runtime).await.ok_or_else(
                    || Hit::Calls {
                        tenant: t.name.clone(),
                        calls: t.budget.calls,
                    },
                )?),
                None => None,
            };
        let host_call =
            acquire(&shared.calls, deadline, in_runtime)
                .await
                .ok_or(Hit::HostCalls {
                    calls: shared.budgets.calls,
                })?;
        // Outside a runtime (a test polling by hand) there is no clock to wait on: no gate.
        let seat = in_runtime.then(|| Seat::new(shared.gate.clone(), tenant.map_or(0, |t| t.lane)));
        if let Some(seat) = &seat
            && tokio::time::timeout_at(deadline.into(), seat.take_turn())
                .await
                .is_err()
        {
            return Err(Hit::Turn);
        }
        Ok(Admission {
            shared: shared.clone(),
            tenant: tenant.cloned(),
            _call: call,
            _host_call: Some(host_call),
            charged: 0,
            seat,
        })
    }

    /// The tenant the call is of (`None`: the host's own).
    pub(super) fn tenant(&self) -> Option<&Arc<Tenant>> {
        self.tenant.as_ref()
    }

    /// Charges `bytes` of new guest memory to the tenant and the host.
    pub(super) fn charge(&mut self, bytes: usize) -> Result<(), Hit> {
        if let Some(t) = &self.tenant
            && !t.memory.try_add(bytes)
        {
            return Err(Hit::TenantMemory {
                tenant: t.name.clone(),
                bytes: t.budget.memory_bytes,
            });
        }
        if !self.shared.memory.try_add(bytes) {
            if let Some(t) = &self.tenant {
                t.memory.sub(bytes);
            }
            return Err(Hit::HostMemory {
                bytes: self.shared.budgets.memory_bytes,
            });
        }
        self.charged += bytes;
        Ok(())
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(t) = &self.tenant {
            t.memory.sub(self.charged);
        }
        self.shared.memory.sub(self.charged);
    }
}

/// A permit of `semaphore`, waited for until `deadline` (without a runtime, as long as it
/// takes); `None` at the deadline.
async fn acquire(
    semaphore: &Arc<Semaphore>,
    deadline: Instant,
    in_runtime: bool,
) -> Option<OwnedSemaphorePermit> {
    let acquire = semaphore.clone().acquire_owned();
    if in_runtime {
        tokio::time::timeout_at(deadline.into(), acquire)
            .await
            .ok()?
            .ok()
    } else {
        acquire.await.ok()
    }
}

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
pub(super) struct Seat {
    gate: Arc<Gate>,
    id: u64,
    lane: u64,
    notify: Arc<Notify>,
}

impl Seat {
    fn new(gate: Arc<Gate>, lane: u64) -> Self {
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
    pub(super) fn at_tick(&self) -> Option<impl Future<Output = ()> + Send + 'static> {
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

    /// Waits for a turn before the call starts.
    async fn take_turn(&self) {
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

    fn shared(
        running: usize,
        calls: usize,
        tenant_memory: usize,
        host_memory: usize,
    ) -> Arc<Shared> {
        Arc::new(Shared::new(Budgets {
            running,
            calls: 64,
            memory_bytes: host_memory,
            tenant: TenantBudget {
                calls,
                memory_bytes: tenant_memory,
                log_lines_per_second: 10,
            },
        }))
    }

    #[tokio::test]
    async fn a_tenant_waits_for_its_own_calls_and_gives_up_at_the_deadline() {
        let shared = shared(4, 2, 1 << 20, 1 << 30);
        let a = shared.tenant("a", None);
        let b = shared.tenant("b", None);
        let soon = || Instant::now() + Duration::from_millis(50);
        let first = Admission::enter(&shared, Some(&a), soon()).await.unwrap();
        let _second = Admission::enter(&shared, Some(&a), soon()).await.unwrap();
        let third = Admission::enter(&shared, Some(&a), soon()).await;
        assert_eq!(
            third.err(),
            Some(Hit::Calls {
                tenant: "a".into(),
                calls: 2
            })
        );
        // Tenant b has calls of its own.
        let _b = Admission::enter(&shared, Some(&b), soon()).await.unwrap();
        // A call that ends lets the next of a in.
        drop(first);
        assert!(Admission::enter(&shared, Some(&a), soon()).await.is_ok());
    }

    #[tokio::test]
    async fn memory_is_charged_to_the_tenant_and_the_host_and_given_back() {
        let shared = shared(4, 8, 10, 15);
        let a = shared.tenant("a", None);
        let b = shared.tenant("b", None);
        let later = Instant::now() + Duration::from_secs(1);
        let mut a1 = Admission::enter(&shared, Some(&a), later).await.unwrap();
        let mut a2 = Admission::enter(&shared, Some(&a), later).await.unwrap();
        a1.charge(6).unwrap();
        assert!(matches!(a2.charge(6), Err(Hit::TenantMemory { .. })));
        a2.charge(4).unwrap();
        let mut b1 = Admission::enter(&shared, Some(&b), later).await.unwrap();
        assert!(matches!(b1.charge(6), Err(Hit::HostMemory { .. })));
        // A refused charge leaves nothing behind.
        assert_eq!(shared.memory_in_use(), 10);
        drop(a1);
        b1.charge(5).unwrap();
        drop((a2, b1));
        assert_eq!(shared.memory_in_use(), 0);
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
    async fn a_call_that_gets_no_turn_before_its_deadline_fails_naming_the_cores() {
        let shared = shared(1, 8, 1 << 30, 1 << 30);
        let (a, b) = (shared.tenant("a", None), shared.tenant("b", None));
        let later = Instant::now() + Duration::from_secs(5);
        // The one core is B's; A's first call waits for it and is handed it when B's call
        // ends. A turn handed and not yet taken up lasts (its future is not polled here),
        // so the core stays taken whatever the clock does.
        let mut tries = 0;
        let held = loop {
            tries += 1;
            assert!(tries <= 10, "A's first call never waited");
            let b_call = Admission::enter(&shared, Some(&b), later).await.unwrap();
            let mut waiting = Box::pin(Admission::enter(&shared, Some(&a), later));
            if futures::poll!(&mut waiting).is_ready() {
                // B's turn had lapsed already (this thread was stopped): again.
                continue;
            }
            drop(b_call);
            break waiting;
        };
        let soon = Instant::now() + Duration::from_millis(30);
        let second = Admission::enter(&shared, Some(&a), soon).await;
        assert_eq!(second.err(), Some(Hit::Turn));
        // Once taken up, A's first call runs.
        assert!(held.await.is_ok());
    }

    #[tokio::test]
    async fn the_hosts_calls_are_capped_across_tenants() {
        let shared = Arc::new(Shared::new(Budgets {
            running: 4,
            calls: 2,
            memory_bytes: 1 << 30,
            tenant: TenantBudget {
                calls: 2,
                memory_bytes: 1 << 30,
                log_lines_per_second: 10,
            },
        }));
        let soon = || Instant::now() + Duration::from_millis(30);
        let (a, b, c) = (
            shared.tenant("a", None),
            shared.tenant("b", None),
            shared.tenant("c", None),
        );
        let _a = Admission::enter(&shared, Some(&a), soon()).await.unwrap();
        let _b = Admission::enter(&shared, Some(&b), soon()).await.unwrap();
        assert_eq!(
            Admission::enter(&shared, Some(&c), soon()).await.err(),
            Some(Hit::HostCalls { calls: 2 })
        );
    }

    #[test]
    fn a_token_bucket_gives_a_burst_then_one_token_per_interval() {
        let mut bucket = TokenBucket::new(10, 50);
        let start = bucket.at;
        // A burst, then nothing until time passes.
        assert_eq!((0..100).filter(|_| bucket.take(start).is_ok()).count(), 50);
        let wait = bucket.take(start).expect_err("empty");
        assert!(
            wait <= Duration::from_millis(100) && wait > Duration::ZERO,
            "{wait:?}"
        );
        assert!(bucket.take(start + Duration::from_millis(100)).is_ok());
        assert!(bucket.take(start + Duration::from_millis(100)).is_err());
        // Time never fills it past the burst.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..100).filter(|_| bucket.take(later).is_ok()).count(), 50);
    }

    #[test]
    fn a_token_bucket_takes_many_at_once_or_none() {
        let mut bucket = TokenBucket::new(100, 1000);
        let start = bucket.at;
        assert!(bucket.take_n(600, start).is_ok());
        // 400 left: 600 more are refused whole, none taken, with the wait for 200.
        let wait = bucket.take_n(600, start).expect_err("short");
        assert_eq!(wait, Duration::from_secs(2));
        assert!(bucket.take_n(400, start).is_ok());
        // More than the bucket ever holds: never.
        assert_eq!(
            bucket.take_n(1001, start + Duration::from_secs(3600)),
            Err(Duration::MAX)
        );
    }

    #[tokio::test]
    async fn a_turn_handed_to_a_waiting_seat_lasts_until_it_is_taken_up() {
        let gate = Arc::new(Gate::new(1));
        let a = Seat::new(gate.clone(), 1);
        a.take_turn().await;
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
