//! What the host exports on `/metrics` and shows on its console: controller-runtime's
//! controller, work-queue, REST-client, leader-election and process metrics (the names,
//! labels, meanings and buckets kubebuilder's dashboards read), Inrun's own for plugins,
//! reloads and the runtime's state, and a short log of recent reconciles for the console.
//!
//! No global registry: the binary makes one [`Metrics`] and hands it to what records (the
//! runtime's controllers, the fleet, leader election, the Kubernetes clients, the Wasm
//! engine as its [`inrun_wasm::Observer`]) and to the health port that reads it.

mod controller;
#[cfg(test)]
mod dashboard;
mod exact;
mod process;
mod rest;
mod rollout;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use controller::{
    InFlight, QUEUE_BUCKETS, RECONCILE_BUCKETS, ReconcileResult, Running, WorkQueue,
};
pub use rest::{CountRequests, Counted};

use crate::console::crs::CrView;
use crate::console::{Console, CrSource, EventRecord, ReconcileRecord, ShardView, Snapshot};

use crate::health::Health;
use exact::register_exact;

/// `inrun_plugin_call_duration_seconds`'s buckets: a call on a small compiled guest takes
/// tens of microseconds, one on an interpreted guest (Python, JavaScript) milliseconds,
/// and a call is stopped at its deadline (2 s by default, a minute at most).
pub const PLUGIN_CALL_BUCKETS: &[f64] = &[
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How a reconcile ended, for [`Metrics::reconcile_finished`].
#[derive(Debug)]
pub struct Finished<'a> {
    /// `namespace/name` of the CR.
    pub key: &'a str,
    /// The plugins that serve it.
    pub plugins: &'a [String],
    /// How it ended.
    pub result: ReconcileResult,
    /// Why it failed, when it did.
    pub error: Option<&'a (dyn std::error::Error + 'static)>,
    /// Whether it panicked (the panic was caught and is the error).
    pub panicked: bool,
    /// What it did, step by step.
    pub timeline: Vec<crate::console::timeline::Step>,
}

/// A plugin of a tenant: plugin names come from the tenant's Blueprint (a location's file
/// name), so two tenants' `app.wasm` are told apart by `tenant`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    tenant: String,
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginOutcome {
    tenant: String,
    plugin: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    tenant: String,
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostCall {
    tenant: String,
    capability: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantOutcome {
    tenant: String,
    result: &'static str,
}

/// client-go names the lease `name`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    name: String,
}

/// Which way buckets moved: `taken`, `given` (handed over), `lost` (dropped after the
/// member Lease lapsed).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MoveLabel {
    direction: String,
}

