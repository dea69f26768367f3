//! One owner per piece of infrastructure: a package CR claims what its identity names (the
//! backend boundary and the state identity's hash) before its first effect, as a
//! `coordination.k8s.io` Lease in the host's namespace. A Lease is created only if absent,
//! so two CRs that meet the same lock (of one CRD, of two, before and after a restart)
//! never both hold it: the second is told which CR holds it (`IdentityConflict`) and makes
//! no call that could change it.
//!
//! Locks are kept per tenant ([`policy`]): the boundary and state come from the tenant's
//! own package, so a lock every tenant met would let one claim another's infrastructure
//! first. A boundary the operator shares (`--shared-identity-boundary`) is locked
//! host-wide, for the tenants it lists only. The Leases are written with the host's
//! credentials under the tenant's write rate, and a tenant holds at most so many.
//!
//! The holder lets go when its CR goes, and when its tenant is removed with its CRs. Its
//! host renews the Lease every third of its duration ([`renew`]); a Lease whose holder is
//! gone (its CR deleted while no host ran), or, when the holder cannot be read (another
//! tenant's), one left unrenewed for its duration, is taken over.

mod policy;
mod renew;

pub use policy::{LockPolicy, Scope, SharedBoundary, lease_name, tenant_label};

use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::core::ObjectMeta;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};

use renew::{Held, State};

/// The Lease's label: what it is for.
const PURPOSE: (&str, &str) = ("inrun.dev/lock", "package-identity");
/// The Lease's label naming the tenant whose CR holds it ([`tenant_label`]).
const TENANT_LABEL: &str = "inrun.dev/lock-tenant";
/// The tenant whose CR holds the Lease, whole; absent for the host's one Blueprint.
const TENANT: &str = "inrun.dev/tenant";
/// Annotations naming the holder, to look it up and to say who holds it.
const HOLDER_API_VERSION: &str = "inrun.dev/holder-api-version";
const HOLDER_KIND: &str = "inrun.dev/holder-kind";
const HOLDER_PLURAL: &str = "inrun.dev/holder-plural";
const HOLDER_NAMESPACE: &str = "inrun.dev/holder-namespace";
const HOLDER_NAME: &str = "inrun.dev/holder-name";
/// The boundary the Lease is for (its name is a hash): for people reading it.
const BOUNDARY: &str = "inrun.dev/boundary";
/// What a tenant is told when it claims a boundary the operator shares among others only.
const REFUSED: &str =
    "a CR of another tenant (the operator shares this boundary only among the tenants it lists)";

/// Why a claim failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The Lease could not be read or written.
    #[error("reading or writing the identity lock's Lease")]
    Api(#[source] kube::Error),
    /// The tenant's CRs hold as many locks as a tenant may.
    #[error(
        "the tenant's CRs hold {held} identity locks, the most a tenant may (--max-tenant-identity-locks)"
    )]
    TenantCap {
        /// How many its CRs hold through this host.
        held: usize,
    },
}

/// A CR that claims (or holds) an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its uid: what the Lease records as holder.
    pub uid: String,
    /// How to address it.
    pub resource: ApiResource,
    /// Its namespace, if namespaced.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl Holder {
    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.resource.kind, self.name),
            None => format!("{} {}", self.resource.kind, self.name),
        }
    }
}

pub use inrun_pass::Claimed as Claim;

/// What every handle of one host shares: where the Leases are, the policy, and the Leases
/// this process's CRs hold (renewed from here).
struct Table {
    /// The host's own client, unlimited: only to build handles from.
    client: Client,
    namespace: String,
    policy: LockPolicy,
    state: Mutex<State>,
}

