//! `spec.runtime`: the host settings of a Blueprint — workers, finalizers, backoff, health
//! port, leader election, resync — apart from the custom resource types.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `spec.runtime`: settings of the host rather than of one CRD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeSpec {
    /// Extra finalizers and how deletion waits.
    #[serde(default)]
    pub finalizers: FinalizersSpec,
    /// Worker count for every CRD that does not set its own.
    #[serde(default = "default_workers")]
    pub workers: u32,
    /// Port of `/healthz`, `/readyz`, `/metrics`, `/blueprint`; 0 picks a free port.
    #[serde(default = "default_health_port")]
    pub health_port: u16,
    /// Per-key retry delays after a failed reconcile.
    #[serde(default)]
    pub backoff: BackoffSpec,
    /// Whether one replica leads and how the lease is kept.
    #[serde(default)]
    pub leader_election: LeaderElectionSpec,
    /// Whether replicas share the CRs (active-active), each serving the buckets of CRs
    /// it holds; the Leases' namespace and timings are `leaderElection`'s.
    #[serde(default, skip_serializing_if = "ShardingSpec::is_off")]
    pub sharding: ShardingSpec,
    /// Reconcile every CR again this long after its last pass, for drift no watch event
    /// shows (`10m`); off when left out. A pass that finds everything as desired writes
    /// nothing.
    #[serde(default, with = "inrun_contract::duration::serde_opt")]
    #[schemars(with = "Option<String>")]
    pub resync: Option<Duration>,
    /// The shortest delay before a CR is reconciled again on a reconciler's request
    /// (`requeue`, `requeueAfter`) or after a failure (the backoff's first step): a
    /// reconciler asking for `0s` cannot make a write storm (default 1s, at least 100ms).
    #[serde(
        default = "default_min_requeue",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub min_requeue: Duration,
    /// What this Blueprint's tenant may hold of what tenants share, each under the host's
    /// per-tenant budget (asking for more is refused); left out: the host's.
    #[serde(default, skip_serializing_if = "BudgetSpec::is_empty")]
    pub budget: BudgetSpec,
}

/// `spec.runtime.budget`: a tenant's share, lower than the host's per-tenant budget where
/// set (`inrun run --tenant-plugin-calls`, `--tenant-plugin-memory`, `--tenant-log-lines`,
/// `--tenant-api-writes`, `--tenant-host-memory`, `--tenant-plugin-cpu`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetSpec {
    /// Plugin calls in flight at once; more wait for one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_calls: Option<u32>,
    /// Linear memory and tables of its plugin calls in flight, together (`128Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_memory: Option<super::quantity::Quantity>,
    /// Lines a second its plugins may log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_lines_per_second: Option<u32>,
    /// Writes a second it may make to the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_writes_per_second: Option<u32>,
    /// Host memory its reconciles may hold together for what reconcilers return: Wasm
    /// outcomes, remote and external replies (`32Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<super::quantity::Quantity>,
    /// CPU its plugins may burn, on average over a second (`250m`, `0.5`); past it they
    /// wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub plugin_cpu: Option<inrun_contract::cpu::Millicores>,
}

impl BudgetSpec {
    /// Whether it sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == BudgetSpec::default()
    }
}

fn default_min_requeue() -> Duration {
    Duration::from_secs(1)
}

fn default_workers() -> u32 {
    2
}

fn default_health_port() -> u16 {
    8081
}

impl Default for RuntimeSpec {
    fn default() -> Self {
        RuntimeSpec {
            finalizers: FinalizersSpec::default(),
            workers: default_workers(),
            health_port: default_health_port(),
            backoff: BackoffSpec::default(),
            leader_election: LeaderElectionSpec::default(),
            sharding: ShardingSpec::default(),
            resync: None,
            min_requeue: default_min_requeue(),
            budget: BudgetSpec::default(),
        }
    }
}

/// `spec.runtime.finalizers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FinalizersSpec {
    /// Finalizers put on every CR beside `inrun.dev/cleanup`.
    #[serde(default)]
    pub names: Vec<String>,
    /// Strip the finalizers instead of adding them, so deletion never waits (for tests).
    #[serde(default)]
    pub remove: bool,
    /// How long a deleting CR may be held by its reconciler; no bound when absent.
    #[serde(
        default,
        with = "inrun_contract::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
}

