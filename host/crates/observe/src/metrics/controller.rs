//! One controller's metrics as controller-runtime exports them: its reconcile counters and
//! histogram, and a model of its work queue. kube-runtime keeps its queue internal, so the
//! controller tells [`WorkQueue`] what it queues, requeues, starts and finishes; depth,
//! workers in use and unfinished work are computed from that at scrape time, so they
//! cannot drift from what is queued and running.

use std::collections::{BTreeSet, HashMap};
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
    /// It asked to run again at once, without a delay. Inrun's reconcilers never do
    /// (every requeue waits at least `runtime.minRequeue`); a change that arrived while
    /// it ran is not this but a queue add, the reconcile keeping its own result.
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
        super::exact::register_exact(
            r,
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconciles.clone(),
        );
        super::exact::register_exact(
            r,
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.errors.clone(),
        );
        super::exact::register_exact(
            r,
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            self.terminal_errors.clone(),
        );
        super::exact::register_exact(
            r,
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            self.panics.clone(),
        );
        super::exact::register_exact(
            r,
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        super::exact::register_exact(
            r,
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        super::exact::register_exact(
            r,
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        super::exact::register_exact(
            r,
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        super::exact::register_exact(
            r,
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            self.work_duration.clone(),
        );
        r.register_collector(Box::new(live));
    }
}

/// What one controller has queued and running. Every operation costs O(log n) in the keys
/// queued: keys whose requeue delay is not over are ordered by when they are due, so
/// settling takes only those that came due, and the depth is the size of one map.
#[derive(Debug, Default)]
struct State {
    /// Keys due and not started (the depth), each with when it became due: when it was
    /// added, or when its delay was over.
    ready: HashMap<String, Instant>,
    /// Keys requeued with a delay not over yet, by when each is due.
    delayed: BTreeSet<(Instant, String)>,
    /// When each key of `delayed` is due, to find its entry there.
    due: HashMap<String, Instant>,
    /// Keys being reconciled, each with when it started.
    running: HashMap<String, Instant>,
}

impl State {
    /// Moves the delayed keys due at `now` into the queue; returns how many came due.
    fn settle(&mut self, now: Instant) -> u64 {
        let mut came_due = 0;
        while self.delayed.first().is_some_and(|(due, _)| *due <= now) {
            if let Some((due, key)) = self.delayed.pop_first() {
                self.due.remove(&key);
                self.ready.insert(key, due);
                came_due += 1;
            }
        }
        came_due
    }

    /// Takes `key`'s delayed entry out, if it has one.
    fn undelay(&mut self, key: &str) {
        if let Some(due) = self.due.remove(key) {
            self.delayed.remove(&(due, key.to_string()));
        }
    }

    /// Queues `key` for `due`, keeping the earlier of that and what is queued already (as
    /// kube-runtime's scheduler does). Returns whether this is a new add: due by `now`
    /// and not queued before.
    fn add(&mut self, key: &str, due: Instant, now: Instant) -> bool {
        if self.ready.contains_key(key) {
            return false;
        }
        if let Some(&queued) = self.due.get(key) {
            if queued <= due {
                return false;
            }
            self.undelay(key);
        }
        if due <= now {
            self.ready.insert(key.to_string(), due);
            true
        } else {
            self.due.insert(key.to_string(), due);
            self.delayed.insert((due, key.to_string()));
            false
        }
    }

    fn clear(&mut self) {
        *self = State::default();
    }
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
        queue_labels(&self.controller)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts that are still worth reading.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `n` adds.
    fn added(&self, n: u64) {
        if n > 0 {
            self.families
                .adds
                .get_or_create(&self.queue_labels())
                .inc_by(n);
        }
    }

    /// The state at `now`, the delayed requeues due by then counted as added.
    fn settled(&self, now: Instant) -> MutexGuard<'_, State> {
        let mut state = self.lock();
        let came_due = state.settle(now);
        self.added(came_due);
        state
    }
}

fn queue_labels(controller: &str) -> QueueLabels {
    QueueLabels {
        controller: controller.to_string(),
        name: controller.to_string(),
    }
}

impl Families {
    /// Removes every series of `controller`, which stopped for good.
    pub(super) fn remove(&self, controller: &str) {
        for result in ReconcileResult::ALL {
            self.reconciles.remove(&ResultLabels {
                controller: controller.to_string(),
                result: result.as_str(),
            });
        }
        let label = ControllerLabel {
            controller: controller.to_string(),
        };
        for family in [&self.errors, &self.terminal_errors, &self.panics] {
            family.remove(&label);
        }
        self.reconcile_time.remove(&label);
        let queue = queue_labels(controller);
        for family in [&self.adds, &self.retries] {
            family.remove(&queue);
        }
        for family in [&self.queue_duration, &self.work_duration] {
            family.remove(&queue);
        }
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

    /// Whether a controller named `controller` runs.
    pub(super) fn runs(&self, controller: &str) -> bool {
        self.list().iter().any(|c| c.controller == controller)
    }

    /// Every running controller's gauges now.
    pub(super) fn gauges(&self) -> Vec<Gauges> {
        self.gauges_at(Instant::now())
    }

    /// Every running controller's gauges at `now`: the depth at once, the rest from the
    /// reconciles in flight (no more than its workers).
    fn gauges_at(&self, now: Instant) -> Vec<Gauges> {
        self.list()
            .iter()
            .map(|c| {
                let state = c.settled(now);
                let ages = state
                    .running
                    .values()
                    .map(|t| now.saturating_duration_since(*t));
                Gauges {
                    controller: c.controller.clone(),
                    workers: c.workers,
                    active: state.running.len(),
                    depth: state.ready.len(),
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
        self.queued_at(key, Instant::now());
    }

    fn queued_at(&self, key: &str, now: Instant) {
        self.add_at(key, now, now);
    }

    /// `key` runs again after `after` (an error's backoff, a requeue): a retry, added
    /// when its delay is over (at once for zero).
    pub fn requeued(&self, key: &str, after: Duration) {
        self.requeued_at(key, after, Instant::now());
    }

    fn requeued_at(&self, key: &str, after: Duration, now: Instant) {
        self.shared
            .families
            .retries
            .get_or_create(&self.shared.queue_labels())
            .inc();
        self.add_at(key, now.checked_add(after).unwrap_or(now), now);
    }

    fn add_at(&self, key: &str, due: Instant, now: Instant) {
        let added = self.shared.settled(now).add(key, due, now);
        self.shared.added(u64::from(added));
    }

    /// `key`'s CR is gone: what was queued for it will not run.
    pub fn forget(&self, key: &str) {
        let mut state = self.shared.settled(Instant::now());
        state.ready.remove(key);
        state.undelay(key);
    }

    /// A reconcile of `key` starts: it leaves the queue (its wait is measured) and takes
    /// a worker until the returned [`InFlight`] is finished or dropped.
    pub fn started(&self, key: &str) -> InFlight {
        self.started_at(key, Instant::now())
    }

    fn started_at(&self, key: &str, now: Instant) -> InFlight {
        let mut state = self.shared.settled(now);
        let waited = state
            .ready
            .remove(key)
            .map(|since| now.saturating_duration_since(since));
        if waited.is_none() {
            // Started by something the queue was not told of (or before its delay was
            // over): counted as added now, its requeue taken out.
            state.undelay(key);
        }
        state.running.insert(key.to_string(), now);
        drop(state);
        if waited.is_none() {
            self.shared.added(1);
        }
        self.shared
            .families
            .queue_duration
            .get_or_create(&self.shared.queue_labels())
            .observe(waited.unwrap_or_default().as_secs_f64());
        InFlight {
            queue: self.clone(),
            key: key.to_string(),
            at: now,
            done: false,
            waited,
        }
    }

    /// CRs queued and not yet started.
    pub fn depth(&self) -> usize {
        self.depth_at(Instant::now())
    }

    fn depth_at(&self, now: Instant) -> usize {
        self.shared.settled(now).ready.len()
    }
}

/// Exports a controller's gauges while it lives (see [`WorkQueue::run`]).
#[derive(Debug)]
pub struct Running(WorkQueue);

impl Drop for Running {
    fn drop(&mut self) {
        let shared = &self.0.shared;
        self.0.live.list().retain(|c| !Arc::ptr_eq(c, shared));
        shared.lock().clear();
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
    /// How long the CR waited in the queue before it started (`None`: started by
    /// something the queue was not told of).
    waited: Option<Duration>,
}

impl InFlight {
    /// How long the CR waited in the queue before this reconcile started.
    pub fn waited(&self) -> Option<Duration> {
        self.waited
    }

    /// Records how the reconcile ended; `panicked`: it panicked (and was caught).
    /// Returns how long it took.
    pub(super) fn finish(self, result: ReconcileResult, panicked: bool) -> Duration {
        self.finish_at(result, panicked, Instant::now())
    }

    fn finish_at(mut self, result: ReconcileResult, panicked: bool, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at);
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
            self.queue.shared.lock().running.remove(&self.key);
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

    fn retries(q: &WorkQueue) -> u64 {
        q.shared
            .families
            .retries
            .get_or_create(&q.shared.queue_labels())
            .get()
    }

    fn reconciles(q: &WorkQueue, result: ReconcileResult) -> u64 {
        q.shared
            .families
            .reconciles
            .get(&ResultLabels {
                controller: q.controller().to_string(),
                result: result.as_str(),
            })
            .map_or(0, |c| c.get())
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
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        q.requeued_at("ns/a", hour, t0);
        assert_eq!(
            (q.depth_at(t0), adds(&q)),
            (0, 0),
            "not due: not in the queue"
        );
        // A change brings it forward: one add, not two, and nothing left to come due.
        q.queued_at("ns/a", t0);
        assert_eq!((q.depth_at(t0), adds(&q)), (1, 1));
        assert_eq!((q.depth_at(t0 + hour), adds(&q)), (1, 1));
        q.started_at("ns/a", t0 + hour)
            .finish_at(ReconcileResult::Requeue, false, t0 + hour);
        q.requeued_at("ns/a", Duration::ZERO, t0 + hour);
        assert_eq!((q.depth_at(t0 + hour), adds(&q)), (1, 2));
        assert_eq!(retries(&q), 2);
        // A later requeue keeps the earlier one; an earlier one brings it forward.
        q.started_at("ns/a", t0 + hour);
        let t1 = t0 + 2 * hour;
        q.requeued_at("ns/a", Duration::from_secs(10), t1);
        q.requeued_at("ns/a", Duration::from_secs(60), t1);
        assert_eq!(q.depth_at(t1 + Duration::from_secs(9)), 0);
        assert_eq!(q.depth_at(t1 + Duration::from_secs(10)), 1);
        q.requeued_at("ns/b", Duration::from_secs(60), t1);
        q.requeued_at("ns/b", Duration::from_secs(5), t1);
        assert_eq!(q.depth_at(t1 + Duration::from_secs(5)), 2);
        assert_eq!((adds(&q), retries(&q)), (4, 6));
        // Its wait counts from when it came due, not from when it was requeued.
        let queue_duration = |q: &WorkQueue| {
            let h = q
                .shared
                .families
                .queue_duration
                .get_or_create(&q.shared.queue_labels());
            let mut text = String::new();
            let mut registry = Registry::default();
            registry.register("d", "", h.clone());
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("text");
            text.lines()
                .find_map(|l| l.strip_prefix("d_sum "))
                .map(|v| v.parse::<f64>().expect("a number"))
        };
        let before = queue_duration(&q).expect("a sum");
        drop(q.started_at("ns/b", t1 + Duration::from_secs(7)));
        assert_eq!(queue_duration(&q), Some(before + 2.0));
    }

    #[test]
    fn a_forgotten_key_and_a_stopped_controller_leave_nothing_queued() {
        let (q, live) = queue();
        let running = q.run();
        q.queued("ns/gone");
        q.forget("ns/gone");
        q.requeued("ns/later", Duration::from_secs(3600));
        q.forget("ns/later");
        assert_eq!(q.depth(), 0);
        assert!(q.shared.lock().delayed.is_empty());
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
        let t0 = Instant::now();
        let a = q.started_at("ns/a", t0);
        let _b = q.started_at("ns/b", t0 + Duration::from_millis(5));
        let g = &live.gauges_at(t0 + Duration::from_millis(20))[0];
        assert_eq!((g.workers, g.active), (3, 2));
        assert_eq!((g.longest, g.unfinished), (0.020, 0.020 + 0.015));
        let took = a.finish_at(ReconcileResult::Error, true, t0 + Duration::from_millis(30));
        assert_eq!(took, Duration::from_millis(30));
        let g = &live.gauges_at(t0 + Duration::from_millis(30))[0];
        assert_eq!((g.active, g.longest, g.unfinished), (1, 0.025, 0.025));
        let controller = q.shared.controller_label();
        let f = &q.shared.families;
        assert_eq!(f.errors.get_or_create(&controller).get(), 1);
        assert_eq!(f.panics.get_or_create(&controller).get(), 1);
        assert_eq!(f.terminal_errors.get_or_create(&controller).get(), 0);
        assert_eq!(reconciles(&q, ReconcileResult::Error), 1);
    }

    #[test]
    fn twenty_thousand_crs_each_waiting_for_a_resync_cost_no_walk_over_the_queue() {
        // Every CR has a requeue pending (a resync): an operation that looked at every
        // queued key made this quadratic (about 25 s in a debug build); it takes
        // milliseconds when only the keys that came due are touched.
        const CRS: usize = 20_000;
        let (q, live) = queue();
        let _running = q.run();
        let keys: Vec<String> = (0..CRS).map(|i| format!("ns/cr-{i}")).collect();
        let t0 = Instant::now();
        let resync = Duration::from_secs(600);
        let clock = Instant::now();
        for key in &keys {
            q.queued_at(key, t0);
        }
        for key in &keys {
            q.started_at(key, t0)
                .finish_at(ReconcileResult::RequeueAfter, false, t0);
            q.requeued_at(key, resync, t0);
            let _ = live.gauges_at(t0);
        }
        assert_eq!(q.depth_at(t0), 0);
        // A plugin reload queues every CR: each is added once, its resync brought forward.
        let reload = t0 + Duration::from_secs(1);
        for key in &keys {
            q.queued_at(key, reload);
        }
        assert_eq!((q.depth_at(reload), adds(&q)), (CRS, 2 * CRS as u64));
        for key in &keys {
            drop(q.started_at(key, reload));
        }
        // Nothing is left to come due: the resyncs were taken out with the reload.
        assert_eq!((q.depth_at(t0 + 2 * resync), adds(&q)), (0, 2 * CRS as u64));
        // Half requeued again: those come due together, each added once.
        for key in keys.iter().step_by(2) {
            q.requeued_at(key, resync, reload);
        }
        assert_eq!(q.depth_at(reload + resync), CRS / 2);
        let took = clock.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "{CRS} CRs took {took:?}: an operation costs more than O(log n)"
        );
    }
}
