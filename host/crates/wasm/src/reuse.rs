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
//!   replaced (a new version is a new [`Plugin`](crate::Plugin)), and when keeping it would
//!   pass the bounds on idle instances ([`Shelf`]).
//!
//! Idle instances hold pool slots of their own (the pool has [`kept_slots`] more than the
//! calls it runs at once), so keeping them never takes a slot a call needs. Whether a call
//! takes an idle instance, and keeps its own afterwards, is decided in `call.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wasmtime::Store;

#[cfg(doc)]
use super::config::kept_slots;
use super::grants::Grants;
use super::guest::Guest;
#[cfg(doc)]
use super::limits::Limits;
use super::shelf::{Shelf, Ticket};
use super::state::State;

/// Which calls may share an instance: one tenant's (every plugin handle belongs to one),
/// and one namespace's when the grants reach data of the CR's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    tenant: Option<String>,
    namespace: Option<String>,
}

impl Key {
    /// The key of a call of `tenant`'s (`None`: the host's own), `None` when it must not
    /// reuse (reuse is off, or 1 call).
    pub(super) fn of(
        tenant: Option<&str>,
        reuse_calls: u32,
        grants: &Grants,
        cr_namespace: Option<&str>,
    ) -> Option<Key> {
        if reuse_calls <= 1 {
            return None;
        }
        let scoped = grants.cluster.is_some() || grants.credentials.is_some();
        Some(Key {
            tenant: tenant.map(str::to_string),
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