/// `spec.runtime.backoff`: failures retry after `base`, doubling up to `max`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackoffSpec {
    /// First retry delay (default 1s).
    #[serde(
        default = "default_backoff_base",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub base: Duration,
    /// Longest retry delay (default 5m).
    #[serde(
        default = "default_backoff_max",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub max: Duration,
}

fn default_backoff_base() -> Duration {
    Duration::from_secs(1)
}

fn default_backoff_max() -> Duration {
    Duration::from_secs(300)
}

impl Default for BackoffSpec {
    fn default() -> Self {
        BackoffSpec {
            base: default_backoff_base(),
            max: default_backoff_max(),
        }
    }
}

/// `spec.runtime.sharding`: every replica works, each on the CRs of the buckets it holds
/// (one Lease per bucket and per replica, in `leaderElection.namespace`, kept with
/// `leaderElection`'s timings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShardingSpec {
    /// Off by default: one replica (or one leader) serves every CR.
    #[serde(default)]
    pub enabled: bool,
    /// The ring's name, the prefix of its Leases (default `inrun`); hosts that share a
    /// ring share the CRs, so each Blueprint set needs its own.
    #[serde(default = "default_lease_name")]
    pub ring: String,
    /// How each replica watches only the CRs of its buckets (default `auto`).
    #[serde(default)]
    pub watch: ShardWatch,
}

/// `spec.runtime.sharding.watch`: how a replica watches only its shard of the CRs. Every
/// replica checks each CR's bucket whatever the watch sends, so this is about memory and
/// traffic, not correctness.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ShardWatch {
    /// `selector` when the API server honours it (asked once at start), else `labels`.
    #[default]
    Auto,
    /// The API server's `shardSelector` (Kubernetes 1.36+, feature gate
    /// `ShardedListAndWatch`): nothing written on the CRs.
    Selector,
    /// A label `inrun.dev/bucket` on each CR, put on by the apply that puts the host's
    /// finalizers on (a CR that already has them pays one write, once), and a watch per
    /// replica of its buckets' labels plus one of the CRs not labelled yet.
    Labels,
}

impl std::str::FromStr for ShardWatch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(ShardWatch::Auto),
            "selector" => Ok(ShardWatch::Selector),
            "labels" => Ok(ShardWatch::Labels),
            other => Err(format!(
                "`{other}`: expected `auto`, `selector` or `labels`"
            )),
        }
    }
}

impl Default for ShardingSpec {
    fn default() -> Self {
        ShardingSpec {
            enabled: false,
            ring: default_lease_name(),
            watch: ShardWatch::default(),
        }
    }
}

impl ShardingSpec {
    /// Whether it is the default (off, ring `inrun`).
    pub fn is_off(&self) -> bool {
        *self == ShardingSpec::default()
    }
}

/// `spec.runtime.leaderElection`: a coordination.k8s.io Lease decides which replica works.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElectionSpec {
    /// Off by default, so a single `inrun run` needs no Lease.
    #[serde(default)]
    pub enabled: bool,
    /// The Lease's name (default `inrun`).
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    /// The Lease's namespace; the host's own namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// How long a lease holds without renewal (default 15s).
    #[serde(
        default = "default_lease_duration",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down (default 10s).
    #[serde(
        default = "default_renew_deadline",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the leader to renew (default 2s).
    #[serde(
        default = "default_retry_period",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub retry_period: Duration,
}

fn default_lease_name() -> String {
    "inrun".to_string()
}

fn default_lease_duration() -> Duration {
    Duration::from_secs(15)
}

fn default_renew_deadline() -> Duration {
    Duration::from_secs(10)
}

fn default_retry_period() -> Duration {
    Duration::from_secs(2)
}

impl Default for LeaderElectionSpec {
    fn default() -> Self {
        LeaderElectionSpec {
            enabled: false,
            lease_name: default_lease_name(),
            namespace: None,
            lease_duration: default_lease_duration(),
            renew_deadline: default_renew_deadline(),
            retry_period: default_retry_period(),
        }
    }
}
