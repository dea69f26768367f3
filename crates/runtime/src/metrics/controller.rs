//! One controller's metrics as controller-runtime exports them: its reconcile counters and
//! histogram, and a model of its work queue. kube-runtime keeps its queue internal, so the
//! controller tells [`WorkQueue`] what it queues, requeues, starts and finishes; depth,
//! workers in use and unfinished work are computed from that at scrape time, so they
//! cannot drift from what is queued and running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `controller_runtime_reconcile_time_seconds`'s buckets, controller-runtime's.
pub const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// The work-queue histograms' buckets, client-go's: ten nanoseconds to a thousand seconds,
/// a factor of ten apart.
pub const QUEUE_BUCKETS: &[f64] = &[
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0,
];

/// How a reconcile ended: controller-runtime's `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// Done; nothing asked for another run.
    Success,
    /// It failed (a caught panic included); retried with backoff.
    Error,
    /// It asked to run again at once: something changed while it ran.
    Requeue,
    /// It asked to run again after a delay (a requeue, a resync, a package not there yet).
    RequeueAfter,
}

impl ReconcileResult {
    /// Every value, in the order controller-runtime initialises them.
    pub const ALL: [ReconcileResult; 4] = [
        ReconcileResult::Error,
        ReconcileResult::RequeueAfter,
        ReconcileResult::Requeue,
        ReconcileResult::Success,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }

    /// Classifies a reconcile as controller-runtime does, in its order: a failure is an
    /// error whatever else it asked; then a delay before the next run is `requeue_after`;
    /// a next run at once is `requeue`; no next run is `success`.
    pub fn classify(failed: bool, next_run: Option<Duration>) -> ReconcileResult {
        match (failed, next_run) {
            (true, _) => ReconcileResult::Error,
            (false, Some(after)) if !after.is_zero() => ReconcileResult::RequeueAfter,
            (false, Some(_)) => ReconcileResult::Requeue,
            (false, None) => ReconcileResult::Success,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ControllerLabel {
    pub(super) controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) controller: String,
    pub(super) result: &'static str,
}

/// client-go names a queue `name`; controller-runtime adds `controller` (the same value).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct QueueLabels {
    controller: String,
    name: String,
}

/// `workqueue_depth`'s labels: controller-runtime's priority queue adds `priority`, empty
/// for a queue without priorities.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    controller: String,
    name: String,
    priority: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS.iter().copied())
}

fn queue_histogram() -> Histogram {
    Histogram::new(QUEUE_BUCKETS.iter().copied())
}

/// The counters and histograms of every controller, which outlive any one of them.
#[derive(Clone)]
pub(super) struct Families {
    pub(super) reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabel, Counter>,
    terminal_errors: Family<ControllerLabel, Counter>,
    panics: Family<ControllerLabel, Counter>,
    reconcile_time: Histograms<ControllerLabel>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: Histograms<QueueLabels>,
    work_duration: Histograms<QueueLabels>,
}

impl Families {
    pub(super) fn new() -> Families {
        Families {
            reconciles: Family::default(),
            errors: Family::default(),
            terminal_errors: Family::default(),
            panics: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_histogram),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
        }
    }

    /// Registers the families, with controller-runtime's and client-go's names and help;
    /// the gauges computed at scrape time come from [`LiveControllers`].
    pub(super) fn register(&self, r: &mut Registry, live: LiveControllers) {
        // Counters are named without `_total`: the encoder appends it.
        super::register_exact(
            r,
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconciles.clone(),
        );
        super::register_exact(
            r,
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.errors.clone(),
        );
        super::register_exact(
            r,
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            self.terminal_errors.clone(),
        );
        super::register_exact(
            r,
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            self.panics.clone(),
        );
        super::register_exact(
            r,
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        super::register_exact(
            r,
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        super::register_exact(
            r,
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        super::register_exact(
            r,
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        super::register_exact(
            r,
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            self.work_duration.clone(),
        );
        r.register_collector(Box::new(live));
    }
}

/// A queued key: when it is (or was) due, and whether its add has been counted yet (a
/// delayed requeue is added when its delay is over).
#[derive(Debug, Clone, Copy)]
struct Waiting {
    due: Instant,
    added: bool,
}

/// What one controller has queued and running.
#[derive(Debug, Default)]
struct State {
    waiting: HashMap<String, Waiting>,
    running: HashMap<String, Instant>,
}

/// One controller: its names, its workers and its state.
struct Shared {
    controller: String,
    workers: usize,
    families: Families,
    state: Mutex<State>,
}

impl Shared {
    fn controller_label(&self) -> ControllerLabel {
        ControllerLabel {
            controller: self.controller.clone(),
        }
    }

    fn queue_labels(&self) -> QueueLabels {
        QueueLabels {
            controller: self.controller.clone(),
            name: self.controller.clone(),
        }
    }

    /// The state, with every delayed requeue whose delay is over counted as added.
    fn settled(&self, now: Instant) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts that are still worth reading.
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let due = state
            .waiting
            .values_mut()
            .filter(|w| !w.added && w.due <= now)
            .map(|w| w.added = true)
            .count();
        if due > 0 {
            self.families
                .adds
                .get_or_create(&self.queue_labels())
                .inc_by(due as u64);
        }
        state
    }
}

/// The controllers running now, read at scrape time.
#[derive(Clone, Default)]
pub(super) struct LiveControllers(Arc<Mutex<Vec<Arc<Shared>>>>);

impl std::fmt::Debug for LiveControllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveControllers").finish_non_exhaustive()
    }
}

