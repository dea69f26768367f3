//! Watch caches of the CRs' children (metadata only, one per managed kind), and the ids
//! the trigger state knows children by.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use super::kinds::Kind;

/// How long a pass waits for the children's caches to list once.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

type Stores = HashMap<(String, String), Store<PartialObjectMeta<DynamicObject>>>;

/// Watch caches (metadata only) of the CR's children, one per managed kind. A kind the API
/// server did not serve when the controller started gets its cache later, when it is.
#[derive(Clone, Default)]
pub struct ChildStores {
    stores: Arc<RwLock<Stores>>,
}

impl ChildStores {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Stores> {
        // Only inserted into; a panic elsewhere leaves the map valid.
        self.stores.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds the cache of `kind`.
    pub fn insert(&self, kind: &Kind, store: Store<PartialObjectMeta<DynamicObject>>) {
        self.stores
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                (
                    kind.resource.api_version.clone(),
                    kind.resource.kind.clone(),
                ),
                store,
            );
    }

    /// Waits (a little) until every cache has listed once, so a pass started with the
    /// controller does not mistake "not listed yet" for "missing". A cache that cannot
    /// list (its watch keeps failing) is not waited for long: its children are applied.
    pub async fn ready(&self) {
        let stores: Vec<_> = self.read().values().cloned().collect();
        for store in stores {
            let _ = tokio::time::timeout(READY_WAIT, store.wait_until_ready()).await;
        }
    }

    /// The cached child, if `kind` is watched and its cache has listed: `Some(None)` when
    /// the child does not exist.
    pub(super) fn get(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Arc<PartialObjectMeta<DynamicObject>>>> {
        let store = self
            .read()
            .get(&(
                kind.resource.api_version.clone(),
                kind.resource.kind.clone(),
            ))?
            .clone();
        futures::FutureExt::now_or_never(store.wait_until_ready())?.ok()?;
        let mut r = ObjectRef::new_with(name, kind.resource.clone());
        if let Some(ns) = namespace.filter(|_| kind.namespaced) {
            r = r.within(ns);
        }
        Some(store.get(&r))
    }
}

/// Trims a child to what its cache needs: name, namespace, resourceVersion, deletion, the
/// host's own labels and annotations (`inrun.dev/`), and who wrote it when (managedFields
/// without their field sets, which are most of an object's metadata). The rest stays on
/// the API server (a pass's `request.children` lists the children whole), so the cache
/// grows by a few hundred bytes per child.
pub fn trim(child: &mut PartialObjectMeta<DynamicObject>) {
    child.types = None;
    let meta = &mut child.metadata;
    meta.uid = None;
    meta.creation_timestamp = None;
    meta.generation = None;
    meta.generate_name = None;
    for map in [&mut meta.labels, &mut meta.annotations]
        .into_iter()
        .flatten()
    {
        map.retain(|k, _| k.starts_with(inrun_contract::RESERVED_PREFIX));
    }
    for entry in meta.managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
        entry.fields_type = None;
        entry.api_version = None;
    }
    meta.owner_references = None;
}

/// A child's id in the trigger state: group, kind, namespace and name.
pub fn child_id(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_child_keeps_what_the_host_reads_and_nothing_else() {
        let mut child: PartialObjectMeta<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "web", "namespace": "a", "resourceVersion": "7", "uid": "c1",
                "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"inrun.dev/owner-uid": "u1", "app": "web"},
                "annotations": {"inrun.dev/applied": "abc", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "ownerReferences": [{"apiVersion": "x/v1", "kind": "X", "name": "x", "uid": "u1"}],
                "managedFields": [{"manager": "inrun-reconciler", "operation": "Apply",
                                   "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:data": {"f:a": {}}}}],
            }
        }))
        .expect("a child");
        trim(&mut child);
        let m = &child.metadata;
        let keys = |map: &Option<std::collections::BTreeMap<String, String>>| {
            map.iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&m.labels), ["inrun.dev/owner-uid"]);
        assert_eq!(keys(&m.annotations), ["inrun.dev/applied"]);
        assert!(m.owner_references.is_none());
        let entry = &m.managed_fields.as_ref().expect("entries kept")[0];
        assert_eq!(entry.manager.as_deref(), Some("inrun-reconciler"));
        assert!(entry.time.is_some() && entry.fields_v1.is_none());
        assert_eq!(entry.operation.as_deref(), Some("Apply"));
        assert_eq!(m.resource_version.as_deref(), Some("7"));
        assert_eq!(
            (m.name.as_deref(), m.namespace.as_deref()),
            (Some("web"), Some("a"))
        );
        assert!(m.uid.is_none() && m.generation.is_none() && m.creation_timestamp.is_none());
        assert!(child.types.is_none());
    }
}
