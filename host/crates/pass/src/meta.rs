//! The CR's own metadata: what the maintain step (finalizers, managed labels) and the
//! apply step (the Result's labels, annotations and pending cleanup) want on it, and
//! whether the CR already has it. Each set is written by server-side apply under its own
//! field manager, so "already has it" means: the manager owns exactly these keys and the
//! live values match.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::fields::owned_keys;
use inrun_blueprint::RuntimeSpec;
use inrun_contract::Outcome;

/// The finalizer every CR Inrun manages carries.
pub const FINALIZER: &str = "inrun.dev/cleanup";
/// Field manager for finalizers and managed labels.
pub const FINALIZER_MANAGER: &str = "inrun-finalizer";
/// Field manager for the Result's labels and annotations (and children).
pub const RECONCILER_MANAGER: &str = "inrun-reconciler";
/// Field manager for status.
pub const STATUS_MANAGER: &str = "inrun-status";
/// Annotation holding when a pending cleanup deletes the CR (RFC 3339).
pub const CLEANUP_AT: &str = "inrun.dev/cleanup-at";
/// Label on every CR Inrun manages.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "inrun");
/// Under sharding by label, the CR's bucket (two digits), kept by the finalizer manager.
pub const BUCKET: &str = "inrun.dev/bucket";
/// Annotation on every child the host applies: a hash of the object it sent, so a later
/// pass (or another replica, or the host after a restart) knows the child is as desired
/// without writing it again.
pub const APPLIED_HASH: &str = "inrun.dev/applied";
/// The label that ties a child to its CR.
pub const OWNER_UID: &str = "inrun.dev/owner-uid";

/// Metadata one field manager keeps on a CR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Finalizers (the maintain step's only).
    pub finalizers: Vec<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// The finalizers the host puts on CRs: `inrun.dev/cleanup` plus `runtime.finalizers.names`.
pub fn finalizers(runtime: &RuntimeSpec) -> Vec<String> {
    std::iter::once(FINALIZER.to_string())
        .chain(runtime.finalizers.names.iter().cloned())
        .collect()
}

/// What the maintain step keeps on every CR: the finalizers (none with
/// `runtime.finalizers.remove`), the managed-by label, and the bucket label when `bucket`
/// names one.
pub fn maintained(runtime: &RuntimeSpec, bucket: Option<&str>) -> Metadata {
    let mut labels = BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())]);
    if let Some(bucket) = bucket {
        labels.insert(BUCKET.to_string(), bucket.to_string());
    }
    Metadata {
        finalizers: if runtime.finalizers.remove {
            Vec::new()
        } else {
            finalizers(runtime)
        },
        labels,
        annotations: BTreeMap::new(),
    }
}

/// The Result's labels and annotations, plus the pending cleanup's time: the one already
/// recorded on the CR, else `after` from `now`.
pub fn decorations(object: &Value, outcome: &Outcome, now: Timestamp) -> Metadata {
    let mut annotations = outcome.annotations.clone();
    if let Some(cleanup) = &outcome.cleanup {
        let at = annotation(object, CLEANUP_AT)
            .map(str::to_string)
            .unwrap_or_else(|| format_time(after(now, cleanup.after)));
        annotations.insert(CLEANUP_AT.into(), at);
    }
    Metadata {
        finalizers: Vec::new(),
        labels: outcome.labels.clone(),
        annotations,
    }
}

/// Whether `manager` must write `want` to the CR: it owns other keys than these, or a live
/// value differs.
pub fn differs(object: &Value, manager: &str, want: &Metadata) -> bool {
    let owned = |path: &[&str]| owned_keys(object, manager, "", path);
    let live_finalizers: BTreeSet<&str> = object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let want_finalizers: BTreeSet<String> = want.finalizers.iter().cloned().collect();
    if owned(&["metadata", "finalizers"]) != want_finalizers
        || want
            .finalizers
            .iter()
            .any(|f| !live_finalizers.contains(f.as_str()))
    {
        return true;
    }
    for (field, map) in [("labels", &want.labels), ("annotations", &want.annotations)] {
        let keys: BTreeSet<String> = map.keys().cloned().collect();
        if owned(&["metadata", field]) != keys {
            return true;
        }
        let live = object.pointer(&format!("/metadata/{field}"));
        if map
            .iter()
            .any(|(k, v)| live.and_then(|l| l.get(k)).and_then(Value::as_str) != Some(v))
        {
            return true;
        }
    }
    false
}

/// Whether the CR carries the finalizer `name` (the host's is [`FINALIZER`]).
pub fn has_finalizer(object: &Value, name: &str) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == name))
}

/// When a pending cleanup deletes the CR, if one is recorded.
pub fn cleanup_at(object: &Value) -> Option<Timestamp> {
    annotation(object, CLEANUP_AT)?.parse().ok()
}

/// Time left until the pending cleanup (or `after` from now, if none is recorded yet).
pub fn cleanup_wait(object: &Value, after: Duration, now: Timestamp) -> Duration {
    match cleanup_at(object) {
        Some(at) => {
            let left = at.duration_since(now);
            Duration::try_from(left).unwrap_or(Duration::ZERO) + Duration::from_millis(100)
        }
        None => after,
    }
}

