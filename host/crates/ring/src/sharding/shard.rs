//! What this replica holds of the ring, and the fence that guards each bucket's writes.
//!
//! A write made while reconciling a CR carries the CR's bucket ([`Shard::scope`]); the
//! client's fence layer asks [`admit`] before sending it. A write passes only while
//!
//! - the member fence is open: this replica's member Lease was renewed within the renew
//!   deadline (a paused or partitioned replica writes nothing past it, and nobody judges
//!   it gone before then: others wait a whole lease duration), and
//! - the bucket is held: its Lease names this replica's current incarnation and no release
//!   has started.
//!
//! Giving a bucket up is graceful: new writes are refused at once, those in flight finish
//! ([`Shard::drained`]), and only then is the bucket's Lease cleared for the next holder.
//! Past the member deadline writes in flight are abandoned instead, like the leader
//! fence's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use super::buckets::BUCKETS;

/// This replica's buckets, as a bit set (bit `b`: bucket `b`).
pub type Held = u64;

/// The bit of `bucket`.
pub fn bit(bucket: usize) -> Held {
    1u64 << (bucket % BUCKETS)
}

/// The bit set of `list`.
pub fn bits(list: impl IntoIterator<Item = usize>) -> Held {
    list.into_iter().fold(0, |held, b| held | bit(b))
}

/// The buckets of a bit set, in order.
pub fn buckets(held: Held) -> impl Iterator<Item = usize> {
    (0..BUCKETS).filter(move |b| held & bit(*b) != 0)
}

/// What this replica holds, shared by its ring keeper (which changes it) and every
/// controller and client (which read it).
#[derive(Debug)]
pub struct Shard {
    /// Until when writes may go: the member Lease's renew deadline, moved on by each
    /// renewal; `None`: closed.
    member: watch::Sender<Option<Instant>>,
    held: watch::Sender<Held>,
    in_flight: [AtomicUsize; BUCKETS],
    returned: Notify,
    /// Per bucket, when a write last ended with no answer from the API server (abandoned
    /// at a deadline, timed out, its connection broken): it may still be applied.
    abandoned: std::sync::Mutex<[Option<Instant>; BUCKETS]>,
    /// Whether the CRs are watched by their bucket label (else by `shardSelector`).
    by_labels: std::sync::atomic::AtomicBool,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            member: watch::channel(None).0,
            held: watch::channel(0).0,
            in_flight: std::array::from_fn(|_| AtomicUsize::new(0)),
            abandoned: std::sync::Mutex::new([None; BUCKETS]),
            by_labels: std::sync::atomic::AtomicBool::new(false),
            returned: Notify::new(),
        }
    }
}

tokio::task_local! {
    /// The shard and bucket of the CR the current task reconciles.
    static WRITING_FOR: (Arc<Shard>, usize);
}

/// Why a write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The member Lease was not renewed in time: this replica may be judged gone.
    Lapsed,
    /// Another replica holds the bucket, or it is being handed over.
    NotHeld(usize),
}

impl Shard {
    /// Whether `bucket` is held now (whatever the member deadline says).
    pub fn holds(&self, bucket: usize) -> bool {
        *self.held.borrow() & bit(bucket) != 0
    }

    /// The buckets held now.
    pub fn held(&self) -> Held {
        *self.held.borrow()
    }

    /// Told each change of the buckets held.
    pub fn subscribe(&self) -> watch::Receiver<Held> {
        self.held.subscribe()
    }

    /// Whether a write for a CR of `bucket` may be sent now.
    ///
    /// # Errors
    /// Why not.
    pub fn may_write(&self, bucket: usize) -> Result<(), Refused> {
        let open = self
            .member
            .borrow()
            .is_some_and(|until| Instant::now() < until);
        if !open {
            return Err(Refused::Lapsed);
        }
        if !self.holds(bucket) {
            return Err(Refused::NotHeld(bucket));
        }
        Ok(())
    }

    /// Watch the CRs by their bucket label from now on (set before the controllers start).
    pub fn watch_by_labels(&self, on: bool) {
        self.by_labels.store(on, Ordering::Release);
    }

    /// Whether the CRs are watched by their bucket label: the passes keep it on each CR.
    pub fn by_labels(&self) -> bool {
        self.by_labels.load(Ordering::Acquire)
    }

    /// Runs `work` (a CR's reconcile) with its writes fenced by `bucket`.
    pub async fn scope<F: std::future::Future>(
        self: &Arc<Self>,
        bucket: usize,
        work: F,
    ) -> F::Output {
        WRITING_FOR.scope((self.clone(), bucket), work).await
    }

