//! Keeping held identity locks alive, and judging others' by their renewals. The host
//! renews each Lease its CRs hold every third of the Lease's duration, on a timer of its own
//! (never in a pass: a pass that finds everything as desired writes nothing), through the
//! holder's tenant's write rate. The timer runs only while this process holds a Lease.
//!
//! Another host's Lease is judged as client-go's leader election judges its Lease: stale
//! once its holder and `renewTime` have not changed for `leaseDurationSeconds` as this
//! process watched them, on its own clock, so hosts' clocks need not agree.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, PostParams};

use super::{Table, holder_of};

/// A Lease a CR of this process holds.
pub(super) struct Held {
    /// The holder's uid.
    pub(super) uid: String,
    /// The holder's tenant (`None`: the host's one Blueprint).
    pub(super) tenant: Option<String>,
    /// The holder's apiVersion and kind.
    pub(super) kind: (String, String),
    /// The Lease as last written or read (its resourceVersion makes a renewal a
    /// compare-and-swap).
    lease: Lease,
    /// When the Lease was last seen renewed (`None`: too long ago to say); past half its
    /// duration a pass reads it again.
    pub(super) confirmed: Option<Instant>,
    /// When to renew it next.
    due: Instant,
    /// Writes the renewals: the host's client under the tenant's write rate.
    pub(super) client: Client,
}

impl Held {
    /// `lease`, held by `uid`: `written` by this process just now, or read (its
    /// `renewTime` says how long ago it was renewed, and so when it is due).
    pub(super) fn new(
        uid: String,
        tenant: Option<String>,
        kind: (String, String),
        lease: Lease,
        client: Client,
        written: bool,
        every: Duration,
    ) -> Self {
        let now = Instant::now();
        let age = if written {
            Duration::ZERO
        } else {
            renewed_ago(&lease).unwrap_or(Duration::MAX)
        };
        Held {
            uid,
            tenant,
            kind,
            lease,
            confirmed: now.checked_sub(age),
            due: now + every.saturating_sub(age),
            client,
        }
    }
}

/// How long ago the Lease was renewed, by the wall clock.
fn renewed_ago(lease: &Lease) -> Option<Duration> {
    let spec = lease.spec.as_ref()?;
    let at = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?;
    let ago = k8s_openapi::jiff::Timestamp::now().duration_since(at.0);
    Some(Duration::try_from(ago).unwrap_or(Duration::ZERO))
}

/// Another's Lease as this process last saw it, and since when unchanged.
pub(super) struct Seen {
    record: (String, Option<MicroTime>),
    since: Instant,
    looked: Instant,
}

/// What the locks of one host keep in memory.
#[derive(Default)]
pub(super) struct State {
    /// Leases this process's CRs hold, by name.
    pub(super) held: HashMap<String, Held>,
    /// Leases of others this process met, by name.
    pub(super) seen: HashMap<String, Seen>,
    /// Whether the renewing task runs.
    renewing: bool,
}

/// Now, as a Lease records it.
pub(super) fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// `spec` renewed now, for `duration` (recorded rounded up to whole seconds, so no one
/// judges the holder gone before its own timings do).
pub(super) fn renewed(spec: LeaseSpec, duration: Duration) -> LeaseSpec {
    LeaseSpec {
        renew_time: Some(now()),
        lease_duration_seconds: Some(inrun_ring::leader::lease_seconds(duration)),
        ..spec
    }
}

/// Whether the Lease `name`, showing `record` (holder and renew time) now, has shown it
/// unchanged for `duration` as this process watched it. A Lease first met now is not: it
/// may have been renewed a moment ago.
pub(super) fn unrenewed_for(
    seen: &mut HashMap<String, Seen>,
    name: &str,
    record: (String, Option<MicroTime>),
    duration: Duration,
    now: Instant,
) -> bool {
    // Leases not met for a while (their claimers gone) are forgotten.
    seen.retain(|_, s| now.saturating_duration_since(s.looked) < duration * 4);
    let s = seen.entry(name.to_string()).or_insert_with(|| Seen {
        record: record.clone(),
        since: now,
        looked: now,
    });
    if s.record != record {
        s.record = record;
        s.since = now;
    }
    s.looked = now;
    now.saturating_duration_since(s.since) >= duration
}

/// Starts the renewing task unless it runs (`state` is `table`'s, locked).
pub(super) fn ensure_running(table: &Arc<Table>, state: &mut State) {
    if state.renewing {
        return;
    }
    state.renewing = true;
    tokio::spawn(renew_held(Arc::downgrade(table)));
}