/// The ring as this replica last saw it.
#[derive(Debug, Default)]
struct ShardGauges {
    held: Gauge,
    members: Gauge,
    unowned: Gauge,
    moves: Family<MoveLabel, Counter>,
    /// CRs received by the CR watches (listed or changed), every CRD together.
    cr_events: Counter,
    view: Mutex<Option<ShardView>>,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn plugin_call_histogram() -> Histogram {
    Histogram::new(PLUGIN_CALL_BUCKETS.iter().copied())
}

/// The label values a tenant's plugin series were recorded with, so that they can be
/// removed with the tenant.
#[derive(Debug, Default)]
struct TenantSeries {
    /// Per plugin, the call outcomes.
    calls: BTreeMap<String, BTreeSet<&'static str>>,
    loads: BTreeSet<&'static str>,
    host_calls: BTreeSet<(&'static str, &'static str)>,
    reloads: BTreeSet<&'static str>,
    /// Plugins whose log lines were dropped.
    logs_dropped: BTreeSet<String>,
}

/// The registry and its families.
pub struct Metrics {
    registry: Registry,
    health: Arc<Health>,
    controllers: controller::Families,
    live: controller::LiveControllers,
    rest_requests: Family<rest::RequestLabels, Counter>,
    leader_status: Family<LeaseLabel, Gauge>,
    shard: ShardGauges,
    plugin_calls: Family<PluginOutcome, Counter>,
    deadline_hits: Family<PluginLabel, Counter>,
    memory_hits: Family<PluginLabel, Counter>,
    traps: Family<PluginLabel, Counter>,
    logs_dropped: Family<PluginLabel, Counter>,
    plugin_time: Histograms<PluginLabel>,
    plugin_loads: Family<SourceLabel, Counter>,
    host_calls: Family<HostCall, Counter>,
    plugin_reloads: Family<TenantOutcome, Counter>,
    blueprint_reloads: Family<TenantOutcome, Counter>,
    tenant_series: Mutex<HashMap<String, TenantSeries>>,
    console: Mutex<Console>,
    rollouts: rollout::Rollouts,
}

fn depth(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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

/// Plugins of no tenant (a host running one Blueprint without the fleet) are recorded
/// with an empty `tenant`, which Prometheus reads as no label.
impl inrun_wasm::Observer for Metrics {
    fn plugin_loaded(&self, source: &'static str) {
        Metrics::plugin_loaded(self, "", source);
    }

    fn host_call(&self, capability: &'static str, outcome: &'static str) {
        self.plugin_host_call("", capability, outcome);
    }

    fn plugin_reloaded(&self, ok: bool) {
        Metrics::plugin_reloaded(self, "", ok);
    }

    fn plugin_called(&self, plugin: &str, outcome: &'static str, elapsed: Duration) {
        Metrics::plugin_called(self, "", plugin, outcome, elapsed);
    }

    fn plugin_loading(&self, plugin: &str, loading: bool) {
        self.health.plugin_loading("", plugin, loading, true);
    }

    fn plugin_logs_dropped(&self, plugin: &str, lines: u64) {
        Metrics::plugin_logs_dropped(self, "", plugin, lines);
    }
}

/// What one tenant's plugins report: the [`Metrics`]' plugin families with the tenant's
/// name as `tenant`. From [`Metrics::tenant_observer`].
#[derive(Debug)]
struct TenantObserver {
    metrics: Arc<Metrics>,
    tenant: String,
    /// Whether the tenant is the operator's own Blueprint.
    own: bool,
}

impl inrun_wasm::Observer for TenantObserver {
    fn plugin_loaded(&self, source: &'static str) {
        self.metrics.plugin_loaded(&self.tenant, source);
    }

    fn host_call(&self, capability: &'static str, outcome: &'static str) {
        self.metrics
            .plugin_host_call(&self.tenant, capability, outcome);
    }

    fn plugin_reloaded(&self, ok: bool) {
        self.metrics.plugin_reloaded(&self.tenant, ok);
    }

    fn plugin_called(&self, plugin: &str, outcome: &'static str, elapsed: Duration) {
        self.metrics
            .plugin_called(&self.tenant, plugin, outcome, elapsed);
    }

    fn plugin_loading(&self, plugin: &str, loading: bool) {
        self.metrics
            .health
            .plugin_loading(&self.tenant, plugin, loading, self.own);
    }

    fn plugin_logs_dropped(&self, plugin: &str, lines: u64) {
        self.metrics
            .plugin_logs_dropped(&self.tenant, plugin, lines);
    }
}

impl Metrics {
    /// A registry exporting `health`'s gauges beside its own families.
    pub fn new(health: Arc<Health>) -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            health,
            controllers: controller::Families::new(),
            live: controller::LiveControllers::default(),
            rest_requests: Family::default(),
            leader_status: Family::default(),
            shard: ShardGauges::default(),
            plugin_calls: Family::default(),
            deadline_hits: Family::default(),
            memory_hits: Family::default(),
            traps: Family::default(),
            logs_dropped: Family::default(),
            plugin_time: Family::new_with_constructor(plugin_call_histogram),
            plugin_loads: Family::default(),
            host_calls: Family::default(),
            plugin_reloads: Family::default(),
            blueprint_reloads: Family::default(),
            tenant_series: Mutex::default(),
            console: Mutex::default(),
            rollouts: rollout::Rollouts::default(),
        };
        m.registered()
    }

    /// Every family in the registry: controller-runtime's and client-go's, the ring's,
    /// the process's, the plugins', and the host's state.
    fn registered(mut self) -> Metrics {
        let r = &mut self.registry;
        self.controllers.register(r, self.live.clone());
        // Counters are named without `_total`: the encoder appends it.
        register_exact(
            r,
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            self.rest_requests.clone(),
        );
        register_exact(
            r,
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            self.leader_status.clone(),
        );
        r.register_collector(Box::new(process::ProcessCollector));
        self.register_ring();
        self.register_plugins();
        self.register_state();
        self.rollouts.register(&mut self.registry);
        self
    }

    /// The sharding ring's families.
    fn register_ring(&mut self) {
        let r = &mut self.registry;
        r.register(
            "inrun_shard_buckets_held",
            "Buckets of CRs this replica holds and writes for (inrun run --sharding)",
            self.shard.held.clone(),
        );
        r.register(
            "inrun_shard_members",
            "Replicas this one sees live in its sharding ring",
            self.shard.members.clone(),
        );
        r.register(
            "inrun_shard_buckets_unowned",
            "Buckets no live replica held at this replica's last look; alert when above 0 for longer than the lease duration",
            self.shard.unowned.clone(),
        );
        r.register(
            "inrun_cr_watch_events",
            "CRs the CR watches received, listed or changed, every CRD together: under sharding about 1/N of the ring's when the API server shards the watch",
            self.shard.cr_events.clone(),
        );
        r.register(
            "inrun_shard_moves",
            "Buckets this replica took, gave up (handed over) or lost (its member Lease lapsed)",
            self.shard.moves.clone(),
        );
    }

