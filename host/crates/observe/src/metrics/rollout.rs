//! The rollouts' families: where each CRD's rollout stands, the CRs on each version, and
//! the passes each version ran, as `inrun_rollout_*`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// One CRD.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CrdLabel {
    crd: String,
}

/// One version of a CRD's reconciler in a rollout: `old` or `new`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    crd: String,
    version: &'static str,
}

/// A pass of one version, and how it ended (`success`, `failure`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassLabel {
    crd: String,
    version: &'static str,
    result: &'static str,
}

/// The rollouts' families.
#[derive(Debug, Default)]
pub(super) struct Rollouts {
    step: Family<CrdLabel, Gauge>,
    percent: Family<CrdLabel, Gauge>,
    crs: Family<VersionLabel, Gauge>,
    passes: Family<PassLabel, Counter>,
}

impl Rollouts {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "inrun_rollout_step",
            "The step a CRD's rollout stands at (1 for the first; 0 when it rolled back)",
            self.step.clone(),
        );
        r.register(
            "inrun_rollout_percent",
            "The share of CRs a CRD's rollout puts on the new version at its step, in percent",
            self.percent.clone(),
        );
        r.register(
            "inrun_rollout_crs",
            "CRs a CRD's rollout serves with each version (old, new)",
            self.crs.clone(),
        );
        r.register(
            "inrun_rollout_passes",
            "Passes each version of a rolling-out CRD's reconciler ran, by result",
            self.passes.clone(),
        );
    }
}

impl super::Metrics {
    /// Records where `crd`'s rollout stands: its step (1-based; 0 rolled back), the share
    /// at that step, and the CRs on each version.
    pub fn rollout_at(&self, crd: &str, step: i64, percent: i64, old: usize, new: usize) {
        let label = CrdLabel {
            crd: crd.to_string(),
        };
        self.rollouts.step.get_or_create(&label).set(step);
        self.rollouts.percent.get_or_create(&label).set(percent);
        for (version, count) in [("old", old), ("new", new)] {
            self.rollouts
                .crs
                .get_or_create(&VersionLabel {
                    crd: crd.to_string(),
                    version,
                })
                .set(super::depth(count));
        }
    }

    /// Records a pass of `crd`'s `old` or `new` version during a rollout.
    pub fn rollout_pass(&self, crd: &str, new: bool, ok: bool) {
        self.rollouts
            .passes
            .get_or_create(&PassLabel {
                crd: crd.to_string(),
                version: if new { "new" } else { "old" },
                result: super::result(ok),
            })
            .inc();
    }
}
