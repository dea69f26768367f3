//! What wakes a CR: a change to it or to one of its children made by anyone but the host.
//! The host's own writes are told apart by the resourceVersion each write returned; a
//! watch event that arrives while the CR's pass is still running is held until the pass
//! ends, then counted as the host's own or as a change that needs another pass. Children
//! map to their CR through an index by owner uid, never a scan.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;

use super::cached::CachedCr;

/// How many of its own recent writes the host remembers per CR (a pass writes a few
/// objects; late watch events of the last pass or two must still be recognised).
const OWN_WRITES: usize = 64;

/// A stand-in for an object id or a resourceVersion in the trigger state: a 64-bit hash,
/// so a CR's state costs a few dozen bytes per remembered write instead of two strings.
/// State is compared only within one CR's few entries, where a collision is not a concern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Tag(u64);

fn tag(text: &str) -> Tag {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    Tag(h.finish())
}

/// What a child's watch event says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildChange {
    /// Created or changed.
    Applied,
    /// Seen by a list of its kind (the watch starting, or starting again after a gap).
    Listed,
    /// Gone.
    Deleted,
}

/// Trigger state of one CRD's controller.
pub struct Triggers {
    /// The CRD's resource, for the references a child event wakes.
    resource: ApiResource,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// CR uid → the CR's key, for mapping a child's owner label.
    owners: HashMap<Tag, String>,
    /// CR key → its state.
    crs: HashMap<String, CrState>,
}

#[derive(Default)]
struct CrState {
    /// Hash of what a CR change must touch to start a pass (spec generation, labels,
    /// annotations, finalizers, deletion), as last seen.
    seen: Option<u64>,
    /// A pass of this CR is running.
    in_pass: bool,
    /// Events (object id, resourceVersion) that arrived during the pass.
    parked: Vec<(Tag, Tag)>,
    /// The host's recent writes: (object id, resourceVersion it returned).
    own: VecDeque<(Tag, Tag)>,
    /// Children the host deleted, whose delete events are its own.
    deleted: HashSet<Tag>,
    /// What the host last applied to each child: (hash of the object sent, the
    /// resourceVersion the apply returned).
    applied: HashMap<Tag, (u64, Tag)>,
}

impl CrState {
    fn is_own(&self, id: Tag, rv: Tag) -> bool {
        self.own.contains(&(id, rv))
    }

    /// Remembers a write of the host's, forgetting the oldest past [`OWN_WRITES`].
    fn own_write(&mut self, id: Tag, rv: Tag) {
        if self.own.len() >= OWN_WRITES {
            self.own.pop_front();
        }
        self.own.push_back((id, rv));
    }
}

/// `namespace/name` (or `name`) of an object.
pub fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// What a change to a CR must touch to start a pass: its spec (generation), labels,
/// annotations, finalizers or deletion. A status-only change — above all the host's own
/// status write — starts none.
fn trigger_hash(meta: &ObjectMeta) -> u64 {
    let mut h = DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut h);
    h.finish()
}

