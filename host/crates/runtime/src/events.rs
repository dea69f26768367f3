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

/// Most events a reconciler may have recorded on one CR per [`EMIT_WINDOW`]; more are
/// dropped (and logged), so a plugin cannot flood the API server through its Results.
const EMIT_BURST: u32 = 5;
/// The window [`EMIT_BURST`] counts in.
const EMIT_WINDOW: SignedDuration = SignedDuration::from_mins(1);

/// What makes two events the same: the object, the type, the reason and the note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: (Option<String>, Option<String>, Option<String>),
    warning: bool,
    reason: String,
    note: String,
}

/// The key of an event on `on`, its note cut to [`NOTE_MAX`].
fn key(on: &ObjectReference, warning: bool, reason: &str, mut note: String) -> Key {
    if note.chars().count() > NOTE_MAX {
        note = note.chars().take(NOTE_MAX - 1).collect::<String>() + "…";
    }
    Key {
        regarding: (on.uid.clone(), on.namespace.clone(), on.name.clone()),
        warning,
        reason: reason.to_string(),
        note,
    }
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
    /// Reconciler events per CR (by uid): when its window started, how many so far.
    emitted: HashMap<String, (Timestamp, u32)>,
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

    /// A recorder reporting as this one does, writing through `client` (the host's own,
    /// for events a tenant's identity may not write: on its CRD or its Blueprint).
    #[must_use]
    pub fn through(&self, client: Client) -> Events {
        Events::new(client, self.instance.clone())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `reason` with `note` on the object. A failure to record is logged, never
    /// fatal: events are for people, and the pass must go on.
    pub async fn record(&self, on: &ObjectReference, reason: Reason, note: impl Into<String>) {
        let key = key(
            on,
            reason.event_type() == "Warning",
            reason.as_str(),
            note.into(),
        );
        let now = Timestamp::now();
        let earlier = self.earlier(&key, now);
        self.write(on, key, earlier, now).await;
    }

    /// Records an event a reconciler asked for: at most [`EMIT_BURST`] per CR per
    /// [`EMIT_WINDOW`], and one identical to an event still in its series window is not
    /// recorded again (a reconciler saying the same thing every pass writes nothing).
    /// Returns whether it was recorded.
    pub async fn emit(&self, on: &ObjectReference, event: &inrun_contract::Event) -> bool {
        let key = key(on, event.is_warning(), &event.reason, event.message.clone());
        let now = Timestamp::now();
        if self.earlier(&key, now).is_some() {
            return false;
        }
        {
            let mut recent = self.recent();
            let uid = on.uid.clone().unwrap_or_default();
            let (start, count) = recent.emitted.entry(uid).or_insert((now, 0));
            if *start + EMIT_WINDOW <= now {
                (*start, *count) = (now, 0);
            }
            if *count >= EMIT_BURST {
                tracing::warn!(
                    reason = %event.reason,
                    object = on.name.as_deref().unwrap_or_default(),
                    "a reconciler's event dropped: more than {EMIT_BURST} for this CR within a minute"
                );
                return false;
            }
            *count += 1;
        }
        self.write(on, key, None, now).await;
        true
    }

    /// The series `key` extends, if one is still within its window.
    fn earlier(&self, key: &Key, now: Timestamp) -> Option<Recorded> {
        let mut recent = self.recent();
        if recent.series.len() >= recent.prune_at {
            recent.series.retain(|_, r| r.last + SERIES_WINDOW > now);
            recent
                .emitted
                .retain(|_, (start, _)| *start + EMIT_WINDOW > now);
            recent.prune_at = (recent.series.len() * 2).max(64);
        }
        recent
            .series
            .get(&key.hashed())
            .filter(|r| r.last + SERIES_WINDOW > now)
            .cloned()
    }

    /// Writes `key` (extending `earlier`) and remembers its series; a failure is logged.
    async fn write(
        &self,
        on: &ObjectReference,
        key: Key,
        earlier: Option<Recorded>,
        now: Timestamp,
    ) {
        match self.publish(on, &key, earlier, now).await {
            Ok(recorded) => {
                self.recent().series.insert(key.hashed(), recorded);
            }
            Err(e) => {
                tracing::warn!(error = %e, reason = %key.reason, "could not record event");
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
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.into()),
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
