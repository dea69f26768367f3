//! Secret values the host reads for reconcilers and external calls (bearer tokens,
//! connection URLs). Values never leave this module in an error message.
//!
//! `inrun run` reads Secrets from the API server ([`KubeSecrets`], cached briefly so a
//! rotated token is picked up within seconds); `inrun render` has no cluster and takes
//! values from the command line ([`StaticSecrets`], `--secret ns/name/key=value`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

/// How long [`KubeSecrets`] keeps a Secret before reading it again.
pub const DEFAULT_TTL: Duration = Duration::from_secs(2);

/// Why a secret value could not be read. Messages name the Secret and key, never a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The Secret does not exist.
    #[error("secret {namespace}/{name} not found")]
    NotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The Secret exists but has no such key.
    #[error("secret {namespace}/{name} has no key {key:?}")]
    MissingKey {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key asked for.
        key: String,
    },
    /// The value is not UTF-8 text.
    #[error("secret {namespace}/{name} key {key:?} is not UTF-8 text")]
    NotText {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key.
        key: String,
    },
    /// Reading the Secret from the API server failed.
    #[error("reading secret {namespace}/{name}")]
    Api {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: crate::api::ApiFailure,
    },
    /// No value was given for this key (offline use).
    #[error(
        "no value for secret {namespace}/{name} key {key:?}; pass --secret {namespace}/{name}/{key}=VALUE"
    )]
    NotGiven {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key.
        key: String,
    },
}

/// Where secret values come from.
#[async_trait]
pub trait Secrets: Send + Sync {
    /// The value of `key` in Secret `namespace/name`, as text.
    ///
    /// # Errors
    /// [`SecretError`] naming the Secret and key (never the value).
    async fn get(&self, namespace: &str, name: &str, key: &str) -> Result<String, SecretError>;
}

/// Values given up front, for `inrun render` and tests. Debug output hides the values.
#[derive(Default, Clone)]
pub struct StaticSecrets {
    values: HashMap<(String, String, String), String>,
}

impl fmt::Debug for StaticSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticSecrets")
            .field("keys", &self.values.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A `--secret` argument that is not `namespace/name/key=value`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not namespace/name/key=value")]
pub struct BadSecretArg(
    /// The argument up to its `=` (the value is left out).
    pub String,
);

impl StaticSecrets {
    /// No values: every lookup fails with [`SecretError::NotGiven`].
    pub fn new() -> Self {
        StaticSecrets::default()
    }

    /// Adds a value.
    #[must_use]
    pub fn with(mut self, namespace: &str, name: &str, key: &str, value: &str) -> Self {
        self.values.insert(
            (namespace.into(), name.into(), key.into()),
            value.to_string(),
        );
        self
    }

    /// Adds a value from `namespace/name/key=value`.
    ///
    /// # Errors
    /// [`BadSecretArg`] when the text does not have that shape.
    pub fn parse(self, arg: &str) -> Result<Self, BadSecretArg> {
        let (path, value) = arg
            .split_once('=')
            .ok_or_else(|| BadSecretArg(String::new()))?;
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            [ns, name, key] if !ns.is_empty() && !name.is_empty() && !key.is_empty() => {
                Ok(self.with(ns, name, key, value))
            }
            _ => Err(BadSecretArg(path.to_string())),
        }
    }
}

#[async_trait]
impl Secrets for StaticSecrets {
    async fn get(&self, namespace: &str, name: &str, key: &str) -> Result<String, SecretError> {
        self.values
            .get(&(namespace.into(), name.into(), key.into()))
            .cloned()
            .ok_or_else(|| SecretError::NotGiven {
                namespace: namespace.into(),
                name: name.into(),
                key: key.into(),
            })
    }
}

type Cached = (Instant, Option<BTreeMap<String, Vec<u8>>>);

/// Secrets read from the API server, each kept for a short time so a reconcile burst does
/// not read the same Secret again and again, and a change is seen within the TTL.
pub struct KubeSecrets {
    client: kube::Client,
    ttl: Duration,
    cache: Mutex<HashMap<(String, String), Cached>>,
}