/// One controller's gauges, read at one instant.
pub(super) struct Gauges {
    pub(super) controller: String,
    workers: usize,
    active: usize,
    pub(super) depth: usize,
    unfinished: f64,
    longest: f64,
}

impl LiveControllers {
    fn list(&self) -> MutexGuard<'_, Vec<Arc<Shared>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every running controller's gauges now.
    pub(super) fn gauges(&self) -> Vec<Gauges> {
        let now = Instant::now();
        self.list()
            .iter()
            .map(|c| {
                let state = c.settled(now);
                let ages = state.running.values().map(|t| now - *t);
                Gauges {
                    controller: c.controller.clone(),
                    workers: c.workers,
                    active: state.running.len(),
                    depth: state.waiting.values().filter(|w| w.added).count(),
                    unfinished: ages.clone().fold(0.0, |sum, a| sum + a.as_secs_f64()),
                    longest: ages.max().map_or(0.0, |a| a.as_secs_f64()),
                }
            })
            .collect()
    }
}

/// A gauge family computed at scrape time: its name, its help, and its value per controller.
type GaugeOf<T> = (&'static str, &'static str, fn(&Gauges) -> T);

impl Collector for LiveControllers {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauges = self.gauges();
        let per_controller: [GaugeOf<i64>; 2] = [
            (
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                |g| i64::try_from(g.workers).unwrap_or(i64::MAX),
            ),
            (
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                |g| i64::try_from(g.active).unwrap_or(i64::MAX),
            ),
        ];
        for (name, help, value) in per_controller {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for g in &gauges {
                let labels = ControllerLabel {
                    controller: g.controller.clone(),
                };
                family.encode_family(&labels)?.encode_gauge(&value(g))?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "workqueue_depth",
            "Current depth of workqueue by workqueue and priority",
            None,
            MetricType::Gauge,
        )?;
        for g in &gauges {
            let labels = DepthLabels {
                controller: g.controller.clone(),
                name: g.controller.clone(),
                priority: "",
            };
            let depth = i64::try_from(g.depth).unwrap_or(i64::MAX);
            family.encode_family(&labels)?.encode_gauge(&depth)?;
        }
        let per_queue: [GaugeOf<f64>; 2] = [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                |g| g.unfinished,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                |g| g.longest,
            ),
        ];
        for (name, help, value) in per_queue {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for g in &gauges {
                let labels = QueueLabels {
                    controller: g.controller.clone(),
                    name: g.controller.clone(),
                };
                family.encode_family(&labels)?.encode_gauge(&value(g))?;
            }
        }
        Ok(())
    }
}

/// One controller's work queue as the metrics see it. Cloning shares it.
#[derive(Clone)]
pub struct WorkQueue {
    shared: Arc<Shared>,
    live: LiveControllers,
}

impl std::fmt::Debug for WorkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("controller", &self.shared.controller)
            .finish_non_exhaustive()
    }
}

impl WorkQueue {
    pub(super) fn new(
        controller: &str,
        workers: usize,
        families: Families,
        live: LiveControllers,
    ) -> WorkQueue {
        WorkQueue {
            shared: Arc::new(Shared {
                controller: controller.to_string(),
                workers,
                families,
                state: Mutex::default(),
            }),
            live,
        }
    }

    /// The controller's name.
    pub fn controller(&self) -> &str {
        &self.shared.controller
    }

