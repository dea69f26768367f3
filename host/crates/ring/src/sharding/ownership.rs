//! Who holds each bucket, recorded in one Lease per bucket (`<ring>-b-NN`): its
//! `holderIdentity` names the member, its `leaseTransitions` is the bucket's epoch (one
//! more at every change of holder). Every change is a compare-and-swap on the Lease's
//! resourceVersion, so of two members taking a bucket at once exactly one succeeds.
//!
//! Bucket Leases are not renewed: a holder holds a bucket while the Lease names it and its
//! member Lease is live ([`super::members`]), so an idle ring writes nothing for its
//! buckets. A member takes a bucket that is free, or whose holder it has seen stop (never
//! one whose holder it has not seen at all); a member giving a bucket up clears the holder,
//! and the next member takes it at once.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{ListParams, ObjectMeta, PostParams};

use super::buckets::BUCKETS;
use super::members::{RING_LABEL, ROLE_LABEL, Ring};

/// The label on a bucket Lease naming its bucket.
pub const BUCKET_LABEL: &str = "inrun.dev/bucket";

/// What a try to take a bucket found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// This member holds the bucket, in this epoch.
    Held {
        /// The Lease's `leaseTransitions`: changes whenever the holder does.
        epoch: i32,
    },
    /// Another member holds it (not one seen gone), or won the race for it (named when
    /// known).
    Other(Option<String>),
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Ring {
    /// The name of `bucket`'s Lease.
    pub fn bucket_lease(&self, bucket: usize) -> String {
        format!("{}-b-{bucket:02}", self.name)
    }

    fn held_spec(&self, me: &str, epoch: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(me.to_string()),
            lease_duration_seconds: Some(crate::leader::lease_seconds(self.lease_duration)),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(epoch),
            ..LeaseSpec::default()
        }
    }

    /// Takes `bucket` for `me` when it is free or its holder is one of `gone` (members `me`
    /// has seen stop: their member Lease unchanged for a lease duration, or deleted after
    /// they took a bucket); keeps it when `me` holds it already. A holder `me` knows
    /// nothing of — a member that joined since `me` looked — keeps it: not seen is not
    /// gone.
    ///
    /// # Errors
    /// The API server's refusal (a lost race is [`Take::Other`], not an error).
    pub async fn acquire(
        &self,
        client: &Client,
        bucket: usize,
        me: &str,
        gone: &[String],
    ) -> Result<Take, kube::Error> {
        let api = self.api(client);
        let name = self.bucket_lease(bucket);
        let Some(mut lease) = api.get_opt(&name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(self.namespace.clone()),
                    labels: Some(BTreeMap::from([
                        (RING_LABEL.to_string(), self.name.clone()),
                        (ROLE_LABEL.to_string(), "bucket".to_string()),
                        (BUCKET_LABEL.to_string(), format!("{bucket:02}")),
                    ])),
                    ..ObjectMeta::default()
                },
                spec: Some(self.held_spec(me, 1)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Take::Held { epoch: 1 }),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Take::Other(None)),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let epoch = spec.lease_transitions.unwrap_or(0);
        match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
            Some(holder) if holder == me => return Ok(Take::Held { epoch }),
            Some(holder) if !gone.iter().any(|m| m == holder) => {
                return Ok(Take::Other(Some(holder.to_string())));
            }
            // Free, or held by a member `me` has seen stop.
            _ => {}
        }
        lease.spec = Some(self.held_spec(me, epoch + 1));
        // The resourceVersion read above makes this a compare-and-swap.
        match api
            .replace(&self.bucket_lease(bucket), &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Take::Held { epoch: epoch + 1 }),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Take::Other(None)),
            Err(e) => Err(e),
        }
    }

    /// Gives `bucket` up if `me` holds it: clears the holder (a compare-and-swap), so the
    /// next member takes it at once. Call only once every write of the bucket has returned.
    ///
    /// # Errors
    /// The API server's refusal; a bucket someone else holds, or none, is left alone.
    pub async fn release_bucket(
        &self,
        client: &Client,
        bucket: usize,
        me: &str,
    ) -> Result<(), kube::Error> {
        let api = self.api(client);
        let name = self.bucket_lease(bucket);
        let Some(mut lease) = api.get_opt(&name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(me) {
            return Ok(());
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            renew_time: Some(now()),
            ..spec
        });
        match api.replace(&name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            // Changed since read: someone else's now.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The holder of every bucket as the API server records it now (one LIST), and each
    /// bucket's epoch.
    ///
    /// # Errors
    /// The API server's refusal.
    pub async fn holders(
        &self,
        client: &Client,
    ) -> Result<Vec<(Option<String>, i32)>, kube::Error> {
        let selector = format!("{RING_LABEL}={},{ROLE_LABEL}=bucket", self.name);
        let mut holders = vec![(None, 0); BUCKETS];
        let list = self
            .api(client)
            .list(&ListParams::default().labels(&selector))
            .await?;
        for lease in list.items {
            let bucket = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(BUCKET_LABEL))
                .and_then(|b| b.parse::<usize>().ok())
                .filter(|b| *b < BUCKETS);
            if let Some(b) = bucket {
                let spec = lease.spec.unwrap_or_default();
                holders[b] = (
                    spec.holder_identity.filter(|h| !h.is_empty()),
                    spec.lease_transitions.unwrap_or(0),
                );
            }
        }
        Ok(holders)
    }
}
