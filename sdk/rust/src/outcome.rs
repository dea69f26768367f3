//! The WIT form of [`Outcome`], the contract type the host uses too: JSON values cross as
//! text, `requeue_after` as milliseconds, a cleanup grace as whole seconds.

use std::time::Duration;

use serde_json::Value;

use crate::bindings::types as wit;
use crate::bindings::types2 as wit2;
use crate::request::parse_json;
pub use inrun_contract::{Cleanup, Condition, Event, Outcome};

/// Whole seconds in `d`, rounded up so a short grace period never becomes zero.
fn ceil_secs(d: Duration) -> u32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

impl From<Outcome> for wit::Outcome {
    /// Writes the outcome as the WIT record, its JSON values as text.
    fn from(outcome: Outcome) -> Self {
        wit::Outcome {
            status: outcome.status.map(|s| Value::Object(s).to_string()),
            resources: outcome.resources.iter().map(Value::to_string).collect(),
            labels: outcome.labels.into_iter().collect(),
            annotations: outcome.annotations.into_iter().collect(),
            requeue: outcome.requeue,
            requeue_after_ms: outcome
                .requeue_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            cleanup: outcome.cleanup.map(|c| wit::Cleanup {
                after_seconds: ceil_secs(c.after),
            }),
        }
    }
}

impl TryFrom<wit::Outcome> for Outcome {
    type Error = String;

    /// Parses an outcome the host sent (a hook's `current` outcome). A `null` status
    /// reads as no status.
    ///
    /// # Errors
    /// When the status is neither a JSON object nor `null`, or a resource is not JSON.
    fn try_from(outcome: wit::Outcome) -> Result<Self, String> {
        let status = match outcome
            .status
            .as_deref()
            .map(|s| parse_json("outcome.status", s))
        {
            None => None,
            Some(Ok(Value::Null)) => None,
            Some(Ok(Value::Object(map))) => Some(map),
            Some(Ok(_)) => return Err("outcome.status is not a JSON object".to_owned()),
            Some(Err(e)) => return Err(e),
        };
        let resources = outcome
            .resources
            .iter()
            .enumerate()
            .map(|(i, text)| parse_json(&format!("outcome.resources[{i}]"), text))
            .collect::<Result<_, _>>()?;
        Ok(Outcome {
            status,
            resources,
            labels: outcome.labels.into_iter().collect(),
            annotations: outcome.annotations.into_iter().collect(),
            requeue: outcome.requeue,
            requeue_after: outcome.requeue_after_ms.map(Duration::from_millis),
            cleanup: outcome.cleanup.map(|c| Cleanup {
                after: Duration::from_secs(c.after_seconds.into()),
            }),
            ..Outcome::default()
        })
    }
}

