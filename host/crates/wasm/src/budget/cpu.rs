//! A cap on the CPU one tenant's guests burn: the time its calls hold a turn at the gate
//! is charged against a share that refills at the cap's rate, with a second's worth of
//! burst. A tenant past its share gives its turn up at the next epoch tick and waits until
//! the share has refilled, whatever else is idle: what a guest burns is taken from the API
//! server and the host as much as from other tenants, so fair turns alone are not enough.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use inrun_contract::cpu::Millicores;

/// A tenant's cap when the operator sets none: half the cores guests may use (`500m`
/// where guests have one core, as on a 2-core pod), so a tenant that spins leaves the
/// rest to the host, the API server beside it and other tenants.
pub fn default_cap(guest_cores: usize) -> Millicores {
    let cores = u32::try_from(guest_cores).unwrap_or(u32::MAX).max(1);
    Millicores::new(cores.saturating_mul(500))
}

/// How long a tenant may burn at once before its cap applies: a second of its rate.
const WINDOW: Duration = Duration::from_secs(1);

/// One tenant's CPU share.
pub(super) struct Cpu {
    /// Nanoseconds of CPU per second of wall time (the cap).
    rate: u64,
    state: Mutex<Share>,
    /// Nanoseconds its calls waited for the share to refill, since it began.
    throttled_ns: AtomicU64,
}

struct Share {
    /// Nanoseconds of CPU it may still burn; below zero, what it owes.
    left: i64,
    at: Instant,
}

impl Cpu {
    pub(super) fn new(cap: Millicores) -> Self {
        let rate = u64::from(cap.get()) * 1_000_000;
        Cpu {
            rate,
            state: Mutex::new(Share {
                left: i64::try_from(burst(rate)).unwrap_or(i64::MAX),
                at: Instant::now(),
            }),
            throttled_ns: AtomicU64::new(0),
        }
    }

    /// Charges `used` of CPU at `now`; how long the tenant must wait before it runs
    /// again, when it is past its share.
    pub(super) fn charge(&self, used: Duration, now: Instant) -> Option<Duration> {
        let mut share = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut share, now);
        share.left = share
            .left
            .saturating_sub(i64::try_from(used.as_nanos()).unwrap_or(i64::MAX));
        self.owed(&share)
    }

    /// How long the tenant must wait at `now` before it runs, when it is past its share.
    pub(super) fn wait(&self, now: Instant) -> Option<Duration> {
        let mut share = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut share, now);
        self.owed(&share)
    }

    /// Counts a wait of `waited`, for what the console shows.
    pub(super) fn throttled(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.throttled_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Milliseconds its calls waited, held back by the cap.
    pub(super) fn throttled_ms(&self) -> u64 {
        self.throttled_ns.load(Ordering::Relaxed) / 1_000_000
    }

    fn refill(&self, share: &mut Share, now: Instant) {
        let elapsed = now.saturating_duration_since(share.at);
        share.at = now;
        let gained = (elapsed.as_nanos() * u128::from(self.rate)) / 1_000_000_000;
        let max = i64::try_from(burst(self.rate)).unwrap_or(i64::MAX);
        share.left = share
            .left
            .saturating_add(i64::try_from(gained).unwrap_or(i64::MAX))
            .min(max);
    }

    fn owed(&self, share: &Share) -> Option<Duration> {
        (share.left < 0).then(|| {
            let owed = u128::from(share.left.unsigned_abs());
            let ns = owed * 1_000_000_000 / u128::from(self.rate.max(1));
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        })
    }
}

/// Nanoseconds of CPU a share holds when full.
fn burst(rate: u64) -> u64 {
    u64::try_from(u128::from(rate) * WINDOW.as_nanos() / 1_000_000_000).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_is_half_the_cores_guests_may_use() {
        assert_eq!(default_cap(1), Millicores::new(500));
        assert_eq!(default_cap(8), Millicores::new(4000));
    }

    #[test]
    fn a_tenant_past_its_share_waits_until_it_has_refilled_at_its_rate() {
        let cpu = Cpu::new(Millicores::new(500));
        let start = Instant::now();
        // A full share: half a second of CPU at once.
        assert_eq!(cpu.charge(Duration::from_millis(400), start), None);
        // 200 ms more: 100 ms owed, which takes 200 ms to refill at half a core.
        let owed = cpu.charge(Duration::from_millis(200), start);
        assert_eq!(owed, Some(Duration::from_millis(200)));
        // 100 ms later half of it has refilled.
        let later = start + Duration::from_millis(100);
        assert_eq!(cpu.wait(later), Some(Duration::from_millis(100)));
        // And at 200 ms it runs again.
        assert_eq!(cpu.wait(start + Duration::from_millis(200)), None);
        // Idle for long, the share is full again but never more than a second's worth.
        let much_later = start + Duration::from_secs(60);
        assert_eq!(cpu.charge(Duration::from_millis(500), much_later), None);
        assert!(cpu.charge(Duration::from_millis(1), much_later).is_some());
    }
}
