//! Leader election with a coordination.k8s.io/v1 Lease: one replica runs the controllers,
//! the others wait. A leader that cannot renew within the renew deadline stops at once;
//! a leader shutting down clears the Lease's holder so a standby takes over without
//! waiting for the lease to expire.
//!
//! Expiry is judged like client-go does: by how long *this* process has seen the same
//! holder and renew time unchanged, so clocks of different machines never matter.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};

/// How the Lease is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's identity (unique among replicas).
    pub identity: String,
    /// How long a lease holds without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the leader to renew.
    pub retry_period: Duration,
}

/// Why leadership ended other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The lease was not renewed within the renew deadline, or another replica took it;
    /// the controllers were stopped.
    #[error("lost the leader-election lease {namespace}/{name}; stopped reconciling")]
    Lost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
    },
    /// The host may not read or write its Lease; waiting would never end.
    #[error(
        "may not use the leader-election lease {namespace}/{name} (apply `inrun generate rbac` for this Blueprint and namespace)"
    )]
    Forbidden {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The API server's refusal.
        #[source]
        source: kube::Error,
    },
    /// The work run under leadership failed.
    #[error("the controllers stopped with an error")]
    Work(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// What a try to acquire or renew found.
enum Attempt {
    /// This replica holds the lease.
    Held,
    /// Another replica holds it.
    Other,
}

struct Elector {
    api: Api<Lease>,
    config: LeaderConfig,
    /// The last (holder, renewTime) seen and when it was first seen.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// A lease duration as a Lease records it, in whole seconds rounded *up*: others judge the
/// holder gone by the recorded duration, so it must never be shorter than the holder's own.
pub fn lease_seconds(duration: Duration) -> i32 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
}

impl Elector {
    fn seconds(&self) -> i32 {
        lease_seconds(self.config.lease_duration)
    }

    fn fresh_spec(&self, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.seconds()),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let id = self.config.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.config.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.fresh_spec(0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Other),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder.clone(), spec.renew_time.clone());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(h, r, _)| (h, r) != (&record.0, &record.1));
        if changed {
            self.observed = Some((record.0, record.1, Instant::now()));
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.lease_duration, Duration::from_secs);
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|(_, _, seen)| seen.elapsed() > duration);
        let new_spec = match holder.as_deref() {
            Some(h) if h == id => LeaseSpec {
                renew_time: Some(now()),
                lease_duration_seconds: Some(self.seconds()),
                ..spec
            },
            Some(_) if !expired => return Ok(Attempt::Other),
            // Free (released) or expired: take it.
            _ => self.fresh_spec(spec.lease_transitions.unwrap_or(0) + 1),
        };
        lease.spec = Some(new_spec);
        // The resourceVersion makes this a compare-and-swap: two candidates never both win.
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Other),
            Err(e) => Err(e),
        }
    }

    /// Clears the holder so a standby takes over at its next try.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.lease_name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(now()),
            ..spec
        });
        self.api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone); holds no borrow across
/// awaits, so the futures waiting on it stay `Send`.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// The Lease's client (unfenced: renewing must work while writes are refused) and the
/// fence this election opens while this replica leads and closes otherwise.
#[derive(Clone)]
pub struct Keeper {
    /// Renews the Lease; built without the fence.
    pub client: Client,
    /// What every writing client passes through.
    pub fence: crate::fence::Fence,
}

