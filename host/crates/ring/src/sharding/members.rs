//! Membership: each replica holds a member Lease (`<ring>-m-<hash of its identity>`,
//! labelled `inrun.dev/ring=<ring>`), renewed every retry period and deleted when the
//! replica stops (left to expire if its writes have not drained); every replica lists the ring's Leases and judges who is live.
//!
//! Liveness is judged as the leader election judges its Lease (and client-go does): a
//! member is live while this replica has seen its (holder, renewTime) record change
//! within the lease duration, on this replica's own monotonic clock, so clocks of
//! different machines never matter. A Lease seen for the first time counts as just
//! renewed. A released (deleted) member is gone at the next look; one that stopped
//! without releasing (SIGKILL, a paused process) is gone a lease duration after its last
//! renewal was first seen.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};

use super::buckets::fnv1a64;

/// The label naming the ring a member Lease belongs to.
pub const RING_LABEL: &str = "inrun.dev/ring";

/// The label telling member Leases from the ring's other Leases.
pub const ROLE_LABEL: &str = "inrun.dev/role";

/// The field manager of member Leases.
const MANAGER: &str = "inrun-member";

/// A ring: the replicas that share a Blueprint's CRs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    /// The ring's name (Lease names start with it; a DNS label).
    pub name: String,
    /// The namespace of its Leases.
    pub namespace: String,
    /// How long a member holds without renewing.
    pub lease_duration: Duration,
}

impl Ring {
    /// The name of `identity`'s member Lease: the identity hashed, since identities
    /// (`HOSTNAME-pid`) need not be valid object names.
    pub fn member_lease(&self, identity: &str) -> String {
        format!("{}-m-{:016x}", self.name, fnv1a64(identity.as_bytes()))
    }

    pub(super) fn api(&self, client: &Client) -> Api<Lease> {
        Api::namespaced(client.clone(), &self.namespace)
    }

