//! The objects plugins may read, served from watch caches: one reflector per kind, started
//! on the first read of that kind and kept until the cache is dropped. A guest's read never
//! becomes a request to the API server of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::watch;

use super::kinds::{Kind, Kinds};
use inrun_wasm::{ClusterReader, Scope};

/// How long a read waits for a newly started watch to list its kind, at most (the plugin
/// call's deadline usually ends the wait first).
const FIRST_LIST_WAIT: Duration = Duration::from_secs(10);

/// A [`ClusterReader`] on watch caches of the kinds plugins read.
///
/// # Guarantees
/// - One watch per (apiVersion, kind), however many plugins and calls read it.
/// - A read of a newly watched kind waits for its first complete list, so a plugin never
///   sees an empty cache that is merely not filled yet; if that list fails, the read fails
///   at once with the reason, and the watch keeps retrying with backoff.
/// - Watches run on the tokio runtime of the first read; they stop when the cache is dropped.
pub struct WatchCache {
    client: Client,
    kinds: Kinds,
    watches: Mutex<HashMap<(String, String), Arc<Watched>>>,
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache").finish_non_exhaustive()
    }
}

/// One kind's watch.
struct Watched {
    kind: Kind,
    store: Store<DynamicObject>,
    synced: watch::Receiver<Sync>,
    task: tokio::task::AbortHandle,
}

/// Whether a watch has completed its first list.
#[derive(Debug, Clone, PartialEq)]
enum Sync {
    /// Not yet; the last error the watch met, if any.
    Pending(Option<String>),
    /// The store holds a complete list (it stays so through re-lists).
    Ready,
}

impl WatchCache {
    /// A cache reading through `client`. Nothing is watched until the first read.
    pub fn new(client: Client) -> Self {
        WatchCache {
            client,
            kinds: Kinds::default(),
            watches: Mutex::new(HashMap::new()),
        }
    }

    fn watches(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Watched>>> {
        // The map is only inserted into; a panic elsewhere leaves it valid.
        self.watches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The watch of `api_version`/`kind`, started (and its first list awaited) if needed.
    async fn watched(&self, api_version: &str, kind: &str) -> Result<Arc<Watched>, String> {
        let key = (api_version.to_string(), kind.to_string());
        let existing = self.watches().get(&key).cloned();
        let watched = match existing {
            Some(w) => w,
            None => {
                let resolved = self
                    .kinds
                    .resolve(&self.client, api_version, kind)
                    .await
                    .map_err(|e| inrun_contract::errors::chain(&e))?;
                self.watches()
                    .entry(key)
                    .or_insert_with(|| Arc::new(start(self.client.clone(), resolved)))
                    .clone()
            }
        };
        let mut synced = watched.synced.clone();
        let wait = synced.wait_for(|s| !matches!(s, Sync::Pending(None)));
        match tokio::time::timeout(FIRST_LIST_WAIT, wait).await {
            Ok(Ok(state)) => match &*state {
                Sync::Ready => {}
                Sync::Pending(error) => {
                    return Err(format!(
                        "the host's cache of {kind} is not filled yet: {}",
                        error.as_deref().unwrap_or("listing")
                    ));
                }
            },
            Ok(Err(_)) => return Err(format!("the host's watch of {kind} has stopped")),
            Err(_) => {
                return Err(format!(
                    "the host's cache of {kind} was not filled within {}s",
                    FIRST_LIST_WAIT.as_secs()
                ));
            }
        }
        Ok(watched)
    }
}

impl Drop for WatchCache {
    fn drop(&mut self) {
        for w in self.watches().values() {
            w.task.abort();
        }
    }
}

/// Starts the watch of `kind` on the current tokio runtime.
fn start(client: Client, kind: Kind) -> Watched {
    let api: Api<DynamicObject> = Api::all_with(client, &kind.resource);
    let writer = reflector::store::Writer::new(kind.resource.clone());
    let store = writer.as_reader();
    let (tx, synced) = watch::channel(Sync::Pending(None));
    let name = kind.resource.kind.clone();
    let events = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    tx.send_replace(Sync::Ready);
                }
                Ok(_) => {}
                Err(e) => {
                    let error = inrun_contract::errors::chain(&e);
                    tracing::warn!(kind = %name, error = %error, "watch of a kind plugins read");
                    tx.send_if_modified(|s| match s {
                        Sync::Ready => false,
                        Sync::Pending(_) => {
                            *s = Sync::Pending(Some(error));
                            true
                        }
                    });
                }
            }
        }
    });
    Watched {
        kind,
        store,
        synced,
        task: task.abort_handle(),
    }
}