/// `at` as an RFC 3339 timestamp with second precision (what `metav1.Time` holds).
pub fn format_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn after(now: Timestamp, after: Duration) -> Timestamp {
    now.checked_add(SignedDuration::try_from(after).unwrap_or_default())
        .unwrap_or(now)
}

fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object.pointer("/metadata/annotations")?.get(key)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cr(finalizers: Value, labels: Value, owned: Value) -> Value {
        json!({"metadata": {"name": "a", "finalizers": finalizers, "labels": labels,
               "managedFields": [{"manager": FINALIZER_MANAGER, "operation": "Apply",
                                  "fieldsV1": {"f:metadata": owned}}]}})
    }

    #[test]
    fn a_cr_that_already_has_the_finalizer_and_label_needs_no_maintain_write() {
        let want = maintained(&RuntimeSpec::default(), None);
        let done = cr(
            json!([FINALIZER]),
            json!({MANAGED_BY.0: MANAGED_BY.1}),
            json!({"f:finalizers": {"v:\"inrun.dev/cleanup\"": {}},
                   "f:labels": {"f:app.kubernetes.io/managed-by": {}}}),
        );
        assert!(!differs(&done, FINALIZER_MANAGER, &want));
        // New CR: nothing there yet.
        assert!(differs(
            &json!({"metadata": {"name": "a"}}),
            FINALIZER_MANAGER,
            &want
        ));
        // The finalizer is there but put by someone else: take it over once.
        let copied = cr(
            json!([FINALIZER]),
            json!({MANAGED_BY.0: MANAGED_BY.1}),
            json!({}),
        );
        assert!(differs(&copied, FINALIZER_MANAGER, &want));
    }

    #[test]
    fn under_sharding_by_label_a_labelled_cr_needs_no_write_and_an_existing_one_pays_one() {
        let want = maintained(&RuntimeSpec::default(), Some("07"));
        assert_eq!(want.labels.get(BUCKET).map(String::as_str), Some("07"));
        let owned = json!({"f:finalizers": {"v:\"inrun.dev/cleanup\"": {}},
                           "f:labels": {"f:app.kubernetes.io/managed-by": {}, "f:inrun.dev/bucket": {}}});
        let labelled = cr(
            json!([FINALIZER]),
            json!({MANAGED_BY.0: MANAGED_BY.1, BUCKET: "07"}),
            owned.clone(),
        );
        assert!(!differs(&labelled, FINALIZER_MANAGER, &want));
        // A CR finalized before sharding by label: one apply adds the label.
        let before = cr(
            json!([FINALIZER]),
            json!({MANAGED_BY.0: MANAGED_BY.1}),
            json!({"f:finalizers": {"v:\"inrun.dev/cleanup\"": {}},
                   "f:labels": {"f:app.kubernetes.io/managed-by": {}}}),
        );
        assert!(differs(&before, FINALIZER_MANAGER, &want));
        // A label someone changed is put back by the next pass that runs.
        let moved = cr(
            json!([FINALIZER]),
            json!({MANAGED_BY.0: MANAGED_BY.1, BUCKET: "05"}),
            owned,
        );
        assert!(differs(&moved, FINALIZER_MANAGER, &want));
    }

    #[test]
    fn a_key_the_manager_owns_but_no_longer_wants_is_a_difference() {
        let object = json!({"metadata": {"labels": {"tier": "web", "old": "x"},
            "managedFields": [{"manager": RECONCILER_MANAGER, "operation": "Apply",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:tier": {}, "f:old": {}}}}}]}});
        let mut want = Metadata::default();
        want.labels.insert("tier".into(), "web".into());
        assert!(differs(&object, RECONCILER_MANAGER, &want));
        want.labels.insert("old".into(), "x".into());
        assert!(!differs(&object, RECONCILER_MANAGER, &want));
        want.labels.insert("old".into(), "y".into());
        assert!(differs(&object, RECONCILER_MANAGER, &want));
    }

    #[test]
    fn a_recorded_cleanup_time_is_kept_and_a_new_one_counts_from_now() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let outcome = Outcome {
            cleanup: Some(inrun_contract::Cleanup {
                after: Duration::from_secs(60),
            }),
            ..Outcome::default()
        };
        let fresh = decorations(&json!({"metadata": {}}), &outcome, now);
        assert_eq!(fresh.annotations[CLEANUP_AT], "2026-01-01T00:01:00Z");
        let recorded = json!({"metadata": {"annotations": {CLEANUP_AT: "2025-12-31T00:00:00Z"}}});
        let kept = decorations(&recorded, &outcome, now);
        assert_eq!(kept.annotations[CLEANUP_AT], "2025-12-31T00:00:00Z");
        assert_eq!(
            cleanup_wait(&recorded, Duration::from_secs(60), now),
            Duration::from_millis(100)
        );
    }
}
