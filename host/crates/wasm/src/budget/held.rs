//! Host memory a tenant's reconciles hold for what their reconcilers returned: a Wasm
//! outcome, a remote reconciler's reply, external calls' replies. Each is admitted against
//! the tenant's share (and the host's) *before* it is read or parsed, and what a pass
//! keeps is held until the pass ends: a tenant at its share fails its own CR, naming the
//! budget, and never takes the host's memory.
//!
//! A pass runs inside [`HostMemory::scope`]; whatever reads a reply in it calls [`hold`]
//! first. Outside a scope (`inrun render`, tests of one reconciler) nothing is counted.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

use super::Counter;

/// The most a parsed JSON tree keeps per token of its text (a value, a key, an element of
/// an array): `host/tests/held_size.rs` measures 59 to 161 bytes with an allocation
/// counter (a `serde_json::Value`, its place in an array or an ordered map, the map's
/// index), and an array's or a map's storage may be up to twice what it holds. What is
/// held is then two to four times what common shapes keep, and never less.
pub const PARSED_PER_TOKEN: usize = 256;

/// The most `text` and what parsing it as JSON keeps take together: the text, the strings
/// of the parsed tree (at most as many bytes), and [`PARSED_PER_TOKEN`] for each token
/// (every token starts at a `[`, `{`, `,` or `:` or is the first; counted inside strings
/// too, which only makes the bound larger). Held before the text is parsed: a reply of
/// many small values (`[{},{},…]`) takes forty times its text once parsed, and is held for
/// it.
pub fn parsed_bound(text: &[u8]) -> usize {
    let tokens = 1 + text
        .iter()
        .filter(|b| matches!(b, b'[' | b'{' | b',' | b':'))
        .count();
    tokens
        .saturating_mul(PARSED_PER_TOKEN)
        .saturating_add(text.len().saturating_mul(2))
}

/// About what `value` keeps on the heap, for a tree built other than by parsing text (rows
/// of a database, a Redis reply): [`PARSED_PER_TOKEN`] a node, its strings' bytes.
pub fn value_bound(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    PARSED_PER_TOKEN
        + match value {
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(value_bound).sum(),
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| PARSED_PER_TOKEN + k.len() + value_bound(v))
                .sum(),
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        }
}

/// One tenant's share of host memory for what its reconciles hold, and the host's.
#[derive(Clone)]
pub struct HostMemory {
    inner: Arc<Meter>,
}

struct Meter {
    tenant: String,
    own: Counter,
    /// Told whenever some of `own` is given back.
    freed: Notify,
    host: Arc<Pool>,
}

/// The host-wide budget every tenant's [`HostMemory`] draws from.
pub(super) struct Pool {
    counter: Counter,
    /// Told whenever some of it is given back.
    freed: Notify,
}

impl Pool {
    pub(super) fn new(max: usize) -> Arc<Pool> {
        Arc::new(Pool {
            counter: Counter::new(max),
            freed: Notify::new(),
        })
    }
}

impl std::fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMemory")
            .field("tenant", &self.inner.tenant)
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

/// A hold refused: the tenant's share, or the host's, would be passed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeldHit {
    /// The tenant's own share.
    #[error(
        "tenant {tenant}'s host-memory budget of {} MiB for what its reconcilers return (asked for {} KiB more while {} KiB were held)",
        max >> 20, asked >> 10, held >> 10
    )]
    Tenant {
        /// The tenant.
        tenant: String,
        /// Its share, in bytes.
        max: usize,
        /// What was asked for.
        asked: usize,
        /// What it held already.
        held: usize,
    },
    /// The host's, across every tenant.
    #[error(
        "the host's memory budget of {} MiB for what reconcilers return, across all tenants",
        max >> 20
    )]
    Host {
        /// The host's budget, in bytes.
        max: usize,
    },
}

impl HostMemory {
    pub(super) fn new(tenant: &str, max: usize, host: Arc<Pool>) -> Self {
        HostMemory {
            inner: Arc::new(Meter {
                tenant: tenant.to_string(),
                own: Counter::new(max),
                freed: Notify::new(),
                host,
            }),
        }
    }

    /// A share of `max` bytes for `tenant` under a host-wide budget of `host_max` bytes,
    /// standing alone (tests, and tools that run one tenant).
    pub fn standalone(tenant: &str, max: usize, host_max: usize) -> Self {
        Self::new(tenant, max, Pool::new(host_max))
    }