impl Table {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The identity locks of one tenant (or of the host's one Blueprint): Leases in the host's
/// namespace, written with the host's credentials under the tenant's write rate.
#[derive(Clone)]
pub struct IdentityLocks {
    table: Arc<Table>,
    /// The tenant whose CRs claim through this handle, as `/tenants` names it; `None`: the
    /// host's one Blueprint (`inrun_runtime::run`), every lock host-wide.
    tenant: Option<String>,
    /// Writes the Leases: the host's client, under the tenant's write rate.
    client: Client,
    /// Whether [`LockPolicy::max_per_tenant`] holds (not for the operator's own Blueprint).
    capped: bool,
}

impl std::fmt::Debug for IdentityLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityLocks")
            .field("namespace", &self.table.namespace)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl IdentityLocks {
    /// Locks kept as Leases in `namespace`, written through `client` (the host's own),
    /// with the default [`LockPolicy`]; host-wide until [`IdentityLocks::for_tenant`].
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        Self::with_policy(client, namespace, LockPolicy::default())
    }

    /// [`IdentityLocks::new`] under `policy`.
    pub fn with_policy(client: Client, namespace: impl Into<String>, policy: LockPolicy) -> Self {
        IdentityLocks {
            table: Arc::new(Table {
                client: client.clone(),
                namespace: namespace.into(),
                policy,
                state: Mutex::default(),
            }),
            tenant: None,
            client,
            capped: false,
        }
    }

    /// The same host's locks for `tenant`'s CRs (named as `/tenants` names it): claimed in
    /// its own scope (or a shared boundary's), the Leases written through `client` (the
    /// host's own under the tenant's write rate: [`IdentityLocks::host_client`]), at most
    /// [`LockPolicy::max_per_tenant`] of them when `capped`.
    #[must_use]
    pub fn for_tenant(&self, tenant: impl Into<String>, client: Client, capped: bool) -> Self {
        IdentityLocks {
            table: self.table.clone(),
            tenant: Some(tenant.into()),
            client,
            capped,
        }
    }

    /// The host's own client, unlimited: what a tenant's handle wraps in its write rate.
    pub fn host_client(&self) -> Client {
        self.table.client.clone()
    }

    /// The namespace the Leases live in.
    pub fn namespace(&self) -> &str {
        &self.table.namespace
    }

    /// How the locks are kept.
    pub fn policy(&self) -> &LockPolicy {
        &self.table.policy
    }

    /// The name of the Lease `boundary` + `identity` is locked with for this handle's
    /// tenant; `None` when the tenant may not claim it.
    pub fn name_for(&self, boundary: &str, identity: &str) -> Option<String> {
        match self.table.policy.scope(self.tenant.as_deref(), boundary) {
            Scope::Refused => None,
            Scope::HostWide => Some(lease_name(None, boundary, identity)),
            Scope::Tenant(t) => Some(lease_name(Some(t), boundary, identity)),
        }
    }

    fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.table.namespace)
    }

    /// Claims `boundary` + `identity` for `holder`: held when no one held it, when
    /// `holder` did already, or when its holder is gone or stale. `asking` is the client
    /// the holder's tenant acts as, to read a holder of its own.
    ///
    /// # Errors
    /// [`LockError::Api`] when the Lease cannot be read or written,
    /// [`LockError::TenantCap`] when the tenant holds as many locks as it may.
    pub async fn claim(
        &self,
        boundary: &str,
        identity: &str,
        holder: &Holder,
        asking: &Client,
    ) -> Result<Claim, LockError> {
        let Some(name) = self.name_for(boundary, identity) else {
            return Ok(Claim::Conflict(REFUSED.into()));
        };
        if self.trusted(&name, &holder.uid) {
            return Ok(Claim::Held);
        }
        let api = self.api();
        // Twice at most: a Lease created or taken over meanwhile is read again.
        for _ in 0..2 {
            let Some(lease) = api.get_opt(&name).await.map_err(LockError::Api)? else {
                self.within_cap(&name)?;
                match api
                    .create(&PostParams::default(), &self.lease(&name, boundary, holder))
                    .await
                {
                    Ok(written) => {
                        self.hold(&name, holder, written, true);
                        return Ok(Claim::Held);
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => return Err(LockError::Api(e)),
                }
            };
            let current = holder_of(&lease);
            if current == holder.uid {
                self.hold(&name, holder, lease, false);
                return Ok(Claim::Held);
            }
            if !self.takeable(&name, &lease, &current, asking).await {
                return Ok(Claim::Conflict(self.described(&lease, holder)));
            }
            self.within_cap(&name)?;
            let mut taken = self.lease(&name, boundary, holder);
            taken.metadata.resource_version = lease.metadata.resource_version.clone();
            match api.replace(&name, &PostParams::default(), &taken).await {
                Ok(written) => {
                    tracing::info!(lease = %name, holder = %holder.describe(), previous = %self.described(&lease, holder),
                        "took over the identity lock of a CR that is gone, or whose host stopped renewing it");
                    self.table.state().seen.remove(&name);
                    self.hold(&name, holder, written, true);
                    return Ok(Claim::Held);
                }
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => continue,
                Err(e) => return Err(LockError::Api(e)),
            }
        }
        Ok(Claim::Conflict(
            "another CR, claiming it at the same moment".into(),
        ))
    }

    /// Lets go of `boundary` + `identity` if `uid` holds it; nothing otherwise.
    ///
    /// # Errors
    /// When the Lease cannot be read or deleted.
    pub async fn release(
        &self,
        boundary: &str,
        identity: &str,
        uid: &str,
    ) -> Result<(), kube::Error> {
        let Some(name) = self.name_for(boundary, identity) else {
            return Ok(());
        };
        let api = self.api();
        let Some(lease) = api.get_opt(&name).await? else {
            self.unhold(&name, uid);
            return Ok(());
        };
        if holder_of(&lease) != uid {
            self.unhold(&name, uid);
            return Ok(());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: lease.metadata.uid.clone(),
                resource_version: lease.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
        self.unhold(&name, uid);
        Ok(())
    }

    /// Stops renewing the Leases this tenant's CRs hold (of `kind` only, when given): their
    /// controller stopped for good. Leases not released go stale after their duration.
    pub fn forget(&self, kind: Option<&ApiResource>) {
        let tenant = self.tenant.as_deref();
        self.table.state().held.retain(|_, h| {
            let of_kind = kind.is_none_or(|k| h.kind == (k.api_version.clone(), k.kind.clone()));
            !(h.tenant.as_deref() == tenant && of_kind)
        });
    }

    /// How many Leases this tenant's CRs hold through this process.
    pub fn held(&self) -> usize {
        let tenant = self.tenant.as_deref();
        self.table
            .state()
            .held
            .values()
            .filter(|h| h.tenant.as_deref() == tenant)
            .count()
    }

    /// Whether this process holds `name` for `uid`, renewed recently enough that no other
    /// host can have judged it stale: then a pass reads nothing. Past half its duration
    /// unrenewed, the Lease is read again.
    fn trusted(&self, name: &str, uid: &str) -> bool {
        let half = self.table.policy.duration / 2;
        let mut state = self.table.state();
        match state.held.get_mut(name) {
            Some(h) if h.uid == uid && h.confirmed.is_some_and(|c| c.elapsed() < half) => {
                // Renewals go through the tenant's current client (its write rate).
                h.client = self.client.clone();
                true
            }
            _ => false,
        }
    }

    /// Refuses one more lock past the tenant's cap (`name` itself, held, does not count).
    fn within_cap(&self, name: &str) -> Result<(), LockError> {
        let max = self.table.policy.max_per_tenant;
        if !self.capped || max == 0 {
            return Ok(());
        }
        let tenant = self.tenant.as_deref();
        let held = self
            .table
            .state()
            .held
            .iter()
            .filter(|(n, h)| h.tenant.as_deref() == tenant && n.as_str() != name)
            .count();
        if held >= max {
            return Err(LockError::TenantCap { held });
        }
        Ok(())
    }

    /// Records that `holder` holds `name` as `lease` shows it (`written`: by this process
    /// just now), and makes sure the Leases held are renewed.
    fn hold(&self, name: &str, holder: &Holder, lease: Lease, written: bool) {
        let held = Held::new(
            holder.uid.clone(),
            self.tenant.clone(),
            (
                holder.resource.api_version.clone(),
                holder.resource.kind.clone(),
            ),
            lease,
            self.client.clone(),
            written,
            self.table.policy.renew_every(),
        );
        let mut state = self.table.state();
        state.held.insert(name.to_string(), held);
        renew::ensure_running(&self.table, &mut state);
    }

    fn unhold(&self, name: &str, uid: &str) {
        let mut state = self.table.state();
        if state.held.get(name).is_some_and(|h| h.uid == uid) {
            state.held.remove(name);
        }
    }

    fn lease(&self, name: &str, boundary: &str, holder: &Holder) -> Lease {
        let mut annotations = std::collections::BTreeMap::from([
            (
                HOLDER_API_VERSION.to_string(),
                holder.resource.api_version.clone(),
            ),
            (HOLDER_KIND.to_string(), holder.resource.kind.clone()),
            (HOLDER_PLURAL.to_string(), holder.resource.plural.clone()),
            (HOLDER_NAME.to_string(), holder.name.clone()),
            (BOUNDARY.to_string(), boundary.chars().take(1024).collect()),
        ]);
        if let Some(ns) = &holder.namespace {
            annotations.insert(HOLDER_NAMESPACE.to_string(), ns.clone());
        }
        let mut labels =
            std::collections::BTreeMap::from([(PURPOSE.0.to_string(), PURPOSE.1.to_string())]);
        if let Some(tenant) = &self.tenant {
            annotations.insert(TENANT.to_string(), tenant.clone());
            labels.insert(TENANT_LABEL.to_string(), tenant_label(tenant));
        }
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.table.namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.uid.clone()),
                acquire_time: Some(renew::now()),
                ..renew::renewed(LeaseSpec::default(), self.table.policy.duration)
            }),
        }
    }

    /// Whether the Lease `name`, held by the CR with uid `uid`, may be taken over: its
    /// holder, of this tenant, is gone; or, when it cannot be read (another tenant's, or
    /// one this tenant may not read), the Lease has gone unrenewed for its duration.
    async fn takeable(&self, name: &str, lease: &Lease, uid: &str, asking: &Client) -> bool {
        if lease.annotations().get(TENANT) == self.tenant.as_ref()
            && let Some(gone) = holder_gone(lease, uid, asking).await
        {
            return gone;
        }
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.table.policy.duration, std::time::Duration::from_secs);
        let record = (uid.to_string(), spec.renew_time.or(spec.acquire_time));
        let mut state = self.table.state();
        renew::unrenewed_for(&mut state.seen, name, record, duration, Instant::now())
    }

    /// `Kind namespace/name` of the CR a Lease names, when it is of this tenant and of
    /// `asking`'s kind; only its kind when of this tenant; neither when of another tenant:
    /// a tenant is not told the names, or the kinds, of another's CRs.
    fn described(&self, lease: &Lease, asking: &Holder) -> String {
        described(lease, asking, self.tenant.as_deref())
    }
}

