//! What tenants share, divided so that none can take it all: the cores that run guest
//! code (a fair gate, round-robin across tenants, and a cap on each tenant's CPU: `cpu`),
//! the instance pool (calls in flight per tenant), guest memory (linear memories and
//! tables of calls in flight, per tenant and for the host), and the host memory their
//! reconciles hold for what reconcilers return (`held`). A call that would pass a budget
//! fails alone, naming the budget; a call that finds its tenant's calls all taken waits
//! for one, behind its own tenant's calls only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod compiles;
mod cpu;
mod gate;
mod held;
mod lanes;
mod rate;

pub use compiles::COMPILE_PAUSE;
pub(crate) use compiles::Compiles;
use cpu::Cpu;
pub use cpu::{Millicores, default_cap as default_cpu_cap};
use gate::Gate;
pub(crate) use gate::Seat;
pub use held::{
    Held, HeldHit, HostMemory, PARSED_PER_TOKEN, held_by_pass, hold, parsed_bound, value_bound,
};
pub use rate::TokenRate;

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
    /// Host memory every tenant's reconciles may hold together for what reconcilers
    /// return (outcomes, remote and external replies), in bytes ([`HostMemory`]).
    pub held_bytes: usize,
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
    /// Host memory its reconciles may hold for what reconcilers return, in bytes: each
    /// reply is admitted against it before it is read ([`HostMemory`]).
    pub held_bytes: usize,
    /// The CPU its guests may burn, on average over a second ([`Millicores`]): a tenant at
    /// its cap waits for its next share, whatever else is idle. `None`: no cap but the
    /// fair share of the gate.
    pub cpu: Option<Millicores>,
}

/// What a tenant uses of its share at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TenantUsage {
    /// Its plugin calls in flight.
    pub calls_in_flight: usize,
    /// Its share of calls in flight.
    pub calls: usize,
    /// Guest memory its calls in flight hold, in bytes.
    pub memory_bytes: usize,
    /// Its share of guest memory, in bytes.
    pub memory_max_bytes: usize,
    /// Host memory its reconciles hold for what reconcilers returned, in bytes.
    pub held_bytes: usize,
    /// Its share of that host memory, in bytes.
    pub held_max_bytes: usize,
    /// Milliseconds its guests had to wait since it started, held back by its CPU cap.
    pub cpu_throttled_ms: u64,
}

impl Budgets {
    /// Budgets for a pool of `instances`: guests may run on half the cores (at least one);
    /// guest memory is half the container's memory limit (1 GiB when there is none) and
    /// the host memory reconciles hold an eighth of it (128 MiB); a tenant gets a quarter
    /// of the pool and of each memory, and half the cores guests may use.
    pub fn for_pool(instances: u32) -> Self {
        Self::for_pool_within(instances, container_memory_limit())
    }

    /// [`Budgets::for_pool`] in a container of `limit` bytes of memory (`None`: no limit).
    pub fn for_pool_within(instances: u32, limit: Option<usize>) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let memory_bytes = limit.map_or(1 << 30, |limit| limit / 2);
        let held_bytes = limit.map_or(128 << 20, |limit| limit / 8);
        let running = (cores / 2).max(1);
        Budgets {
            running,
            calls: (instances as usize).max(1),
            memory_bytes,
            held_bytes,
            tenant: TenantBudget {
                calls: (instances as usize / 4).max(1),
                memory_bytes: memory_bytes / 4,
                log_lines_per_second: 100,
                held_bytes: held_bytes / 4,
                cpu: Some(cpu::default_cap(running)),
            },
        }
    }
}

/// The memory limit of this process's cgroup (v2, then v1), if it has one.
pub fn container_memory_limit() -> Option<usize> {
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
    held: Arc<held::Pool>,
    gate: Arc<Gate>,
    /// Turns at compiling, round-robin across tenants' lanes.
    pub(crate) compiles: Compiles,
    tenants: Mutex<HashMap<String, Weak<Tenant>>>,
    lanes: AtomicU64,
}

