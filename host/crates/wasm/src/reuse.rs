//! Opt-in instance reuse ([`Limits::reuse_calls`]): a plugin's instance serves up to that
//! many calls before it is discarded, instead of one.
//!
//! Reuse skips instantiation, teardown and the guest's own warm-up (an interpreter's
//! imports, Go's runtime start, JSON caches), which is most of a call for an interpreted
//! or garbage-collected guest. The price is state kept between calls: whatever the guest
//! leaves in its globals, the next call it serves can read. So:
//!
//! - an instance serves one tenant only, and, when the call's grants let it read the
//!   cluster or credentials (data scoped to the CR's namespace), one namespace only;
//! - every call gets its own limits, deadline, memory cap and budget admission (the memory
//!   the instance already holds is charged to it), grants and CR; the sealed WASI context
//!   grants nothing to keep, and what the guest printed before is not logged again;
//! - an instance is discarded after any failure (a trap, the deadline, a memory cap, an
//!   error the guest returned, a bad outcome), after its calls, when its plugin is
//!   replaced (a new version is a new [`Plugin`]), and when keeping it would pass the
//!   bounds on idle instances ([`Shelf`]).
//!
//! Idle instances hold pool slots of their own (the pool has [`kept_slots`] more than the
//! calls it runs at once), so keeping them never takes a slot a call needs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use wasmtime::Store;

#[cfg(doc)]
use super::Limits;
use super::bindings;
use super::grants::Grants;
use super::plugin::{Plugin, Pre};
use super::state::State;

/// Pool slots kept for idle instances, beside the `calls` a pool of that many runs at once.
pub(super) fn kept_slots(calls: u32) -> u32 {
    (calls / 4).max(1)
}

/// A live instance of a plugin's component, typed as its world.
pub(super) enum Guest {
    Reconciler(bindings::reconciler::Reconciler),
    Reconciler2(bindings::reconciler2::Reconciler),
    Hooks(bindings::hooks::Hooks),
    Hooks2(bindings::hooks2::Hooks),
    Package(bindings::package::Package),
}

impl Pre {
    /// A new instance in `store`.
    pub(super) async fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Guest> {
        Ok(match self {
            Pre::Reconciler(pre) => Guest::Reconciler(pre.instantiate_async(store).await?),
            Pre::Reconciler2(pre) => Guest::Reconciler2(pre.instantiate_async(store).await?),
            Pre::Hooks(pre) => Guest::Hooks(pre.instantiate_async(store).await?),
            Pre::Hooks2(pre) => Guest::Hooks2(pre.instantiate_async(store).await?),
            Pre::Package(pre) => Guest::Package(pre.instantiate_async(store).await?),
        })
    }
}

/// Which calls may share an instance: one tenant's (every plugin handle belongs to one),
/// and one namespace's when the grants reach data of the CR's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    tenant: Option<String>,
    namespace: Option<String>,
}

impl Key {
    /// The key of a call, `None` when it must not reuse (reuse is off, or 1 call).
    pub(super) fn of(
        plugin: &Plugin,
        reuse_calls: u32,
        grants: &Grants,
        cr_namespace: Option<&str>,
    ) -> Option<Key> {
        if reuse_calls <= 1 {
            return None;
        }
        let scoped = grants.cluster.is_some() || grants.credentials.is_some();
        Some(Key {
            tenant: plugin.engine().tenant_name().map(str::to_string),
            namespace: scoped.then(|| cr_namespace.unwrap_or_default().to_string()),
        })
    }
}

/// An idle instance: its store (state of the last call cleared), the instance, and how
/// many calls it has served.
pub(super) struct Kept {
    pub(super) store: Store<State>,
    pub(super) guest: Guest,
    pub(super) served: u32,
    _ticket: Ticket,
}

/// A plugin's idle instances, by [`Key`].
#[derive(Default)]
pub(super) struct Instances {
    idle: Mutex<HashMap<Key, Vec<Kept>>>,
}

impl Instances {
    fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Vec<Kept>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently kept idle instance for `key`, if any.
    pub(super) fn take(&self, key: &Key) -> Option<Kept> {
        let mut idle = self.idle();
        let kept = idle.get_mut(key)?.pop();
        idle.retain(|_, v| !v.is_empty());
        kept
    }

    /// Keeps an instance that has served `served` calls, if the shelf has room for it.
    pub(super) fn keep(
        &self,
        shelf: &Arc<Shelf>,
        key: Key,
        mut store: Store<State>,
        guest: Guest,
        served: u32,
    ) {
        // Its place on the shelf before its admission goes: the slot it holds is never one
        // a call was admitted to.
        let bytes = store.data().limiter.used;
        let Some(ticket) = shelf.reserve(key.tenant.as_deref(), bytes) else {
            return;
        };
        store.data_mut().park();
        let kept = Kept {
            store,
            guest,
            served,
            _ticket: ticket,
        };
        self.idle().entry(key).or_default().push(kept);
    }

    /// Idle instances held.
    pub(super) fn len(&self) -> usize {
        self.idle().values().map(Vec::len).sum()
    }
}

/// The bounds on idle instances, engine-wide: how many (the pool slots kept for them) and
/// how much memory, in all and per tenant, so that one tenant's idle instances never
/// crowd out another's.
pub(super) struct Shelf {
    instances: Bound,
    bytes: Bound,
    tenant_instances: usize,
    tenant_bytes: usize,
    tenants: Mutex<HashMap<String, (usize, usize)>>,
}

