//! What one call of a plugin may use ([`Limits`]): its deadline, its memory, the size of
//! what it returns and how many calls one instance may serve. Per call, unlike the
//! budgets, which are what a tenant's calls share over time (`budget/`).

use std::time::Duration;

/// What one call of a plugin may use. Every field is overridable per plugin in a Blueprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for one call, instantiation included.
    pub deadline: Duration,
    /// Linear memory the plugin may grow to, in bytes, summed over its memories.
    pub memory_bytes: usize,
    /// Total size of the JSON the plugin returns, in bytes.
    pub output_bytes: usize,
    /// How many resources one outcome may hold.
    pub max_resources: usize,
    /// Calls one instance of the plugin may serve before it is discarded: 1 (the
    /// default) is a fresh instance for every call. More keeps an instance between the
    /// calls of one tenant (and one namespace where the grants are scoped to it): faster,
    /// at the price of state the guest keeps between CRs (`reuse.rs` says what is
    /// kept, what is fresh in every call, and when an instance is discarded).
    pub reuse_calls: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(2),
            memory_bytes: 64 << 20,
            output_bytes: 1 << 20,
            max_resources: 100,
            reuse_calls: 1,
        }
    }
}

impl Limits {
    /// The most a Blueprint may ask for when the operator sets no ceiling: the ranges the
    /// Blueprint schema accepts.
    pub fn ceilings() -> Self {
        Limits {
            deadline: Duration::from_secs(300),
            memory_bytes: 4 << 30,
            output_bytes: 64 << 20,
            max_resources: 10_000,
            reuse_calls: MAX_REUSE_CALLS,
        }
    }
}

impl Limits {
    /// The most a Blueprint resource (a tenant) may ask for when the operator sets no
    /// ceiling: enough for any reconciler, small enough that one call cannot take a
    /// small pod's memory or hold a call for minutes.
    pub fn tenant_ceilings() -> Self {
        Limits {
            deadline: Duration::from_secs(30),
            memory_bytes: 256 << 20,
            output_bytes: 16 << 20,
            max_resources: 1_000,
            reuse_calls: MAX_REUSE_CALLS,
        }
    }
}

/// The most calls one instance may serve ([`Limits::reuse_calls`]).
pub const MAX_REUSE_CALLS: u32 = 10_000;
