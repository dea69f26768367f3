//! The console's state: what the host shows people beyond its metrics — the recent
//! reconciles and failures (each with its [`timeline`]), the events passes recorded, calls
//! into each plugin, the ring as this replica sees it, and each running controller's CRs
//! ([`crs`]). [`crate::metrics::Metrics`] records into it as it counts, and
//! [`crate::metrics::Metrics::snapshot`] reads it for the console's page.

pub mod crs;
pub mod timeline;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crs::CrView;

/// How many recent reconciles (and, separately, failures) the console sees.
const RECENT: usize = 50;
/// Events the console keeps.
pub const RECENT_EVENTS: usize = 200;

/// What lists a running controller's CRs as the console shows them (a controller
/// hands one over when it starts: it reads the cache the controller keeps anyway).
pub type CrSource = Arc<dyn Fn() -> Vec<CrView> + Send + Sync>;

/// How a reconcile ended, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct ReconcileRecord {
    /// Unix time in milliseconds when it finished.
    pub at_ms: u128,
    /// The controller (`plural.group`).
    pub controller: String,
    /// `namespace/name` of the CR.
    pub key: String,
    /// `success`, `error`, `requeue` or `requeue_after` (see [`crate::metrics::ReconcileResult`]).
    pub result: &'static str,
    /// The error chain, for failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
    /// The plugins that serve the CR.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<String>,
    /// How long the CR waited in the queue first, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_wait_ms: Option<f64>,
    /// What the reconcile did, step by step ([`timeline`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<timeline::Step>,
}

/// An event a pass recorded on a CR, for the console.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EventRecord {
    /// Unix time in milliseconds.
    pub at_ms: u128,
    /// The controller (`plural.group`).
    pub controller: String,
    /// `namespace/name` of the CR.
    pub key: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its reason.
    pub reason: String,
    /// Its note.
    pub note: String,
}

/// Calls into one plugin of one tenant so far, for the console (which charts their mean
/// time between two readings).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PluginCalls {
    /// The tenant (empty: the host's own Blueprint).
    pub tenant: String,
    /// The plugin.
    pub plugin: String,
    /// Calls made.
    pub calls: u64,
    /// Calls that did not return an answer the host took (trap, deadline, memory, error).
    pub failures: u64,
    /// Their time together, in seconds.
    pub seconds: f64,
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
    /// Per controller: CRs queued and not yet started (`workqueue_depth`).
    pub queue_depth: BTreeMap<String, i64>,
    /// Per controller: reconciles by result.
    pub reconciles: BTreeMap<String, BTreeMap<String, u64>>,
    /// The most recent reconciles, newest first.
    pub recent: Vec<ReconcileRecord>,
    /// The most recent failures, newest first.
    pub errors: Vec<ReconcileRecord>,
    /// The most recent failures of reconciles of CRs a plugin serves, newest first.
    pub plugin_failures: Vec<ReconcileRecord>,
    /// Under sharding: the ring as this replica last saw it.
    pub shard: Option<ShardView>,
    /// Calls into each plugin so far.
    pub plugins: Vec<PluginCalls>,
    /// The events the passes recorded on CRs, newest first ([`RECENT_EVENTS`] at most).
    pub events: Vec<EventRecord>,
    /// The plugins loading now (`tenant T: plugin P`), the host's own and tenants'.
    pub loading: Vec<String>,
}

/// A sharding round as one replica saw it, for the console and the gauges.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ShardView {
    /// The ring's name.
    pub ring: String,
    /// This replica's member name (its identity and incarnation).
    pub member: String,
    /// The buckets it holds.
    pub held: Vec<usize>,
    /// The members it sees live.
    pub members: Vec<String>,
    /// Buckets no live member holds.
    pub unowned: usize,
}

/// The console's log, and the controllers it has seen.
#[derive(Default)]
pub(crate) struct Console {
    pub(crate) controllers: BTreeSet<String>,
    /// Each running controller's CRs, by CRD, with the number given to the source.
    crs: BTreeMap<String, (u64, CrSource)>,
    /// The last number given to a source in `crs`.
    sources: u64,
    /// Calls into each plugin so far, by tenant, then plugin.
    pub(crate) plugin_calls: BTreeMap<String, BTreeMap<String, PluginCalls>>,
    /// The events the passes recorded on CRs, newest first.
    pub(crate) events: VecDeque<EventRecord>,
    pub(crate) recent: VecDeque<ReconcileRecord>,
    pub(crate) errors: VecDeque<ReconcileRecord>,
    pub(crate) plugin_failures: VecDeque<ReconcileRecord>,
}

impl Console {
    /// Lists the CRs of `controller` from `crs` from now on; returns the number
    /// [`Console::cr_source_gone`] takes.
    pub(crate) fn cr_source(&mut self, controller: &str, crs: CrSource) -> u64 {
        self.sources += 1;
        self.crs.insert(controller.to_string(), (self.sources, crs));
        self.sources
    }

    /// The source numbered `number` stopped: its CRs go, unless a controller started
    /// since (a reload, a takeover) put its own in place.
    pub(crate) fn cr_source_gone(&mut self, controller: &str, number: u64) {
        if self.crs.get(controller).is_some_and(|(n, _)| *n == number) {
            self.crs.remove(controller);
        }
    }

    /// The sources of every running controller's CRs (called outside the lock: a
    /// listing reads a cache).
    pub(crate) fn cr_sources(&self) -> Vec<CrSource> {
        self.crs.values().map(|(_, crs)| crs.clone()).collect()
    }

    /// Counts a call into `plugin` of `tenant`; allocates only on the plugin's first call
    /// (this runs on every Wasm call).
    pub(crate) fn count_call(
        &mut self,
        tenant: &str,
        plugin: &str,
        failed: bool,
        elapsed: Duration,
    ) {
        let by_plugin = match self.plugin_calls.get_mut(tenant) {
            Some(by_plugin) => by_plugin,
            None => self.plugin_calls.entry(tenant.to_string()).or_default(),
        };
        let calls = match by_plugin.get_mut(plugin) {
            Some(calls) => calls,
            None => by_plugin
                .entry(plugin.to_string())
                .or_insert_with(|| PluginCalls {
                    tenant: tenant.to_string(),
                    plugin: plugin.to_string(),
                    ..PluginCalls::default()
                }),
        };
        calls.calls += 1;
        calls.failures += u64::from(failed);
        calls.seconds += elapsed.as_secs_f64();
    }

    /// An event a pass recorded (or tried to) on a CR.
    pub(crate) fn event(&mut self, event: EventRecord) {
        self.events.push_front(event);
        self.events.truncate(RECENT_EVENTS);
    }

    /// A reconcile that ended: in the recent list, and in the failures when it failed.
    pub(crate) fn finished(&mut self, record: ReconcileRecord) {
        if record.error.is_some() {
            if !record.plugins.is_empty() {
                push(&mut self.plugin_failures, record.clone());
            }
            push(&mut self.errors, record.clone());
        }
        push(&mut self.recent, record);
    }
}

fn push(list: &mut VecDeque<ReconcileRecord>, record: ReconcileRecord) {
    list.push_front(record);
    list.truncate(RECENT);
}
