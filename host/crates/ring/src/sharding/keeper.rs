//! The ring keeper: one task per replica that, every retry period, renews the member
//! Lease, lists the ring, and gives up and takes buckets as [`super::moves`] says,
//! recording the outcome in the replica's [`Shard`] (which every write checks).
//!
//! # Why no bucket ever has two writers
//!
//! A replica writes for a bucket only while its bucket Lease names it and its member fence
//! is open, that is until `renew_deadline` after the *send* of its last successful member
//! renewal. Another replica takes the bucket only once it sees the holder's member record
//! unchanged for a whole `lease_duration` on its own clock, which starts no earlier than
//! that send; `renew_deadline < lease_duration`, so the holder has stopped by then. The
//! look that shows the record unchanged is a list, and its answer can trail a renewal that
//! landed while it was on its way, so the member is judged as of the list's *send*.
//!
//! A holder the bucket Leases name but the member Leases do not has left — released its
//! member Lease after its writes stopped, or had it collected long after it stopped — only
//! if the member Leases were listed *after* the bucket Leases: a member creates its member
//! Lease before it takes a bucket. Listed the other way round, a replica that joined between
//! the two lists (a new incarnation, say, after an API server restart) and took a bucket
//! would look gone, and its bucket would be taken while it writes. So a round lists the
//! bucket Leases first, and takes a bucket only when it is free or its holder is one of
//! those it saw gone: a holder it has not seen at all keeps it.
//!
//! A renewal that succeeds late — its answer came a lease duration or more after the
//! previous one was sent — may have landed after another replica judged this one gone and
//! took its buckets. The replica then counts itself gone: it drops every bucket and joins
//! again under a new incarnation (a new member name), so the buckets its old name holds
//! are taken by whoever the table gives them to, itself included, through the Leases'
//! compare-and-swap like any other free bucket.
//!
//! A graceful hand-over (a bucket assigned elsewhere, or SIGTERM) refuses the bucket's new
//! writes, waits for those in flight to return — and for any that ended unanswered to have
//! had `lease_duration - renew_deadline` to land, the margin a crashed holder gets — then
//! clears the bucket's Lease: the next holder's writes start after the last of this one's
//! have landed. A replica leaving with writes not drained keeps its member Lease, to expire.
//!
//! A round reads which buckets name this incarnation and holds those. That read is true
//! only if none of this incarnation's own Lease writes can still land after it: a clear
//! abandoned when a round ran out of time (or answered by no response at all) may be
//! applied after the next round's read, freeing a bucket this replica has just taken back
//! by name — and another replica then takes it while this one writes. So after such a
//! round the replica trusts no Lease naming it: it refuses every write at once, lets those
//! in flight return, and joins again under a new incarnation, as after a late renewal. Its
//! buckets come back only through compare-and-swap, which a late write cannot undo.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use kube::Client;
use kube::api::{DeleteParams, Preconditions};
use tokio::sync::watch;

use super::assign::Assignment;
use super::buckets::BUCKETS;
use super::members::{Observed, Ring};
use super::moves::moves;
use super::ownership::Take;
use super::shard::{Held, Shard, bit, bits, buckets};
use inrun_observe::metrics::Metrics;

/// How a replica takes part in its ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeeperConfig {
    /// The ring, its Leases' namespace and lease duration.
    pub ring: Ring,
    /// This replica's name (unique among replicas; its incarnations add a suffix).
    pub identity: String,
    /// How long after the send of its last successful renewal a replica may write.
    pub renew_deadline: Duration,
    /// How often the member Lease is renewed and the ring looked at.
    pub retry_period: Duration,
    /// Buckets given up in one round at most, so a membership change moves a few at a
    /// time (buckets of a member gone are taken whatever this says).
    pub max_releases: usize,
    /// How the replica watches only its buckets' CRs.
    pub watch: inrun_blueprint::ShardWatch,
}

