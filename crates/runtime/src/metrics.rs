//! Counters, gauges and histograms the runtime records into and the health port reads:
//! controller-runtime's metric names (so existing dashboards work) plus Inrun's own for
//! plugins and leadership, typed families exported as OpenMetrics text, and a short log of
//! recent reconciles for the console.
//!
//! No global registry: the binary makes one [`Metrics`] and hands it to what records (the
//! runtime's controllers, the fleet, leader election, the Wasm engine as its
//! [`inrun_wasm::Observer`]) and to the health port that reads it. The controller and
//! leadership gauges are the runtime's [`Health`], which `/readyz` reads too.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Serialize;

use crate::health::Health;

/// Histogram buckets, in seconds (controller-runtime's, extended to a minute).
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// How many recent reconciles (and, separately, failures) the console sees.
const RECENT: usize = 50;
/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How a reconcile ended, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct ReconcileRecord {
    /// Unix time in milliseconds when it finished.
    pub at_ms: u128,
    /// The controller (`plural.group`).
    pub controller: String,
    /// `namespace/name` of the CR.
    pub key: String,
    /// `success` or `error`.
    pub result: &'static str,
    /// The error chain, for failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
    /// Plugins the reconcile called.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<String>,
}

/// What the console shows beside the Blueprint.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Whether this replica leads.
    pub leader: bool,
    /// Controllers running.
    pub controllers_running: i64,
    /// Controllers whose watch cache has synced.
    pub caches_synced: i64,
    /// Per controller: reconciles in progress.
    pub queue_depth: BTreeMap<String, i64>,
    /// Per controller: reconciles by result.
    pub reconciles: BTreeMap<String, BTreeMap<String, u64>>,
    /// The most recent reconciles, newest first.
    pub recent: Vec<ReconcileRecord>,
    /// The most recent failures, newest first.
    pub errors: Vec<ReconcileRecord>,
    /// The most recent failures of reconciles that called a plugin, newest first.
    pub plugin_failures: Vec<ReconcileRecord>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: &'static str,
}