/// The uid the Lease names as holder (empty when none).
fn holder_of(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

/// Whether the CR the Lease names (with uid `uid`) no longer exists, read as `asking` (the
/// claiming CR's tenant); `None` when it cannot be read.
async fn holder_gone(lease: &Lease, uid: &str, asking: &Client) -> Option<bool> {
    let a = lease.annotations();
    let (Some(api_version), Some(kind), Some(plural), Some(name)) = (
        a.get(HOLDER_API_VERSION),
        a.get(HOLDER_KIND),
        a.get(HOLDER_PLURAL),
        a.get(HOLDER_NAME),
    ) else {
        return None;
    };
    let (group, version) = inrun_contract::api_version::split(api_version);
    let resource = ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: api_version.clone(),
        kind: kind.clone(),
        plural: plural.clone(),
    };
    let api: Api<DynamicObject> = match a.get(HOLDER_NAMESPACE) {
        Some(ns) => Api::namespaced_with(asking.clone(), ns, &resource),
        None => Api::all_with(asking.clone(), &resource),
    };
    match api.get_opt(name).await {
        Ok(None) => Some(true),
        Ok(Some(cr)) => Some(cr.metadata.uid.as_deref() != Some(uid)),
        // The kind is no longer served: nothing of it exists.
        Err(kube::Error::Api(e)) if e.code == 404 => Some(true),
        Err(e) => {
            tracing::debug!(error = %e, holder = %name, "could not read an identity lock's holder; judging the Lease by its renewals");
            None
        }
    }
}