    /// The controller runs: its series exist from now on (every `result` at 0, as
    /// controller-runtime initialises them) and its gauges are exported until the
    /// returned guard is dropped.
    #[must_use = "the controller's gauges are exported while the guard lives"]
    pub fn run(&self) -> Running {
        let s = &self.shared;
        let f = &s.families;
        let controller = s.controller_label();
        for result in ReconcileResult::ALL {
            let _ = f.reconciles.get_or_create(&ResultLabels {
                controller: s.controller.clone(),
                result: result.as_str(),
            });
        }
        for family in [&f.errors, &f.terminal_errors, &f.panics] {
            let _ = family.get_or_create(&controller);
        }
        let _ = f.reconcile_time.get_or_create(&controller);
        let queue = s.queue_labels();
        for family in [&f.adds, &f.retries] {
            let _ = family.get_or_create(&queue);
        }
        for family in [&f.queue_duration, &f.work_duration] {
            let _ = family.get_or_create(&queue);
        }
        self.live.list().push(self.shared.clone());
        Running(self.clone())
    }

    /// A change queued `key` now: added unless it is queued already (a delayed requeue
    /// not due yet is brought forward, as kube-runtime's scheduler keeps the earliest).
    pub fn queued(&self, key: &str) {
        self.add_at(key, Instant::now());
    }

    /// `key` runs again after `after` (an error's backoff, a requeue): a retry, added
    /// when its delay is over (at once for zero).
    pub fn requeued(&self, key: &str, after: Duration) {
        self.shared
            .families
            .retries
            .get_or_create(&self.shared.queue_labels())
            .inc();
        let now = Instant::now();
        self.add_at(key, now.checked_add(after).unwrap_or(now));
    }

    fn add_at(&self, key: &str, due: Instant) {
        let now = Instant::now();
        let mut state = self.shared.settled(now);
        let waiting = state
            .waiting
            .entry(key.to_string())
            .or_insert(Waiting { due, added: false });
        waiting.due = waiting.due.min(due);
        let newly = !waiting.added && waiting.due <= now;
        waiting.added |= newly;
        drop(state);
        if newly {
            self.shared
                .families
                .adds
                .get_or_create(&self.shared.queue_labels())
                .inc();
        }
    }

    /// `key`'s CR is gone: what was queued for it will not run.
    pub fn forget(&self, key: &str) {
        self.shared.settled(Instant::now()).waiting.remove(key);
    }

    /// A reconcile of `key` starts: it leaves the queue (its wait is measured) and takes
    /// a worker until the returned [`InFlight`] is finished or dropped.
    pub fn started(&self, key: &str) -> InFlight {
        let now = Instant::now();
        let mut state = self.shared.settled(now);
        let waited = match state.waiting.remove(key) {
            Some(w) if w.added => Some(now.saturating_duration_since(w.due)),
            // Started by something the queue was not told of: counted as added now.
            _ => None,
        };
        state.running.insert(key.to_string(), now);
        drop(state);
        let queue = self.shared.queue_labels();
        if waited.is_none() {
            self.shared.families.adds.get_or_create(&queue).inc();
        }
        self.shared
            .families
            .queue_duration
            .get_or_create(&queue)
            .observe(waited.unwrap_or_default().as_secs_f64());
        InFlight {
            queue: self.clone(),
            key: key.to_string(),
            at: now,
            done: false,
        }
    }

    /// CRs queued and not yet started.
    pub fn depth(&self) -> usize {
        let state = self.shared.settled(Instant::now());
        state.waiting.values().filter(|w| w.added).count()
    }
}

/// Exports a controller's gauges while it lives (see [`WorkQueue::run`]).
#[derive(Debug)]
pub struct Running(WorkQueue);

impl Drop for Running {
    fn drop(&mut self) {
        let shared = &self.0.shared;
        self.0.live.list().retain(|c| !Arc::ptr_eq(c, shared));
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        state.waiting.clear();
        state.running.clear();
    }
}

/// A reconcile in progress, from [`WorkQueue::started`]; dropping it unfinished (the
/// future was dropped) frees its worker without counting a reconcile.
#[derive(Debug)]
pub struct InFlight {
    queue: WorkQueue,
    key: String,
    at: Instant,
    done: bool,
}

impl InFlight {
    /// Records how the reconcile ended; `panicked`: it panicked (and was caught).
    /// Returns how long it took.
    pub(super) fn finish(mut self, result: ReconcileResult, panicked: bool) -> Duration {
        let elapsed = self.at.elapsed();
        self.release();
        let s = &self.queue.shared;
        let f = &s.families;
        let controller = s.controller_label();
        f.reconciles
            .get_or_create(&ResultLabels {
                controller: s.controller.clone(),
                result: result.as_str(),
            })
            .inc();
        if result == ReconcileResult::Error {
            f.errors.get_or_create(&controller).inc();
        }
        if panicked {
            f.panics.get_or_create(&controller).inc();
        }
        f.reconcile_time
            .get_or_create(&controller)
            .observe(elapsed.as_secs_f64());
        f.work_duration
            .get_or_create(&s.queue_labels())
            .observe(elapsed.as_secs_f64());
        elapsed
    }

    /// The controller's name.
    pub(super) fn controller(&self) -> &str {
        self.queue.controller()
    }

