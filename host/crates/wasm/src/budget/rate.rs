//! A rate with bursts ([`TokenRate`]), for such rates as a tenant's log lines a second.

use std::time::{Duration, Instant};

/// A rate of `rate` tokens a second, with bursts of up to `burst` tokens (full at first).
#[derive(Debug)]
pub struct TokenRate {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenRate {
    /// A full burst of `burst` tokens, filling at `rate` a second.
    pub fn new(rate: u32, burst: u32) -> Self {
        TokenRate {
            rate: f64::from(rate),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: Instant::now(),
        }
    }

    /// Takes a token at `now` (`Ok`), or says how long until one is there.
    ///
    /// # Errors
    /// The wait for the next token, when none is left.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.take_n(1, now)
    }

    /// Takes `n` tokens at `now` (`Ok`), or says how long until there are `n` (none are
    /// taken then; `Duration::MAX` when `n` is more than a burst holds).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_rate_gives_a_burst_then_one_token_per_interval() {
        let mut rate = TokenRate::new(10, 50);
        let start = rate.at;
        // A burst, then nothing until time passes.
        assert_eq!((0..100).filter(|_| rate.take(start).is_ok()).count(), 50);
        let wait = rate.take(start).expect_err("empty");
        assert!(
            wait <= Duration::from_millis(100) && wait > Duration::ZERO,
            "{wait:?}"
        );
        assert!(rate.take(start + Duration::from_millis(100)).is_ok());
        assert!(rate.take(start + Duration::from_millis(100)).is_err());
        // Time never fills it past the burst.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..100).filter(|_| rate.take(later).is_ok()).count(), 50);
    }

    #[test]
    fn a_token_rate_takes_many_at_once_or_none() {
        let mut rate = TokenRate::new(100, 1000);
        let start = rate.at;
        assert!(rate.take_n(600, start).is_ok());
        // 400 left: 600 more are refused whole, none taken, with the wait for 200.
        let wait = rate.take_n(600, start).expect_err("short");
        assert_eq!(wait, Duration::from_secs(2));
        assert!(rate.take_n(400, start).is_ok());
        // More than a burst ever holds: never.
        assert_eq!(
            rate.take_n(1001, start + Duration::from_secs(3600)),
            Err(Duration::MAX)
        );
    }
}