impl KeeperConfig {
    /// The ring's leader Lease (`<ring>-leader`, beside the ring's), held by one replica
    /// at a time on the same timings: its holder makes the host's cluster-wide writes
    /// (CRDs, `Blueprint` resources' status, releases).
    pub fn leader(&self) -> crate::leader::LeaderConfig {
        crate::leader::LeaderConfig {
            lease_name: format!("{}-leader", self.ring.name),
            namespace: self.ring.namespace.clone(),
            identity: self.identity.clone(),
            lease_duration: self.ring.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }
}

/// How long past a member's expiry its buckets' round runs: its record must be older
/// than the lease duration, not equal to it.
const EXPIRY_SLACK: Duration = Duration::from_millis(20);

/// Why the keeper stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    /// The host may not use the ring's Leases: nothing would ever be held.
    #[error(
        "may not use the sharding Leases of ring {ring} in namespace {namespace} (apply `inrun generate rbac --sharding` for this Blueprint and namespace)"
    )]
    Forbidden {
        /// The ring.
        ring: String,
        /// The Leases' namespace.
        namespace: String,
        /// The API server's refusal.
        #[source]
        source: kube::Error,
    },
}

/// The keeper's state between rounds.
struct Keeper {
    client: Client,
    config: KeeperConfig,
    shard: Arc<Shard>,
    metrics: Arc<Metrics>,
    /// This incarnation's name: the identity and a suffix new at each start and after
    /// each lapse.
    me: String,
    incarnation: u32,
    /// When the last successful renewal was sent.
    renewed: Option<Instant>,
    /// Shared with the watch of the ring's Leases, which records renewals as they come.
    observed: Arc<std::sync::Mutex<Observed>>,
    /// The buckets whose Lease named this incarnation at the last look.
    recorded: Held,
    /// Rounds so far: the first only joins and looks, so replicas started together see
    /// each other before any takes buckets.
    rounds: u64,
    /// A write of this incarnation to a bucket Lease may still be applied: the next round
    /// joins again under a new incarnation instead of holding buckets by name.
    unsure: bool,
    /// Clears of bucket Leases are in flight (a round cut off now leaves them unanswered).
    clearing: bool,
}

/// The holders a round may take buckets from: those named by the bucket Leases, listed
/// before the member Leases, and not live by them. Any other holder a bucket's Lease names
/// when it is taken — one that joined and took it since the look — is left alone.
fn gone(holders: &[Option<String>], live: &[String]) -> Vec<String> {
    let mut gone: Vec<String> = holders
        .iter()
        .flatten()
        .filter(|h| !live.contains(h))
        .cloned()
        .collect();
    gone.sort();
    gone.dedup();
    gone
}

fn forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Whether a write that failed with `e` may still be applied by the API server: only an
/// answer from it (a status) says it was not; a timeout or a broken connection does not.
fn may_still_land(e: &kube::Error) -> bool {
    !matches!(e, kube::Error::Api(_))
}

impl Keeper {
    fn incarnation_name(identity: &str, incarnation: u32) -> String {
        format!("{identity}#{incarnation:08x}")
    }

    /// Renews the member Lease; a renewal answered a lease duration or more after the
    /// previous one was sent starts a new incarnation (see the module's notes).
    async fn renew(&mut self) -> Result<(), kube::Error> {
        let sent = Instant::now();
        self.config.ring.renew(&self.client, &self.me).await?;
        let late = self
            .renewed
            .is_some_and(|last| Instant::now() >= last + self.config.ring.lease_duration);
        if !late {
            self.renewed = Some(sent);
            self.shard.renewed(sent + self.config.renew_deadline);
            return Ok(());
        }
        tracing::warn!(member = %self.me, "the member Lease was not renewed for a lease duration; giving up every bucket and joining again");
        self.shard.close();
        self.rejoin().await
    }

