//! Events on CRs (events.k8s.io, shown by `kubectl describe`). An event identical to one
//! recorded shortly before (same object, reason and note) extends that event's series
//! rather than adding an object per retry; a different note is a new event, so nothing
//! said is lost (kube's `Recorder` folds every note of a reason into its first one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

pub use inrun_pass::Reason;

/// Longest event note, in characters; Kubernetes caps notes at 1 kB.
const NOTE_MAX: usize = 1000;
/// How long an identical event extends the earlier one (client-go uses the same window).
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);
/// The reporting controller.
const CONTROLLER: &str = "inrun";

/// What makes two events the same: the object, the reason and the note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: (Option<String>, Option<String>, Option<String>),
    reason: Reason,
    note: String,
}

/// An event object already written, and its series so far.
#[derive(Debug, Clone)]
struct Recorded {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

impl Key {
    /// The map key of the event: a 64-bit hash, so 10,000 recent events cost little more
    /// than their series (a collision could only extend the wrong one of two series).
    fn hashed(&self) -> u64 {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

/// Events written within the series window, by [`Key::hashed`].
#[derive(Default)]
struct Recent {
    series: HashMap<u64, Recorded>,
    /// Expired series are dropped when the map reaches this size (then twice what is left),
    /// so recording stays O(1) amortised however many CRs there are.
    prune_at: usize,
}

/// Records events for one controller.
#[derive(Clone)]
pub struct Events {
    client: Client,
    instance: String,
    recent: Arc<Mutex<Recent>>,
}

impl Events {
    /// A recorder reporting as `inrun` from `instance`.
    pub fn new(client: Client, instance: String) -> Self {
        Events {
            client,
            instance,
            recent: Arc::default(),
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `reason` with `note` on the object. A failure to record is logged, never
    /// fatal: events are for people, and the pass must go on.
    pub async fn record(&self, on: &ObjectReference, reason: Reason, note: impl Into<String>) {
        let mut note: String = note.into();
        if note.chars().count() > NOTE_MAX {
            note = note.chars().take(NOTE_MAX - 1).collect::<String>() + "…";
        }
        let key = Key {
            regarding: (on.uid.clone(), on.namespace.clone(), on.name.clone()),
            reason,
            note,
        };
        let now = Timestamp::now();
        let hashed = key.hashed();
        let earlier = {
            let mut recent = self.recent();
            if recent.series.len() >= recent.prune_at {
                recent.series.retain(|_, r| r.last + SERIES_WINDOW > now);
                recent.prune_at = (recent.series.len() * 2).max(64);
            }
            recent
                .series
                .get(&hashed)
                .filter(|r| r.last + SERIES_WINDOW > now)
                .cloned()
        };
        match self.publish(on, &key, earlier, now).await {
            Ok(recorded) => {
                self.recent().series.insert(hashed, recorded);
            }
            Err(e) => {
                tracing::warn!(error = %e, reason = reason.as_str(), "could not record event");
            }
        }
    }

    /// Extends `earlier`'s series, or writes a new event when there is none (or it is gone).
    async fn publish(
        &self,
        on: &ObjectReference,
        key: &Key,
        earlier: Option<Recorded>,
        now: Timestamp,
    ) -> Result<Recorded, kube::Error> {
        if let Some(mut recorded) = earlier {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &recorded.namespace);
            let series = EventSeries {
                count: recorded.count.saturating_add(1),
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            match api
                .patch(
                    &recorded.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    recorded.count = series.count;
                    recorded.last = now;
                    return Ok(recorded);
                }
                // Expired or deleted: start a new event.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let namespace = on.namespace.clone().unwrap_or_else(|| "default".into());
        let name = format!(
            "{}.{:x}",
            on.name.as_deref().unwrap_or(CONTROLLER),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some("Reconcile".into()),
            reason: Some(key.reason.as_str().into()),
            note: Some(key.note.clone()),
            type_: Some(key.reason.event_type().into()),
            regarding: Some(on.clone()),
            reporting_controller: Some(CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event).await?;
        Ok(Recorded {
            namespace,
            name,
            count: 1,
            last: now,
        })
    }
}
