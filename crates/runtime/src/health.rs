//! The runtime's own account of whether it serves: how many controllers run, how many of
//! their watch caches have synced, and whether this replica leads or waits for the lease.
//! `/readyz` is computed from it, and [`crate::metrics`] exports the same gauges, so the
//! two can never disagree.

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::gauge::Gauge;

/// Controllers, caches and leadership, updated by the runtime as they change.
#[derive(Debug, Default)]
pub struct Health {
    pub(crate) controllers: Gauge,
    pub(crate) synced: Gauge,
    pub(crate) leader: Gauge,
    standby: AtomicBool,
}

/// What `/readyz` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Every controller runs and its cache of CRs has synced.
    Ready,
    /// This replica waits for the lease: ready, though no controller runs.
    Standby,
    /// Controllers run, but some cache is still listing.
    CachesNotSynced,
    /// No controller runs yet.
    NotStarted,
}

impl Readiness {
    /// Whether the replica should receive traffic.
    pub fn is_ready(self) -> bool {
        matches!(self, Readiness::Ready | Readiness::Standby)
    }

    /// A short word for the health port's body.
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Ready | Readiness::Standby => "ok",
            Readiness::CachesNotSynced => "caches not synced",
            Readiness::NotStarted => "controllers not started",
        }
    }
}

impl Health {
    /// One more controller runs (`false`: one stopped).
    pub fn controller_running(&self, running: bool) {
        if running {
            self.controllers.inc();
        } else {
            self.controllers.dec();
        }
    }

    /// One more controller's cache has synced (`false`: a synced one stopped).
    pub fn cache_synced(&self, synced: bool) {
        if synced {
            self.synced.inc();
        } else {
            self.synced.dec();
        }
    }

    /// This replica leads (it runs controllers), or not.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// This replica waits for the lease, or not.
    pub fn set_standby(&self, standby: bool) {
        self.standby.store(standby, Ordering::Relaxed);
    }

    /// Whether this replica leads.
    pub fn leader(&self) -> bool {
        self.leader.get() > 0
    }

    /// Controllers running now.
    pub fn controllers(&self) -> i64 {
        self.controllers.get()
    }

    /// Controllers whose cache has synced.
    pub fn caches_synced(&self) -> i64 {
        self.synced.get()
    }

    /// Ready once every controller runs with its cache synced, or while waiting as a
    /// standby.
    pub fn readiness(&self) -> Readiness {
        let running = self.controllers.get();
        if self.standby.load(Ordering::Relaxed) {
            Readiness::Standby
        } else if running == 0 {
            Readiness::NotStarted
        } else if self.synced.get() < running {
            Readiness::CachesNotSynced
        } else {
            Readiness::Ready
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_running_controller_has_synced_or_when_standing_by() {
        let h = Health::default();
        assert_eq!(h.readiness(), Readiness::NotStarted);
        h.controller_running(true);
        h.controller_running(true);
        h.cache_synced(true);
        assert_eq!(h.readiness(), Readiness::CachesNotSynced);
        h.cache_synced(true);
        assert_eq!(h.readiness(), Readiness::Ready);
        h.controller_running(false);
        h.controller_running(false);
        h.cache_synced(false);
        h.cache_synced(false);
        assert_eq!(h.readiness(), Readiness::NotStarted);
        h.set_standby(true);
        assert!(h.readiness().is_ready());
        assert_eq!(h.readiness(), Readiness::Standby);
    }
}