impl KubeSecrets {
    /// Reads through `client`, caching for [`DEFAULT_TTL`].
    pub fn new(client: kube::Client) -> Self {
        KubeSecrets::with_ttl(client, DEFAULT_TTL)
    }

    /// Reads through `client`, caching each Secret for `ttl`.
    pub fn with_ttl(client: kube::Client, ttl: Duration) -> Self {
        KubeSecrets {
            client,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, id: &(String, String)) -> Option<Option<BTreeMap<String, Vec<u8>>>> {
        let cache = self.cache.lock().ok()?;
        let (at, data) = cache.get(id)?;
        (at.elapsed() < self.ttl).then(|| data.clone())
    }

    async fn read(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, SecretError> {
        let id = (namespace.to_string(), name.to_string());
        if let Some(data) = self.cached(&id) {
            return Ok(data);
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api.get_opt(name).await.map_err(|source| SecretError::Api {
            namespace: namespace.into(),
            name: name.into(),
            source: source.into(),
        })?;
        let data = secret.map(|s| {
            let mut data: BTreeMap<String, Vec<u8>> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            for (k, v) in s.string_data.unwrap_or_default() {
                data.insert(k, v.into_bytes());
            }
            data
        });
        if let Ok(mut cache) = self.cache.lock() {
            // Expired entries go as new ones come: Secrets of CRs long gone, or of
            // tenants removed, are not kept (whole) for the life of the host.
            prune(&mut cache, self.ttl);
            cache.insert(id, (Instant::now(), data.clone()));
        }
        Ok(data)
    }
}

/// Drops the entries older than `ttl`.
fn prune<K>(cache: &mut HashMap<K, Cached>, ttl: Duration) {
    cache.retain(|_, (at, _)| at.elapsed() < ttl);
}

#[async_trait]
impl Secrets for KubeSecrets {
    async fn get(&self, namespace: &str, name: &str, key: &str) -> Result<String, SecretError> {
        let data = self
            .read(namespace, name)
            .await?
            .ok_or_else(|| SecretError::NotFound {
                namespace: namespace.into(),
                name: name.into(),
            })?;
        let bytes = data.get(key).ok_or_else(|| SecretError::MissingKey {
            namespace: namespace.into(),
            name: name.into(),
            key: key.into(),
        })?;
        String::from_utf8(bytes.clone()).map_err(|_| SecretError::NotText {
            namespace: namespace.into(),
            name: name.into(),
            key: key.into(),
        })
    }
}

/// Reads a [`inrun_blueprint::SecretRef`], defaulting its namespace to the CR's.
///
/// # Errors
/// [`SecretError`] from the source.
pub async fn resolve(
    secrets: &dyn Secrets,
    secret: &inrun_blueprint::SecretRef,
    cr_namespace: &str,
) -> Result<String, SecretError> {
    let ns = secret.namespace.as_deref().unwrap_or(cr_namespace);
    secrets.get(ns, &secret.name, &secret.key).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_entries_are_pruned_and_fresh_ones_kept() {
        let mut cache: HashMap<&str, super::Cached> = HashMap::new();
        let now = Instant::now();
        let old = now
            .checked_sub(Duration::from_secs(120))
            .expect("an instant");
        cache.insert("old", (old, None));
        cache.insert("fresh", (now, Some(BTreeMap::new())));
        super::prune(&mut cache, Duration::from_secs(60));
        assert!(cache.contains_key("fresh") && !cache.contains_key("old"));
    }

    #[tokio::test]
    async fn static_secrets_parse_arguments_and_hide_values_from_errors() {
        let s = StaticSecrets::new()
            .parse("team-a/remote/token=s3cret=x")
            .expect("parse");
        assert_eq!(
            s.get("team-a", "remote", "token").await.expect("value"),
            "s3cret=x"
        );
        let missing = s
            .get("team-a", "remote", "other")
            .await
            .expect_err("missing");
        assert!(
            missing
                .to_string()
                .contains("--secret team-a/remote/other=VALUE")
        );
        let bad = StaticSecrets::new()
            .parse("a/b=topsecret")
            .expect_err("bad");
        assert!(!bad.to_string().contains("topsecret"));
        assert!(!format!("{s:?}").contains("s3cret"));
    }
}
