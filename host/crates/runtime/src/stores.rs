//! Watch caches of the CRs' children (metadata only, one per managed kind), and the ids
//! the trigger state knows children by.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::kinds::Kind;
use inrun_pass::meta::APPLIED_HASH;
use inrun_pass::meta::{OWNER_UID, RECONCILER_MANAGER};

/// How long a pass waits for the children's caches to list once.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

type Stores = HashMap<(String, String), Store<CachedChild>>;

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
    pub fn insert(&self, kind: &Kind, store: Store<CachedChild>) {
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
    ) -> Option<Option<Arc<CachedChild>>> {
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

/// A child as its cache keeps it: name, namespace, resourceVersion and deletion in
/// `metadata`, and of the rest only what the host reads — the CR its owner label names,
/// the hash the host stamped on it, and whether anyone but the host wrote it since. The
/// rest stays on the API server (a pass's `request.children` lists the children whole).
///
/// Kept as [`ObjectMeta`] labels, annotations and managedFields, those three facts cost
/// about 1 KiB a child (a B-tree node of ~0.5 KiB per map even with one entry, an entry
/// per field manager); as fields, a few dozen bytes.
#[derive(Clone, Debug)]
pub struct CachedChild {
    /// Name, namespace, resourceVersion and deletionTimestamp; nothing else.
    pub metadata: ObjectMeta,
    /// The uid the child's `inrun.dev/owner-uid` label names.
    pub owner: Option<Box<str>>,
    /// The child's `inrun.dev/applied` annotation: the hash of what the host last applied.
    pub stamp: Option<Box<str>>,
    /// Whether nobody but the host has written the child's fields since the host's last
    /// apply: in its managed fields (status aside), the host's entry is the newest.
    pub untouched: bool,
}

impl CachedChild {
    /// `child`'s metadata, reduced.
    pub fn new(child: PartialObjectMeta<DynamicObject>) -> Self {
        let ObjectMeta {
            name,
            namespace,
            resource_version,
            deletion_timestamp,
            labels,
            annotations,
            managed_fields,
            ..
        } = child.metadata;
        CachedChild {
            untouched: untouched(managed_fields.as_deref().unwrap_or_default()),
            owner: labels
                .and_then(|mut l| l.remove(OWNER_UID))
                .map(String::into_boxed_str),
            stamp: annotations
                .and_then(|mut a| a.remove(APPLIED_HASH))
                .map(String::into_boxed_str),
            metadata: ObjectMeta {
                name,
                namespace,
                resource_version,
                deletion_timestamp,
                ..ObjectMeta::default()
            },
        }
    }
}

/// Whether, among the entries of the object itself (not its subresources), the host's
/// `Apply` is the newest.
fn untouched(entries: &[ManagedFieldsEntry]) -> bool {
    let own: Vec<_> = entries
        .iter()
        .filter(|m| m.subresource.as_deref().unwrap_or_default().is_empty())
        .collect();
    let Some(ours) = own.iter().find(|m| {
        m.manager.as_deref() == Some(RECONCILER_MANAGER) && m.operation.as_deref() == Some("Apply")
    }) else {
        return false;
    };
    own.iter().all(|m| {
        std::ptr::eq(*m, *ours) || matches!((&m.time, &ours.time), (Some(t), Some(o)) if t.0 < o.0)
    })
}

crate::cached::dynamic_resource!(CachedChild);

/// A watch event of a child, reduced to what its cache keeps.
pub fn cached(
    event: watcher::Event<PartialObjectMeta<DynamicObject>>,
) -> watcher::Event<CachedChild> {
    use watcher::Event;
    match event {
        Event::Apply(c) => Event::Apply(CachedChild::new(c)),
        Event::Delete(c) => Event::Delete(CachedChild::new(c)),
        Event::Init => Event::Init,
        Event::InitApply(c) => Event::InitApply(CachedChild::new(c)),
        Event::InitDone => Event::InitDone,
    }
}

/// A child's id in the trigger state: group, kind, namespace and name.
pub fn child_id(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(managed: serde_json::Value) -> PartialObjectMeta<DynamicObject> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "web", "namespace": "a", "resourceVersion": "7", "uid": "c1",
                "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"inrun.dev/owner-uid": "u1", "app": "web", "inrun.dev/applied": "forged"},
                "annotations": {"inrun.dev/applied": "abc", "inrun.dev/apply-order": "2",
                                "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "ownerReferences": [{"apiVersion": "x/v1", "kind": "X", "name": "x", "uid": "u1"}],
                "managedFields": managed,
            }
        }))
        .expect("a child")
    }

    fn entry(
        manager: &str,
        operation: &str,
        time: &str,
        subresource: Option<&str>,
    ) -> serde_json::Value {
        let mut e = serde_json::json!({"manager": manager, "operation": operation, "time": time,
                                       "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}});
        if let Some(sub) = subresource {
            e["subresource"] = sub.into();
        }
        e
    }

    #[test]
    fn a_cached_child_keeps_what_the_host_reads_and_nothing_else() {
        let cached = CachedChild::new(child(serde_json::json!([entry(
            RECONCILER_MANAGER,
            "Apply",
            "2026-01-01T00:00:00Z",
            None
        )])));
        assert_eq!(cached.owner.as_deref(), Some("u1"));
        // The stamp is the annotation's value; a label of its name is not read as it.
        assert_eq!(cached.stamp.as_deref(), Some("abc"));
        assert!(cached.untouched);
        let m = &cached.metadata;
        assert_eq!(
            (
                m.name.as_deref(),
                m.namespace.as_deref(),
                m.resource_version.as_deref()
            ),
            (Some("web"), Some("a"), Some("7"))
        );
        let empty = ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            resource_version: m.resource_version.clone(),
            ..ObjectMeta::default()
        };
        assert_eq!(*m, empty, "no other metadata is kept");
    }

    #[test]
    fn a_child_is_untouched_while_the_hosts_apply_is_its_newest_write() {
        let ours = entry(RECONCILER_MANAGER, "Apply", "2026-01-01T00:00:05Z", None);
        let untouched = |entries: serde_json::Value| CachedChild::new(child(entries)).untouched;
        assert!(untouched(serde_json::json!([ours])));
        // A status write by a controller is not a write of the child's fields.
        assert!(untouched(serde_json::json!([
            ours,
            entry(
                "kube-controller-manager",
                "Update",
                "2026-01-01T00:00:09Z",
                Some("status")
            )
        ])));
        assert!(untouched(serde_json::json!([
            entry("kubectl-edit", "Update", "2026-01-01T00:00:01Z", None),
            ours
        ])));
        assert!(!untouched(serde_json::json!([
            ours,
            entry("kubectl-edit", "Update", "2026-01-01T00:00:09Z", None)
        ])));
        // Written in the same second: not known to be older.
        assert!(!untouched(serde_json::json!([
            ours,
            entry("kubectl-edit", "Update", "2026-01-01T00:00:05Z", None)
        ])));
        assert!(!untouched(serde_json::json!([entry(
            RECONCILER_MANAGER,
            "Update",
            "2026-01-01T00:00:05Z",
            None
        )])));
        assert!(!untouched(serde_json::json!([])));
    }

    #[test]
    fn watch_events_keep_their_kind_when_reduced() {
        let one = || child(serde_json::json!([]));
        assert!(
            matches!(cached(watcher::Event::Apply(one())), watcher::Event::Apply(c) if c.owner.is_some())
        );
        assert!(matches!(
            cached(watcher::Event::Delete(one())),
            watcher::Event::Delete(_)
        ));
        assert!(matches!(
            cached(watcher::Event::InitApply(one())),
            watcher::Event::InitApply(_)
        ));
        assert!(matches!(cached(watcher::Event::Init), watcher::Event::Init));
        assert!(matches!(
            cached(watcher::Event::InitDone),
            watcher::Event::InitDone
        ));
    }
}