impl Shared {
    pub(super) fn new(budgets: Budgets) -> Self {
        Shared {
            budgets,
            calls: Arc::new(Semaphore::new(budgets.calls.max(1))),
            memory: Counter::new(budgets.memory_bytes),
            held: held::Pool::new(budgets.held_bytes),
            gate: Arc::new(Gate::new(budgets.running.max(1))),
            compiles: Compiles::default(),
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
            logs: Mutex::new(TokenRate::new(
                budget.log_lines_per_second,
                budget.log_lines_per_second.saturating_mul(5),
            )),
            held: HostMemory::new(name, budget.held_bytes, self.held.clone()),
            cpu: budget.cpu.map(|cap| Arc::new(Cpu::new(cap))),
        });
        tenants.insert(name.to_string(), Arc::downgrade(&tenant));
        tenant
    }

    /// What tenant `name` uses of its share now; `None` when it has no live handle.
    pub(super) fn usage(&self, name: &str) -> Option<TenantUsage> {
        let tenant = self
            .tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .and_then(Weak::upgrade)?;
        let calls = tenant.budget.calls.max(1);
        Some(TenantUsage {
            calls_in_flight: calls.saturating_sub(tenant.calls.available_permits()),
            calls,
            memory_bytes: tenant.memory.used.load(Ordering::Relaxed),
            memory_max_bytes: tenant.budget.memory_bytes,
            held_bytes: tenant.held.held(),
            held_max_bytes: tenant.held.max(),
            cpu_throttled_ms: tenant.cpu.as_ref().map_or(0, |c| c.throttled_ms()),
        })
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
    /// Its lane at the gate and in the compile queue.
    pub(crate) lane: u64,
    logs: Mutex<TokenRate>,
    /// Host memory its reconciles hold for what reconcilers return.
    pub(super) held: HostMemory,
    /// Its CPU cap, when it has one.
    cpu: Option<Arc<Cpu>>,
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

/// Bytes in use against a cap.
pub(super) struct Counter {
    pub(super) used: AtomicUsize,
    pub(super) max: usize,
}

impl Counter {
    pub(super) fn new(max: usize) -> Self {
        Counter {
            used: AtomicUsize::new(0),
            max,
        }
    }

    pub(super) fn try_add(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.max)
            })
            .is_ok()
    }

    pub(super) fn sub(&self, bytes: usize) {
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
        let seat = in_runtime.then(|| seat(shared, tenant));
        if let Some(seat) = &seat
            && tokio::time::timeout_at(deadline.into(), seat.take_turn())
                .await
                .is_err()
        {
            return Err(Hit::Turn);
        }
        Ok(Admission::holding(shared, tenant, call, host_call, seat))
    }

    fn holding(
        shared: &Arc<Shared>,
        tenant: Option<&Arc<Tenant>>,
        call: Option<OwnedSemaphorePermit>,
        host_call: OwnedSemaphorePermit,
        seat: Option<Seat>,
    ) -> Admission {
        Admission {
            shared: shared.clone(),
            tenant: tenant.cloned(),
            _call: call,
            _host_call: Some(host_call),
            charged: 0,
            seat,
        }
    }

    /// Admits one call of `tenant` (or of the host itself) only with what is free now: a
    /// call in flight of the tenant, one of the host's, and a turn at the gate nobody waits
    /// for. `None` otherwise; it never waits, nor queues ahead of a call that does.
    pub(super) fn try_enter(
        shared: &Arc<Shared>,
        tenant: Option<&Arc<Tenant>>,
    ) -> Option<Admission> {
        let call = match tenant {
            Some(t) => Some(t.calls.clone().try_acquire_owned().ok()?),
            None => None,
        };
        let host_call = shared.calls.clone().try_acquire_owned().ok()?;
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        let seat = in_runtime.then(|| seat(shared, tenant));
        if seat.as_ref().is_some_and(|seat| !seat.try_take()) {
            return None;
        }
        Some(Admission::holding(shared, tenant, call, host_call, seat))
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

/// A call's place at the gate: in its tenant's lane, under its tenant's CPU cap.
fn seat(shared: &Shared, tenant: Option<&Arc<Tenant>>) -> Seat {
    Seat::new(
        shared.gate.clone(),
        tenant.map_or(0, |t| t.lane),
        tenant.and_then(|t| t.cpu.clone()),
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
            held_bytes: 1 << 30,
            tenant: TenantBudget {
                calls,
                memory_bytes: tenant_memory,
                log_lines_per_second: 10,
                held_bytes: 1 << 20,
                cpu: None,
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
        // What the console shows of A: two calls in flight of its eight, 10 bytes of 10.
        assert_eq!(
            shared.usage("a"),
            Some(TenantUsage {
                calls_in_flight: 2,
                calls: 8,
                memory_bytes: 10,
                memory_max_bytes: 10,
                held_bytes: 0,
                held_max_bytes: 1 << 20,
                cpu_throttled_ms: 0,
            })
        );
        assert_eq!(shared.usage("nobody"), None);
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
            held_bytes: 1 << 30,
            tenant: TenantBudget {
                calls: 2,
                memory_bytes: 1 << 30,
                log_lines_per_second: 10,
                held_bytes: 1 << 20,
                cpu: None,
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
}
