//! One lane per tenant: its loads, reloads and removals run one at a time, in order, each
//! lane as a task of its own, so one tenant's slow source or drain never holds up another's;
//! of the jobs waiting in a lane only the newest is kept.

use crate::state::*;

/// What a job queued in a lane that has a job running or waiting does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenBusy {
    /// It waits, instead of the one waiting (the newer one sees the newer state).
    Replace,
    /// It is dropped.
    Skip,
}

impl Fleet {
    /// Runs `job` in `source`'s lane: after the job of the tenant that runs now, if any,
    /// and instead of one still waiting (the newer one sees the newer state).
    pub(super) fn enqueue<F, Fut>(self: &Arc<Self>, source: TenantSource, job: F)
    where
        F: FnOnce(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.queue(source, job, WhenBusy::Replace);
    }

    /// [`Fleet::enqueue`], unless the lane has a job running or waiting.
    pub(super) fn enqueue_if_idle<F, Fut>(self: &Arc<Self>, source: TenantSource, job: F)
    where
        F: FnOnce(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.queue(source, job, WhenBusy::Skip);
    }

    /// Puts `job` in `source`'s lane, draining it in a task unless one already does.
    fn queue<F, Fut>(self: &Arc<Self>, source: TenantSource, job: F, when_busy: WhenBusy)
    where
        F: FnOnce(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let lane = lanes.entry(source).or_default().clone();
        let mut state = lane.lock().unwrap_or_else(|p| p.into_inner());
        if when_busy == WhenBusy::Skip && (state.draining || state.pending.is_some()) {
            return;
        }
        state.pending = Some(Box::new(move |fleet| Box::pin(job(fleet))));
        if state.draining {
            return;
        }
        state.draining = true;
        drop(state);
        drop(lanes);
        let fleet = self.clone();
        let task = tokio::spawn(async move {
            loop {
                let next = {
                    let mut state = lane.lock().unwrap_or_else(|p| p.into_inner());
                    let next = state.pending.take();
                    state.draining = next.is_some();
                    next
                };
                match next {
                    Some(job) if !fleet.is_closing() => job(fleet.clone()).await,
                    Some(_) => {}
                    None => break,
                }
            }
        });
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.retain(|j| !j.is_finished());
        jobs.push(task);
    }

    /// Queues the removal of `source`'s tenant; its lane goes with it.
    pub(super) fn enqueue_removal(self: &Arc<Self>, source: TenantSource) {
        self.enqueue(source.clone(), move |fleet| async move {
            fleet.remove(&source).await;
            let mut lanes = fleet.lanes.lock().unwrap_or_else(|p| p.into_inner());
            // The lane goes too, unless a job arrived meanwhile (the source came back).
            let idle = lanes.get(&source).is_some_and(|l| {
                l.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pending
                    .is_none()
            });
            if idle {
                lanes.remove(&source);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{test_fleet, test_options, until};
    use crate::state::*;

    type Log = Arc<Mutex<Vec<&'static str>>>;

    fn note(log: &Log, what: &'static str) {
        log.lock().unwrap_or_else(|p| p.into_inner()).push(what);
    }

    fn noted(log: &Log) -> Vec<&'static str> {
        log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    #[tokio::test]
    async fn a_lane_runs_one_job_at_a_time_keeps_the_newest_waiting_and_holds_up_no_other() {
        let fleet = test_fleet(test_options());
        let log: Log = Arc::default();
        let (release, hold) = watch::channel(false);
        let (a, b) = (
            TenantSource::Resource("a".into()),
            TenantSource::Resource("b".into()),
        );
        let job = |what: &'static str| {
            let log = log.clone();
            move |_: Arc<Fleet>| async move { note(&log, what) }
        };
        {
            let (log, mut hold) = (log.clone(), hold.clone());
            fleet.enqueue(a.clone(), move |_| async move {
                note(&log, "a1 starts");
                let _ = hold.wait_for(|r| *r).await;
                note(&log, "a1 ends");
            });
        }
        until("a1 to start", || noted(&log).contains(&"a1 starts")).await;
        // Waiting behind a1: a2 is replaced by the newer a3; an idle-only job is dropped.
        fleet.enqueue(a.clone(), job("a2"));
        fleet.enqueue(a.clone(), job("a3"));
        fleet.enqueue_if_idle(a.clone(), job("a idle"));
        // Another tenant's lane runs meanwhile.
        fleet.enqueue(b.clone(), job("b1"));
        until("b1 to run beside a1", || noted(&log).contains(&"b1")).await;
        assert!(!noted(&log).contains(&"a1 ends"));
        let _ = release.send(true);
        until("a3 to run", || noted(&log).contains(&"a3")).await;
        // An idle lane takes an idle-only job.
        until("a's lane to be idle", || {
            let lanes = fleet.lanes.lock().unwrap_or_else(|p| p.into_inner());
            lanes.get(&a).is_some_and(|l| {
                let l = l.lock().unwrap_or_else(|p| p.into_inner());
                !l.draining && l.pending.is_none()
            })
        })
        .await;
        fleet.enqueue_if_idle(a.clone(), job("a idle"));
        until("the idle-only job", || noted(&log).contains(&"a idle")).await;
        assert_eq!(noted(&log), ["a1 starts", "b1", "a1 ends", "a3", "a idle"]);
    }
}
