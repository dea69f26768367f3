//! What every reconcile of one CRD shares: the client, the assembled plan, discovered
//! kinds, the event recorder, and retry state.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;

use super::backoff::Backoff;
use super::events::Events;
use super::kinds::Kinds;
use super::stores::ChildStores;
use super::triggers::Triggers;
use inrun_blueprint::RuntimeSpec;
use inrun_reconcilers::assemble::Assembly;
use inrun_reconcilers::plan::CrdPlan;

/// Shared state of one CRD's controller.
pub struct Ctx {
    /// The API client.
    pub client: Client,
    /// The assembled Blueprint.
    pub assembly: Arc<Assembly>,
    /// This CRD's index in `assembly.crds()`.
    pub crd: usize,
    /// How to address this CRD's CRs.
    pub cr_resource: ApiResource,
    /// Whether the CRs are namespaced.
    pub namespaced: bool,
    /// Discovered kinds, shared by every controller.
    pub kinds: Arc<Kinds>,
    /// Package CRs' identity locks: this CRD's tenant's handle on the host's.
    pub locks: Option<Arc<crate::locks::IdentityLocks>>,
    /// Event recorder.
    pub events: Events,
    /// Per-key retry delays.
    pub backoff: Backoff,
    /// Host settings from the Blueprint.
    pub runtime: RuntimeSpec,
    /// What is queued and running, for the work-queue metrics: every trigger of a CR is
    /// told to it.
    pub queue: inrun_observe::metrics::WorkQueue,
    /// Watch caches of the CRs' children, by kind.
    pub children: ChildStores,
    /// Which changes wake a CR, and what the host itself wrote.
    pub triggers: Arc<Triggers>,
    /// Where reconciles are recorded.
    pub metrics: Arc<inrun_observe::metrics::Metrics>,
    /// Reads each reconcile span's trace id, when the process exports traces.
    pub trace_ids: Option<crate::shared::TraceIds>,
    /// Told when a pass saw a CRD of a CR's become `Established`: a kind that was not
    /// served may be now, and its children's watch may start.
    pub kinds_changed: Arc<tokio::sync::Notify>,
    /// The buckets this replica holds under `inrun run --sharding`; `None`: it serves
    /// every CR.
    pub shard: Option<Arc<inrun_ring::sharding::shard::Shard>>,
    /// Under sharding, the buckets taken whose CRs wake at their next listing whatever the
    /// triggers remember of them (an earlier tenure saw them unchanged).
    pub fresh: Arc<std::sync::atomic::AtomicU64>,
    /// The host memory the tenant's passes may hold for what reconcilers return; `None`:
    /// not counted.
    pub host_memory: Option<inrun_wasm::HostMemory>,
    /// The rollout of a new version of what reconciles the CRD, when one is under way:
    /// the CRs it has not moved are served by the version before.
    pub rollout: Option<Arc<crate::rollout::Rollout>>,
    /// Under sharding, open while this replica holds the ring's leader Lease: it alone
    /// decides a rollout's steps (the others follow its record). `None`: it decides.
    pub leading: Option<inrun_ring::fence::Fence>,
}

impl Ctx {
    /// The bucket of `cr` when this replica shards (`None` otherwise, or for a CR
    /// without a uid).
    pub fn bucket(&self, cr: &impl kube::Resource) -> Option<usize> {
        self.shard.as_ref()?;
        cr.meta()
            .uid
            .as_deref()
            .map(inrun_ring::sharding::buckets::bucket_of)
    }

    /// Whether `cr` is of a bucket just taken, whose CRs all wake once (see `fresh`).
    pub fn fresh(&self, cr: &impl kube::Resource) -> bool {
        self.bucket(cr).is_some_and(|b| {
            self.fresh.load(std::sync::atomic::Ordering::Acquire)
                & inrun_ring::sharding::shard::bit(b)
                != 0
        })
    }

    /// Whether this replica serves `cr` now: it holds the CR's bucket, or it does not
    /// shard.
    pub fn serves(&self, cr: &impl kube::Resource) -> bool {
        match (&self.shard, self.bucket(cr)) {
            (Some(shard), Some(bucket)) => shard.holds(bucket),
            _ => true,
        }
    }

    /// This CRD's plan.
    pub fn plan(&self) -> &CrdPlan {
        &self.assembly.crds()[self.crd]
    }

    /// The plan that serves `cr`: this CRD's, or during a rollout the version before it
    /// for a CR the rollout has not moved; and the version, during a rollout.
    pub fn plan_of(
        &self,
        cr: &crate::cached::CachedCr,
    ) -> (&CrdPlan, Option<crate::rollout::Version>) {
        match &self.rollout {
            Some(rollout) => match rollout.version_of(
                cr.metadata.uid.as_deref(),
                cr.reconciled_by_and_ready().0.as_deref(),
            ) {
                crate::rollout::Version::Old => {
                    (rollout.previous_plan(), Some(crate::rollout::Version::Old))
                }
                crate::rollout::Version::New => (self.plan(), Some(crate::rollout::Version::New)),
            },
            None => (self.plan(), None),
        }
    }

    /// The API for a CR (its namespace, or cluster-wide).
    pub fn cr_api(&self, obj: &DynamicObject) -> Api<DynamicObject> {
        match (&obj.metadata.namespace, self.namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &self.cr_resource),
            _ => Api::all_with(self.client.clone(), &self.cr_resource),
        }
    }

    /// `namespace/name` (or `name`).
    pub fn key(obj: &impl kube::Resource) -> String {
        let meta = obj.meta();
        super::triggers::key_of(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// The CR's id in the trigger state (the same form as a child's).
    pub fn cr_id(&self, obj: &impl kube::Resource) -> String {
        let meta = obj.meta();
        super::stores::child_id(
            &self.cr_resource.group,
            &self.cr_resource.kind,
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// The reference events are recorded on.
    pub fn reference(&self, obj: &DynamicObject) -> k8s_openapi::api::core::v1::ObjectReference {
        use kube::Resource;
        obj.object_ref(&self.cr_resource)
    }
}