    /// Gives up every bucket and joins again under a new incarnation (a new member name):
    /// the Leases naming the old one are taken, by this replica too, only through
    /// compare-and-swap. The member fence must be closed, or every write drained, first.
    async fn rejoin(&mut self) -> Result<(), kube::Error> {
        let dropped = self.shard.held();
        self.shard.give_up(dropped);
        self.metrics
            .shard_moved("lost", buckets(dropped).count() as u64);
        self.recorded = 0;
        self.unsure = false;
        let _ = self.config.ring.release(&self.client, &self.me).await;
        self.incarnation = self.incarnation.wrapping_add(1);
        self.me = Self::incarnation_name(&self.config.identity, self.incarnation);
        self.renewed = None;
        let sent = Instant::now();
        self.config.ring.renew(&self.client, &self.me).await?;
        self.renewed = Some(sent);
        self.shard.renewed(sent + self.config.renew_deadline);
        Ok(())
    }

    /// After a round that may have left a bucket Lease's clear in flight: refuses every
    /// write now; the next round waits for those in flight, then joins again.
    fn doubt(&mut self) {
        self.unsure = true;
        let dropped = self.shard.held();
        self.shard.give_up(dropped);
        self.metrics
            .shard_moved("lost", buckets(dropped).count() as u64);
    }

    /// How long a write abandoned unanswered may take to land, as the fence's timings
    /// allow for: the lease duration less the renew deadline (a taker waits that much
    /// longer than the holder writes).
    fn settle(&self) -> Duration {
        self.config
            .ring
            .lease_duration
            .saturating_sub(self.config.renew_deadline)
    }

