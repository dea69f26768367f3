//! Requests into their WIT form, and outcomes out of it: a guest's outcome is checked
//! against the plugin's output limits and parsed, and the first problem is its reason.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::bindings;
use super::budget::{PARSED_PER_TOKEN, parsed_bound};
use super::limits::Limits;
use inrun_contract::{Cleanup, Outcome, Request};

pub(super) fn to_wit_request(req: &Request) -> bindings::Request {
    bindings::Request {
        key: req.key.clone(),
        api_version: req.api_version.clone(),
        kind: req.kind.clone(),
        object: req.object.to_string(),
        args: req.args.to_string(),
        finalizing: req.finalizing,
        target: req.target.clone(),
        children: req.children.as_ref().map(Value::to_string),
    }
}

pub(super) fn to_wit_outcome(o: &Outcome) -> bindings::Outcome {
    bindings::Outcome {
        status: o
            .status
            .as_ref()
            .map(|s| Value::Object(s.clone()).to_string()),
        resources: o.resources.iter().map(Value::to_string).collect(),
        labels: o
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        annotations: o
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        requeue: o.requeue,
        requeue_after_ms: o
            .requeue_after
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        cleanup: o.cleanup.map(|c| bindings::Cleanup {
            after_seconds: u32::try_from(c.after.as_secs()).unwrap_or(u32::MAX),
        }),
    }
}