    /// The plugins' families, by tenant.
    fn register_plugins(&mut self) {
        let r = &mut self.registry;
        r.register(
            "inrun_plugin_calls",
            "Calls into Wasm plugins, by tenant, plugin and outcome (ok, returned: the plugin's own error, trap, deadline, memory, bad_output, host: the host could not run it)",
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
            "inrun_plugin_log_lines_dropped",
            "Plugin log lines (host.log, stdout, stderr) dropped because their tenant was over its log budget",
            self.logs_dropped.clone(),
        );
        r.register(
            "inrun_plugin_call_duration_seconds",
            "How long one call into a Wasm plugin took: a fresh instance, the call, and the check of its output",
            self.plugin_time.clone(),
        );
        r.register(
            "inrun_plugin_loads",
            "Plugin components loaded, by tenant and source: memory (already loaded), cache (compiled code from disk), compiled",
            self.plugin_loads.clone(),
        );
        r.register(
            "inrun_plugin_host_calls",
            "Calls plugins made to granted host capabilities, by tenant, capability (cluster, http) and result (ok, refused, error)",
            self.host_calls.clone(),
        );
        r.register(
            "inrun_plugin_reloads",
            "Plugin versions checked after a source change, by tenant and result (success: swapped in; failure: the previous version keeps serving)",
            self.plugin_reloads.clone(),
        );
        r.register(
            "inrun_blueprint_reloads",
            "Blueprint changes applied without a restart, by tenant and result",
            self.blueprint_reloads.clone(),
        );
    }