impl Watched {
    /// Fails unless `scope` fits the kind's own scope.
    fn check_scope(&self, scope: Scope<'_>) -> Result<(), String> {
        let kind = &self.kind.resource.kind;
        match (self.kind.namespaced, scope) {
            (true, Scope::Cluster) => Err(format!(
                "{kind} is namespaced: its grant must not say clusterScoped"
            )),
            (false, Scope::Namespace(_) | Scope::AllNamespaces) => Err(format!(
                "{kind} is cluster-scoped: grant it with clusterScoped: true"
            )),
            _ => Ok(()),
        }
    }

    /// An object as the guest sees it: apiVersion and kind set, managedFields dropped.
    fn to_json(&self, obj: &DynamicObject) -> Result<Value, String> {
        let mut value = serde_json::to_value(obj).map_err(|e| e.to_string())?;
        if let Some(map) = value.as_object_mut() {
            let ar = &self.kind.resource;
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(ar.api_version.clone()));
            map.entry("kind")
                .or_insert_with(|| Value::String(ar.kind.clone()));
            if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
        Ok(value)
    }
}

/// Whether `obj` is within `scope` and carries every label in `labels`.
fn selected(obj: &DynamicObject, scope: Scope<'_>, labels: &[(String, String)]) -> bool {
    let in_scope = match scope {
        Scope::Namespace(ns) => obj.metadata.namespace.as_deref() == Some(ns),
        Scope::AllNamespaces | Scope::Cluster => true,
    };
    in_scope
        && labels.iter().all(|(k, v)| {
            obj.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .is_some_and(|have| have == v)
        })
}

#[async_trait]
impl ClusterReader for WatchCache {
    async fn get(
        &self,
        api_version: &str,
        kind: &str,
        scope: Scope<'_>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let w = self.watched(api_version, kind).await?;
        w.check_scope(scope)?;
        let mut key = ObjectRef::new_with(name, w.kind.resource.clone());
        match scope {
            Scope::Namespace(ns) => key = key.within(ns),
            Scope::Cluster => {}
            Scope::AllNamespaces => return Err("get needs a namespace".into()),
        }
        w.store.get(&key).map(|obj| w.to_json(&obj)).transpose()
    }

    async fn list(
        &self,
        api_version: &str,
        kind: &str,
        scope: Scope<'_>,
        labels: &[(String, String)],
    ) -> Result<Vec<Value>, String> {
        let w = self.watched(api_version, kind).await?;
        w.check_scope(scope)?;
        w.store
            .state()
            .iter()
            .filter(|obj| selected(obj, scope, labels))
            .map(|obj| w.to_json(obj))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(ns: &str, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": ns, "labels": labels},
        }))
        .expect("object")
    }

    #[test]
    fn selection_matches_the_namespace_and_every_label() {
        let o = obj("team-a", json!({"app": "web", "tier": "front"}));
        let app = [("app".to_string(), "web".to_string())];
        assert!(selected(&o, Scope::Namespace("team-a"), &app));
        assert!(!selected(&o, Scope::Namespace("team-b"), &app));
        assert!(selected(&o, Scope::AllNamespaces, &[]));
        let wrong = [("app".to_string(), "db".to_string())];
        assert!(!selected(&o, Scope::AllNamespaces, &wrong));
        let missing = [("zone".to_string(), "x".to_string())];
        assert!(!selected(&o, Scope::AllNamespaces, &missing));
    }
}
