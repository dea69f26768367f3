//! What every controller of a host shares: the client, discovered kinds, metrics, whom it
//! acts as, and the identity locks; and how a single-Blueprint run is configured.

use std::sync::Arc;

use kube::Client;

use crate::impersonation::{IdentityError, Impersonation};
use crate::kinds::Kinds;
use crate::locks;
use inrun_ring::fence;

/// Reads the trace id of a span when the process exports traces: each reconcile's span
/// records it, so its log lines carry the id the collector shows.
pub type TraceIds = fn(&tracing::Span) -> Option<String>;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Install (server-side apply) the Blueprint's CRDs instead of requiring them.
    pub install_crds: bool,
    /// This replica's name, for events (e.g. the pod name).
    pub instance: String,
    /// Where the controllers record.
    pub metrics: Arc<inrun_observe::metrics::Metrics>,
    /// Where package CRs' identity locks are kept (Leases, written with `client`); `None`:
    /// not kept, every claim holds.
    pub lock_namespace: Option<String>,
}

/// Everything one CRD's controller needs besides its plan.
#[derive(Clone)]
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// Kinds discovered so far, shared by every controller.
    pub kinds: Arc<Kinds>,
    /// This replica's name, for events.
    pub instance: String,
    /// Where controllers record; its `health::Health` is what `/readyz` reads.
    pub metrics: Arc<inrun_observe::metrics::Metrics>,
    /// How clients acting as a tenant's ServiceAccount are built; `None`: this host
    /// cannot impersonate, and a Blueprint that names an identity is refused.
    pub impersonation: Option<Impersonation>,
    /// Whom `client` acts as: `None` for the host's own identity.
    pub identity: Option<inrun_blueprint::ServiceAccountRef>,
    /// Where package CRs claim the infrastructure they manage, one owner a thing: the
    /// host's, and in a tenant's `Shared` that tenant's ([`locks::IdentityLocks::for_tenant`]);
    /// `None`: claims are not kept (every claim holds).
    pub locks: Option<Arc<locks::IdentityLocks>>,
    /// The buckets of CRs this replica holds under sharding; `None`: it serves every CR.
    pub shard: Option<Arc<inrun_ring::sharding::shard::Shard>>,
    /// Under sharding, open while this replica holds the ring's leader Lease: it alone
    /// makes the host's cluster-wide writes (CRDs, Blueprint resources' status, releases).
    /// `None`: this replica makes them.
    pub leading: Option<fence::Fence>,
    /// The host memory the tenant's reconciles may hold for what reconcilers return: each
    /// pass runs in its scope ([`inrun_wasm::HostMemory::scope`]); `None`: not counted.
    pub host_memory: Option<inrun_wasm::HostMemory>,
    /// Reads each reconcile span's trace id ([`Shared::with_trace_ids`]); `None`: none.
    pub trace_ids: Option<TraceIds>,
}

impl Shared {
    /// State shared by controllers started on `client`.
    pub fn new(client: Client, instance: String) -> Self {
        Shared {
            client,
            kinds: Arc::new(Kinds::default()),
            instance,
            metrics: Arc::default(),
            impersonation: None,
            identity: None,
            locks: None,
            shard: None,
            leading: None,
            host_memory: None,
            trace_ids: None,
        }
    }

    /// The same, keeping package CRs' identity locks as Leases in `namespace`, written
    /// with `client`'s (the host's own) credentials, under the default
    /// [`locks::LockPolicy`].
    #[must_use]
    pub fn with_locks(self, namespace: &str) -> Self {
        self.with_locks_under(namespace, locks::LockPolicy::default())
    }

    /// [`Shared::with_locks`] under `policy` (shared boundaries, Lease duration, the cap
    /// per tenant).
    #[must_use]
    pub fn with_locks_under(mut self, namespace: &str, policy: locks::LockPolicy) -> Self {
        self.locks = Some(Arc::new(locks::IdentityLocks::with_policy(
            self.client.clone(),
            namespace,
            policy,
        )));
        self
    }

    /// The same, recording on each reconcile's span the trace id `read` finds on it (the
    /// process's trace exporter's reader).
    #[must_use]
    pub fn with_trace_ids(mut self, read: TraceIds) -> Self {
        self.trace_ids = Some(read);
        self
    }

    /// The same, able to act as tenants' ServiceAccounts (clients built from `config`,
    /// the host's own, writing only while `fence` is open).
    #[must_use]
    pub fn with_impersonation(mut self, config: kube::Config, fence: fence::Fence) -> Self {
        self.impersonation = Some(Impersonation::new(config, fence));
        self
    }

    /// The same state acting as `sa`: its client impersonates the ServiceAccount; kinds
    /// and metrics stay shared.
    ///
    /// # Errors
    /// [`IdentityError::NoImpersonation`] when this host cannot impersonate,
    /// [`IdentityError::Client`] when the client cannot be built.
    pub fn acting_as(
        &self,
        sa: &inrun_blueprint::ServiceAccountRef,
    ) -> Result<Shared, IdentityError> {
        let impersonation = self
            .impersonation
            .as_ref()
            .ok_or_else(|| IdentityError::NoImpersonation { sa: sa.clone() })?;
        let client = impersonation
            .client(sa)
            .map_err(|source| IdentityError::Client {
                sa: sa.clone(),
                source,
            })?;
        Ok(Shared {
            client,
            identity: Some(sa.clone()),
            ..self.clone()
        })
    }

    /// The same, serving only the CRs of the buckets `shard` holds (and writing for a CR
    /// only while it does).
    #[must_use]
    pub fn with_shard(mut self, shard: Arc<inrun_ring::sharding::shard::Shard>) -> Self {
        self.shard = Some(shard);
        self
    }

    /// The same, its cluster-wide writes made only while `leading` is open.
    #[must_use]
    pub fn with_leading(mut self, leading: fence::Fence) -> Self {
        self.leading = Some(leading);
        self
    }

    /// Whether this replica makes the host's cluster-wide writes now.
    pub fn leads(&self) -> bool {
        self.leading.as_ref().is_none_or(fence::Fence::is_open)
    }

    /// How this replica installs CRDs when `asked` (`--install-crds`): under sharding
    /// only while it leads, the others waiting for the CRD.
    pub fn install(&self, asked: bool) -> crate::crds::Install {
        match (&self.leading, asked) {
            (_, false) => crate::crds::Install::Never,
            (None, true) => crate::crds::Install::Always,
            (Some(leading), true) => crate::crds::Install::WhileLeading(leading.clone()),
        }
    }

    /// The same, recording into `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<inrun_observe::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }
}