    /// Creates or renews `identity`'s member Lease (one server-side apply).
    ///
    /// # Errors
    /// The API server's refusal.
    pub async fn renew(&self, client: &Client, identity: &str) -> Result<(), kube::Error> {
        let name = self.member_lease(identity);
        let seconds = crate::leader::lease_seconds(self.lease_duration);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (RING_LABEL.to_string(), self.name.clone()),
                    (ROLE_LABEL.to_string(), "member".to_string()),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(identity.to_string()),
                lease_duration_seconds: Some(seconds),
                renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        let mut value = serde_json::to_value(&lease).unwrap_or_default();
        value["apiVersion"] = "coordination.k8s.io/v1".into();
        value["kind"] = "Lease".into();
        self.api(client)
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&value),
            )
            .await
            .map(|_| ())
    }

    /// Deletes `identity`'s member Lease: the others drop it at their next look.
    ///
    /// # Errors
    /// The API server's refusal (a Lease already gone is not one).
    pub async fn release(&self, client: &Client, identity: &str) -> Result<(), kube::Error> {
        match self
            .api(client)
            .delete(&self.member_lease(identity), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The ring's member Leases as the API server has them now.
    ///
    /// # Errors
    /// The API server's refusal.
    pub async fn member_leases(&self, client: &Client) -> Result<Vec<Lease>, kube::Error> {
        let selector = format!("{RING_LABEL}={},{ROLE_LABEL}=member", self.name);
        Ok(self
            .api(client)
            .list(&ListParams::default().labels(&selector))
            .await?
            .items)
    }
}

/// What one replica has seen of the ring's member Leases, and since when.
#[derive(Debug, Default)]
pub struct Observed {
    /// By Lease name: the holder, its renew time, its lease duration, and when this
    /// record was first seen.
    records: BTreeMap<String, Record>,
}

#[derive(Debug)]
struct Record {
    holder: Option<String>,
    renewed: Option<MicroTime>,
    duration: Option<Duration>,
    since: Instant,
}

impl Observed {
    /// Takes in the ring's Leases as listed at `now`: a changed record restarts its clock,
    /// a Lease no longer listed is forgotten.
    pub fn update(&mut self, leases: &[Lease], now: Instant) {
        let mut next = BTreeMap::new();
        for lease in leases {
            if let Some((name, record)) = self.record(lease, now) {
                next.insert(name, record);
            }
        }
        self.records = next;
    }

    /// Takes in one member Lease as a watch delivered it at `now`: its renewal is seen the
    /// moment it is made, not at the next list, so a member that stops renewing is judged
    /// gone a lease duration after its last renewal, not up to a period later.
    pub fn see(&mut self, lease: &Lease, now: Instant) {
        if let Some((name, record)) = self.record(lease, now) {
            self.records.insert(name, record);
        }
    }

    /// `lease`'s record, keeping when it was first seen if it is unchanged.
    fn record(&self, lease: &Lease, now: Instant) -> Option<(String, Record)> {
        let name = lease.metadata.name.clone()?;
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.filter(|h| !h.is_empty());
        let renewed = spec.renew_time;
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs);
        let since = match self.records.get(&name) {
            Some(r) if r.holder == holder && r.renewed == renewed => r.since,
            _ => now,
        };
        Some((
            name,
            Record {
                holder,
                renewed,
                duration,
                since,
            },
        ))
    }

    /// The next moment after `now` at which a member seen live stops being live, if it is
    /// not renewed before then.
    pub fn next_expiry(&self, now: Instant, fallback: Duration) -> Option<Instant> {
        self.records
            .values()
            .filter(|r| r.holder.is_some())
            .map(|r| r.since + r.duration.unwrap_or(fallback))
            .filter(|at| *at > now)
            .min()
    }

    /// The Leases whose record has not changed for their duration and `grace` more: of
    /// members that stopped without releasing (SIGKILL), left for anyone to delete.
    pub fn stale(&self, now: Instant, fallback: Duration, grace: Duration) -> Vec<String> {
        self.records
            .iter()
            .filter(|(_, r)| {
                now.saturating_duration_since(r.since) > r.duration.unwrap_or(fallback) + grace
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The identities live at `now`: holders whose record changed within their Lease's
    /// duration (`fallback` when it names none), sorted, each once.
    pub fn live(&self, now: Instant, fallback: Duration) -> Vec<String> {
        let mut live: Vec<String> = self
            .records
            .values()
            .filter(|r| now.saturating_duration_since(r.since) <= r.duration.unwrap_or(fallback))
            .filter_map(|r| r.holder.clone())
            .collect();
        live.sort();
        live.dedup();
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: &str, renewed_second: i64) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "renewTime": k8s_openapi::jiff::Timestamp::from_second(renewed_second)
                         .expect("time").to_string()},
        }))
        .expect("lease")
    }

    #[test]
    fn a_member_is_live_while_its_renewals_keep_coming_on_the_observers_clock() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut seen = Observed::default();
        seen.update(&[lease("r-m-a", "a", 100), lease("r-m-b", "b", 100)], at(0));
        assert_eq!(seen.live(at(0), Duration::from_secs(15)), ["a", "b"]);
        // a renews, b does not.
        seen.update(
            &[lease("r-m-a", "a", 110), lease("r-m-b", "b", 100)],
            at(10),
        );
        assert_eq!(seen.live(at(15), Duration::from_secs(15)), ["a", "b"]);
        seen.update(
            &[lease("r-m-a", "a", 120), lease("r-m-b", "b", 100)],
            at(20),
        );
        assert_eq!(seen.live(at(20), Duration::from_secs(15)), ["a"]);
        // b renews again: live from the moment its new record is seen.
        seen.update(
            &[lease("r-m-a", "a", 120), lease("r-m-b", "b", 130)],
            at(21),
        );
        assert_eq!(seen.live(at(21), Duration::from_secs(15)), ["a", "b"]);
    }

    #[test]
    fn a_renewal_a_watch_delivers_counts_from_when_it_came_and_the_next_expiry_follows_it() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut seen = Observed::default();
        seen.update(&[lease("r-m-a", "a", 100), lease("r-m-b", "b", 100)], at(0));
        assert_eq!(
            seen.next_expiry(at(0), Duration::from_secs(15)),
            Some(at(15))
        );
        // b's renewal arrives by watch at 4; the list at 9 shows the same record.
        seen.see(&lease("r-m-b", "b", 104), at(4));
        seen.update(&[lease("r-m-a", "a", 100), lease("r-m-b", "b", 104)], at(9));
        assert_eq!(seen.live(at(16), Duration::from_secs(15)), ["b"]);
        assert!(seen.live(at(20), Duration::from_secs(15)).is_empty());
        // Expiries already past are not next.
        assert_eq!(
            seen.next_expiry(at(15), Duration::from_secs(15)),
            Some(at(19))
        );
        assert_eq!(seen.next_expiry(at(19), Duration::from_secs(15)), None);
    }

    #[test]
    fn a_released_member_is_gone_at_the_next_look() {
        let now = Instant::now();
        let mut seen = Observed::default();
        seen.update(&[lease("r-m-a", "a", 1), lease("r-m-b", "b", 1)], now);
        seen.update(&[lease("r-m-a", "a", 1)], now);
        assert_eq!(seen.live(now, Duration::from_secs(15)), ["a"]);
    }

    #[test]
    fn renew_times_from_a_skewed_clock_do_not_matter() {
        // A renew time far in the past (another machine's clock) is live while it changes.
        let now = Instant::now();
        let mut seen = Observed::default();
        seen.update(&[lease("r-m-a", "a", 1)], now);
        assert_eq!(
            seen.live(now + Duration::from_secs(14), Duration::from_secs(15)),
            ["a"]
        );
        assert!(
            seen.live(now + Duration::from_secs(16), Duration::from_secs(15))
                .is_empty()
        );
    }

    #[test]
    fn lease_names_are_valid_object_names_whatever_the_identity() {
        let ring = Ring {
            name: "inrun".into(),
            namespace: "ops".into(),
            lease_duration: Duration::from_secs(15),
        };
        let name = ring.member_lease("Host_Name.example/1234 ünïcode");
        assert!(
            name.starts_with("inrun-m-") && name.len() == "inrun-m-".len() + 16,
            "{name}"
        );
        assert_ne!(name, ring.member_lease("other-1"));
    }
}