    /// The host's state: controllers, caches, leadership.
    fn register_state(&mut self) {
        let r = &mut self.registry;
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
            "1 while this replica runs controllers: it holds the leader-election lease, or runs without election",
            self.health.leader.clone(),
        );
    }

    /// The runtime's health, whose gauges this registry exports.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    fn console(&self) -> MutexGuard<'_, Console> {
        // A panic while holding the lock leaves a log that is still worth reading.
        self.console.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The work queue of the controller `controller` with `workers` workers; its series
    /// are exported once it runs ([`WorkQueue::run`]).
    pub fn controller(&self, controller: &str, workers: usize) -> WorkQueue {
        WorkQueue::new(
            controller,
            workers,
            self.controllers.clone(),
            self.live.clone(),
        )
    }

    /// Records that the controller `controller` runs, so the console lists it before its
    /// first reconcile ends.
    pub fn controller_started(&self, controller: &str) {
        self.console().controllers.insert(controller.to_string());
    }

    /// The CRs of the controller `controller`, which runs from now on, for the console's
    /// CR views; returns a number for [`Metrics::cr_source_gone`].
    pub fn cr_source(&self, controller: &str, crs: CrSource) -> u64 {
        self.console().cr_source(controller, crs)
    }

    /// The controller whose CRs got `number` stopped: its CRs go from the console,
    /// unless a controller started since (a reload, a takeover) put its own in place.
    pub fn cr_source_gone(&self, controller: &str, number: u64) {
        self.console().cr_source_gone(controller, number);
    }

    /// An event a pass recorded (or tried to) on a CR, for the console.
    pub fn event_recorded(&self, event: EventRecord) {
        self.console().event(event);
    }

    /// The CRs the running controllers cache, as the console shows them, by CRD.
    pub fn crs(&self) -> Vec<CrView> {
        let sources = self.console().cr_sources();
        sources.iter().flat_map(|crs| crs()).collect()
    }

    /// The controller `controller` stopped for good (its CRD left its tenant's Blueprint,
    /// or the tenant was removed): its series go, so a host whose tenants come and go
    /// does not export every controller it ever ran. Nothing is removed while a
    /// controller of that name runs (another tenant took the CRD over).
    /// controller-runtime never removes a controller's series, but its controllers live
    /// as long as the process; a stop at shutdown or on a lost lease removes nothing here
    /// either.
    pub fn controller_retired(&self, controller: &str) {
        if self.live.runs(controller) {
            return;
        }
        self.controllers.remove(controller);
        self.console().controllers.remove(controller);
    }

    /// A plugin observer for the tenant `tenant`: the engine its plugins load through
    /// reports to it ([`inrun_wasm::Engine::observed_by`]), so every `inrun_plugin_*`
    /// series carries the tenant's name. `own`: the tenant is the operator's own
    /// Blueprint, whose plugins a starting host waits for.
    pub fn tenant_observer(
        self: &Arc<Self>,
        tenant: &str,
        own: bool,
    ) -> Arc<dyn inrun_wasm::Observer> {
        Arc::new(TenantObserver {
            metrics: self.clone(),
            tenant: tenant.to_string(),
            own,
        })
    }

    /// The tenant `tenant` was removed: its plugins' series and its Blueprint reloads go.
    pub fn tenant_retired(&self, tenant: &str) {
        self.console().plugin_calls.remove(tenant);
        // Held until every series is removed: see [`Metrics::note`].
        let mut series = self.series();
        let seen = series.remove(tenant).unwrap_or_default();
        let tenant = tenant.to_string();
        for (plugin, outcomes) in seen.calls {
            for outcome in outcomes {
                self.plugin_calls.remove(&PluginOutcome {
                    tenant: tenant.clone(),
                    plugin: plugin.clone(),
                    outcome,
                });
            }
            let label = PluginLabel {
                tenant: tenant.clone(),
                plugin,
            };
            for family in [&self.deadline_hits, &self.memory_hits, &self.traps] {
                family.remove(&label);
            }
            self.plugin_time.remove(&label);
        }
        for plugin in seen.logs_dropped {
            self.logs_dropped.remove(&PluginLabel {
                tenant: tenant.clone(),
                plugin,
            });
        }
        for source in seen.loads {
            self.plugin_loads.remove(&SourceLabel {
                tenant: tenant.clone(),
                source,
            });
        }
        for (capability, result) in seen.host_calls {
            self.host_calls.remove(&HostCall {
                tenant: tenant.clone(),
                capability,
                result,
            });
        }
        for result in seen.reloads {
            self.plugin_reloads.remove(&TenantOutcome {
                tenant: tenant.clone(),
                result,
            });
        }
        for ok in [true, false] {
            self.blueprint_reloads.remove(&TenantOutcome {
                tenant: tenant.clone(),
                result: result(ok),
            });
        }
    }

    fn series(&self) -> MutexGuard<'_, HashMap<String, TenantSeries>> {
        self.tenant_series.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes what `tenant`'s series were recorded with (see [`TenantSeries`]).
    /// The caller records the series while it holds the guard returned, so a tenant
    /// retired meanwhile ([`Metrics::tenant_retired`], which holds it too) takes the series
    /// with it rather than leaving it behind unnoted.
    fn note(
        &self,
        tenant: &str,
        note: impl FnOnce(&mut TenantSeries),
    ) -> MutexGuard<'_, HashMap<String, TenantSeries>> {
        let mut series = self.series();
        match series.get_mut(tenant) {
            Some(seen) => note(seen),
            None => note(series.entry(tenant.to_string()).or_default()),
        }
        series
    }

    /// Records how a reconcile ended.
    pub fn reconcile_finished(&self, in_flight: InFlight, done: Finished<'_>) {
        let controller = in_flight.controller().to_string();
        let waited = in_flight.waited();
        let elapsed = in_flight.finish(done.result, done.panicked);
        let record = ReconcileRecord {
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_millis(),
            controller,
            key: done.key.to_string(),
            result: done.result.as_str(),
            error: done.error.map(inrun_contract::errors::chain),
            duration_ms: elapsed.as_secs_f64() * 1000.0,
            plugins: done.plugins.to_vec(),
            queue_wait_ms: waited.map(|w| w.as_secs_f64() * 1000.0),
            timeline: done.timeline,
        };
        self.console().finished(record);
    }

    /// A layer counting a client's requests to the API server at `host` (`host:port`)
    /// into `rest_client_requests_total`.
    pub fn count_requests(&self, host: &str) -> CountRequests {
        CountRequests::new(self.rest_requests.clone(), host)
    }

    /// Records whether this replica holds the leader-election lease `lease`
    /// (`leader_election_master_status`, and `inrun_leader`).
    pub fn leader_election(&self, lease: &str, leading: bool) {
        self.leader_status
            .get_or_create(&LeaseLabel {
                name: lease.to_string(),
            })
            .set(i64::from(leading));
        self.health.set_leader(leading);
    }

    /// Records what a sharding round saw: the buckets this replica holds, the members live,
    /// the buckets no live member holds.
    pub fn shard_round(&self, view: ShardView) {
        let g = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.shard.held.set(g(view.held.len()));
        self.shard.members.set(g(view.members.len()));
        self.shard.unowned.set(g(view.unowned));
        *self
            .shard
            .view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(view);
    }

    /// Records a CR received by a CR watch.
    pub fn cr_watch_event(&self) {
        self.shard.cr_events.inc();
    }

    /// Records `count` buckets moved `direction` (`taken`, `given`, `lost`).
    pub fn shard_moved(&self, direction: &str, count: u64) {
        if count > 0 {
            self.shard
                .moves
                .get_or_create(&MoveLabel {
                    direction: direction.to_string(),
                })
                .inc_by(count);
        }
    }

    /// Records a call into `tenant`'s `plugin` that ended in `outcome` after `elapsed`.
    pub fn plugin_called(
        &self,
        tenant: &str,
        plugin: &str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        let _noted = self.note(tenant, |seen| {
            match seen.calls.get_mut(plugin) {
                Some(outcomes) => outcomes.insert(outcome),
                None => seen
                    .calls
                    .entry(plugin.to_string())
                    .or_default()
                    .insert(outcome),
            };
        });
        self.console()
            .count_call(tenant, plugin, outcome != "ok", elapsed);
        let label = PluginLabel {
            tenant: tenant.to_string(),
            plugin: plugin.to_string(),
        };
        self.plugin_calls
            .get_or_create(&PluginOutcome {
                tenant: tenant.to_string(),
                plugin: plugin.to_string(),
                outcome,
            })
            .inc();
        let hit = match outcome {
            "deadline" => Some(&self.deadline_hits),
            "memory" => Some(&self.memory_hits),
            "trap" => Some(&self.traps),
            _ => None,
        };
        if let Some(family) = hit {
            family.get_or_create(&label).inc();
        }
        self.plugin_time
            .get_or_create(&label)
            .observe(elapsed.as_secs_f64());
    }

    /// Records `lines` log lines of `tenant`'s `plugin` dropped by the tenant's log budget.
    pub fn plugin_logs_dropped(&self, tenant: &str, plugin: &str, lines: u64) {
        let _noted = self.note(tenant, |seen| {
            seen.logs_dropped.insert(plugin.to_string());
        });
        self.logs_dropped
            .get_or_create(&PluginLabel {
                tenant: tenant.to_string(),
                plugin: plugin.to_string(),
            })
            .inc_by(lines);
    }

    /// Records a plugin of `tenant` loaded from `source`: `memory`, `cache` or `compiled`.
    pub fn plugin_loaded(&self, tenant: &str, source: &'static str) {
        let _noted = self.note(tenant, |seen| {
            seen.loads.insert(source);
        });
        self.plugin_loads
            .get_or_create(&SourceLabel {
                tenant: tenant.to_string(),
                source,
            })
            .inc();
    }

    /// Records a call by a plugin of `tenant` to a host capability (`cluster`, `http`)
    /// and its result (`ok`, `refused`: not granted, `error`).
    pub fn plugin_host_call(&self, tenant: &str, capability: &'static str, result: &'static str) {
        let _noted = self.note(tenant, |seen| {
            seen.host_calls.insert((capability, result));
        });
        self.host_calls
            .get_or_create(&HostCall {
                tenant: tenant.to_string(),
                capability,
                result,
            })
            .inc();
    }

    /// Records a plugin reload of `tenant`: swapped in, or refused with the old version
    /// still serving.
    pub fn plugin_reloaded(&self, tenant: &str, ok: bool) {
        let result = result(ok);
        let _noted = self.note(tenant, |seen| {
            seen.reloads.insert(result);
        });
        self.plugin_reloads
            .get_or_create(&TenantOutcome {
                tenant: tenant.to_string(),
                result,
            })
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

    /// Reconciles of `controller` that ended in `result` (`success`, `error`, `requeue`,
    /// `requeue_after`).
    pub fn reconciles(&self, controller: &str, result: &'static str) -> u64 {
        self.controllers
            .reconciles
            .get(&controller::ResultLabels {
                controller: controller.to_string(),
                result,
            })
            .map_or(0, |c| c.get())
    }

    /// Plugin loads from `source` (`memory`, `cache`, `compiled`), of every tenant.
    pub fn plugin_loads(&self, source: &'static str) -> u64 {
        self.series()
            .keys()
            .filter_map(|tenant| {
                self.plugin_loads.get(&SourceLabel {
                    tenant: tenant.clone(),
                    source,
                })
            })
            .map(|c| c.get())
            .sum()
    }

    /// Plugin reloads that were swapped in (`true`) or refused, of every tenant.
    pub fn plugin_reloads(&self, ok: bool) -> u64 {
        self.series()
            .keys()
            .filter_map(|tenant| {
                self.plugin_reloads.get(&TenantOutcome {
                    tenant: tenant.clone(),
                    result: result(ok),
                })
            })
            .map(|c| c.get())
            .sum()
    }

    /// CRs of `controller` queued and not yet started (0 when it does not run).
    pub fn queue_depth(&self, controller: &str) -> i64 {
        self.live
            .gauges()
            .into_iter()
            .find(|g| g.controller == controller)
            .map_or(0, |g| depth(g.depth))
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
        let controllers = self.console().controllers.clone();
        // One reading of every running controller's queue.
        let depths: HashMap<String, usize> = self
            .live
            .gauges()
            .into_iter()
            .map(|g| (g.controller, g.depth))
            .collect();
        let mut queue_depth = BTreeMap::new();
        let mut reconciles = BTreeMap::new();
        for c in &controllers {
            queue_depth.insert(c.clone(), depths.get(c).map_or(0, |d| depth(*d)));
            let by_result: BTreeMap<String, u64> = ReconcileResult::ALL
                .into_iter()
                .map(|r| (r.as_str().to_string(), self.reconciles(c, r.as_str())))
                .collect();
            reconciles.insert(c.clone(), by_result);
        }
        let console = self.console();
        Snapshot {
            leader: self.health.leader(),
            controllers_running: self.health.controllers(),
            caches_synced: self.health.caches_synced(),
            queue_depth,
            reconciles,
            recent: console.recent.iter().cloned().collect(),
            errors: console.errors.iter().cloned().collect(),
            plugin_failures: console.plugin_failures.iter().cloned().collect(),
            shard: self
                .shard
                .view
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            plugins: console
                .plugin_calls
                .values()
                .flat_map(|by_plugin| by_plugin.values().cloned())
                .collect(),
            events: console.events.iter().cloned().collect(),
            loading: self.health.loading(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the samples a family of `text` exports, from its `# TYPE` line.
    fn exported(text: &str) -> BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .flat_map(|(name, kind)| match kind {
                "counter" => vec![format!("{name}_total")],
                "histogram" => ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|s| format!("{name}{s}"))
                    .collect(),
                _ => vec![name.to_string()],
            })
            .collect()
    }

    #[test]
    fn a_running_controller_exports_controller_runtimes_series_from_the_start() {
        let m = Metrics::default();
        let queue = m.controller("webapps.example.dev", 4);
        let text = m.render();
        assert!(
            !text.contains("controller=\"webapps.example.dev\""),
            "no series before the controller runs: {text}"
        );
        let _running = queue.run();
        let text = m.render();
        for result in ["success", "error", "requeue", "requeue_after"] {
            let series = format!(
                "controller_runtime_reconcile_total{{controller=\"webapps.example.dev\",result=\"{result}\"}} 0\n"
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
        for series in [
            "controller_runtime_reconcile_errors_total{controller=\"webapps.example.dev\"} 0\n",
            "controller_runtime_terminal_reconcile_errors_total{controller=\"webapps.example.dev\"} 0\n",
            "controller_runtime_reconcile_panics_total{controller=\"webapps.example.dev\"} 0\n",
            "controller_runtime_max_concurrent_reconciles{controller=\"webapps.example.dev\"} 4\n",
            "controller_runtime_active_workers{controller=\"webapps.example.dev\"} 0\n",
            "workqueue_depth{controller=\"webapps.example.dev\",name=\"webapps.example.dev\",priority=\"\"} 0\n",
            "workqueue_adds_total{controller=\"webapps.example.dev\",name=\"webapps.example.dev\"} 0\n",
            "workqueue_retries_total{controller=\"webapps.example.dev\",name=\"webapps.example.dev\"} 0\n",
            "workqueue_queue_duration_seconds_count{controller=\"webapps.example.dev\",name=\"webapps.example.dev\"} 0\n",
            "workqueue_work_duration_seconds_count{controller=\"webapps.example.dev\",name=\"webapps.example.dev\"} 0\n",
            "workqueue_unfinished_work_seconds{controller=\"webapps.example.dev\",name=\"webapps.example.dev\"} 0.0\n",
            "workqueue_longest_running_processor_seconds{controller=\"webapps.example.dev\",name=\"webapps.example.dev\"} 0.0\n",
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        // Help texts as controller-runtime and client-go write them, no period added.
        for help in [
            "# HELP controller_runtime_reconcile Total number of reconciliations per controller\n",
            "# HELP workqueue_work_duration_seconds How long in seconds processing an item from workqueue takes.\n",
            "# HELP workqueue_depth Current depth of workqueue by workqueue and priority\n",
        ] {
            assert!(text.contains(help), "{help} in {text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_finished_reconcile_is_counted_by_result_and_shown_on_the_console() {
        let m = Metrics::default();
        let queue = m.controller("webapps.example.dev", 2);
        let _running = queue.run();
        m.controller_started("webapps.example.dev");
        queue.queued("ns/a");
        assert_eq!(m.snapshot().queue_depth["webapps.example.dev"], 1);
        let boom = std::io::Error::other("boom");
        m.reconcile_finished(
            queue.started("ns/a"),
            Finished {
                key: "ns/a",
                plugins: &["p".into()],
                result: ReconcileResult::Error,
                error: Some(&boom),
                panicked: false,
                timeline: Vec::new(),
            },
        );
        m.reconcile_finished(
            queue.started("ns/b"),
            Finished {
                key: "ns/b",
                plugins: &[],
                result: ReconcileResult::RequeueAfter,
                error: None,
                panicked: false,
                timeline: Vec::new(),
            },
        );
        assert_eq!(m.reconciles("webapps.example.dev", "error"), 1);
        assert_eq!(m.reconciles("webapps.example.dev", "requeue_after"), 1);
        let text = m.render();
        assert!(text.contains(
            "controller_runtime_reconcile_errors_total{controller=\"webapps.example.dev\"} 1\n"
        ));
        assert!(text.contains(
            "controller_runtime_reconcile_time_seconds_count{controller=\"webapps.example.dev\"} 2\n"
        ));
        let snap = m.snapshot();
        assert_eq!(snap.queue_depth["webapps.example.dev"], 0);
        assert_eq!(snap.errors.len(), 1);
        assert_eq!(snap.plugin_failures.len(), 1);
        assert_eq!(snap.recent[0].result, "requeue_after");
        assert_eq!(snap.reconciles["webapps.example.dev"]["error"], 1);
        assert_eq!(snap.reconciles["webapps.example.dev"]["success"], 0);
    }

    #[test]
    fn buckets_are_controller_runtimes_and_client_gos() {
        let m = Metrics::default();
        let _running = m.controller("a.example.dev", 1).run();
        let text = m.render();
        let le = |family: &str| le_of(&text, family);
        assert_eq!(
            le("controller_runtime_reconcile_time_seconds"),
            RECONCILE_BUCKETS
        );
        assert_eq!(le("workqueue_queue_duration_seconds"), QUEUE_BUCKETS);
        assert_eq!(le("workqueue_work_duration_seconds"), QUEUE_BUCKETS);
        assert_eq!(RECONCILE_BUCKETS.len(), 40);
        m.plugin_called("team-a", "p", "ok", Duration::from_micros(40));
        assert_eq!(
            le_of(&m.render(), "inrun_plugin_call_duration_seconds"),
            PLUGIN_CALL_BUCKETS
        );
    }

    fn le_of(text: &str, family: &str) -> Vec<f64> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}_bucket{{")))
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
            .filter(|v| *v != "+Inf")
            .map(|v| v.parse().expect("a number"))
            .collect()
    }

    #[test]
    fn a_plugin_call_is_timed_and_its_failure_counted_by_kind() {
        let m = Metrics::default();
        m.plugin_called("team-a", "p", "ok", Duration::from_micros(40));
        m.plugin_called("team-a", "p", "deadline", Duration::from_secs(2));
        let text = m.render();
        assert!(text.contains(
            "inrun_plugin_calls_total{tenant=\"team-a\",plugin=\"p\",outcome=\"ok\"} 1\n"
        ));
        assert!(
            text.contains("inrun_plugin_deadline_hits_total{tenant=\"team-a\",plugin=\"p\"} 1\n")
        );
        assert!(text.contains(
            "inrun_plugin_call_duration_seconds_count{tenant=\"team-a\",plugin=\"p\"} 2\n"
        ));
        // 40 µs falls in the 50 µs bucket, not in the 25 µs one.
        let bucket = |le: &str| -> Option<u64> {
            text.lines()
                .find(|l| {
                    l.starts_with("inrun_plugin_call_duration_seconds_bucket{")
                        && l.contains("plugin=\"p\"")
                        && l.contains(&format!("le=\"{le}\""))
                })?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        };
        assert_eq!(
            (bucket("0.000025"), bucket("0.00005")),
            (Some(0), Some(1)),
            "{text}"
        );
    }

    #[test]
    fn two_tenants_plugins_of_one_name_are_apart_and_a_retired_tenant_leaves_no_series() {
        let m = Arc::new(Metrics::default());
        let (a, b) = (
            m.tenant_observer("team-a", false),
            m.tenant_observer("team-b", false),
        );
        a.plugin_called("app", "ok", Duration::from_millis(1));
        a.plugin_called("app", "trap", Duration::from_millis(1));
        a.plugin_loaded("compiled");
        a.host_call("http", "refused");
        a.plugin_reloaded(false);
        m.blueprint_reloaded("team-a", true);
        b.plugin_called("app", "ok", Duration::from_millis(1));
        b.plugin_loaded("memory");
        let text = m.render();
        for series in [
            "inrun_plugin_calls_total{tenant=\"team-a\",plugin=\"app\",outcome=\"ok\"} 1\n",
            "inrun_plugin_calls_total{tenant=\"team-b\",plugin=\"app\",outcome=\"ok\"} 1\n",
            "inrun_plugin_traps_total{tenant=\"team-a\",plugin=\"app\"} 1\n",
            "inrun_plugin_loads_total{tenant=\"team-a\",source=\"compiled\"} 1\n",
            "inrun_plugin_host_calls_total{tenant=\"team-a\",capability=\"http\",result=\"refused\"} 1\n",
            "inrun_plugin_reloads_total{tenant=\"team-a\",result=\"failure\"} 1\n",
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        assert_eq!(m.plugin_loads("compiled") + m.plugin_loads("memory"), 2);
        // The console's count of calls, per tenant and plugin.
        let calls = m.snapshot().plugins;
        let a_app = calls
            .iter()
            .find(|c| c.tenant == "team-a")
            .expect("team-a's app");
        assert_eq!((a_app.calls, a_app.failures), (2, 1));
        assert!((a_app.seconds - 0.002).abs() < 1e-9, "{}", a_app.seconds);
        m.tenant_retired("team-a");
        assert!(m.snapshot().plugins.iter().all(|c| c.tenant != "team-a"));
        let text = m.render();
        assert!(!text.contains("team-a"), "{text}");
        assert!(text.contains(
            "inrun_plugin_calls_total{tenant=\"team-b\",plugin=\"app\",outcome=\"ok\"} 1\n"
        ));
        assert_eq!(m.plugin_loads("compiled"), 0);
    }

    #[test]
    fn a_retired_controller_leaves_no_series_unless_one_of_its_name_runs() {
        let m = Metrics::default();
        let gone = m.controller("gone.example.dev", 1);
        let kept = m.controller("kept.example.dev", 1);
        let running = (gone.run(), kept.run());
        m.controller_started("gone.example.dev");
        gone.queued("ns/a");
        m.reconcile_finished(
            gone.started("ns/a"),
            Finished {
                key: "ns/a",
                plugins: &[],
                result: ReconcileResult::Success,
                error: None,
                panicked: false,
                timeline: Vec::new(),
            },
        );
        // Taken over by another tenant before the first was retired: kept.
        let again = m.controller("gone.example.dev", 1).run();
        drop(running.0);
        m.controller_retired("gone.example.dev");
        assert_eq!(m.reconciles("gone.example.dev", "success"), 1);
        drop(again);
        m.controller_retired("gone.example.dev");
        let text = m.render();
        assert!(!text.contains("gone.example.dev"), "{text}");
        assert!(!m.snapshot().reconciles.contains_key("gone.example.dev"));
        assert!(text.contains(
            "controller_runtime_reconcile_total{controller=\"kept.example.dev\",result=\"success\"} 0\n"
        ));
        // Started again later: its series are back from zero.
        let _back = m.controller("gone.example.dev", 1).run();
        assert!(m.render().contains(
            "controller_runtime_reconcile_total{controller=\"gone.example.dev\",result=\"success\"} 0\n"
        ));
    }

    #[test]
    fn a_sharding_round_sets_the_gauges_and_shows_on_the_console() {
        let m = Metrics::default();
        assert_eq!(m.snapshot().shard, None);
        let view = ShardView {
            ring: "inrun".into(),
            member: "pod-1#0000002a".into(),
            held: vec![1, 2, 3],
            members: vec!["pod-1#0000002a".into(), "pod-2#00000007".into()],
            unowned: 4,
        };
        m.shard_round(view.clone());
        m.shard_moved("taken", 3);
        m.shard_moved("given", 0);
        m.cr_watch_event();
        let text = m.render();
        for line in [
            "inrun_shard_buckets_held 3\n",
            "inrun_shard_members 2\n",
            "inrun_shard_buckets_unowned 4\n",
            "inrun_shard_moves_total{direction=\"taken\"} 3\n",
            "inrun_cr_watch_events_total 1\n",
        ] {
            assert!(text.contains(line), "{line}{text}");
        }
        assert!(
            !text.contains("direction=\"given\""),
            "nothing given, no series"
        );
        assert_eq!(m.snapshot().shard, Some(view));
    }

    #[test]
    fn leadership_and_process_metrics_are_exported() {
        let m = Metrics::default();
        m.leader_election("inrun", false);
        let text = m.render();
        assert!(
            text.contains("leader_election_master_status{name=\"inrun\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("inrun_leader 0\n"));
        m.leader_election("inrun", true);
        let text = m.render();
        assert!(text.contains("leader_election_master_status{name=\"inrun\"} 1\n"));
        assert!(text.contains("inrun_leader 1\n"));
        assert!(m.snapshot().leader);
        let names = exported(&text);
        #[cfg(target_os = "linux")]
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_virtual_memory_max_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(names.contains(name), "{name} in {text}");
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name} "))),
                "{name}"
            );
        }
        assert!(!text.contains("go_"), "no Go runtime series: {text}");
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

    #[test]
    fn every_metric_the_dashboard_queries_is_exported() {
        // Every family recorded into once: an empty family is not written at all.
        let m = Metrics::default();
        let _running = m.controller("a.example.dev", 1).run();
        for outcome in ["ok", "deadline", "memory", "trap"] {
            m.plugin_called("team-a", "p", outcome, Duration::from_millis(1));
        }
        m.plugin_loaded("team-a", "compiled");
        m.plugin_host_call("team-a", "http", "ok");
        m.plugin_reloaded("team-a", true);
        m.blueprint_reloaded("t", true);
        m.leader_election("inrun", true);
        m.rollout_at("a.example.dev", 1, 5, 95, 5);
        m.rollout_pass("a.example.dev", true, false);
        let _ = m
            .rest_requests
            .get_or_create(&rest::RequestLabels::new("200", "GET", "h:443"));
        let text = m.render();
        let names = exported(&text);
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../deploy/grafana/inrun.json"
        );
        let dashboard = std::fs::read_to_string(path).expect("the dashboard");
        let queried = dashboard::metric_names(&dashboard).expect("a dashboard");
        assert!(queried.len() > 20, "{queried:?}");
        let missing: Vec<_> = queried.iter().filter(|n| !names.contains(*n)).collect();
        assert!(
            missing.is_empty(),
            "the dashboard queries {missing:?}, which the host does not export"
        );
        // Every label a query filters or groups by is one the family has, or one
        // Prometheus gives every target.
        let labelled = exported_labels(&text);
        let unknown: Vec<_> = dashboard::label_uses(&dashboard)
            .expect("a dashboard")
            .into_iter()
            .filter(|(_, label)| !["namespace", "job", "pod", "instance"].contains(&label.as_str()))
            .filter(|(metric, label)| labelled.get(metric).is_none_or(|l| !l.contains(label)))
            .collect();
        assert!(
            unknown.is_empty(),
            "the dashboard reads labels the host does not export: {unknown:?}"
        );
    }

    /// The label names of each sample name in `text`.
    fn exported_labels(text: &str) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, rest)) = line.split_once('{') else {
                continue;
            };
            let labels = out.entry(name.to_string()).or_default();
            let mut rest = rest;
            // `key="value",` pairs; a value may hold escaped quotes.
            while let Some((key, after)) = rest.split_once("=\"") {
                labels.insert(key.trim_start_matches(',').to_string());
                let mut escaped = false;
                let end = after
                    .char_indices()
                    .find(|&(_, c)| {
                        let close = c == '"' && !escaped;
                        escaped = c == '\\' && !escaped;
                        close
                    })
                    .map_or(after.len(), |(i, _)| i + 1);
                rest = &after[end..];
                if rest.starts_with('}') {
                    break;
                }
            }
        }
        out
    }
}
