//! Property tests over hostile Blueprints: any text given to the loader is a Blueprint or
//! a list of problems each naming the file, never a panic. `PROPTEST_CASES` sets how many
//! (256 by default; `make fuzz` runs many more).

use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

/// A scalar a hostile author might put anywhere: names, templates, quantities, durations.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "a {%} b",
            "{{ .spec.x }}",
            "{{",
            "}}",
            "{% raw %}",
            "-1",
            "0",
            "1e400",
            "9999999999999999999999",
            "1m",
            "0s",
            "-1s",
            "1.5Gi",
            "100000000000000Ei",
            "",
            "~",
            "null",
            "*",
            "../../etc/passwd",
            "oci://",
            "https://",
            "file:///x",
            "kube-system",
            "inrun.dev/owner-uid",
            "ConfigMap",
            "v1",
            "\u{0}",
            "é",
            "'",
            "\"",
            "[]",
            "{}",
            "&a",
            "*a",
            "!!binary",
            "<<",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,12}",
    ]
}

fn document() -> impl Strategy<Value = String> {
    prop::collection::vec(scalar(), 14).prop_map(|s| {
        format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: {:?} }}\nspec:\n  runtime: {{ workers: {:?}, resync: {:?} }}\n  serviceAccount: {{ namespace: {:?}, name: {:?} }}\n  crds:\n    - group: {:?}\n      version: {:?}\n      kind: {:?}\n      reconcile:\n        onReconcile:\n          - {{ apiVersion: v1, kind: ConfigMap, metadata: {{ name: {:?} }}, data: {{ k: {:?} }} }}\n        emit: {{ status: {{ x: {:?} }} }}\n        requeue: {{ after: {:?} }}\n        managedResources: [ {{ apiVersion: {:?}, kind: {:?} }} ]\n",
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13]
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn any_text_loads_or_names_its_problems(text in "[ -~\n\t]{0,200}") {
        if let Err(inrun_blueprint::BlueprintError::Invalid { problems }) =
            inrun_blueprint::from_str(&text, "fuzz.yaml")
        {
            prop_assert!(!problems.is_empty());
        }
    }

    #[test]
    fn field_paths_parse_or_say_where(text in "[.\\[\\]'\"*a-z0-9/\\\\$ -]{0,24}") {
        match inrun_blueprint::FieldPath::parse(&text) {
            Ok(path) => {
                prop_assert!(!path.steps().is_empty());
                let mut v = serde_json::json!({"a": {"b": [1, {"c": 2}]}});
                path.remove(&mut v);
                let _ = path.get(&v);
            }
            Err(e) => prop_assert!(e.at <= text.chars().count(), "{}", e),
        }
    }

    #[test]
    fn any_key_reads_back_from_a_quoted_path(key in "[ -~]{1,20}") {
        let escaped = key.replace('\\', "\\\\").replace('\'', "\\'");
        let path = inrun_blueprint::FieldPath::parse(&format!(".metadata.annotations['{escaped}']"))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let want = [
            inrun_blueprint::fieldpath::Step::Key("metadata".into()),
            inrun_blueprint::fieldpath::Step::Key("annotations".into()),
            inrun_blueprint::fieldpath::Step::Key(key.clone()),
        ];
        prop_assert_eq!(path.steps(), &want[..]);
    }

    #[test]
    fn any_field_value_loads_or_names_file_and_field(text in document()) {
        if let Err(err) = inrun_blueprint::from_str(&text, "fuzz.yaml") {
            let message = err.to_string();
            prop_assert!(message.contains("fuzz.yaml"), "{}", message);
        }
    }

    #[test]
    fn quantities_and_durations_parse_or_fail(text in "[-+.0-9eEkKMGTPimnuµμsh ]{0,16}") {
        if let Ok(q) = inrun_blueprint::Quantity::parse(&text) {
            // What it prints reads back as the same size.
            let printed = q.to_string();
            prop_assert_eq!(inrun_blueprint::Quantity::parse(&printed).ok(), Some(q), "{}", printed);
        }
        if let Ok(d) = inrun_contract::duration::parse(&text) {
            let printed = inrun_contract::duration::format(d);
            prop_assert_eq!(inrun_contract::duration::parse(&printed).ok(), Some(d), "{}", printed);
        }
    }
}

#[test]
fn the_template_that_once_panicked_the_host_is_a_blueprint_like_any_other() {
    let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: x }\nspec:\n  crds:\n    - group: demo.inrun.dev\n      version: v1alpha1\n      kind: Web\n      reconcile:\n        emit: {status: {x: \"a {%} b\"}}\n";
    // Loading does not compile templates; it must not panic either way.
    let _ = inrun_blueprint::from_str(text, "fuzz.yaml");
}