/// Waits for the lease, then runs `work` until `shutdown` turns true or the lease is lost;
/// `work` gets a receiver that turns true when it must stop. `metrics` tells whether this
/// replica leads (`leader_election_master_status`). Returns `Ok` after a shutdown (lease
/// released).
///
/// Writes are fenced: `keeper.fence` is closed while this replica waits, opened when it
/// holds the lease, and closed again the moment the lease is lost, which is at the latest
/// the renew deadline after the start of the last successful renewal (the fence itself
/// knows that deadline, so a write is refused past it even before this task runs). A candidate takes
/// over only after seeing the lease unrenewed for the whole lease duration, so no write
/// of this replica, not even one in flight, lands after another has started leading.
///
/// # Errors
/// [`LeaderError::Lost`] when renewal failed for the renew deadline (writes were fenced,
/// the work was told to stop and has finished), [`LeaderError::Work`] when the work failed.
pub async fn run<F, Fut, E>(
    keeper: Keeper,
    config: LeaderConfig,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<inrun_observe::metrics::Metrics>,
    work: F,
) -> Result<(), LeaderError>
where
    F: FnOnce(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let Keeper { client, fence } = keeper;
    fence.close();
    let mut elector = Elector {
        api: Api::namespaced(client, &config.namespace),
        config: config.clone(),
        observed: None,
    };
    let lease = config.lease_name.clone();
    metrics.leader_election(&lease, false);
    tracing::info!(lease = %config.lease_name, namespace = %config.namespace, identity = %config.identity, "waiting for the leader-election lease");
    let Some(acquired) = acquire(&mut elector, &mut shutdown).await? else {
        return Ok(());
    };
    tracing::info!(identity = %config.identity, "became the leader");
    // Leadership counts from when the winning request was sent: the API server may have
    // stored it (and others seen it) at any moment after that.
    let mut deadline = acquired + config.renew_deadline;
    // Open until the renew deadline, moved on by each renewal: a process paused past it
    // writes nothing when it resumes, whichever of its tasks runs first.
    fence.open_until(deadline);
    metrics.leader_election(&lease, true);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut task = tokio::spawn(work(stop_rx));
    let lost = match lead(
        &mut elector,
        &fence,
        &mut deadline,
        &mut shutdown,
        &mut task,
    )
    .await
    {
        Term::Shutdown => false,
        Term::Lost => true,
        Term::WorkEnded(finished) => {
            // The work ended by itself (a startup error): give the lease back.
            fence.close();
            metrics.leader_election(&lease, false);
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "releasing the lease");
            }
            return work_outcome(finished);
        }
    };
    if lost {
        // Lost: refuse writes before anything else, abandoning those in flight.
        fence.close();
    }
    // Stop reconciling at once: controllers finish what is in flight and start nothing new.
    let _ = stop_tx.send(true);
    metrics.leader_election(&lease, false);
    let finished = drain(&mut elector, &fence, deadline, &mut task).await;
    fence.close();
    if lost {
        tracing::error!("lost the leader-election lease; stopped reconciling");
        return Err(LeaderError::Lost {
            namespace: config.namespace,
            name: config.lease_name,
        });
    }
    if let Err(e) = elector.release().await {
        tracing::warn!(error = %inrun_contract::errors::chain(&e), "releasing the lease");
    } else {
        tracing::info!("released the leader-election lease");
    }
    work_outcome(finished)
}

/// Tries for the lease every retry period until this replica holds it. Returns when the
/// winning request was sent, or `None` once `shutdown` turns true.
///
/// # Errors
/// [`LeaderError::Forbidden`] when the host may not use its Lease.
async fn acquire(
    elector: &mut Elector,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<Instant>, LeaderError> {
    let retry_period = elector.config.retry_period;
    let attempt_timeout = retry_period.max(Duration::from_secs(1));
    loop {
        if *shutdown.borrow() {
            return Ok(None);
        }
        let sent = Instant::now();
        match tokio::time::timeout(attempt_timeout, elector.try_acquire_or_renew()).await {
            Ok(Ok(Attempt::Held)) => return Ok(Some(sent)),
            Ok(Ok(Attempt::Other)) => {}
            Ok(Err(kube::Error::Api(e))) if e.code == 403 => {
                return Err(LeaderError::Forbidden {
                    namespace: elector.config.namespace.clone(),
                    name: elector.config.lease_name.clone(),
                    source: kube::Error::Api(e),
                });
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "trying to acquire the lease")
            }
            Err(_) => tracing::warn!("trying to acquire the lease timed out"),
        }
        tokio::select! {
            () = tokio::time::sleep(retry_period) => {}
            () = stopped(shutdown) => return Ok(None),
        }
    }
}

