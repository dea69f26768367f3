//! Per-key retry delays: exponential from a base to a cap, reset by a success or by a
//! change of the CR's spec (its generation).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Failure counts per CR key.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, (u32, i64)>>,
}

impl Backoff {
    /// Delays double from `base` up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, i64)>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a failure of `key` at `generation` and returns how long to wait. A new
    /// generation starts again from `base`.
    pub fn failed(&self, key: &str, generation: i64) -> Duration {
        let mut map = self.map();
        let entry = map.entry(key.to_string()).or_insert((0, generation));
        if entry.1 != generation {
            *entry = (0, generation);
        }
        entry.0 = entry.0.saturating_add(1);
        let factor = 2u32.saturating_pow(entry.0 - 1);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// Forgets `key`'s failures.
    pub fn succeeded(&self, key: &str) {
        self.map().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_reset_on_success() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let d: Vec<_> = (0..5).map(|_| b.failed("ns/a", 1).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 5, 5]);
        b.succeeded("ns/a");
        assert_eq!(b.failed("ns/a", 1), Duration::from_secs(1));
    }

    #[test]
    fn a_spec_change_resets_the_delay() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
        b.failed("k", 1);
        b.failed("k", 1);
        assert_eq!(b.failed("k", 1), Duration::from_secs(4));
        assert_eq!(b.failed("k", 2), Duration::from_secs(1));
    }

    #[test]
    fn keys_back_off_independently() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
        b.failed("a", 1);
        b.failed("a", 1);
        assert_eq!(b.failed("b", 1), Duration::from_secs(1));
    }
}