/// client-go's workqueue metrics name the queue `name`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginOutcome {
    plugin: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostCall {
    capability: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantOutcome {
    tenant: String,
    result: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn histograms<L: Clone + std::hash::Hash + Eq>() -> Histograms<L> {
    Family::new_with_constructor(|| Histogram::new(BUCKETS.iter().copied()))
}

/// The console's log, and the controllers it has seen.
#[derive(Default)]
struct Console {
    controllers: BTreeSet<String>,
    recent: VecDeque<ReconcileRecord>,
    errors: VecDeque<ReconcileRecord>,
    plugin_failures: VecDeque<ReconcileRecord>,
}

/// The registry and its families.
pub struct Metrics {
    registry: Registry,
    health: Arc<Health>,
    reconciles: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_time: Histograms<ControllerLabel>,
    active_workers: Family<ControllerLabel, Gauge>,
    queue_depth: Family<QueueLabel, Gauge>,
    queue_adds: Family<QueueLabel, Counter>,
    queue_wait: Histograms<QueueLabel>,
    queue_retries: Family<QueueLabel, Counter>,
    plugin_calls: Family<PluginOutcome, Counter>,
    deadline_hits: Family<PluginLabel, Counter>,
    memory_hits: Family<PluginLabel, Counter>,
    traps: Family<PluginLabel, Counter>,
    plugin_time: Histograms<PluginLabel>,
    plugin_loads: Family<SourceLabel, Counter>,
    host_calls: Family<HostCall, Counter>,
    plugin_reloads: Family<Outcome, Counter>,
    blueprint_reloads: Family<TenantOutcome, Counter>,
    console: Mutex<Console>,
}

/// A reconcile in progress, from [`Metrics::reconcile_started`].
#[derive(Debug)]
pub struct Started {
    controller: String,
    at: Instant,
}

fn push(list: &mut VecDeque<ReconcileRecord>, record: ReconcileRecord) {
    list.push_front(record);
    list.truncate(RECENT);
}

fn result(ok: bool) -> &'static str {
    if ok { "success" } else { "failure" }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

impl inrun_wasm::Observer for Metrics {
    fn plugin_loaded(&self, source: &'static str) {
        Metrics::plugin_loaded(self, source);
    }

    fn host_call(&self, capability: &'static str, outcome: &'static str) {
        self.plugin_host_call(capability, outcome);
    }

    fn plugin_reloaded(&self, ok: bool) {
        Metrics::plugin_reloaded(self, ok);
    }
}

impl Metrics {
    /// A registry exporting `health`'s gauges beside its own families.
    pub fn new(health: Arc<Health>) -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            health,
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: histograms(),
            active_workers: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_wait: histograms(),
            queue_retries: Family::default(),
            plugin_calls: Family::default(),
            deadline_hits: Family::default(),
            memory_hits: Family::default(),
            traps: Family::default(),
            plugin_time: histograms(),
            plugin_loads: Family::default(),
            host_calls: Family::default(),
            plugin_reloads: Family::default(),
            blueprint_reloads: Family::default(),
            console: Mutex::default(),
        };
        m.registered()
    }

    fn registered(mut self) -> Metrics {
        let r = &mut self.registry;
        // Counters are named without `_total`: the encoder appends it.
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconciles.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            self.active_workers.clone(),
        );
        r.register(
            "workqueue_depth",
            "Reconciles of the controller in progress (kube-runtime keeps its queue internal)",
            self.queue_depth.clone(),
        );
        r.register(
            "workqueue_adds",
            "Total number of reconciles started per controller",
            self.queue_adds.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long a CR waited between the change that queued it and the start of its reconcile",
            self.queue_wait.clone(),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries (requeues after a failure) per controller",
            self.queue_retries.clone(),
        );
        r.register(
            "inrun_plugin_calls",
            "Reconciles that called a Wasm plugin, by plugin and outcome (ok, returned, trap, deadline, memory, bad_output, host, error)",
            self.plugin_calls.clone(),
        );
        r.register(
            "inrun_plugin_deadline_hits",
            "Plugin calls interrupted at their deadline",
            self.deadline_hits.clone(),
        );
        r.register(
            "inrun_plugin_memory_cap_hits",
            "Plugin calls stopped at their memory cap",
            self.memory_hits.clone(),
        );
        r.register(
            "inrun_plugin_traps",
            "Plugin calls that trapped (a guest panic, for one)",
            self.traps.clone(),
        );
        r.register(
            "inrun_plugin_call_duration_seconds",
            "Duration of reconciles that called a Wasm plugin",
            self.plugin_time.clone(),
        );
        r.register(
            "inrun_plugin_loads",
            "Plugin components loaded, by source: memory (already loaded), cache (compiled code from disk), compiled",
            self.plugin_loads.clone(),
        );
        r.register(
            "inrun_plugin_host_calls",
            "Calls plugins made to granted host capabilities, by capability (cluster, http) and result (ok, refused, error)",
            self.host_calls.clone(),
        );
        r.register(
            "inrun_plugin_reloads",
            "Plugin versions checked after a source change, by result (success: swapped in; failure: the previous version keeps serving)",
            self.plugin_reloads.clone(),
        );
        r.register(
            "inrun_blueprint_reloads",
            "Blueprint changes applied without a restart, by tenant and result",
            self.blueprint_reloads.clone(),
        );
        r.register(
            "inrun_caches_synced",
            "Controllers whose watch cache of CRs has synced",
            self.health.synced.clone(),
        );
        r.register(
            "inrun_controllers_running",
            "Controllers (one per CRD) currently running in this process",
            self.health.controllers.clone(),
        );
        r.register(
            "inrun_leader",
            "1 while this replica holds the leader-election lease (or runs without election)",
            self.health.leader.clone(),
        );
        self
    }

    /// The runtime's health, whose gauges this registry exports.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    fn console(&self) -> MutexGuard<'_, Console> {
        // A panic while holding the lock leaves a log that is still worth reading.
        self.console.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the controller `controller` runs, so the console lists it before its
    /// first reconcile ends.
    pub fn controller_started(&self, controller: &str) {
        self.console().controllers.insert(controller.to_string());
    }

    /// Records that a reconcile of `controller` began.
    pub fn reconcile_started(&self, controller: &str) -> Started {
        let queue = QueueLabel {
            name: controller.to_string(),
        };
        self.queue_adds.get_or_create(&queue).inc();
        self.queue_depth.get_or_create(&queue).inc();
        self.active_workers
            .get_or_create(&ControllerLabel {
                controller: controller.to_string(),
            })
            .inc();
        Started {
            controller: controller.to_string(),
            at: Instant::now(),
        }
    }

    /// Records how a reconcile ended: `failure` is why it failed, `plugins` the plugins its
    /// reconciler calls.
    pub fn reconcile_finished(
        &self,
        started: Started,
        key: &str,
        plugins: &[String],
        failure: Option<&(dyn std::error::Error + 'static)>,
    ) {
        let error = failure.map(inrun_contract::errors::chain);
        let plugin_outcome = failure.map_or("ok", plugin_outcome);
        let elapsed = started.at.elapsed().as_secs_f64();
        let result = if error.is_some() { "error" } else { "success" };
        let controller = ControllerLabel {
            controller: started.controller,
        };
        let queue = QueueLabel {
            name: controller.controller.clone(),
        };
        self.queue_depth.get_or_create(&queue).dec();
        self.active_workers.get_or_create(&controller).dec();
        self.reconciles
            .get_or_create(&ResultLabels {
                controller: controller.controller.clone(),
                result,
            })
            .inc();
        self.reconcile_time
            .get_or_create(&controller)
            .observe(elapsed);
        if error.is_some() {
            self.reconcile_errors.get_or_create(&controller).inc();
            // Every failure is requeued with backoff by the error policy.
            self.queue_retries.get_or_create(&queue).inc();
        }
        for p in plugins {
            self.plugin_calls
                .get_or_create(&PluginOutcome {
                    plugin: p.clone(),
                    outcome: plugin_outcome,
                })
                .inc();
            let plugin = PluginLabel { plugin: p.clone() };
            let hit = match plugin_outcome {
                "deadline" => Some(&self.deadline_hits),
                "memory" => Some(&self.memory_hits),
                "trap" => Some(&self.traps),
                _ => None,
            };
            if let Some(family) = hit {
                family.get_or_create(&plugin).inc();
            }
            self.plugin_time.get_or_create(&plugin).observe(elapsed);
        }
        let record = ReconcileRecord {
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_millis(),
            controller: controller.controller,
            key: key.to_string(),
            result,
            error,
            duration_ms: elapsed * 1000.0,
            plugins: plugins.to_vec(),
        };
        let mut console = self.console();
        if record.error.is_some() {
            if !plugins.is_empty() {
                push(&mut console.plugin_failures, record.clone());
            }
            push(&mut console.errors, record.clone());
        }
        push(&mut console.recent, record);
    }

    /// Records how long a CR of `controller` waited in the queue before its reconcile began.
    pub fn queue_wait(&self, controller: &str, waited: Duration) {
        self.queue_wait
            .get_or_create(&QueueLabel {
                name: controller.to_string(),
            })
            .observe(waited.as_secs_f64());
    }

    /// Records a plugin load from `source`: `memory`, `cache` or `compiled`.
    pub fn plugin_loaded(&self, source: &'static str) {
        self.plugin_loads
            .get_or_create(&SourceLabel { source })
            .inc();
    }

    /// Records a plugin's call to a host capability (`cluster`, `http`) and its result
    /// (`ok`, `refused`: not granted, `error`).
    pub fn plugin_host_call(&self, capability: &'static str, result: &'static str) {
        self.host_calls
            .get_or_create(&HostCall { capability, result })
            .inc();
    }

    /// Records a plugin reload: swapped in, or refused with the old version still serving.
    pub fn plugin_reloaded(&self, ok: bool) {
        self.plugin_reloads
            .get_or_create(&Outcome { result: result(ok) })
            .inc();
    }

    /// Records a Blueprint reload of `tenant`: applied, or refused with the old one serving.
    pub fn blueprint_reloaded(&self, tenant: &str, ok: bool) {
        self.blueprint_reloads
            .get_or_create(&TenantOutcome {
                tenant: tenant.to_string(),
                result: result(ok),
            })
            .inc();
    }

    /// Reconciles of `controller` that ended in `result` (`success` or `error`).
    pub fn reconciles(&self, controller: &str, result: &'static str) -> u64 {
        self.reconciles
            .get(&ResultLabels {
                controller: controller.to_string(),
                result,
            })
            .map_or(0, |c| c.get())
    }

    /// Plugin loads from `source` (`memory`, `cache`, `compiled`).
    pub fn plugin_loads(&self, source: &'static str) -> u64 {
        self.plugin_loads
            .get(&SourceLabel { source })
            .map_or(0, |c| c.get())
    }

    /// Plugin reloads that were swapped in (`true`) or refused.
    pub fn plugin_reloads(&self, ok: bool) -> u64 {
        self.plugin_reloads
            .get(&Outcome { result: result(ok) })
            .map_or(0, |c| c.get())
    }

    /// Reconciles of `controller` in progress.
    pub fn queue_depth(&self, controller: &str) -> i64 {
        self.queue_depth
            .get(&QueueLabel {
                name: controller.to_string(),
            })
            .map_or(0, |g| g.get())
    }

    /// Everything in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Live state for the console.
    pub fn snapshot(&self) -> Snapshot {
        let console = self.console();
        let mut queue_depth = BTreeMap::new();
        let mut reconciles = BTreeMap::new();
        for c in &console.controllers {
            queue_depth.insert(c.clone(), self.queue_depth(c));
            let by_result: BTreeMap<String, u64> = ["success", "error"]
                .into_iter()
                .map(|r| (r.to_string(), self.reconciles(c, r)))
                .collect();
            reconciles.insert(c.clone(), by_result);
        }
        Snapshot {
            leader: self.health.leader(),
            controllers_running: self.health.controllers(),
            caches_synced: self.health.caches_synced(),
            queue_depth,
            reconciles,
            recent: console.recent.iter().cloned().collect(),
            errors: console.errors.iter().cloned().collect(),
            plugin_failures: console.plugin_failures.iter().cloned().collect(),
        }
    }
}

