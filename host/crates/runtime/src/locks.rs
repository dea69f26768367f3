//! One owner per piece of infrastructure: a package CR claims what its identity names (the
//! backend boundary and the state identity's hash) before its first effect, as a
//! `coordination.k8s.io` Lease in the host's namespace, written with the host's own
//! credentials. A Lease is created only if absent, so two CRs (of one CRD, of two, of two
//! tenants, before and after a restart) never both hold one: the second is told which CR
//! holds it (`IdentityConflict`) and makes no call that could change it. The holder lets go
//! when its CR goes; a Lease whose holder is gone (its CR deleted while no host ran) is
//! taken over.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::core::ObjectMeta;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use sha2::{Digest, Sha256};

/// The Lease's label: what it is for.
const PURPOSE: (&str, &str) = ("inrun.dev/lock", "package-identity");
/// Annotations naming the holder, to look it up and to say who holds it.
const HOLDER_API_VERSION: &str = "inrun.dev/holder-api-version";
const HOLDER_KIND: &str = "inrun.dev/holder-kind";
const HOLDER_PLURAL: &str = "inrun.dev/holder-plural";
const HOLDER_NAMESPACE: &str = "inrun.dev/holder-namespace";
const HOLDER_NAME: &str = "inrun.dev/holder-name";
/// The boundary the Lease is for (its name is a hash): for people reading it.
const BOUNDARY: &str = "inrun.dev/boundary";

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

/// The Lease name for `boundary` and `identity` (the state identity's hash).
pub fn lease_name(boundary: &str, identity: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(boundary.as_bytes());
    hash.update([0]);
    hash.update(identity.as_bytes());
    let hex: String = hash
        .finalize()
        .iter()
        .take(20)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("inrun-identity-{hex}")
}

