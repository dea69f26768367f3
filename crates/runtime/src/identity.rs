//! Tenants' Kubernetes identities: a tenant that names a ServiceAccount is served through
//! a client that impersonates it, so the API server's RBAC fences everything done on its
//! behalf (watches, applies, prunes, status, events, Secret and cluster reads).

use inrun_blueprint::ServiceAccountRef;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::Api;
use kube::{Client, Config};

/// The annotation by which a ServiceAccount admits the `Blueprint` resources that may act
/// as it: their names, comma separated. A Blueprint resource names the identity it acts
/// as, so without the ServiceAccount's consent one tenant could name another's.
pub const ADMITS: &str = "inrun.dev/blueprints";

/// Whether `sa` admits the Blueprint resource `blueprint` ([`ADMITS`]), read with the
/// host's own `client`.
///
/// # Errors
/// A message naming the ServiceAccount and what is missing.
pub async fn admits(
    client: &Client,
    sa: &ServiceAccountRef,
    blueprint: &str,
) -> Result<(), String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &sa.namespace);
    let account = api
        .get_opt(&sa.name)
        .await
        .map_err(|e| format!("reading ServiceAccount {sa}: {e}"))?
        .ok_or_else(|| format!("ServiceAccount {sa} does not exist"))?;
    let listed = account
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ADMITS))
        .is_some_and(|names| names.split(',').any(|n| n.trim() == blueprint));
    if listed {
        Ok(())
    } else {
        Err(format!(
            "ServiceAccount {sa} does not admit the Blueprint {blueprint}: its annotation {ADMITS} must list it"
        ))
    }
}

/// Builds clients acting as a ServiceAccount, from the host's own configuration.
#[derive(Clone)]
pub struct Impersonation {
    config: Config,
    fence: crate::fence::Fence,
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
    pub fn new(config: Config, fence: crate::fence::Fence) -> Self {
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
        crate::fence::client(self.config(sa), &self.fence)
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
        let config = Impersonation::new(host, crate::fence::Fence::default()).config(&sa);
        assert_eq!(
            config.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:team-a:tenant")
        );
        assert_eq!(config.auth_info.impersonate_groups, None);
    }
}