    fn observed(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One round: renew, look at the ring, give up and take buckets.
    async fn round(&mut self) -> Result<(), kube::Error> {
        self.renew().await?;
        if self.unsure {
            // Every write was refused when the doubt arose. The old incarnation's member
            // Lease goes (and with it its buckets, to whoever takes them) only once every
            // write in flight has returned; until then it is renewed and its buckets wait.
            self.doubt();
            if !self
                .shard
                .drained(Held::MAX, self.settle(), self.config.renew_deadline / 2)
                .await
            {
                return Ok(());
            }
            tracing::warn!(member = %self.me, "a bucket Lease's clear may still land; giving up every bucket and joining again");
            self.rejoin().await?;
        }
        let ring = self.config.ring.clone();
        // The bucket Leases first, the member Leases after (see the module's notes): a
        // holder missing from the later member list has left, not joined since the look.
        let holders: Vec<Option<String>> = ring
            .holders(&self.client)
            .await?
            .into_iter()
            .map(|(holder, _)| holder)
            .collect();
        let asked = Instant::now();
        let leases = ring.member_leases(&self.client).await?;
        let now = Instant::now();
        let mut live = {
            let mut observed = self.observed();
            observed.update(&leases, now);
            // Judged as of the list's send: what it shows unchanged was unchanged then.
            observed.live(asked, ring.lease_duration)
        };
        if !live.contains(&self.me) {
            live.push(self.me.clone());
            live.sort();
        }
        // Holders this round may take buckets from: those it saw stop.
        let gone = gone(&holders, &live);
        // What the Leases give this incarnation is held; what they give another is not.
        let recorded =
            bits((0..BUCKETS).filter(|b| holders[*b].as_deref() == Some(self.me.as_str())));
        self.shard.give_up(self.shard.held() & !recorded);
        self.shard.take(recorded);
        self.recorded = recorded;
        self.rounds += 1;
        if self.rounds == 1 {
            self.record(0, &live, BUCKETS);
            return Ok(());
        }
        let table = Assignment::new(&live);
        let next = moves(&self.me, &table, &holders, &live, self.config.max_releases);
        let mut after = holders.clone();
        if !next.release.is_empty() {
            self.release(&next.release).await;
            for b in &next.release {
                if self.recorded & bit(*b) == 0 {
                    after[*b] = None;
                }
            }
        }
        // Unsure, this incarnation takes nothing more: the next round replaces it.
        let taken = if self.unsure {
            0
        } else {
            self.acquire(&next.acquire, &gone).await?
        };
        for b in buckets(taken) {
            after[b] = Some(self.me.clone());
        }
        let unowned = after
            .iter()
            .filter(|h| h.as_ref().is_none_or(|h| !live.contains(h)))
            .count();
        self.record(self.shard.held(), &live, unowned);
        self.collect(&leases, now).await;
        Ok(())
    }

    /// Records the round for the gauges and the console.
    fn record(&self, held: Held, live: &[String], unowned: usize) {
        self.metrics.shard_round(inrun_observe::console::ShardView {
            ring: self.config.ring.name.clone(),
            member: self.me.clone(),
            held: buckets(held).collect(),
            members: live.to_vec(),
            unowned,
        });
    }

    /// Gives `list` up: refuses their new writes, waits for those in flight, clears their
    /// Leases. A bucket whose writes do not return within the renew deadline keeps its
    /// Lease (and stays refused) until a later round.
    async fn release(&mut self, list: &[usize]) {
        let set = bits(list.iter().copied());
        self.shard.give_up(set);
        if !self
            .shard
            .drained(set, self.settle(), self.config.renew_deadline)
            .await
        {
            tracing::warn!(buckets = ?list, "writes still in flight (or abandoned too recently) after the renew deadline; the buckets are kept refused and given up later");
            return;
        }
        let ring = &self.config.ring;
        self.clearing = true;
        let results = join_all(
            list.iter()
                .map(|b| ring.release_bucket(&self.client, *b, &self.me)),
        )
        .await;
        self.clearing = false;
        let mut given = 0;
        for (b, result) in list.iter().zip(results) {
            match result {
                Ok(()) => {
                    self.recorded &= !bit(*b);
                    given += 1;
                }
                Err(e) => {
                    if may_still_land(&e) {
                        self.doubt();
                    }
                    tracing::warn!(bucket = b, error = %inrun_contract::errors::chain(&e), "giving a bucket up");
                }
            }
        }
        self.metrics.shard_moved("given", given);
    }

    /// Takes what it can of `list` (free, or held by one of `gone`); the buckets taken.
    async fn acquire(&mut self, list: &[usize], gone: &[String]) -> Result<Held, kube::Error> {
        let ring = &self.config.ring;
        let results = join_all(
            list.iter()
                .map(|b| ring.acquire(&self.client, *b, &self.me, gone)),
        )
        .await;
        let mut taken = 0;
        for (b, result) in list.iter().zip(results) {
            match result {
                Ok(Take::Held { .. }) => taken |= bit(*b),
                Ok(Take::Other(_)) => {}
                Err(e) if forbidden(&e) => return Err(e),
                Err(e) => {
                    tracing::warn!(bucket = b, error = %inrun_contract::errors::chain(&e), "taking a bucket");
                }
            }
        }
        self.recorded |= taken;
        self.shard.take(taken);
        self.metrics
            .shard_moved("taken", buckets(taken).count() as u64);
        Ok(taken)
    }

    /// Deletes the member Leases of replicas gone for a lease duration and more (each
    /// only if unchanged since listed).
    async fn collect(&self, leases: &[k8s_openapi::api::coordination::v1::Lease], now: Instant) {
        let ring = &self.config.ring;
        let stale = self
            .observed()
            .stale(now, ring.lease_duration, ring.lease_duration);
        for lease in leases {
            let (Some(name), Some(rv)) = (&lease.metadata.name, &lease.metadata.resource_version)
            else {
                continue;
            };
            if !stale.contains(name) {
                continue;
            }
            let params = DeleteParams::default().preconditions(Preconditions {
                resource_version: Some(rv.clone()),
                uid: None,
            });
            match ring.api(&self.client).delete(name, &params).await {
                Ok(_) => {
                    tracing::info!(lease = %name, "deleted the member Lease of a replica gone")
                }
                Err(e) => {
                    tracing::debug!(lease = %name, error = %e, "deleting a stale member Lease")
                }
            }
        }
    }

    /// Leaves the ring: refuses every write, waits for those in flight (the renew
    /// deadline at most), gives every bucket up and deletes the member Lease — unless a
    /// write is still in flight, when the member Lease is left to expire.
    async fn leave(&mut self) {
        let held = self.shard.held() | self.recorded;
        self.shard.give_up(held);
        let drained = self
            .shard
            .drained(held, self.settle(), self.config.renew_deadline)
            .await;
        self.shard.close();
        let list: Vec<usize> = buckets(self.recorded).collect();
        if drained {
            self.release(&list).await;
            if let Err(e) = self.config.ring.release(&self.client, &self.me).await {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "releasing the member Lease");
            }
        } else {
            // A write abandoned in flight may still land: the member Lease stays, so the
            // others take its buckets only once it has expired, as after a crash.
            tracing::warn!(member = %self.me, "writes still in flight at shutdown; the buckets go when the member Lease expires");
        }
        self.record(0, &[], 0);
        tracing::info!(member = %self.me, buckets = list.len(), released = drained, "left the ring");
    }
}