/// See [`IdentityLocks::described`]; `tenant` is the asking tenant.
fn described(lease: &Lease, asking: &Holder, tenant: Option<&str>) -> String {
    let a = lease.annotations();
    if a.get(TENANT).map(String::as_str) != tenant {
        return "a CR of another tenant".into();
    }
    let kind = a.get(HOLDER_KIND).map_or("CR", String::as_str);
    let same = a.get(HOLDER_API_VERSION) == Some(&asking.resource.api_version)
        && kind == asking.resource.kind;
    if !same {
        return format!("a CR of another kind ({kind})");
    }
    let name = a.get(HOLDER_NAME).map_or("?", String::as_str);
    match a.get(HOLDER_NAMESPACE) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease_of(tenant: Option<&str>) -> Lease {
        let mut annotations: std::collections::BTreeMap<String, String> = [
            (HOLDER_KIND.to_string(), "Bucket".to_string()),
            (HOLDER_NAMESPACE.to_string(), "team-a".to_string()),
            (HOLDER_NAME.to_string(), "logs".to_string()),
            (HOLDER_API_VERSION.to_string(), "x.example/v1".to_string()),
        ]
        .into();
        if let Some(t) = tenant {
            annotations.insert(TENANT.to_string(), t.to_string());
        }
        let mut lease = Lease::default();
        lease.metadata.annotations = Some(annotations);
        lease
    }

    fn asking(kind: &str) -> Holder {
        Holder {
            uid: "u".into(),
            resource: ApiResource {
                group: "x.example".into(),
                version: "v1".into(),
                api_version: "x.example/v1".into(),
                kind: kind.into(),
                plural: "buckets".into(),
            },
            namespace: Some("team-b".into()),
            name: "mine".into(),
        }
    }

    #[test]
    fn a_lease_says_who_holds_it_to_its_own_tenant_only() {
        let lease = lease_of(Some("Blueprint/a"));
        assert_eq!(
            described(&lease, &asking("Bucket"), Some("Blueprint/a")),
            "Bucket team-a/logs"
        );
        assert_eq!(
            described(&lease, &asking("Queue"), Some("Blueprint/a")),
            "a CR of another kind (Bucket)",
            "another kind's CR is not named"
        );
        assert_eq!(
            described(&lease, &asking("Bucket"), Some("Blueprint/b")),
            "a CR of another tenant",
            "another tenant's CR is not named, nor its kind"
        );
        // The host's one Blueprint: no tenants.
        assert_eq!(
            described(&lease_of(None), &asking("Bucket"), None),
            "Bucket team-a/logs"
        );
    }
}