impl From<Outcome> for wit2::Outcome {
    /// Writes the outcome as the 0.2.0 WIT record: the 0.1.0 fields, conditions and events.
    fn from(mut outcome: Outcome) -> Self {
        let conditions = std::mem::take(&mut outcome.conditions);
        let events = std::mem::take(&mut outcome.events);
        let v1 = wit::Outcome::from(outcome);
        wit2::Outcome {
            status: v1.status,
            resources: v1.resources,
            labels: v1.labels,
            annotations: v1.annotations,
            requeue: v1.requeue,
            requeue_after_ms: v1.requeue_after_ms,
            cleanup: v1.cleanup,
            conditions: conditions
                .into_iter()
                .map(|c| wit2::Condition {
                    status: c.truth(),
                    type_: c.kind,
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            events: events
                .into_iter()
                .map(|e| wit2::Event {
                    type_: if e.is_warning() {
                        wit2::EventType::Warning
                    } else {
                        wit2::EventType::Normal
                    },
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
        }
    }
}

impl TryFrom<wit2::Outcome> for Outcome {
    type Error = String;

    /// Parses a 0.2.0 outcome the host sent (a hook's `current` outcome).
    ///
    /// # Errors
    /// As for the 0.1.0 record.
    fn try_from(o: wit2::Outcome) -> Result<Self, String> {
        let mut outcome = Outcome::try_from(wit::Outcome {
            status: o.status,
            resources: o.resources,
            labels: o.labels,
            annotations: o.annotations,
            requeue: o.requeue,
            requeue_after_ms: o.requeue_after_ms,
            cleanup: o.cleanup,
        })?;
        outcome.conditions = o
            .conditions
            .into_iter()
            .map(|c| Condition::of(c.type_, c.status, c.reason, c.message))
            .collect();
        outcome.events = o
            .events
            .into_iter()
            .map(|e| {
                let warning = matches!(e.type_, wit2::EventType::Warning);
                Event::of(warning, e.reason, e.message)
            })
            .collect();
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wit_outcome() -> wit::Outcome {
        wit::Outcome {
            status: None,
            resources: vec![],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
        }
    }

    #[test]
    fn durations_cross_as_milliseconds_and_rounded_up_seconds() {
        let wit: wit::Outcome = Outcome::new()
            .requeue()
            .requeue_after(Duration::from_millis(1500))
            .cleanup_after(Duration::from_millis(200))
            .into();
        assert!(wit.requeue);
        assert_eq!(wit.requeue_after_ms, Some(1500));
        assert_eq!(wit.cleanup.map(|c| c.after_seconds), Some(1));
    }

    #[test]
    fn an_outcome_becomes_json_text_in_the_wit_record() {
        let wit: wit::Outcome = Outcome::new()
            .resource(json!({"kind": "ConfigMap"}))
            .status("ok", true)
            .label("l", "v")
            .into();
        assert_eq!(wit.resources, vec![r#"{"kind":"ConfigMap"}"#.to_owned()]);
        assert_eq!(wit.status.as_deref(), Some(r#"{"ok":true}"#));
        assert_eq!(wit.labels, vec![("l".to_owned(), "v".to_owned())]);
        assert_eq!(wit.cleanup.map(|c| c.after_seconds), None);
    }

    #[test]
    fn an_outcome_round_trips_through_the_wit_record() {
        let outcome = Outcome::new()
            .resource(json!({"apiVersion": "v1", "kind": "Service"}))
            .intent("deployment", json!({"replicas": 3}))
            .status("url", "http://a")
            .label("a", "b")
            .annotation("c", "d")
            .requeue()
            .requeue_after(Duration::from_secs(30))
            .cleanup_after(Duration::from_secs(600));
        let back = Outcome::try_from(wit::Outcome::from(outcome.clone())).expect("round trip");
        assert_eq!(back, outcome);
        // And through the 0.2.0 record, with conditions and events.
        let outcome = outcome
            .condition(Condition::new(
                "Degraded",
                true,
                "ReplicaDown",
                "1 of 3 down",
            ))
            .condition(Condition::unknown("Synced", "Waiting", ""))
            .event(Event::warning("BackupFailed", "disk full"));
        let back = Outcome::try_from(wit2::Outcome::from(outcome.clone())).expect("round trip");
        assert_eq!(back, outcome);
    }

    #[test]
    fn a_resource_that_is_not_json_is_an_error_naming_its_index() {
        let mut wit = wit_outcome();
        wit.resources = vec!["{}".into(), "not json".into()];
        let err = Outcome::try_from(wit).err().unwrap_or_default();
        assert!(
            err.starts_with("outcome.resources[1] is not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn a_status_must_be_an_object_or_null() {
        let mut wit = wit_outcome();
        wit.status = Some("null".into());
        assert_eq!(Outcome::try_from(wit.clone()).map(|o| o.status), Ok(None));
        wit.status = Some("[1]".into());
        assert_eq!(
            Outcome::try_from(wit.clone()),
            Err("outcome.status is not a JSON object".to_owned())
        );
        wit.status = Some("{".into());
        let err = Outcome::try_from(wit).err().unwrap_or_default();
        assert!(err.starts_with("outcome.status is not valid JSON"), "{err}");
    }
}
