//! A rollout's analysis: each version's passes over the window (how many failed) and the
//! CRs it reconciled (how many are Ready), and the verdict on the new version — worse than
//! the thresholds *and* worse than the old version in the same window, so an outage both
//! suffer is not the new version's fault.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use inrun_blueprint::RolloutAnalysis;

use super::Version;

/// Passes the new version must have run in the window before its failure rate is judged
/// during a step (at a step's end, one is enough).
pub(super) const MIN_PASSES: u64 = 5;

/// Most passes a tally remembers; older ones are dropped first.
const MAX_KEPT: usize = 100_000;

/// One version's numbers at one look.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Numbers {
    /// Passes it ran in the window.
    pub passes: u64,
    /// Of which failed.
    pub failures: u64,
    /// CRs whose status says it reconciled them last.
    pub reconciled: usize,
    /// Of which are Ready.
    pub ready: usize,
}

impl Numbers {
    fn failure_rate(&self) -> Option<f64> {
        (self.passes > 0).then(|| ratio(self.failures, self.passes))
    }

    fn ready_ratio(&self) -> Option<f64> {
        (self.reconciled > 0).then(|| ratio(self.ready as u64, self.reconciled as u64))
    }
}

#[allow(clippy::cast_precision_loss)]
fn ratio(part: u64, whole: u64) -> f64 {
    part as f64 / whole as f64
}

fn percent(r: f64) -> String {
    format!("{:.0} %", r * 100.0)
}

/// Each version's passes, with when they ended.
#[derive(Debug, Default)]
pub(super) struct Tally {
    passes: VecDeque<(Instant, Version, bool)>,
}

impl Tally {
    /// Records a pass of `version` ending at `now`; forgets those older than `window`.
    pub(super) fn record(&mut self, version: Version, ok: bool, now: Instant, window: Duration) {
        self.passes.push_back((now, version, ok));
        if self.passes.len() > MAX_KEPT {
            self.passes.pop_front();
        }
        self.forget(now, window);
    }

    fn forget(&mut self, now: Instant, window: Duration) {
        while self
            .passes
            .front()
            .is_some_and(|(at, _, _)| now.duration_since(*at) > window)
        {
            self.passes.pop_front();
        }
    }

    /// `(passes, failures)` of `version` within `window` of `now`.
    pub(super) fn counts(
        &mut self,
        version: Version,
        now: Instant,
        window: Duration,
    ) -> (u64, u64) {
        self.forget(now, window);
        let mut out = (0, 0);
        for (_, v, ok) in &self.passes {
            if *v == version {
                out.0 += 1;
                out.1 += u64::from(!ok);
            }
        }
        out
    }
}

/// Why the new version fails its analysis, or `None`. Its failure rate is judged once it
/// ran [`MIN_PASSES`] (or at the step's end, `step_over`); its Ready ratio at the step's
/// end. Each must be past its threshold and worse than the old version's.
pub(super) fn judge(
    spec: &RolloutAnalysis,
    old: &Numbers,
    new: &Numbers,
    step_over: bool,
) -> Option<String> {
    let window = inrun_contract::duration::format(spec.window);
    if (new.passes >= MIN_PASSES || step_over)
        && let Some(rate) = new.failure_rate()
    {
        let before = old.failure_rate().unwrap_or(0.0);
        if rate > spec.max_failure_rate && rate > before {
            return Some(format!(
                "the new version failed {} of its passes over the last {window} ({} of {}), above maxFailureRate {} and the old version's {} ({} of {})",
                percent(rate),
                new.failures,
                new.passes,
                percent(spec.max_failure_rate),
                percent(before),
                old.failures,
                old.passes,
            ));
        }
    }
    if step_over && let Some(ready) = new.ready_ratio() {
        let before = old.ready_ratio().unwrap_or(1.0);
        if ready < spec.min_ready_ratio && ready < before {
            return Some(format!(
                "{} of the CRs the new version reconciled are Ready ({} of {}), below minReadyRatio {} and the old version's {} ({} of {})",
                percent(ready),
                new.ready,
                new.reconciled,
                percent(spec.min_ready_ratio),
                percent(before),
                old.ready,
                old.reconciled,
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(passes: u64, failures: u64, reconciled: usize, ready: usize) -> Numbers {
        Numbers {
            passes,
            failures,
            reconciled,
            ready,
        }
    }

    #[test]
    fn the_new_version_fails_only_past_its_thresholds_and_worse_than_the_old() {
        let spec = RolloutAnalysis {
            window: Duration::from_secs(60),
            max_failure_rate: 0.05,
            min_ready_ratio: 0.9,
        };
        let fine = numbers(20, 0, 20, 20);
        // 30 % failing: halted, with the numbers.
        let bad = numbers(20, 6, 20, 14);
        let why = judge(&spec, &fine, &bad, false).expect("halted");
        assert_eq!(
            why,
            "the new version failed 30 % of its passes over the last 1m (6 of 20), above maxFailureRate 5 % and the old version's 0 % (0 of 20)"
        );
        // Too few passes yet during the step; at its end one is enough.
        assert_eq!(judge(&spec, &fine, &numbers(2, 2, 2, 0), false), None);
        assert!(judge(&spec, &fine, &numbers(2, 2, 2, 0), true).is_some());
        // The old version fails as much: an outage, not the new version's fault.
        assert_eq!(judge(&spec, &numbers(20, 8, 20, 12), &bad, true), None);
        // Passes fine but CRs not Ready, judged at the step's end.
        let unready = numbers(20, 0, 20, 10);
        assert_eq!(judge(&spec, &fine, &unready, false), None);
        assert_eq!(
            judge(&spec, &fine, &unready, true).expect("halted"),
            "50 % of the CRs the new version reconciled are Ready (10 of 20), below minReadyRatio 90 % and the old version's 100 % (20 of 20)"
        );
    }

    #[test]
    fn a_tally_counts_each_version_within_the_window_only() {
        let window = Duration::from_secs(10);
        let start = Instant::now();
        let mut tally = Tally::default();
        tally.record(Version::New, false, start, window);
        tally.record(Version::Old, true, start + Duration::from_secs(5), window);
        tally.record(Version::New, true, start + Duration::from_secs(8), window);
        let now = start + Duration::from_secs(9);
        assert_eq!(tally.counts(Version::New, now, window), (2, 1));
        assert_eq!(tally.counts(Version::Old, now, window), (1, 0));
        // The first pass leaves the window.
        let later = start + Duration::from_secs(12);
        assert_eq!(tally.counts(Version::New, later, window), (1, 0));
    }
}
