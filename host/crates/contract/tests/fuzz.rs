//! Property tests over what reconcilers return: any JSON a guest or a remote endpoint
//! sends is an Outcome or an error, and every resource in it expands to an object or an
//! error, never a panic. `PROPTEST_CASES` sets how many (256 by default).

use inrun_contract::Outcome;
use inrun_contract::intent::{IntentDefaults, expand};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "status", "resources", "labels", "annotations", "requeue", "requeueAfter", "cleanup",
            "intent", "kind", "apiVersion", "metadata", "name", "namespace", "spec", "image",
            "replicas", "ports", "port", "env", "data", "stringData", "type", "selector",
            "Deployment", "Service", "ConfigMap", "Secret", "app", "inrun.dev/owner-uid",
        ]).prop_map(str::to_string),
        1 => "[ -~]{0,8}",
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        key().prop_map(Value::String),
        "[ -~]{0,10}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn any_reply_is_an_outcome_or_an_error(reply in json()) {
        if let Ok(outcome) = serde_json::from_value::<Outcome>(reply) {
            let _ = outcome.check();
            let defaults = IntentDefaults { name: "web".into(), namespace: Some("apps".into()) };
            for resource in &outcome.resources {
                let _ = expand(resource, &defaults);
            }
        }
    }

    #[test]
    fn any_resource_expands_or_fails(resource in json()) {
        let defaults = IntentDefaults { name: "web".into(), namespace: None };
        let _ = expand(&resource, &defaults);
    }
}