impl Shelf {
    /// A shelf of `slots` instances and `bytes` of memory; a tenant may hold a quarter of
    /// each (at least one instance).
    pub(super) fn new(slots: usize, bytes: usize) -> Self {
        Shelf {
            instances: Bound::new(slots),
            bytes: Bound::new(bytes),
            tenant_instances: (slots / 4).max(1),
            tenant_bytes: bytes / 4,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Room for one idle instance of `bytes` for `tenant`, held until the ticket drops:
    /// a place ([`Ticket`] of 0 bytes), then its bytes ([`Ticket::hold`]).
    pub(super) fn reserve(self: &Arc<Self>, tenant: Option<&str>, bytes: usize) -> Option<Ticket> {
        if !self.instances.try_add(1) {
            return None;
        }
        if let Some(name) = tenant {
            let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
            let held = tenants.get(name).map_or(0, |held| held.0);
            if held + 1 > self.tenant_instances {
                drop(tenants);
                self.instances.sub(1);
                return None;
            }
            tenants.entry(name.to_string()).or_default().0 += 1;
        }
        let mut ticket = Ticket {
            shelf: self.clone(),
            tenant: tenant.map(str::to_string),
            bytes: 0,
        };
        // Past the bytes' bounds the ticket drops, and gives its place back.
        ticket.hold(bytes).then_some(ticket)
    }

    /// Idle instances held, engine-wide.
    pub(super) fn held(&self) -> usize {
        self.instances.used.load(Ordering::Relaxed)
    }
}

/// A count with a ceiling.
struct Bound {
    used: AtomicUsize,
    max: usize,
}

impl Bound {
    fn new(max: usize) -> Self {
        Bound {
            used: AtomicUsize::new(0),
            max,
        }
    }

    fn try_add(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&u| u <= self.max)
            })
            .is_ok()
    }

    fn sub(&self, n: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }
}

/// An idle instance's place on the shelf, given back when the instance goes.
pub(super) struct Ticket {
    shelf: Arc<Shelf>,
    tenant: Option<String>,
    bytes: usize,
}

impl Ticket {
    /// Adds `bytes` to what this place holds, if the bounds in all and the tenant's allow.
    pub(super) fn hold(&mut self, bytes: usize) -> bool {
        if !self.shelf.bytes.try_add(bytes) {
            return false;
        }
        if let Some(name) = &self.tenant {
            let mut tenants = self.shelf.tenants.lock().unwrap_or_else(|p| p.into_inner());
            // A ticket's tenant has an entry until the ticket drops.
            let held = tenants.entry(name.clone()).or_default();
            if held.1 + bytes > self.shelf.tenant_bytes {
                drop(tenants);
                self.shelf.bytes.sub(bytes);
                return false;
            }
            held.1 += bytes;
        }
        self.bytes += bytes;
        true
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.shelf.instances.sub(1);
        self.shelf.bytes.sub(self.bytes);
        if let Some(name) = &self.tenant {
            let mut tenants = self.shelf.tenants.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(held) = tenants.get_mut(name) {
                held.0 = held.0.saturating_sub(1);
                held.1 = held.1.saturating_sub(self.bytes);
                if held.0 == 0 {
                    tenants.remove(name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shelf_bounds_idle_instances_in_all_and_per_tenant_and_frees_them_on_drop() {
        let shelf = Arc::new(Shelf::new(8, 100));
        // A tenant holds a quarter: 2 instances, 25 bytes.
        let a1 = shelf.reserve(Some("a"), 10).expect("a1");
        let a2 = shelf.reserve(Some("a"), 10).expect("a2");
        assert!(shelf.reserve(Some("a"), 1).is_none(), "a third of a's");
        let b1 = shelf.reserve(Some("b"), 20).expect("b's own share");
        assert!(shelf.reserve(Some("b"), 10).is_none(), "b's bytes");
        assert_eq!(shelf.held(), 3);
        drop(a1);
        assert!(
            shelf.reserve(Some("a"), 10).is_some(),
            "a's place came back"
        );
        drop((a2, b1));
        assert_eq!(shelf.held(), 0);
        assert_eq!(shelf.bytes.used.load(Ordering::Relaxed), 0);
        // The host's own plugins (no tenant) only meet the engine-wide bounds.
        let host: Vec<_> = (0..8).filter_map(|_| shelf.reserve(None, 1)).collect();
        assert_eq!(host.len(), 8);
        assert!(shelf.reserve(Some("c"), 0).is_none(), "every slot is taken");
    }

    #[test]
    fn a_place_taken_empty_holds_bytes_only_within_the_bounds() {
        let shelf = Arc::new(Shelf::new(8, 100));
        // A tenant holds a quarter: 25 bytes.
        let mut a = shelf.reserve(Some("a"), 0).expect("a's place");
        assert!(a.hold(20));
        assert!(!a.hold(10), "past a's quarter");
        assert_eq!(
            shelf.bytes.used.load(Ordering::Relaxed),
            20,
            "nothing kept of it"
        );
        let mut b = shelf.reserve(Some("b"), 0).expect("b's place");
        assert!(b.hold(25), "b's own quarter");
        drop((a, b));
        assert_eq!(shelf.bytes.used.load(Ordering::Relaxed), 0);
        assert_eq!(shelf.held(), 0);
    }
}