pub(super) fn to_wit_outcome2(o: &Outcome) -> bindings::Outcome2 {
    let v1 = to_wit_outcome(o);
    bindings::Outcome2 {
        status: v1.status,
        resources: v1.resources,
        labels: v1.labels,
        annotations: v1.annotations,
        requeue: v1.requeue,
        requeue_after_ms: v1.requeue_after_ms,
        cleanup: v1.cleanup,
        conditions: o
            .conditions
            .iter()
            .map(|c| bindings::Condition2 {
                type_: c.kind.clone(),
                status: c.truth(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        events: o
            .events
            .iter()
            .map(|e| bindings::Event2 {
                type_: if e.is_warning() {
                    bindings::EventType::Warning
                } else {
                    bindings::EventType::Normal
                },
                reason: e.reason.clone(),
                message: e.message.clone(),
            })
            .collect(),
    }
}

/// Whether the outcome `o` keeps within the plugin's output limits (its size, its count of
/// resources); the reason names the first it passes.
pub(super) fn within_limits(o: &bindings::Outcome, limits: &Limits) -> Result<(), String> {
    let pairs = o.labels.iter().chain(&o.annotations);
    let size = output_size(&o.status, &o.resources, pairs);
    check_output(size, o.resources.len(), limits)
}

/// [`within_limits`] of a 0.2.0 outcome: its conditions' and events' text counts in its
/// size. Returns the limits left for the rest of it.
pub(super) fn within_limits2(o: &bindings::Outcome2, limits: &Limits) -> Result<Limits, String> {
    let reports: usize = o
        .conditions
        .iter()
        .map(|c| c.type_.len() + c.reason.len() + c.message.len())
        .chain(o.events.iter().map(|e| e.reason.len() + e.message.len()))
        .sum();
    if reports > limits.output_bytes {
        return Err(format!(
            "{reports} bytes of conditions and events, more than its output limit of {} bytes",
            limits.output_bytes
        ));
    }
    let rest = Limits {
        output_bytes: limits.output_bytes - reports,
        ..*limits
    };
    let pairs = o.labels.iter().chain(&o.annotations);
    let size = output_size(&o.status, &o.resources, pairs);
    check_output(size, o.resources.len(), &rest)?;
    Ok(rest)
}

/// The bytes of an outcome's text: status, resources, labels and annotations.
fn output_size<'a>(
    status: &Option<String>,
    resources: &[String],
    pairs: impl Iterator<Item = &'a (String, String)>,
) -> usize {
    status.as_ref().map_or(0, String::len)
        + resources.iter().map(String::len).sum::<usize>()
        + pairs.map(|(k, v)| k.len() + v.len()).sum::<usize>()
}

fn check_output(size: usize, resources: usize, limits: &Limits) -> Result<(), String> {
    if size > limits.output_bytes {
        return Err(format!(
            "{size} bytes of output, more than its limit of {} bytes",
            limits.output_bytes
        ));
    }
    if resources > limits.max_resources {
        return Err(format!(
            "{resources} resources, more than its limit of {}",
            limits.max_resources
        ));
    }
    Ok(())
}

/// A 0.2.0 outcome: the 0.1.0 checks, then its conditions and events (their text counted
/// in the output size).
pub(super) fn from_wit_outcome2(o: bindings::Outcome2, limits: &Limits) -> Result<Outcome, String> {
    let rest = within_limits2(&o, limits)?;
    let v1 = bindings::Outcome {
        status: o.status,
        resources: o.resources,
        labels: o.labels,
        annotations: o.annotations,
        requeue: o.requeue,
        requeue_after_ms: o.requeue_after_ms,
        cleanup: o.cleanup,
    };
    let mut outcome = from_wit_outcome(v1, &rest)?;
    outcome.conditions = o
        .conditions
        .into_iter()
        .map(|c| inrun_contract::Condition::of(c.type_, c.status, c.reason, c.message))
        .collect();
    outcome.events = o
        .events
        .into_iter()
        .map(|e| {
            let warning = matches!(e.type_, bindings::EventType::Warning);
            inrun_contract::Event::of(warning, e.reason, e.message)
        })
        .collect();
    Ok(outcome)
}

/// Checks sizes and parses the JSON a plugin returned. The reason names the first problem.
///
/// Every object's keys are sorted as they are read: the order a guest wrote them in carries
/// no meaning (a JavaScript object keeps insertion order, a Go struct its field order), and
/// the host keeps the order of what it reads, so without this two guests declaring the same
/// object would render differently and stamp it differently — and one whose order varied
/// between calls would rewrite an unchanged child. Guests need not sort (sorting in Rust
/// costs a fraction of what it does in an interpreted guest).
pub(super) fn from_wit_outcome(o: bindings::Outcome, limits: &Limits) -> Result<Outcome, String> {
    within_limits(&o, limits)?;
    let status = match o.status {
        None => None,
        Some(text) => match serde_json::from_str::<Value>(&text).map(sorted) {
            Ok(Value::Object(map)) => Some(map),
            Ok(Value::Null) => None,
            Ok(_) => return Err("status is not a JSON object".into()),
            Err(e) => return Err(format!("status is not JSON: {e}")),
        },
    };
    let mut resources = Vec::with_capacity(o.resources.len());
    for (i, text) in o.resources.iter().enumerate() {
        match serde_json::from_str::<Value>(text).map(sorted) {
            Ok(v @ Value::Object(_)) => resources.push(v),
            Ok(_) => return Err(format!("resources[{i}] is not a JSON object")),
            Err(e) => return Err(format!("resources[{i}] is not JSON: {e}")),
        }
    }
    let to_map = |pairs: Vec<(String, String)>| pairs.into_iter().collect::<BTreeMap<_, _>>();
    Ok(Outcome {
        status: status
            .filter(|m: &Map<String, Value>| !m.is_empty())
            .or(None),
        resources,
        labels: to_map(o.labels),
        annotations: to_map(o.annotations),
        requeue: o.requeue,
        requeue_after: o.requeue_after_ms.map(Duration::from_millis),
        cleanup: o.cleanup.map(|c| Cleanup {
            after: Duration::from_secs(u64::from(c.after_seconds)),
        }),
        ..Outcome::default()
    })
}

/// The most the outcome `o` keeps once parsed ([`parsed_bound`] of each JSON text, and a
/// token for each label and annotation with its text), held before it is parsed.
pub(super) fn outcome_bound(o: &bindings::Outcome) -> usize {
    texts_bound(
        &o.status,
        &o.resources,
        o.labels.iter().chain(&o.annotations),
    )
}

/// [`outcome_bound`] of a 0.2.0 outcome, its conditions and events included.
pub(super) fn outcome2_bound(o: &bindings::Outcome2) -> usize {
    let reports = o
        .conditions
        .iter()
        .map(|c| PARSED_PER_TOKEN + c.type_.len() + c.reason.len() + c.message.len())
        .chain(
            o.events
                .iter()
                .map(|e| PARSED_PER_TOKEN + e.reason.len() + e.message.len()),
        )
        .sum::<usize>();
    texts_bound(
        &o.status,
        &o.resources,
        o.labels.iter().chain(&o.annotations),
    ) + reports
}

fn texts_bound<'a>(
    status: &Option<String>,
    resources: &[String],
    pairs: impl Iterator<Item = &'a (String, String)>,
) -> usize {
    status.as_deref().map_or(0, |s| parsed_bound(s.as_bytes()))
        + resources
            .iter()
            .map(|r| parsed_bound(r.as_bytes()))
            .sum::<usize>()
        + pairs
            .map(|(k, v)| PARSED_PER_TOKEN + k.len() + v.len())
            .sum::<usize>()
}

/// `value` with every object's keys sorted, at every level.
fn sorted(mut value: Value) -> Value {
    value.sort_all_objects();
    value
}

/// Property tests over what a guest hands back: any strings in the WIT outcome decode to an
/// outcome within the limits, or to a reason, never a panic. `PROPTEST_CASES` sets how
/// many (256 by default; `make fuzz` runs many more).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "{}".to_string(),
                "null".into(),
                "[]".into(),
                r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}"#.into(),
                "[".repeat(200),
                "{\"a\": ".repeat(50),
                "\u{0}".into(),
                "1e999999".into(),
                r#""\ud800""#.into(),
            ]),
            ".{0,64}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256)
        ))]
        #[test]
        fn any_guest_outcome_decodes_within_limits_or_is_refused(
            status in proptest::option::of(text()),
            resources in prop::collection::vec(text(), 0..8),
            labels in prop::collection::vec((".{0,16}", ".{0,16}"), 0..4),
            requeue_after_ms in proptest::option::of(any::<u64>()),
            after_seconds in proptest::option::of(any::<u32>()),
            max_resources in 0usize..6,
        ) {
            let limits = Limits { max_resources, output_bytes: 512, ..Limits::default() };
            let o = bindings::Outcome {
                status,
                resources,
                labels: labels.clone(),
                annotations: labels,
                requeue: false,
                requeue_after_ms,
                cleanup: after_seconds.map(|after_seconds| bindings::Cleanup { after_seconds }),
            };
            if let Ok(outcome) = from_wit_outcome(o, &limits) {
                prop_assert!(outcome.resources.len() <= max_resources);
                prop_assert!(outcome.resources.iter().all(Value::is_object));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_over_the_size_limit_is_refused() {
        let limits = Limits {
            output_bytes: 10,
            ..Limits::default()
        };
        let o = bindings::Outcome {
            status: None,
            resources: vec![r#"{"kind":"ConfigMap","data":"0123456789"}"#.into()],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
        };
        let err = from_wit_outcome(o, &limits).unwrap_err();
        assert!(err.contains("more than its limit of 10 bytes"), "{err}");
    }

    #[test]
    fn a_guests_key_order_is_read_sorted_at_every_level() {
        let o = bindings::Outcome {
            status: Some(r#"{"url":"http://a","phase":{"z":1,"a":2}}"#.into()),
            resources: vec![
                r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","labels":{"b":"2","a":"1"}},"data":[{"y":1,"x":2}]}"#
                    .into(),
            ],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
        };
        let outcome = from_wit_outcome(o, &Limits::default()).expect("outcome");
        // The host keeps the order of what it reads (`preserve_order`): what is written is
        // what the pass applies, renders and stamps.
        assert_eq!(
            outcome.resources[0].to_string(),
            r#"{"apiVersion":"v1","data":[{"x":2,"y":1}],"kind":"ConfigMap","metadata":{"labels":{"a":"1","b":"2"},"name":"x"}}"#
        );
        assert_eq!(
            Value::Object(outcome.status.expect("status")).to_string(),
            r#"{"phase":{"a":2,"z":1},"url":"http://a"}"#
        );
    }

    #[test]
    fn resource_that_is_not_json_is_named() {
        let o = bindings::Outcome {
            status: Some("{}".into()),
            resources: vec!["{}".into(), "not json".into()],
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
        };
        let err = from_wit_outcome(o, &Limits::default()).unwrap_err();
        assert!(err.starts_with("resources[1] is not JSON"), "{err}");
    }

    #[test]
    fn outcome_round_trips_through_wit() {
        let o = Outcome {
            status: serde_json::json!({"phase": "Ready"}).as_object().cloned(),
            resources: vec![serde_json::json!({"kind": "ConfigMap"})],
            labels: [("a".to_string(), "b".to_string())].into(),
            requeue_after: Some(Duration::from_millis(1500)),
            cleanup: Some(Cleanup {
                after: Duration::from_secs(30),
            }),
            ..Outcome::default()
        };
        let back = from_wit_outcome(to_wit_outcome(&o), &Limits::default()).unwrap();
        assert_eq!(back, o);
    }
}
