//! Tenants' Kubernetes identities: a tenant that names a ServiceAccount is served through
//! a client that impersonates it, so the API server's RBAC fences everything done on its
//! behalf (watches, applies, prunes, status, events, Secret and cluster reads) — and only
//! with the ServiceAccount's consent.

use inrun_blueprint::ServiceAccountRef;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::Api;
use kube::{Client, Config};

/// The annotation by which a ServiceAccount admits the `Blueprint` resources that may act
/// as it: `name=uid` entries, comma separated. A Blueprint resource names the identity it
/// acts as, so without the ServiceAccount's consent one tenant could name another's; the
/// uid binds the consent to one Blueprint, not to a name anyone may create once the
/// Blueprint it meant is gone (or before it exists).
pub const ADMITS: &str = "inrun.dev/blueprints";

/// Why a tenant cannot act as its ServiceAccount.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A Blueprint resource names no ServiceAccount, and the host derives none.
    #[error(
        "a Blueprint resource acts as a Kubernetes identity: set spec.serviceAccount {{namespace, name}}, or start the host with --default-tenant-service-account namespace/{{name}}"
    )]
    Unnamed,
    /// The ServiceAccount derived from the Blueprint resource's name is not a valid one.
    #[error(transparent)]
    Derived(inrun_blueprint::AccountError),
    /// The ServiceAccount is outside the namespaces the host keeps for tenants' identities.
    #[error(
        "ServiceAccount {sa} is not in a namespace the host keeps for tenants' identities ({kept}; --tenant-identity-namespaces): a tenant's ServiceAccount reads its kinds cluster-wide, and its token must not be within reach of a tenant's pods"
    )]
    NamespaceNotKept {
        /// The ServiceAccount.
        sa: ServiceAccountRef,
        /// The namespaces kept, comma separated.
        kept: String,
    },
    /// This host was started without a way to impersonate.
    #[error(
        "the Blueprint runs as ServiceAccount {sa}, but this host was started without a way to impersonate"
    )]
    NoImpersonation {
        /// The ServiceAccount.
        sa: ServiceAccountRef,
    },
    /// The client acting as the ServiceAccount could not be built.
    #[error("a client acting as ServiceAccount {sa}")]
    Client {
        /// The ServiceAccount.
        sa: ServiceAccountRef,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The ServiceAccount could not be read.
    #[error("reading ServiceAccount {sa}")]
    ReadAccount {
        /// The ServiceAccount.
        sa: ServiceAccountRef,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The ServiceAccount does not exist.
    #[error("ServiceAccount {sa} does not exist")]
    MissingAccount {
        /// The ServiceAccount.
        sa: ServiceAccountRef,
    },
    /// The Blueprint resource could not be read (for its uid).
    #[error("reading Blueprint {blueprint}")]
    ReadBlueprint {
        /// The Blueprint resource's name.
        blueprint: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Blueprint resource is gone.
    #[error("Blueprint {blueprint} is gone")]
    BlueprintGone {
        /// The Blueprint resource's name.
        blueprint: String,
    },
    /// The ServiceAccount does not admit the Blueprint resource ([`ADMITS`]).
    #[error("ServiceAccount {sa} {why}")]
    NotAdmitted {
        /// The ServiceAccount.
        sa: ServiceAccountRef,
        /// Why not, naming the Blueprint.
        why: NoConsent,
    },
}

/// Why an [`ADMITS`] annotation does not admit a Blueprint resource, worded after the
/// ServiceAccount's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoConsent {
    /// It names another Blueprint of the same name, deleted since.
    #[error(
        "admits another Blueprint {name} (uid {other}), not this one (uid {uid}): it was deleted and created again; annotate it {ADMITS}: {name}={uid} to admit this one"
    )]
    Another {
        /// The Blueprint's name.
        name: String,
        /// The uid it admits.
        other: String,
        /// This Blueprint's uid.
        uid: String,
    },
    /// It names the Blueprint without a uid.
    #[error(
        "admits the Blueprint {name} by name only; consent is bound to one Blueprint by its uid: annotate it {ADMITS}: {name}={uid} to admit this one"
    )]
    NameOnly {
        /// The Blueprint's name.
        name: String,
        /// This Blueprint's uid.
        uid: String,
    },
    /// It does not name the Blueprint.
    #[error(
        "does not admit the Blueprint {name}: annotate it {ADMITS}: {name}={uid} to admit this one"
    )]
    Absent {
        /// The Blueprint's name.
        name: String,
        /// This Blueprint's uid.
        uid: String,
    },
}