/// How a failed reconcile went for its plugin: `deadline`, `memory`, `trap`, `returned`
/// (the plugin's own error), `bad_output`, `host`, or `error` when the failure was not the
/// plugin's (e.g. an API write after a successful call).
fn plugin_outcome(err: &(dyn std::error::Error + 'static)) -> &'static str {
    use inrun_wasm::{CallError, CallFailure};
    let mut next = Some(err);
    while let Some(e) = next {
        let failure = e
            .downcast_ref::<CallError>()
            .map(|c| &c.failure)
            .or_else(|| e.downcast_ref::<CallFailure>());
        if let Some(f) = failure {
            return match f {
                CallFailure::Deadline(_) => "deadline",
                CallFailure::Memory(_) => "memory",
                CallFailure::Trap { .. } => "trap",
                CallFailure::Returned(_) => "returned",
                CallFailure::BadOutput(_) => "bad_output",
                CallFailure::Host(_) => "host",
            };
        }
        next = e.source();
    }
    "error"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_reconcile_counts_once_and_leaves_the_queue_empty() {
        let m = Metrics::default();
        m.controller_started("webapps.example.dev");
        assert_eq!(m.snapshot().queue_depth["webapps.example.dev"], 0);
        let s = m.reconcile_started("webapps.example.dev");
        assert_eq!(m.queue_depth("webapps.example.dev"), 1);
        let boom = std::io::Error::other("boom");
        m.reconcile_finished(s, "ns/a", &["p".into()], Some(&boom));
        assert_eq!(m.queue_depth("webapps.example.dev"), 0);
        assert_eq!(m.reconciles("webapps.example.dev", "error"), 1);
        let text = m.render();
        assert!(text.contains(
            "controller_runtime_reconcile_total{controller=\"webapps.example.dev\",result=\"error\"} 1"
        ));
        assert!(text.contains("inrun_plugin_calls_total{plugin=\"p\",outcome=\"error\"} 1"));
        assert!(text.contains(
            "controller_runtime_reconcile_time_seconds_count{controller=\"webapps.example.dev\"} 1"
        ));
        assert!(text.contains("# TYPE controller_runtime_reconcile_time_seconds histogram"));
        assert!(text.ends_with("# EOF\n"), "{text}");
        let snap = m.snapshot();
        assert_eq!(snap.errors.len(), 1);
        assert_eq!(snap.reconciles["webapps.example.dev"]["error"], 1);
        assert_eq!(snap.queue_depth["webapps.example.dev"], 0);
    }

    #[test]
    fn the_health_gauges_are_the_runtimes_own() {
        let health = Arc::new(Health::default());
        let m = Metrics::new(health.clone());
        health.controller_running(true);
        health.set_leader(true);
        let text = m.render();
        assert!(text.contains("inrun_controllers_running 1\n"), "{text}");
        assert!(text.contains("inrun_caches_synced 0\n"), "{text}");
        assert!(text.contains("inrun_leader 1\n"), "{text}");
        assert!(m.snapshot().leader);
    }

    #[test]
    fn label_values_are_escaped_in_the_text() {
        let m = Metrics::default();
        m.blueprint_reloaded("evil\"} x{y=\"1\n", false);
        let text = m.render();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("inrun_blueprint_reloads_total"))
            .collect();
        // One line: the quote and the newline escaped, so no label or sample is forged.
        assert_eq!(
            series,
            [r#"inrun_blueprint_reloads_total{tenant="evil\"} x{y=\"1\n",result="failure"} 1"#],
            "{text}"
        );
    }
}
