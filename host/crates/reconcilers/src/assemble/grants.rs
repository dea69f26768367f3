//! A plugin's Blueprint `capabilities` made into the engine's [`Grants`]: the kinds and
//! hosts allowed, with the shared reader and client that serve them.

use std::sync::Arc;

use super::Services;
use inrun_blueprint::Capabilities;
use inrun_wasm::{
    ClusterGrant, CredentialGrant, Grants, HttpGrant, Namespaces, ReadGrant, SecretReader,
};

/// A package's `credentials` read through the host's secret source (as the identity the
/// Blueprint acts as).
struct SecretsReader(Arc<dyn crate::secrets::Secrets>);

#[async_trait::async_trait]
impl SecretReader for SecretsReader {
    async fn key(&self, namespace: &str, name: &str, key: &str) -> Result<String, String> {
        self.0
            .get(namespace, name, key)
            .await
            .map_err(|e| inrun_contract::errors::chain(&e))
    }
}

/// The grants `caps` describes, served by `services`. Empty capabilities grant nothing.
pub fn grants(caps: &Capabilities, services: &Services) -> Grants {
    let reads: Vec<ReadGrant> = caps
        .reads()
        .iter()
        .map(|r| ReadGrant {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespaces: if r.cluster_scoped {
                Namespaces::Cluster
            } else if r.namespaces.iter().any(|n| n == "*") {
                Namespaces::Any
            } else {
                Namespaces::Own(r.namespaces.clone())
            },
        })
        .collect();
    Grants {
        cluster: (!reads.is_empty()).then(|| ClusterGrant {
            reads: reads.into(),
            reader: Arc::clone(&services.cluster),
        }),
        http: caps.http.as_ref().map(|h| HttpGrant {
            hosts: h.hosts.iter().cloned().collect(),
            timeout: h.timeout(),
            max_response_bytes: usize::try_from(h.max_response_size().bytes())
                .unwrap_or(usize::MAX),
            client: services.plugin_http.clone(),
            canned: services.canned_http.clone(),
        }),
        credentials: (!caps.credentials.is_empty()).then(|| CredentialGrant {
            secrets: caps
                .credentials
                .iter()
                .map(|c| (c.secret.clone(), c.keys.clone()))
                .collect(),
            reader: Arc::new(SecretsReader(Arc::clone(&services.secrets))),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(yaml: &str) -> Capabilities {
        serde_yaml_ng::from_str(yaml).expect("capabilities")
    }

    #[test]
    fn namespaces_become_own_any_or_cluster() {
        let g = grants(
            &caps(
                "{ cluster: { read: [ { apiVersion: v1, kind: ConfigMap, namespaces: [shared] }, { apiVersion: v1, kind: Secret, namespaces: ['*'] }, { apiVersion: v1, kind: Namespace, clusterScoped: true } ] } }",
            ),
            &Services::offline(),
        );
        let reads = g.cluster.expect("cluster grant").reads;
        assert_eq!(reads[0].namespaces, Namespaces::Own(vec!["shared".into()]));
        assert_eq!(reads[1].namespaces, Namespaces::Any);
        assert_eq!(reads[2].namespaces, Namespaces::Cluster);
        assert!(g.http.is_none());
    }

    #[test]
    fn http_limits_default_and_empty_capabilities_grant_nothing() {
        let g = grants(
            &caps("{ http: { hosts: ['127.0.0.1:8080'], maxResponseSize: 2Mi } }"),
            &Services::offline(),
        );
        let http = g.http.expect("http grant");
        assert_eq!(http.timeout, std::time::Duration::from_secs(5));
        assert_eq!(http.max_response_bytes, 2 << 20);
        let none = grants(&Capabilities::default(), &Services::offline());
        assert!(none.cluster.is_none() && none.http.is_none());
    }
}