/// The host's identity locks: Leases in one namespace, on the host's own client.
pub struct IdentityLocks {
    client: Client,
    namespace: String,
    /// Leases this process knows its CRs hold (name → holder uid), so a CR's every pass
    /// does not read its Lease again. Only this host writes them while it leads.
    held: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for IdentityLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityLocks")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl IdentityLocks {
    /// Locks kept as Leases in `namespace`, written through `client` (the host's own).
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        IdentityLocks {
            client,
            namespace: namespace.into(),
            held: Mutex::default(),
        }
    }

    /// The namespace the Leases live in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims `boundary` + `identity` for `holder`: held when no one held it, when
    /// `holder` did already, or when its holder is gone.
    ///
    /// # Errors
    /// When the Lease cannot be read or written.
    pub async fn claim(
        &self,
        boundary: &str,
        identity: &str,
        holder: &Holder,
        asking: &Client,
    ) -> Result<Claim, kube::Error> {
        let name = lease_name(boundary, identity);
        if self.known().get(&name) == Some(&holder.uid) {
            return Ok(Claim::Held);
        }
        let api = self.api();
        // Twice at most: a Lease created or taken over meanwhile is read again.
        for _ in 0..2 {
            let Some(lease) = api.get_opt(&name).await? else {
                match api
                    .create(&PostParams::default(), &self.lease(&name, boundary, holder))
                    .await
                {
                    Ok(_) => {
                        self.known().insert(name, holder.uid.clone());
                        return Ok(Claim::Held);
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => return Err(e),
                }
            };
            let current = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default();
            if current == holder.uid {
                self.known().insert(name, holder.uid.clone());
                return Ok(Claim::Held);
            }
            if !self.holder_gone(&lease, &current, holder, asking).await {
                return Ok(Claim::Conflict(described(&lease, holder)));
            }
            // Its holder is gone: taken over, if no one changed the Lease since it was read.
            let mut taken = self.lease(&name, boundary, holder);
            taken.metadata.resource_version = lease.metadata.resource_version.clone();
            match api.replace(&name, &PostParams::default(), &taken).await {
                Ok(_) => {
                    tracing::info!(lease = %name, holder = %holder.describe(), previous = %described(&lease, holder),
                        "took over the identity lock of a CR that is gone");
                    self.known().insert(name, holder.uid.clone());
                    return Ok(Claim::Held);
                }
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => continue,
                Err(e) => return Err(e),
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
        let name = lease_name(boundary, identity);
        let api = self.api();
        let Some(lease) = api.get_opt(&name).await? else {
            self.known().remove(&name);
            return Ok(());
        };
        let current = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if current != Some(uid) {
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
        self.known().remove(&name);
        Ok(())
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
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.namespace.clone()),
                labels: Some([(PURPOSE.0.to_string(), PURPOSE.1.to_string())].into()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.uid.clone()),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Whether the CR the Lease names (with uid `uid`) no longer exists. It is read as the
    /// host, and, when the host may not (a tenant's kind), as `asking`'s client when the
    /// holder is of `asking`'s own kind; when neither may read it, it is taken to exist.
    async fn holder_gone(&self, lease: &Lease, uid: &str, asker: &Holder, asking: &Client) -> bool {
        let a = lease.annotations();
        let (Some(api_version), Some(kind), Some(plural), Some(name)) = (
            a.get(HOLDER_API_VERSION),
            a.get(HOLDER_KIND),
            a.get(HOLDER_PLURAL),
            a.get(HOLDER_NAME),
        ) else {
            return false;
        };
        let (group, version) = inrun_contract::api_version::split(api_version);
        let (group, version) = (group.to_string(), version.to_string());
        let resource = ApiResource {
            group,
            version,
            api_version: api_version.clone(),
            kind: kind.clone(),
            plural: plural.clone(),
        };
        let same_kind = resource.api_version == asker.resource.api_version
            && resource.kind == asker.resource.kind;
        let clients = std::iter::once(&self.client).chain(same_kind.then_some(asking));
        for client in clients {
            let api: Api<DynamicObject> = match a.get(HOLDER_NAMESPACE) {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            match api.get_opt(name).await {
                Ok(None) => return true,
                Ok(Some(cr)) => return cr.metadata.uid.as_deref() != Some(uid),
                // The kind is no longer served: nothing of it exists.
                Err(kube::Error::Api(e)) if e.code == 404 => return true,
                Err(e) => tracing::debug!(error = %e, holder = %name,
                    "could not read an identity lock's holder"),
            }
        }
        false
    }
}

/// `Kind namespace/name` of the CR a Lease names, when it is of `asking`'s kind (its own
/// tenant's); only its kind otherwise: a tenant is not told the names of another's CRs.
fn described(lease: &Lease, asking: &Holder) -> String {
    let a = lease.annotations();
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

    #[test]
    fn a_lease_name_is_a_valid_name_fixed_by_boundary_and_identity_alone() {
        let a = lease_name("https://api.example", "abc");
        assert_eq!(a, lease_name("https://api.example", "abc"));
        assert!(a.len() <= 63 && a.starts_with("inrun-identity-"), "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(a, lease_name("https://api.example", "abd"));
        assert_ne!(a, lease_name("https://other.example", "abc"));
        // The parts are framed: moving a character across the boundary changes the name.
        assert_ne!(lease_name("ab", "c"), lease_name("a", "bc"));
    }

    #[test]
    fn a_lease_says_who_holds_it() {
        let mut lease = Lease::default();
        lease.metadata.annotations = Some(
            [
                (HOLDER_KIND.to_string(), "Bucket".to_string()),
                (HOLDER_NAMESPACE.to_string(), "team-a".to_string()),
                (HOLDER_NAME.to_string(), "logs".to_string()),
            ]
            .into(),
        );
        lease
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert(HOLDER_API_VERSION.to_string(), "x.example/v1".to_string());
        let asking = |kind: &str| Holder {
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
        };
        assert_eq!(described(&lease, &asking("Bucket")), "Bucket team-a/logs");
        assert_eq!(
            described(&lease, &asking("Queue")),
            "a CR of another kind (Bucket)",
            "another kind's CR is not named"
        );
    }
}