    fn release(&mut self) {
        if !self.done {
            self.done = true;
            let mut state = self
                .queue
                .shared
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            state.running.remove(&self.key);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> (WorkQueue, LiveControllers) {
        let live = LiveControllers::default();
        let q = WorkQueue::new("pairs.example.dev", 3, Families::new(), live.clone());
        (q, live)
    }

    fn adds(q: &WorkQueue) -> u64 {
        q.shared
            .families
            .adds
            .get_or_create(&q.shared.queue_labels())
            .get()
    }

    #[test]
    fn results_are_classified_in_controller_runtimes_order() {
        use ReconcileResult::*;
        let later = Some(Duration::from_secs(30));
        assert_eq!(ReconcileResult::classify(true, later), Error);
        assert_eq!(ReconcileResult::classify(true, None), Error);
        assert_eq!(ReconcileResult::classify(false, later), RequeueAfter);
        assert_eq!(
            ReconcileResult::classify(false, Some(Duration::ZERO)),
            Requeue
        );
        assert_eq!(ReconcileResult::classify(false, None), Success);
        let labels: Vec<_> = ReconcileResult::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels, ["error", "requeue_after", "requeue", "success"]);
    }

    #[test]
    fn a_key_queued_twice_is_one_add_and_depth_counts_only_what_has_not_started() {
        let (q, _live) = queue();
        let _running = q.run();
        q.queued("ns/a");
        q.queued("ns/a");
        q.queued("ns/b");
        assert_eq!((q.depth(), adds(&q)), (2, 2));
        let a = q.started("ns/a");
        assert_eq!(q.depth(), 1, "a reconcile in flight is not in the queue");
        // Queued again while it runs: waiting (dirty), as client-go counts it.
        q.queued("ns/a");
        assert_eq!((q.depth(), adds(&q)), (2, 3));
        a.finish(ReconcileResult::Success, false);
        let a = q.started("ns/a");
        let b = q.started("ns/b");
        assert_eq!(q.depth(), 0);
        drop(a);
        b.finish(ReconcileResult::Success, false);
        assert_eq!(q.depth(), 0);
        assert_eq!(adds(&q), 3);
    }

    #[test]
    fn a_delayed_requeue_is_a_retry_added_only_when_due() {
        let (q, _live) = queue();
        let _running = q.run();
        q.requeued("ns/a", Duration::from_secs(3600));
        assert_eq!((q.depth(), adds(&q)), (0, 0), "not due: not in the queue");
        // A change brings it forward: one add, not two.
        q.queued("ns/a");
        assert_eq!((q.depth(), adds(&q)), (1, 1));
        q.started("ns/a").finish(ReconcileResult::Requeue, false);
        q.requeued("ns/a", Duration::ZERO);
        assert_eq!((q.depth(), adds(&q)), (1, 2));
        let retries = q
            .shared
            .families
            .retries
            .get_or_create(&q.shared.queue_labels())
            .get();
        assert_eq!(retries, 2);
    }

    #[test]
    fn a_forgotten_key_and_a_stopped_controller_leave_nothing_queued() {
        let (q, live) = queue();
        let running = q.run();
        q.queued("ns/gone");
        q.forget("ns/gone");
        assert_eq!(q.depth(), 0);
        q.queued("ns/a");
        let _in_flight = q.started("ns/b");
        let gauges = live.gauges();
        assert_eq!(gauges.len(), 1);
        assert_eq!((gauges[0].depth, gauges[0].active), (1, 1));
        drop(running);
        assert!(
            live.gauges().is_empty(),
            "a stopped controller exports no gauges"
        );
        assert_eq!(q.depth(), 0);
    }

    #[test]
    fn in_flight_reconciles_are_the_active_workers_and_their_age_the_unfinished_work() {
        let (q, live) = queue();
        let _running = q.run();
        let a = q.started("ns/a");
        let _b = q.started("ns/b");
        std::thread::sleep(Duration::from_millis(20));
        let g = &live.gauges()[0];
        assert_eq!((g.workers, g.active), (3, 2));
        assert!(
            g.longest >= 0.02 && g.unfinished >= 2.0 * 0.02,
            "{} {}",
            g.longest,
            g.unfinished
        );
        assert!(g.unfinished >= g.longest);
        a.finish(ReconcileResult::Error, true);
        assert_eq!(live.gauges()[0].active, 1);
        let controller = q.shared.controller_label();
        let f = &q.shared.families;
        assert_eq!(f.errors.get_or_create(&controller).get(), 1);
        assert_eq!(f.panics.get_or_create(&controller).get(), 1);
        assert_eq!(f.terminal_errors.get_or_create(&controller).get(), 0);
    }
}
