//! Watch caches of the CRs' children (metadata only, one per managed kind), and the ids
//! the trigger state knows children by.

use std::collections::HashMap;
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use super::kinds::Kind;

/// How long a pass waits for the children's caches to list once.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Watch caches (metadata only) of the CR's children, one per managed kind.
#[derive(Clone, Default)]
pub struct ChildStores {
    stores: HashMap<(String, String), Store<PartialObjectMeta<DynamicObject>>>,
}

impl ChildStores {
    /// Adds the cache of `kind`.
    pub fn insert(&mut self, kind: &Kind, store: Store<PartialObjectMeta<DynamicObject>>) {
        self.stores.insert(
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
        for store in self.stores.values() {
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
        let store = self.stores.get(&(
            kind.resource.api_version.clone(),
            kind.resource.kind.clone(),
        ))?;
        futures::FutureExt::now_or_never(store.wait_until_ready())?.ok()?;
        let mut r = ObjectRef::new_with(name, kind.resource.clone());
        if let Some(ns) = namespace.filter(|_| kind.namespaced) {
            r = r.within(ns);
        }
        Some(store.get(&r))
    }
}

/// A child's id in the trigger state: group, kind, namespace and name.
pub fn child_id(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or_default())
}