/// Keeps this replica in `config.ring` until `stop` turns true, recording what it holds in
/// `shard`; then leaves the ring (buckets given up once their writes returned, member Lease
/// deleted), so the others take over at their next round — or, with writes not drained in
/// time, leaves its member Lease to expire, so they take over a lease duration later.
///
/// # Errors
/// [`KeeperError::Forbidden`] when the host may not use the ring's Leases.
pub async fn run(
    client: Client,
    config: KeeperConfig,
    shard: Arc<Shard>,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), KeeperError> {
    let incarnation = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ std::process::id().rotate_left(16));
    let mut keeper = Keeper {
        me: Keeper::incarnation_name(&config.identity, incarnation),
        incarnation,
        client,
        shard,
        metrics,
        renewed: None,
        observed: Arc::default(),
        recorded: 0,
        rounds: 0,
        unsure: false,
        clearing: false,
        config,
    };
    tracing::info!(ring = %keeper.config.ring.name, member = %keeper.me, "joining the ring");
    let moved = Arc::new(tokio::sync::Notify::new());
    let watching = tokio::spawn(watch_moves(
        keeper.client.clone(),
        keeper.config.ring.clone(),
        keeper.observed.clone(),
        moved.clone(),
    ));
    loop {
        if *stop.borrow() {
            break;
        }
        // A round never outlasts the renew deadline: a request the API server holds (one
        // restarting, say) must not keep the replica from its next renewal.
        let round = tokio::time::timeout(keeper.config.renew_deadline, keeper.round()).await;
        match round {
            Ok(Ok(())) => {}
            // Refused before this replica ever joined: its RBAC lacks the Leases, and
            // waiting would never end. Refused later (an API server whose authorizer is
            // still starting), it is tried again like any failure.
            Ok(Err(e)) if forbidden(&e) && keeper.rounds == 0 => {
                keeper.shard.close();
                return Err(KeeperError::Forbidden {
                    ring: keeper.config.ring.name.clone(),
                    namespace: keeper.config.ring.namespace.clone(),
                    source: e,
                });
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "a sharding round failed; writes stop at the renew deadline unless the next succeeds");
            }
            Err(_) if keeper.clearing => {
                // Cut off with a bucket Lease's clear sent and unanswered.
                keeper.clearing = false;
                keeper.doubt();
                tracing::warn!(after = ?keeper.config.renew_deadline, "a sharding round timed out while clearing bucket Leases; every write is refused and the replica joins again");
            }
            Err(_) => {
                tracing::warn!(after = ?keeper.config.renew_deadline, "a sharding round timed out; writes stop at the renew deadline unless the next succeeds");
            }
        }
        // After the first round (which only joins), a quarter period: replicas started
        // together have all joined by then, and the ring settles sooner.
        let pause = if keeper.rounds == 1 {
            keeper.config.retry_period / 4
        } else {
            keeper.config.retry_period
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            () = tokio::time::sleep(pause) => {}
            // A member left or a bucket was given up: the next round now, not a period on.
            () = moved.notified() => {}
        }
    }
    watching.abort();
    let within = keeper.config.renew_deadline * 2;
    if tokio::time::timeout(within, keeper.leave()).await.is_err() {
        keeper.shard.close();
        tracing::warn!(
            ?within,
            "leaving the ring timed out; the others take its buckets once its member Lease expires"
        );
    }
    Ok(())
}