    /// Bytes the tenant's reconciles hold now.
    pub fn held(&self) -> usize {
        self.inner.own.used.load(Ordering::Relaxed)
    }

    /// The tenant's share, in bytes.
    pub fn max(&self) -> usize {
        self.inner.own.max
    }

    /// Runs `work` (one pass) with this share: what it [`hold`]s and keeps is given back
    /// when it ends, however it ends.
    pub async fn scope<F: Future>(&self, work: F) -> F::Output {
        let pass = Arc::new(Pass {
            meter: self.clone(),
            kept: Mutex::new(Vec::new()),
        });
        PASS.scope(pass, work).await
    }

    fn take(&self, bytes: usize) -> Result<(), HeldHit> {
        let meter = &self.inner;
        if !meter.own.try_add(bytes) {
            return Err(HeldHit::Tenant {
                tenant: meter.tenant.clone(),
                max: meter.own.max,
                asked: bytes,
                held: meter.own.used.load(Ordering::Relaxed),
            });
        }
        if !meter.host.counter.try_add(bytes) {
            meter.own.sub(bytes);
            return Err(HeldHit::Host {
                max: meter.host.counter.max,
            });
        }
        Ok(())
    }

    /// [`HostMemory::take`], waiting for what is held to be given back until `deadline`
    /// when the budget is full; refused at once when `bytes` could never fit.
    async fn take_by(&self, bytes: usize, deadline: Instant) -> Result<(), HeldHit> {
        loop {
            let meter = &self.inner;
            // Asked for before trying, so a give-back between the try and the wait is not
            // missed.
            let own = meter.freed.notified();
            let host = meter.host.freed.notified();
            let hit = match self.take(bytes) {
                Ok(()) => return Ok(()),
                Err(hit) => hit,
            };
            let never = match &hit {
                HeldHit::Tenant { max, .. } | HeldHit::Host { max } => bytes > *max,
            };
            if never || Instant::now() >= deadline {
                return Err(hit);
            }
            let freed = async {
                match hit {
                    HeldHit::Tenant { .. } => own.await,
                    HeldHit::Host { .. } => host.await,
                }
            };
            if tokio::time::timeout_at(deadline.into(), freed)
                .await
                .is_err()
            {
                // One last try at the deadline.
                return self.take(bytes);
            }
        }
    }

    fn give(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.inner.own.sub(bytes);
        self.inner.host.counter.sub(bytes);
        self.inner.freed.notify_waiters();
        self.inner.host.freed.notify_waiters();
    }
}

/// What one pass holds.
struct Pass {
    meter: HostMemory,
    /// Holds kept until the pass ends.
    kept: Mutex<Vec<Held>>,
}

tokio::task_local! {
    static PASS: Arc<Pass>;
}

/// Bytes held for one reply; given back when dropped, or when the pass ends if
/// [`Held::keep`] was called.
#[must_use = "a hold is given back when dropped"]
pub struct Held {
    meter: Option<HostMemory>,
    bytes: usize,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("bytes", &self.bytes).finish()
    }
}

/// Holds `bytes` of the running pass's tenant's share before they are read, waiting
/// until `deadline` for others of the tenant's reconciles to give some back when the
/// share is full. Nothing is counted outside a pass ([`HostMemory::scope`]).
///
/// # Errors
/// [`HeldHit`] when the tenant's share or the host's would still be passed at the
/// deadline (at once when `bytes` is more than the whole share): the reply must not be
/// read.
pub async fn hold(bytes: usize, deadline: Instant) -> Result<Held, HeldHit> {
    let meter = PASS.try_with(|pass| pass.meter.clone()).ok();
    if let Some(meter) = &meter {
        meter.take_by(bytes, deadline).await?;
    }
    Ok(Held { meter, bytes })
}

impl Held {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `bytes` in all from now on: more is asked for at once, never waited for
    /// (what is read is already in hand; a refusal leaves the hold as it was), less is
    /// given back.
    ///
    /// # Errors
    /// [`HeldHit`] when more is refused.
    pub fn resize(&mut self, bytes: usize) -> Result<(), HeldHit> {
        if let Some(meter) = &self.meter {
            if bytes > self.bytes {
                meter.take(bytes - self.bytes)?;
            } else {
                meter.give(self.bytes - bytes);
            }
        }
        self.bytes = bytes;
        Ok(())
    }

