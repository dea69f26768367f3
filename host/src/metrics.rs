//! Counters, gauges and histograms the runtime records into and the health port reads:
//! controller-runtime's metric names (so existing dashboards work) plus Inrun's own for
//! plugins and leadership, and a short log of recent reconciles for the console.
//!
//! No global registry: the binary makes one [`Metrics`] and hands it to what records (the
//! runtime's controllers, the fleet, leader election, the Wasm engine as its
//! [`inrun_wasm::Observer`]) and to the health port that reads it.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Histogram buckets, in seconds (controller-runtime's, extended to a minute).
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// How many recent reconciles (and, separately, failures) the console sees.
const RECENT: usize = 50;

/// Help text and type of every metric, in the order they are written.
const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "inrun_plugin_reloads_total",
        "counter",
        "Plugin versions checked after a source change, by result (success: swapped in; failure: the previous version keeps serving).",
    ),
    (
        "inrun_blueprint_reloads_total",
        "counter",
        "Blueprint changes applied without a restart, by tenant and result.",
    ),
    (
        "controller_runtime_reconcile_total",
        "counter",
        "Total number of reconciliations per controller.",
    ),
    (
        "controller_runtime_reconcile_errors_total",
        "counter",
        "Total number of reconciliation errors per controller.",
    ),
    (
        "controller_runtime_reconcile_time_seconds",
        "histogram",
        "Length of time per reconciliation per controller.",
    ),
    (
        "controller_runtime_active_workers",
        "gauge",
        "Number of currently used workers per controller.",
    ),
    (
        "workqueue_depth",
        "gauge",
        "Reconciles of the controller in progress (kube-runtime keeps its queue internal).",
    ),
    (
        "workqueue_adds_total",
        "counter",
        "Total number of reconciles started per controller.",
    ),
    (
        "workqueue_queue_duration_seconds",
        "histogram",
        "How long a CR waited between the change that queued it and the start of its reconcile.",
    ),
    (
        "workqueue_retries_total",
        "counter",
        "Total number of retries (requeues after a failure) per controller.",
    ),
    (
        "inrun_plugin_calls_total",
        "counter",
        "Reconciles that called a Wasm plugin, by plugin and outcome (ok, returned, trap, deadline, memory, bad_output, host, error).",
    ),
    (
        "inrun_plugin_deadline_hits_total",
        "counter",
        "Plugin calls interrupted at their deadline.",
    ),
    (
        "inrun_plugin_memory_cap_hits_total",
        "counter",
        "Plugin calls stopped at their memory cap.",
    ),
    (
        "inrun_plugin_traps_total",
        "counter",
        "Plugin calls that trapped (a guest panic, for one).",
    ),
    (
        "inrun_plugin_call_duration_seconds",
        "histogram",
        "Duration of reconciles that called a Wasm plugin.",
    ),
    (
        "inrun_plugin_loads_total",
        "counter",
        "Plugin components loaded, by source: memory (already loaded), cache (compiled code from disk), compiled.",
    ),
    (
        "inrun_plugin_host_calls_total",
        "counter",
        "Calls plugins made to granted host capabilities, by capability (cluster, http) and result (ok, refused, error).",
    ),
    (
        "inrun_caches_synced",
        "gauge",
        "Controllers whose watch cache of CRs has synced.",
    ),
    (
        "inrun_controllers_running",
        "gauge",
        "Controllers (one per CRD) currently running in this process.",
    ),
    (
        "inrun_leader",
        "gauge",
        "1 while this replica holds the leader-election lease (or runs without election).",
    ),
];

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
    pub controllers_running: f64,
    /// Controllers whose watch cache has synced.
    pub caches_synced: f64,
    /// Per controller: reconciles in progress.
    pub queue_depth: BTreeMap<String, f64>,
    /// Per controller: reconciles by result.
    pub reconciles: BTreeMap<String, BTreeMap<String, f64>>,
    /// The most recent reconciles, newest first.
    pub recent: Vec<ReconcileRecord>,
    /// The most recent failures, newest first.
    pub errors: Vec<ReconcileRecord>,
    /// The most recent failures of reconciles that called a plugin, newest first.
    pub plugin_failures: Vec<ReconcileRecord>,
}

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// Series key: metric name and rendered labels (`a="x",b="y"`).
type Key = (&'static str, String);

#[derive(Default)]
struct Inner {
    values: BTreeMap<Key, f64>,
    histograms: BTreeMap<Key, Histogram>,
    recent: VecDeque<ReconcileRecord>,
    errors: VecDeque<ReconcileRecord>,
    plugin_failures: VecDeque<ReconcileRecord>,
}

/// The registry.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// A reconcile in progress, from [`Metrics::reconcile_started`].
#[derive(Debug)]
pub struct Started {
    controller: String,
    at: Instant,
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(out, "{k}=\"{v}\"");
    }
    out
}