/// Wakes `moved` whenever a member of `ring` leaves (its Lease deleted), a bucket is given
/// up (its Lease names no holder), or a member's last renewal seen is a lease duration old:
/// whoever is to take its buckets need not wait for its next round. Renewals, which come
/// every period from every member, wake nothing but are recorded in `observed` as they
/// come. Ends only when aborted; a watch that fails is retried with backoff (rounds go on
/// without it).
async fn watch_moves(
    client: Client,
    ring: Ring,
    observed: Arc<std::sync::Mutex<Observed>>,
    moved: Arc<tokio::sync::Notify>,
) {
    use super::members::{RING_LABEL, ROLE_LABEL};
    use futures::StreamExt;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().labels(&format!("{RING_LABEL}={}", ring.name));
    let role = |lease: &Lease| {
        lease
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ROLE_LABEL))
            .cloned()
            .unwrap_or_default()
    };
    let observed = || {
        observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let events = watcher(ring.api(&client), config).default_backoff();
    let mut events = std::pin::pin!(events);
    loop {
        // Just past the moment the next member would stop being live.
        let expiry = observed().next_expiry(Instant::now(), ring.lease_duration);
        let expired = async {
            match expiry {
                Some(at) => tokio::time::sleep_until((at + EXPIRY_SLACK).into()).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            event = events.next() => match event {
                Some(event) => event,
                None => return,
            },
            () = expired => {
                moved.notify_one();
                continue;
            }
        };
        let wake = match &event {
            Ok(watcher::Event::Delete(lease)) => role(lease) == "member",
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))
                if role(lease) == "member" =>
            {
                observed().see(lease, Instant::now());
                false
            }
            Ok(watcher::Event::Apply(lease)) => {
                role(lease) == "bucket"
                    && lease
                        .spec
                        .as_ref()
                        .and_then(|s| s.holder_identity.as_deref())
                        .is_none_or(str::is_empty)
            }
            _ => false,
        };
        if wake {
            moved.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_an_answer_from_the_api_server_says_a_lease_write_will_not_land() {
        let answered = kube::Error::Api(Box::new(
            kube::core::Status::failure("conflict", "Conflict").with_code(409),
        ));
        assert!(!super::may_still_land(&answered));
        let cut = kube::Error::Service("request timed out".into());
        assert!(super::may_still_land(&cut));
    }

    #[test]
    fn only_holders_listed_and_not_live_may_lose_their_buckets() {
        let named = |n: &str| Some(n.to_string());
        let holders = [named("a#1"), None, named("b#1"), named("a#1"), named("c#1")];
        let live = ["b#1".to_string(), "d#1".to_string()];
        assert_eq!(super::gone(&holders, &live), ["a#1", "c#1"]);
        assert!(super::gone(&[None, None], &[]).is_empty());
    }

    #[test]
    fn incarnations_are_told_apart_by_their_suffix() {
        let a = super::Keeper::incarnation_name("pod-1", 1);
        let b = super::Keeper::incarnation_name("pod-1", 2);
        assert_ne!(a, b);
        assert!(a.starts_with("pod-1#"), "{a}");
    }
}