/// Renews each held Lease when it is due; ends when none is held (idle: no timer) or the
/// host's locks are gone.
async fn renew_held(table: Weak<Table>) {
    loop {
        let next = {
            let Some(t) = table.upgrade() else { return };
            let mut state = t.state();
            match state.held.values().map(|h| h.due).min() {
                Some(due) => due,
                None => {
                    state.renewing = false;
                    return;
                }
            }
        };
        tokio::time::sleep_until(next.into()).await;
        let Some(t) = table.upgrade() else { return };
        let due: Vec<(String, String, Lease, Client)> = {
            let now = Instant::now();
            t.state()
                .held
                .iter()
                .filter(|(_, h)| h.due <= now)
                .map(|(n, h)| (n.clone(), h.uid.clone(), h.lease.clone(), h.client.clone()))
                .collect()
        };
        for (name, uid, lease, client) in due {
            let outcome = renew(&t, &name, &uid, lease, &client).await;
            settle(&t, &name, &uid, outcome);
        }
    }
}

/// What one renewal came to.
enum Renewal {
    /// Renewed: the Lease as written.
    Done(Box<Lease>),
    /// Another holds it now, or it is gone: no longer this process's to renew.
    Lost,
    /// It could not be written now: try again soon.
    Failed,
}

/// Renews `lease` (named `name`, held by `uid`) through `client`; a Lease changed since it
/// was last seen is read again, and renewed if `uid` still holds it.
async fn renew(table: &Table, name: &str, uid: &str, mut lease: Lease, client: &Client) -> Renewal {
    let api: Api<Lease> = Api::namespaced(client.clone(), &table.namespace);
    for _ in 0..2 {
        lease.spec = Some(renewed(
            lease.spec.take().unwrap_or_default(),
            table.policy.duration,
        ));
        match api.replace(name, &PostParams::default(), &lease).await {
            Ok(written) => return Renewal::Done(Box::new(written)),
            Err(kube::Error::Api(e)) if e.code == 404 => return Renewal::Lost,
            Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(name).await {
                Ok(Some(now)) if holder_of(&now) == uid => lease = now,
                Ok(_) => return Renewal::Lost,
                Err(e) => {
                    tracing::warn!(lease = %name, error = %e, "could not read an identity lock to renew it");
                    return Renewal::Failed;
                }
            },
            Err(e) => {
                tracing::warn!(lease = %name, error = %e, "could not renew an identity lock; trying again soon");
                return Renewal::Failed;
            }
        }
    }
    Renewal::Failed
}

/// Records a renewal's outcome for `name`, if `uid` still holds it here.
fn settle(table: &Table, name: &str, uid: &str, outcome: Renewal) {
    let every = table.policy.renew_every();
    let mut state = table.state();
    let Some(h) = state.held.get_mut(name).filter(|h| h.uid == uid) else {
        return;
    };
    let now = Instant::now();
    match outcome {
        Renewal::Done(lease) => {
            h.lease = *lease;
            h.confirmed = Some(now);
            h.due = now + every;
        }
        Renewal::Failed => h.due = now + (every / 10).max(Duration::from_secs(1)).min(every),
        Renewal::Lost => {
            tracing::info!(lease = %name, "an identity lock this host renewed is held by another CR now, or gone; its CR claims it again at its next pass");
            state.held.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Option<MicroTime> {
        Some(MicroTime(
            k8s_openapi::jiff::Timestamp::from_second(secs).expect("timestamp"),
        ))
    }

    #[test]
    fn a_lease_is_stale_once_unchanged_for_its_duration_as_this_process_watched_it() {
        let mut seen = HashMap::new();
        let d = Duration::from_secs(10);
        let t0 = Instant::now();
        let rec = |renewed| ("holder".to_string(), at(renewed));
        // First met: never stale at once, however old its renewTime says it is.
        assert!(!unrenewed_for(&mut seen, "l", rec(1), d, t0));
        assert!(!unrenewed_for(&mut seen, "l", rec(1), d, t0 + d / 2));
        // Renewed meanwhile: the clock starts again.
        assert!(!unrenewed_for(&mut seen, "l", rec(2), d, t0 + d));
        assert!(!unrenewed_for(&mut seen, "l", rec(2), d, t0 + d + d / 2));
        assert!(unrenewed_for(&mut seen, "l", rec(2), d, t0 + d * 2));
        // Another holder is another record.
        assert!(!unrenewed_for(
            &mut seen,
            "l",
            ("other".to_string(), at(2)),
            d,
            t0 + d * 2
        ));
        // Leases not met for four durations are forgotten.
        assert!(!unrenewed_for(&mut seen, "m", rec(1), d, t0 + d * 7));
        assert!(!seen.contains_key("l"), "forgotten");
    }

    #[test]
    fn a_renewal_records_the_time_and_the_duration_rounded_up() {
        let spec = renewed(LeaseSpec::default(), Duration::from_millis(2500));
        assert_eq!(spec.lease_duration_seconds, Some(3));
        assert!(spec.renew_time.is_some());
    }
}