impl Triggers {
    /// Trigger state for the CRs of `resource`.
    pub fn new(resource: ApiResource) -> Self {
        Triggers {
            resource,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a CR the watch delivered (for the owner index); `cr_id` is its object id.
    /// Returns whether the change starts a pass.
    pub fn cr_changed(&self, cr: &ObjectMeta, cr_id: &str) -> bool {
        let key = key_of(
            cr.namespace.as_deref(),
            cr.name.as_deref().unwrap_or_default(),
        );
        let (id, rv) = (
            tag(cr_id),
            tag(cr.resource_version.as_deref().unwrap_or_default()),
        );
        let hash = trigger_hash(cr);
        let mut inner = self.lock();
        if let Some(uid) = &cr.uid {
            inner.owners.entry(tag(uid)).or_insert_with(|| key.clone());
        }
        let state = inner.crs.entry(key).or_default();
        if state.seen.replace(hash) == Some(hash) || state.is_own(id, rv) {
            return false;
        }
        if state.in_pass {
            state.parked.push((id, rv));
            return false;
        }
        true
    }

    /// A change that woke `cr` was dropped before its pass ran (its list restarted): the
    /// next delivery of the same CR wakes it again.
    pub fn unsee(&self, cr: &ObjectMeta) {
        let key = key_of(
            cr.namespace.as_deref(),
            cr.name.as_deref().unwrap_or_default(),
        );
        if let Some(state) = self.lock().crs.get_mut(&key) {
            state.seen = None;
        }
    }

    /// Forgets a CR that is gone.
    pub fn cr_gone(&self, cr: &ObjectMeta) {
        let key = key_of(
            cr.namespace.as_deref(),
            cr.name.as_deref().unwrap_or_default(),
        );
        let mut inner = self.lock();
        inner.crs.remove(&key);
        if let Some(uid) = &cr.uid {
            inner.owners.remove(&tag(uid));
        }
    }

    /// The CR a child event should wake, if any: none for the host's own write or delete,
    /// none while that CR's pass runs (the event is held for [`Triggers::end`]). A child
    /// [`ChildChange::Listed`] wakes the CR only when it differs from what the host last
    /// applied (a relist after a gap), never at start-up.
    pub fn child_changed(
        &self,
        owner_uid: &str,
        child_id: &str,
        rv: &str,
        change: ChildChange,
    ) -> Option<ObjectRef<CachedCr>> {
        let (id, rv) = (tag(child_id), tag(rv));
        let mut inner = self.lock();
        let key = inner.owners.get(&tag(owner_uid))?.clone();
        let owner = match key.split_once('/') {
            Some((ns, name)) => ObjectRef::new_with(name, self.resource.clone()).within(ns),
            None => ObjectRef::new_with(&key, self.resource.clone()),
        };
        let state = inner.crs.entry(key).or_default();
        if change == ChildChange::Deleted {
            if state.deleted.remove(&id) {
                return None;
            }
            state.applied.remove(&id);
        } else if state.is_own(id, rv)
            || (change == ChildChange::Listed
                && state.applied.get(&id).is_none_or(|(_, r)| *r == rv))
        {
            return None;
        }
        if state.in_pass {
            state.parked.push((id, rv));
            return None;
        }
        Some(owner)
    }

    /// A pass of the CR `key` starts.
    pub fn begin(&self, key: &str) {
        let mut inner = self.lock();
        let state = inner.crs.entry(key.to_string()).or_default();
        state.in_pass = true;
        state.parked.clear();
    }

    /// The pass of `key` ended. Returns whether a change other than the host's own arrived
    /// while it ran (the CR must be reconciled again).
    pub fn end(&self, key: &str) -> bool {
        let mut inner = self.lock();
        let Some(state) = inner.crs.get_mut(key) else {
            return false;
        };
        state.in_pass = false;
        let parked = std::mem::take(&mut state.parked);
        parked.iter().any(|&(id, rv)| !state.is_own(id, rv))
    }

    /// Notes a write the host made for the CR `key`: `object_id` now has `rv`.
    pub fn wrote(&self, key: &str, object_id: &str, rv: &str) {
        let mut inner = self.lock();
        inner
            .crs
            .entry(key.to_string())
            .or_default()
            .own_write(tag(object_id), tag(rv));
    }

    /// Notes that the host is about to delete `child_id` for the CR `key`.
    pub fn deleting(&self, key: &str, child_id: &str) {
        let mut inner = self.lock();
        let state = inner.crs.entry(key.to_string()).or_default();
        state.deleted.insert(tag(child_id));
        state.applied.remove(&tag(child_id));
    }

    /// Notes what the host applied to `child_id`: the hash of the object sent and the
    /// resourceVersion the apply returned.
    pub fn applied(&self, key: &str, child_id: &str, hash: u64, rv: &str) {
        let mut inner = self.lock();
        let state = inner.crs.entry(key.to_string()).or_default();
        let (id, rv) = (tag(child_id), tag(rv));
        state.applied.insert(id, (hash, rv));
        state.own_write(id, rv);
    }

    /// Whether the host's last apply of `child_id` of `key` sent an object hashing to
    /// `hash` and returned resourceVersion `rv`.
    pub fn applied_as(&self, key: &str, child_id: &str, hash: u64, rv: &str) -> bool {
        self.lock()
            .crs
            .get(key)
            .and_then(|s| s.applied.get(&tag(child_id)))
            .is_some_and(|&applied| applied == (hash, tag(rv)))
    }
}

/// Holds the CRs a (re)list wakes until the list is complete: the store swaps in the
/// listed objects only then, and a CR triggered before would be looked up in the old
/// store, not found, and dropped (after the API server restarts, a paginated relist would
/// leave new CRs unreconciled). A list that restarts before it completes (a later page
/// failed) drops what it held; those CRs are handed to `dropped`, so that the next list,
/// which delivers them unchanged, wakes them again.
pub(crate) struct ListGate<K> {
    held: Vec<K>,
}

impl<K> Default for ListGate<K> {
    fn default() -> Self {
        ListGate { held: Vec::new() }
    }
}

impl<K> ListGate<K> {
    /// What `event` lets through now, given whether a delivered CR wakes.
    pub(crate) fn pass(
        &mut self,
        event: kube::runtime::watcher::Event<K>,
        wakes: impl Fn(&K) -> bool,
        mut dropped: impl FnMut(&K),
    ) -> Vec<K> {
        use kube::runtime::watcher::Event;
        match event {
            Event::Apply(cr) => wakes(&cr).then_some(cr).into_iter().collect(),
            Event::Init => {
                self.held.drain(..).for_each(|cr| dropped(&cr));
                Vec::new()
            }
            Event::InitApply(cr) => {
                if wakes(&cr) {
                    self.held.push(cr);
                }
                Vec::new()
            }
            Event::InitDone => std::mem::take(&mut self.held),
            Event::Delete(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ar() -> kube::discovery::ApiResource {
        kube::discovery::ApiResource {
            group: "demo.inrun.dev".into(),
            version: "v1".into(),
            api_version: "demo.inrun.dev/v1".into(),
            kind: "WebApp".into(),
            plural: "webapps".into(),
        }
    }

    fn cr(
        rv: &str,
        generation: i64,
        labels: serde_json::Value,
        status: serde_json::Value,
    ) -> CachedCr {
        serde_json::from_value(json!({
            "apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
            "metadata": {"name": "web", "namespace": "a", "uid": "u1", "generation": generation,
                         "labels": labels, "resourceVersion": rv},
            "status": status,
        }))
        .expect("cr")
    }

    fn changed(t: &Triggers, obj: &CachedCr) -> bool {
        t.cr_changed(&obj.metadata, "webapps/a/web")
    }

    #[test]
    fn a_cr_held_by_a_list_that_restarts_is_woken_by_the_next_list() {
        use kube::runtime::watcher::Event;
        let t = Triggers::new(ar());
        let mut gate = ListGate::default();
        let mut pass = |event| {
            gate.pass(
                event,
                |c: &CachedCr| changed(&t, c),
                |c| t.unsee(&c.metadata),
            )
            .len()
        };
        assert_eq!(pass(Event::Init), 0);
        assert_eq!(pass(Event::InitApply(cr("1", 1, json!({}), json!({})))), 0);
        // A later page fails: the watcher lists again from the start.
        assert_eq!(pass(Event::Init), 0);
        assert_eq!(pass(Event::InitApply(cr("1", 1, json!({}), json!({})))), 0);
        assert_eq!(pass(Event::InitDone), 1, "the CR is reconciled once listed");
        // A relist that finds it unchanged does not wake it again.
        assert_eq!(pass(Event::Init), 0);
        assert_eq!(pass(Event::InitApply(cr("1", 1, json!({}), json!({})))), 0);
        assert_eq!(pass(Event::InitDone), 0);
    }

    #[test]
    fn a_status_only_change_starts_no_pass_and_a_spec_change_does() {
        let t = Triggers::new(ar());
        assert!(changed(&t, &cr("1", 1, json!({}), json!({}))));
        assert!(!changed(&t, &cr("2", 1, json!({}), json!({"passes": 2}))));
        assert!(changed(&t, &cr("3", 2, json!({}), json!({}))));
    }

    #[test]
    fn the_hosts_own_metadata_write_never_wakes_its_cr() {
        let t = Triggers::new(ar());
        assert!(changed(&t, &cr("1", 1, json!({}), json!({}))));
        t.begin("a/web");
        t.wrote("a/web", "webapps/a/web", "2");
        t.end("a/web");
        assert!(!changed(
            &t,
            &cr("2", 1, json!({"managed": "inrun"}), json!({}))
        ));
        // Someone else's label edit does.
        assert!(changed(
            &t,
            &cr("3", 1, json!({"managed": "inrun", "team": "x"}), json!({}))
        ));
    }

    #[test]
    fn an_event_during_the_pass_is_held_and_counted_at_its_end() {
        let t = Triggers::new(ar());
        assert!(changed(&t, &cr("1", 1, json!({}), json!({}))));
        t.begin("a/web");
        // The host's own child apply, seen before the apply's answer came back.
        assert!(
            t.child_changed("u1", "cm/a/web", "5", ChildChange::Applied)
                .is_none()
        );
        t.applied("a/web", "cm/a/web", 7, "5");
        assert!(!t.end("a/web"), "only the host's own write arrived");
        t.begin("a/web");
        assert!(
            t.child_changed("u1", "cm/a/web", "6", ChildChange::Applied)
                .is_none()
        );
        assert!(
            t.end("a/web"),
            "a foreign edit during the pass asks for another"
        );
        // After the pass, a foreign edit wakes the CR at once.
        assert!(
            t.child_changed("u1", "cm/a/web", "8", ChildChange::Applied)
                .is_some()
        );
        assert!(
            t.child_changed("u1", "cm/a/web", "5", ChildChange::Applied)
                .is_none()
        );
    }

    #[test]
    fn a_child_the_host_deleted_wakes_nothing_and_one_deleted_by_others_wakes_its_cr() {
        let t = Triggers::new(ar());
        assert!(changed(&t, &cr("1", 1, json!({}), json!({}))));
        t.deleting("a/web", "cm/a/old");
        assert!(
            t.child_changed("u1", "cm/a/old", "9", ChildChange::Deleted)
                .is_none()
        );
        assert!(
            t.child_changed("u1", "cm/a/web", "9", ChildChange::Deleted)
                .is_some()
        );
        // Unknown owner: nothing to wake.
        assert!(
            t.child_changed("u2", "cm/a/web", "9", ChildChange::Deleted)
                .is_none()
        );
    }

    #[test]
    fn a_relist_wakes_a_cr_only_for_a_child_that_moved_since_the_hosts_apply() {
        let t = Triggers::new(ar());
        assert!(changed(&t, &cr("1", 1, json!({}), json!({}))));
        // Start-up: nothing remembered, nothing woken.
        assert!(
            t.child_changed("u1", "cm/a/web", "5", ChildChange::Listed)
                .is_none()
        );
        t.applied("a/web", "cm/a/web", 7, "5");
        assert!(
            t.child_changed("u1", "cm/a/web", "5", ChildChange::Listed)
                .is_none()
        );
        assert!(
            t.child_changed("u1", "cm/a/web", "6", ChildChange::Listed)
                .is_some()
        );
    }
}