fn push(list: &mut VecDeque<ReconcileRecord>, record: ReconcileRecord) {
    list.push_front(record);
    list.truncate(RECENT);
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
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
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves counters that are still worth reading.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(inner: &mut Inner, name: &'static str, labels: String, by: f64) {
        *inner.values.entry((name, labels)).or_default() += by;
    }

    /// Records that a reconcile of `controller` began.
    pub fn reconcile_started(&self, controller: &str) -> Started {
        let mut inner = self.lock();
        let l = labels(&[("controller", controller)]);
        Self::add(
            &mut inner,
            "workqueue_adds_total",
            labels(&[("name", controller)]),
            1.0,
        );
        Self::add(
            &mut inner,
            "workqueue_depth",
            labels(&[("name", controller)]),
            1.0,
        );
        Self::add(&mut inner, "controller_runtime_active_workers", l, 1.0);
        Started {
            controller: controller.to_string(),
            at: Instant::now(),
        }
    }

    /// Records how a reconcile ended: `error` is the failure's message, `plugins` the
    /// plugins its reconciler calls.
    pub fn reconcile_finished(
        &self,
        started: Started,
        key: &str,
        plugins: &[String],
        failure: Option<&(dyn std::error::Error + 'static)>,
    ) {
        let error = failure.map(inrun_contract::errors::chain);
        let plugin_outcome = failure.map_or("ok", plugin_outcome);
        let elapsed = started.at.elapsed();
        let c = started.controller.as_str();
        let result = if error.is_some() { "error" } else { "success" };
        let mut inner = self.lock();
        Self::add(&mut inner, "workqueue_depth", labels(&[("name", c)]), -1.0);
        Self::add(
            &mut inner,
            "controller_runtime_active_workers",
            labels(&[("controller", c)]),
            -1.0,
        );
        Self::add(
            &mut inner,
            "controller_runtime_reconcile_total",
            labels(&[("controller", c), ("result", result)]),
            1.0,
        );
        inner
            .histograms
            .entry((
                "controller_runtime_reconcile_time_seconds",
                labels(&[("controller", c)]),
            ))
            .or_default()
            .observe(elapsed.as_secs_f64());
        if error.is_some() {
            Self::add(
                &mut inner,
                "controller_runtime_reconcile_errors_total",
                labels(&[("controller", c)]),
                1.0,
            );
            // Every failure is requeued with backoff by the error policy.
            Self::add(
                &mut inner,
                "workqueue_retries_total",
                labels(&[("name", c)]),
                1.0,
            );
        }
        for p in plugins {
            Self::add(
                &mut inner,
                "inrun_plugin_calls_total",
                labels(&[("plugin", p), ("outcome", plugin_outcome)]),
                1.0,
            );
            let hit = match plugin_outcome {
                "deadline" => Some("inrun_plugin_deadline_hits_total"),
                "memory" => Some("inrun_plugin_memory_cap_hits_total"),
                "trap" => Some("inrun_plugin_traps_total"),
                _ => None,
            };
            if let Some(name) = hit {
                Self::add(&mut inner, name, labels(&[("plugin", p)]), 1.0);
            }
            inner
                .histograms
                .entry((
                    "inrun_plugin_call_duration_seconds",
                    labels(&[("plugin", p)]),
                ))
                .or_default()
                .observe(elapsed.as_secs_f64());
        }
        let record = ReconcileRecord {
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_millis(),
            controller: c.to_string(),
            key: key.to_string(),
            result,
            error,
            duration_ms: elapsed.as_secs_f64() * 1000.0,
            plugins: plugins.to_vec(),
        };
        if record.error.is_some() {
            if !plugins.is_empty() {
                push(&mut inner.plugin_failures, record.clone());
            }
            push(&mut inner.errors, record.clone());
        }
        push(&mut inner.recent, record);
    }

    /// Records how long a CR of `controller` waited in the queue before its reconcile began.
    pub fn queue_wait(&self, controller: &str, waited: Duration) {
        self.lock()
            .histograms
            .entry((
                "workqueue_queue_duration_seconds",
                labels(&[("name", controller)]),
            ))
            .or_default()
            .observe(waited.as_secs_f64());
    }

    /// Records a plugin load from `source`: `memory`, `cache` or `compiled`.
    pub fn plugin_loaded(&self, source: &str) {
        let mut inner = self.lock();
        Self::add(
            &mut inner,
            "inrun_plugin_loads_total",
            labels(&[("source", source)]),
            1.0,
        );
    }

    /// Records a plugin's call to a host capability (`cluster`, `http`) and its result
    /// (`ok`, `refused`: not granted, `error`).
    pub fn plugin_host_call(&self, capability: &str, result: &str) {
        let mut inner = self.lock();
        Self::add(
            &mut inner,
            "inrun_plugin_host_calls_total",
            labels(&[("capability", capability), ("result", result)]),
            1.0,
        );
    }

    /// Records a plugin reload: swapped in, or refused with the old version still serving.
    pub fn plugin_reloaded(&self, ok: bool) {
        let mut inner = self.lock();
        let result = if ok { "success" } else { "failure" };
        Self::add(
            &mut inner,
            "inrun_plugin_reloads_total",
            labels(&[("result", result)]),
            1.0,
        );
    }

    /// Records a Blueprint reload of `tenant`: applied, or refused with the old one serving.
    pub fn blueprint_reloaded(&self, tenant: &str, ok: bool) {
        let mut inner = self.lock();
        let result = if ok { "success" } else { "failure" };
        Self::add(
            &mut inner,
            "inrun_blueprint_reloads_total",
            labels(&[("tenant", tenant), ("result", result)]),
            1.0,
        );
    }

    /// Records that one more controller's watch cache has synced (`-1` when it stops).
    pub fn cache_synced(&self, n: i64) {
        let mut inner = self.lock();
        #[allow(clippy::cast_precision_loss)]
        Self::add(&mut inner, "inrun_caches_synced", String::new(), n as f64);
    }

    /// Records that `n` controllers started (negative when they stop).
    pub fn controllers_running(&self, n: i64) {
        let mut inner = self.lock();
        #[allow(clippy::cast_precision_loss)]
        Self::add(
            &mut inner,
            "inrun_controllers_running",
            String::new(),
            n as f64,
        );
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        let mut inner = self.lock();
        inner.values.insert(
            ("inrun_leader", String::new()),
            if leader { 1.0 } else { 0.0 },
        );
    }

    /// The current value of a counter or gauge series (`labels` rendered as in the text
    /// format, e.g. `controller="x",result="success"`); 0 when never recorded.
    pub fn value(&self, name: &str, labels: &str) -> f64 {
        let inner = self.lock();
        inner
            .values
            .iter()
            .find(|((n, l), _)| *n == name && l == labels)
            .map_or(0.0, |(_, v)| *v)
    }

    /// Everything in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::new();
        for (name, kind, help) in FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for ((n, l), v) in &inner.values {
                if n == name {
                    if l.is_empty() {
                        let _ = writeln!(out, "{n} {v}");
                    } else {
                        let _ = writeln!(out, "{n}{{{l}}} {v}");
                    }
                }
            }
            for ((n, l), h) in &inner.histograms {
                if n != name {
                    continue;
                }
                let sep = if l.is_empty() { "" } else { "," };
                for (b, c) in BUCKETS.iter().zip(&h.counts) {
                    let _ = writeln!(out, "{n}_bucket{{{l}{sep}le=\"{b}\"}} {c}");
                }
                let _ = writeln!(out, "{n}_bucket{{{l}{sep}le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "{n}_sum{{{l}}} {}", h.sum);
                let _ = writeln!(out, "{n}_count{{{l}}} {}", h.count);
            }
        }
        out
    }

    /// Live state for the console.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.lock();
        let strip = |l: &str, key: &str| {
            l.strip_prefix(&format!("{key}=\""))
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        let mut queue_depth = BTreeMap::new();
        let mut reconciles: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
        for ((n, l), v) in &inner.values {
            match *n {
                "workqueue_depth" => {
                    queue_depth.insert(strip(l, "name"), *v);
                }
                "controller_runtime_reconcile_total" => {
                    let result = l.rsplit("result=\"").next().unwrap_or_default();
                    reconciles
                        .entry(strip(l, "controller"))
                        .or_default()
                        .insert(result.trim_end_matches('"').to_string(), *v);
                }
                _ => {}
            }
        }
        let get = |name: &str| {
            inner
                .values
                .get(&(name_static(name), String::new()))
                .copied()
                .unwrap_or_default()
        };
        Snapshot {
            leader: get("inrun_leader") > 0.0,
            controllers_running: get("inrun_controllers_running"),
            caches_synced: get("inrun_caches_synced"),
            queue_depth,
            reconciles,
            recent: inner.recent.iter().cloned().collect(),
            errors: inner.errors.iter().cloned().collect(),
            plugin_failures: inner.plugin_failures.iter().cloned().collect(),
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

/// The `'static` name of a known metric (keys hold `'static` names).
fn name_static(name: &str) -> &'static str {
    FAMILIES
        .iter()
        .map(|(n, _, _)| *n)
        .find(|n| *n == name)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_reconcile_counts_once_and_leaves_the_queue_empty() {
        let m = Metrics::default();
        let s = m.reconcile_started("webapps.example.dev");
        assert_eq!(
            m.value("workqueue_depth", "name=\"webapps.example.dev\""),
            1.0
        );
        let boom = std::io::Error::other("boom");
        m.reconcile_finished(s, "ns/a", &["p".into()], Some(&boom));
        assert_eq!(
            m.value("workqueue_depth", "name=\"webapps.example.dev\""),
            0.0
        );
        let text = m.render();
        assert!(text.contains(
            "controller_runtime_reconcile_total{controller=\"webapps.example.dev\",result=\"error\"} 1"
        ));
        assert!(text.contains("inrun_plugin_calls_total{plugin=\"p\",outcome=\"error\"} 1"));
        assert!(text.contains(
            "controller_runtime_reconcile_time_seconds_count{controller=\"webapps.example.dev\"} 1"
        ));
        let snap = m.snapshot();
        assert_eq!(snap.errors.len(), 1);
        assert_eq!(snap.reconciles["webapps.example.dev"]["error"], 1.0);
    }
}