/// Whether `sa` admits the Blueprint resource named `blueprint` of `uid` ([`ADMITS`]);
/// without a `uid`, the Blueprint's as it is now, read with the host's own `client`.
///
/// # Errors
/// [`IdentityError`] naming the ServiceAccount, the Blueprint and its uid, and what to
/// annotate.
pub async fn admits(
    client: &Client,
    sa: &ServiceAccountRef,
    blueprint: &str,
    uid: Option<&str>,
) -> Result<(), IdentityError> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &sa.namespace);
    let account = api
        .get_opt(&sa.name)
        .await
        .map_err(|source| IdentityError::ReadAccount {
            sa: sa.clone(),
            source,
        })?
        .ok_or_else(|| IdentityError::MissingAccount { sa: sa.clone() })?;
    let uid = match uid {
        Some(uid) => uid.to_string(),
        None => {
            let blueprints: Api<kube::api::DynamicObject> =
                Api::all_with(client.clone(), &crate::kinds::blueprint_resource());
            blueprints
                .get_opt(blueprint)
                .await
                .map_err(|source| IdentityError::ReadBlueprint {
                    blueprint: blueprint.to_string(),
                    source,
                })?
                .and_then(|b| b.metadata.uid)
                .ok_or_else(|| IdentityError::BlueprintGone {
                    blueprint: blueprint.to_string(),
                })?
        }
    };
    let entries = account
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ADMITS))
        .cloned()
        .unwrap_or_default();
    consent(&entries, blueprint, &uid).map_err(|why| IdentityError::NotAdmitted {
        sa: sa.clone(),
        why,
    })
}

/// Whether the entries of an [`ADMITS`] annotation admit the Blueprint `name` of `uid`;
/// else why not.
fn consent(entries: &str, name: &str, uid: &str) -> Result<(), NoConsent> {
    let mut named = None;
    for entry in entries.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (n, u) = entry
            .split_once('=')
            .map_or((entry, None), |(n, u)| (n.trim(), Some(u.trim())));
        if n != name {
            continue;
        }
        match u {
            Some(u) if u == uid => return Ok(()),
            other => named = Some(other.map(str::to_string)),
        }
    }
    let (name, uid) = (name.to_string(), uid.to_string());
    Err(match named {
        Some(Some(other)) => NoConsent::Another { name, other, uid },
        Some(None) => NoConsent::NameOnly { name, uid },
        None => NoConsent::Absent { name, uid },
    })
}

#[cfg(test)]
mod consent_tests {
    use super::consent;

    #[test]
    fn consent_is_bound_to_the_uid() {
        assert!(consent("a=1, team-a=u1", "team-a", "u1").is_ok());
        let gone = consent("team-a=u0", "team-a", "u1")
            .unwrap_err()
            .to_string();
        assert!(gone.contains("another Blueprint team-a (uid u0)"), "{gone}");
        assert!(gone.contains("team-a=u1"), "{gone}");
        let bare = consent("team-a", "team-a", "u1").unwrap_err().to_string();
        assert!(bare.contains("by name only"), "{bare}");
        let none = consent("team-b=u1", "team-a", "u1")
            .unwrap_err()
            .to_string();
        assert!(
            none.starts_with("does not admit the Blueprint team-a"),
            "{none}"
        );
        assert!(consent("", "team-a", "u1").is_err());
    }
}

/// Builds clients acting as a ServiceAccount, from the host's own configuration.
#[derive(Clone)]
pub struct Impersonation {
    config: Config,
    fence: inrun_ring::fence::Fence,
}

impl std::fmt::Debug for Impersonation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Impersonation")
            .field("cluster_url", &self.config.cluster_url)
            .finish_non_exhaustive()
    }
}

impl Impersonation {
    /// Clients derived from `config`, the host's (its credentials prove who impersonates),
    /// writing only while `fence` is open.
    pub fn new(config: Config, fence: inrun_ring::fence::Fence) -> Self {
        Impersonation { config, fence }
    }

    /// The configuration of a client acting as `sa`: the host's credentials with the
    /// `Impersonate-User` header. No groups are named, so the API server adds those of a
    /// ServiceAccount (`system:serviceaccounts`, `system:serviceaccounts:<namespace>`) and
    /// `system:authenticated` itself, as for the ServiceAccount's own token.
    pub fn config(&self, sa: &ServiceAccountRef) -> Config {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(sa.username());
        config.auth_info.impersonate_groups = None;
        config.auth_info.impersonate_uid = None;
        config.auth_info.impersonate_user_extra = None;
        config
    }

    /// A client acting as `sa`.
    ///
    /// # Errors
    /// When the client cannot be built (the same configuration as the host's builds, so
    /// only a name that is not a valid header value fails, which validation rules out).
    pub fn client(&self, sa: &ServiceAccountRef) -> Result<Client, kube::Error> {
        inrun_ring::fence::client(self.config(sa), &self.fence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_config_impersonates_the_service_account_and_nothing_else() {
        let mut host = Config::new("https://127.0.0.1:6443".parse().expect("url"));
        host.auth_info.impersonate_groups = Some(vec!["system:masters".into()]);
        let sa = ServiceAccountRef {
            namespace: "team-a".into(),
            name: "tenant".into(),
        };
        let config = Impersonation::new(host, inrun_ring::fence::Fence::default()).config(&sa);
        assert_eq!(
            config.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:team-a:tenant")
        );
        assert_eq!(config.auth_info.impersonate_groups, None);
    }
}