/// How a term as leader ended.
enum Term<T> {
    /// `shutdown` turned true.
    Shutdown,
    /// The lease was not renewed by `deadline`, or another replica holds it.
    Lost,
    /// The work ended by itself, with this outcome.
    WorkEnded(T),
}

/// Leads while `task` runs: renews the lease every retry period, each success moving
/// `deadline` to the renew deadline after the renewal was sent.
async fn lead<T>(
    elector: &mut Elector,
    fence: &crate::fence::Fence,
    deadline: &mut Instant,
    shutdown: &mut watch::Receiver<bool>,
    task: &mut JoinHandle<T>,
) -> Term<Result<T, JoinError>> {
    let (retry_period, renew_deadline) =
        (elector.config.retry_period, elector.config.renew_deadline);
    loop {
        tokio::select! {
            () = tokio::time::sleep(retry_period) => {}
            () = tokio::time::sleep_until((*deadline).into()) => return Term::Lost,
            () = stopped(shutdown) => return Term::Shutdown,
            finished = &mut *task => return Term::WorkEnded(finished),
        }
        let sent = Instant::now();
        match tokio::time::timeout_at((*deadline).into(), elector.try_acquire_or_renew()).await {
            Ok(Ok(Attempt::Held)) => {
                *deadline = sent + renew_deadline;
                fence.extend(*deadline);
            }
            Ok(Ok(Attempt::Other)) => return Term::Lost,
            Ok(Err(e)) => {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "renewing the lease")
            }
            Err(_) => tracing::warn!("renewing the lease timed out"),
        }
        if Instant::now() >= *deadline {
            return Term::Lost;
        }
    }
}

/// Waits for `task`, told to stop, to finish. While it finishes after a shutdown, the
/// lease is still renewed; writes stay fenced by the same deadline either way (`fence`
/// closes at `deadline`, or when another replica holds the lease).
async fn drain<T>(
    elector: &mut Elector,
    fence: &crate::fence::Fence,
    mut deadline: Instant,
    task: &mut JoinHandle<T>,
) -> Result<T, JoinError> {
    let (retry_period, renew_deadline) =
        (elector.config.retry_period, elector.config.renew_deadline);
    loop {
        tokio::select! {
            finished = &mut *task => return finished,
            () = tokio::time::sleep_until(deadline.into()), if fence.is_open() => fence.close(),
            () = tokio::time::sleep(retry_period), if fence.is_open() => {
                let sent = Instant::now();
                match tokio::time::timeout_at(deadline.into(), elector.try_acquire_or_renew()).await {
                    Ok(Ok(Attempt::Held)) => {
                        deadline = sent + renew_deadline;
                        fence.extend(deadline);
                    }
                    Ok(Ok(Attempt::Other)) => fence.close(),
                    _ => {}
                }
            }
        }
    }
}

/// The work's outcome as leadership's.
///
/// # Errors
/// [`LeaderError::Work`] when the work failed or panicked.
fn work_outcome<E>(finished: Result<Result<(), E>, JoinError>) -> Result<(), LeaderError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match finished {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(LeaderError::Work(Box::new(e))),
        Err(join) => Err(LeaderError::Work(Box::new(join))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_lease_records_its_duration_rounded_up_never_shorter_than_the_holders() {
        assert_eq!(super::lease_seconds(Duration::from_secs(6)), 6);
        assert_eq!(super::lease_seconds(Duration::from_millis(2500)), 3);
        assert_eq!(super::lease_seconds(Duration::from_millis(200)), 1);
        assert_eq!(super::lease_seconds(Duration::ZERO), 1);
    }
}
