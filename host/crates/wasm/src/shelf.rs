//! The bounds on instances that wait for a call, engine-wide ([`Shelf`]): how many (the
//! pool slots kept for them) and how much memory, in all and per tenant. An instance kept
//! idle for reuse (`reuse.rs`) or made ahead (`ahead.rs`) holds its place by a [`Ticket`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The bounds on instances that wait for a call, engine-wide (the engine keeps one shelf
/// for idle instances, one for those made ahead): how many (the pool slots kept for them)
/// and how much memory, in all and per tenant, so that one tenant's waiting instances
/// never crowd out another's.
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