    /// The member Lease was renewed by a request sent at `sent`: writes may go on until
    /// `sent + renew_deadline`.
    pub(crate) fn renewed(&self, until: Instant) {
        self.member.send_replace(Some(until));
    }

    /// Refuses every write at once (the member deadline passed, or the host stops after
    /// its buckets were given up).
    pub(crate) fn close(&self) {
        self.member.send_replace(None);
    }

    /// `buckets` are held from now on.
    pub(crate) fn take(&self, buckets: Held) {
        self.held.send_if_modified(|held| {
            let before = *held;
            *held |= buckets;
            *held != before
        });
    }

    /// `buckets` are no longer held: their new writes are refused from now on.
    pub(crate) fn give_up(&self, buckets: Held) {
        self.held.send_if_modified(|held| {
            let before = *held;
            *held &= !buckets;
            *held != before
        });
    }

    /// Waits until no write for `buckets` is in flight and every write of theirs that
    /// ended unanswered did so `settle` ago or more (long enough to have landed, if it
    /// ever does), for `within` at most; whether so.
    pub(crate) async fn drained(&self, buckets: Held, settle: Duration, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            let returned = self.returned.notified();
            if self::buckets(buckets).all(|b| self.in_flight[b].load(Ordering::Acquire) == 0) {
                let settled = self.last_abandoned(buckets).map(|at| at + settle);
                match settled {
                    Some(at) if at > until => return false,
                    Some(at) if at > Instant::now() => {
                        tokio::time::sleep_until(at.into()).await;
                        continue;
                    }
                    _ => return true,
                }
            }
            if tokio::time::timeout_at(until.into(), returned)
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    /// When a write for one of `buckets` last ended unanswered.
    fn last_abandoned(&self, buckets: Held) -> Option<Instant> {
        let abandoned = self
            .abandoned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self::buckets(buckets).filter_map(|b| abandoned[b]).max()
    }

    /// Resolves once the member deadline passes (at once when closed), following the
    /// deadline as renewals move it.
    pub(crate) async fn expired(&self) {
        let mut deadline = self.member.subscribe();
        loop {
            let Some(until) = *deadline.borrow_and_update() else {
                return;
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(until.into()) => {}
                changed = deadline.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// A write admitted for a bucket: counted in flight until dropped; dropped without
/// [`Admitted::answered`], it counts as abandoned (it may still be applied).
#[derive(Debug)]
pub(crate) struct Admitted {
    shard: Arc<Shard>,
    bucket: usize,
    /// Refused before it was sent, or answered: nothing of it can land later.
    settled: bool,
}

impl Admitted {
    /// The shard it was admitted by.
    pub(crate) fn shard(&self) -> &Shard {
        &self.shard
    }

    /// The API server answered the write: it will not be applied later.
    pub(crate) fn answered(mut self) {
        self.settled = true;
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if !self.settled {
            let mut abandoned = self
                .shard
                .abandoned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            abandoned[self.bucket] = Some(Instant::now());
        }
        self.shard.in_flight[self.bucket].fetch_sub(1, Ordering::AcqRel);
        self.shard.returned.notify_waiters();
    }
}

/// For a write about to be sent: `None` outside a CR's reconcile (the host's own writes,
/// fenced by the leader fence alone); else whether the CR's bucket admits it.
pub(crate) fn admit() -> Option<Result<Admitted, Refused>> {
    WRITING_FOR
        .try_with(|(shard, bucket)| {
            // Counted before the check, so a release that starts between the two waits
            // for this write (or sees it refused).
            shard.in_flight[*bucket].fetch_add(1, Ordering::AcqRel);
            let mut admitted = Admitted {
                shard: shard.clone(),
                bucket: *bucket,
                settled: false,
            };
            match shard.may_write(*bucket) {
                Ok(()) => Ok(admitted),
                Err(refused) => {
                    // Never sent: nothing of it can land.
                    admitted.settled = true;
                    Err(refused)
                }
            }
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn renewed(shard: &Shard) {
        shard.renewed(Instant::now() + Duration::from_secs(60));
    }

    #[tokio::test]
    async fn a_write_passes_only_for_a_held_bucket_while_the_member_lease_is_renewed() {
        let shard = Arc::new(Shard::default());
        assert_eq!(admit().map(|a| a.map(|_| ())), None, "outside a reconcile");
        let check = |b| {
            let shard = shard.clone();
            async move {
                shard
                    .scope(b, async { admit().map(|a| a.map(|_| ())) })
                    .await
            }
        };
        // Held but never renewed: lapsed.
        shard.take(bit(3));
        assert_eq!(check(3).await, Some(Err(Refused::Lapsed)));
        renewed(&shard);
        assert_eq!(check(3).await, Some(Ok(())));
        assert_eq!(check(4).await, Some(Err(Refused::NotHeld(4))));
        shard.give_up(bit(3));
        assert_eq!(check(3).await, Some(Err(Refused::NotHeld(3))));
        // A deadline in the past refuses everything, held or not.
        shard.take(bit(3));
        shard.renewed(Instant::now() - Duration::from_millis(1));
        assert_eq!(check(3).await, Some(Err(Refused::Lapsed)));
        assert_eq!(shard.may_write(3), Err(Refused::Lapsed));
    }

    #[tokio::test]
    async fn giving_a_bucket_up_waits_for_its_writes_in_flight_and_no_others() {
        let shard = Arc::new(Shard::default());
        renewed(&shard);
        shard.take(bit(1) | bit(2));
        let (started, start) = tokio::sync::oneshot::channel();
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let write = tokio::spawn({
            let shard = shard.clone();
            async move {
                shard
                    .scope(1, async {
                        let admitted = admit().expect("in scope").expect("held");
                        let _ = started.send(());
                        let _ = finished.await;
                        drop(admitted);
                    })
                    .await;
            }
        });
        start.await.expect("started");
        shard.give_up(bit(1));
        assert!(
            shard.drained(bit(2), Duration::ZERO, Duration::ZERO).await,
            "bucket 2 has none"
        );
        assert!(
            !shard
                .drained(bit(1), Duration::ZERO, Duration::from_millis(50))
                .await
        );
        let _ = finish.send(());
        assert!(
            shard
                .drained(bit(1), Duration::ZERO, Duration::from_secs(5))
                .await
        );
        write.await.expect("write");
        // A refused write is not left counted.
        shard
            .scope(1, async { assert!(admit().expect("in scope").is_err()) })
            .await;
        assert!(shard.drained(bit(1), Duration::ZERO, Duration::ZERO).await);
    }

    #[tokio::test]
    async fn a_write_abandoned_unanswered_keeps_its_bucket_undrained_until_it_could_have_landed() {
        let shard = Arc::new(Shard::default());
        renewed(&shard);
        shard.take(bit(1) | bit(2));
        let settle = Duration::from_millis(300);
        // Bucket 1: a write dropped with no answer (abandoned at a deadline, timed out).
        let before = Instant::now();
        shard
            .scope(1, async { drop(admit().expect("in scope").expect("held")) })
            .await;
        // Bucket 2: a write answered by the API server.
        shard
            .scope(2, async {
                admit().expect("in scope").expect("held").answered()
            })
            .await;
        assert!(shard.drained(bit(2), settle, Duration::ZERO).await);
        assert!(
            !shard
                .drained(bit(1), settle, Duration::from_millis(50))
                .await,
            "an abandoned write may still land"
        );
        assert!(shard.drained(bit(1), settle, Duration::from_secs(5)).await);
        assert!(before.elapsed() >= settle);
        // A write refused before it was sent counts as nothing.
        shard.give_up(bit(2));
        shard
            .scope(2, async { assert!(admit().expect("in scope").is_err()) })
            .await;
        assert!(shard.drained(bit(2), settle, Duration::ZERO).await);
    }

    #[tokio::test]
    async fn the_member_deadline_expires_when_it_passes_unless_a_renewal_moved_it() {
        let shard = Shard::default();
        // Never renewed: expired at once.
        assert!(shard.expired().now_or_never().is_some());
        shard.renewed(Instant::now() + Duration::from_millis(50));
        let waiting = shard.expired();
        tokio::pin!(waiting);
        assert!(futures::poll!(&mut waiting).is_pending());
        shard.renewed(Instant::now() + Duration::from_secs(60));
        let moved = tokio::time::timeout(Duration::from_millis(200), &mut waiting).await;
        assert!(moved.is_err(), "followed the renewal");
        shard.close();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("closed: expired");
    }

    #[test]
    fn bit_sets_list_their_buckets() {
        assert_eq!(
            buckets(bit(0) | bit(63) | bit(7)).collect::<Vec<_>>(),
            [0, 7, 63]
        );
        assert_eq!(buckets(0).count(), 0);
    }
}