    /// Keeps the hold until the pass ends: what was read stays in the pass's hands (an
    /// outcome applied child by child) after the reader is done with it.
    pub fn keep(self) {
        if self.meter.is_none() {
            return;
        }
        // Inside a scope the meter came from it; a hold moved out of its pass (it
        // cannot be, but if it were) is simply given back.
        let _ = PASS.try_with(|pass| {
            pass.kept
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(self);
        });
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(meter) = &self.meter {
            meter.give(self.bytes);
        }
    }
}

/// Bytes held by the running pass (kept ones), for tests and the console.
pub fn held_by_pass() -> usize {
    PASS.try_with(|pass| {
        pass.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|h| h.bytes)
            .sum()
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    fn now() -> Instant {
        Instant::now()
    }

    #[tokio::test]
    async fn a_pass_holds_what_it_keeps_until_it_ends_and_a_refusal_holds_nothing() {
        let host = Pool::new(90);
        let a = HostMemory::new("a", 60, host.clone());
        let b = HostMemory::new("b", 60, host.clone());
        a.scope(async {
            hold(40, now()).await.expect("fits").keep();
            assert_eq!(held_by_pass(), 40);
            // Over a's share: refused, and nothing more is held.
            let refused = hold(30, now()).await.unwrap_err();
            assert!(matches!(
                refused,
                HeldHit::Tenant {
                    max: 60,
                    asked: 30,
                    held: 40,
                    ..
                }
            ));
            assert_eq!(a.held(), 40);
            // A hold dropped unkept is given back at once.
            drop(hold(20, now()).await.expect("fits"));
            assert_eq!(a.held(), 40);
            // b fits its share but not what is left of the host's.
            b.scope(async {
                assert!(matches!(hold(61, now()).await, Err(HeldHit::Tenant { .. })));
                let refused = hold(60, now()).await.unwrap_err();
                assert_eq!(refused, HeldHit::Host { max: 90 });
                assert_eq!(
                    b.held(),
                    0,
                    "a refusal by the host leaves b's share as it was"
                );
            })
            .await;
        })
        .await;
        assert_eq!((a.held(), b.held()), (0, 0), "the pass ended");
        assert_eq!(host.counter.used.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_hold_that_does_not_fit_yet_waits_for_another_to_be_given_back() {
        let a = HostMemory::standalone("a", 100, 1000);
        let first = a.clone();
        let (holding, held) = tokio::sync::oneshot::channel();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let other = tokio::spawn(async move {
            first
                .scope(async {
                    hold(80, now()).await.expect("fits").keep();
                    holding.send(()).expect("told");
                    released.await.expect("released");
                })
                .await;
        });
        held.await.expect("held");
        let later = now() + Duration::from_secs(30);
        let second = a.clone();
        let mut waiting = tokio::spawn(async move {
            second
                .scope(async { hold(50, later).await.map(drop) })
                .await
        });
        // More than the whole share is refused at once, whatever the deadline.
        assert!(a.scope(hold(101, later)).await.is_err());
        // The 50 bytes wait while the other pass holds 80 of 100.
        let early = tokio::time::timeout(Duration::from_millis(50), &mut waiting).await;
        assert!(early.is_err(), "the hold waited for room");
        release.send(()).expect("release");
        waiting
            .await
            .expect("joined")
            .expect("fits once the other pass ended");
        other.await.expect("joined");
        assert_eq!(a.held(), 0);
    }

    #[tokio::test]
    async fn a_hold_grows_only_within_the_share_and_shrinks_freely() {
        let a = HostMemory::standalone("a", 100, 1000);
        a.scope(async {
            let mut held = hold(10, now()).await.expect("fits");
            held.resize(90).expect("fits");
            assert_eq!(a.held(), 90);
            assert!(held.resize(101).is_err());
            assert_eq!(
                (held.bytes(), a.held()),
                (90, 90),
                "a refused growth changes nothing"
            );
            held.resize(5).expect("less");
            assert_eq!(a.held(), 5);
        })
        .await;
        assert_eq!(a.held(), 0);
    }

    #[tokio::test]
    async fn outside_a_pass_nothing_is_counted() {
        let mut held = hold(usize::MAX, now()).await.expect("no pass, no budget");
        held.resize(1).expect("no pass");
        held.keep();
    }
}
