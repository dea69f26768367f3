//! Behaviour tests of the engine: compile, render, conditions, documents, errors.

use serde_json::{Value, json};

use super::*;

fn cr() -> Value {
    json!({
        "apiVersion": "demo.inrun.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {"name": "web", "namespace": "apps", "labels": {"tier": "front"}},
        "spec": {
            "image": "nginx:1.27",
            "replicas": 3,
            "enabled": true,
            "ratio": 0.5,
            "ports": [80, 443],
            "env": {"A": "1", "B": "2"},
            "empty": "",
        },
    })
}

fn ctx() -> Context {
    Context::new(&cr())
        .with_args(json!({"size": "large"}))
        .with_external(json!({"price": {"value": 42}}))
        .with_target(Some("blue"))
}

fn render(template: Value) -> Value {
    let engine = Engine::new();
    match engine
        .compile_value(&template)
        .and_then(|c| c.render(&ctx()))
    {
        Ok(v) => v,
        Err(e) => panic!("{template} failed: {e:?}"),
    }
}

fn condition(text: &str) -> bool {
    let engine = Engine::new();
    match engine.compile_condition(text).and_then(|c| c.eval(&ctx())) {
        Ok(b) => b,
        Err(e) => panic!("{text} failed: {e:?}"),
    }
}

#[test]
fn go_paths_and_plain_paths_render_the_same() {
    let go = render(json!([
        "{{ .spec.image }}",
        "x {{ .metadata.name | upper }}"
    ]));
    let plain = render(json!(["{{ spec.image }}", "x {{ metadata.name | upper }}"]));
    assert_eq!(go, plain);
    assert_eq!(go, json!(["nginx:1.27", "x WEB"]));
}

#[test]
fn a_single_expression_keeps_its_type() {
    let out = render(json!({
        "replicas": "{{ .spec.replicas }}",
        "enabled": "{{ .spec.enabled }}",
        "ratio": "{{ .spec.ratio }}",
        "ports": "{{ .spec.ports }}",
        "env": "{{ .spec.env }}",
        "sum": "{{ .spec.replicas + 1 }}",
        "trimmed": "{{- .spec.replicas -}}",
    }));
    assert_eq!(
        out,
        json!({
            "replicas": 3, "enabled": true, "ratio": 0.5, "ports": [80, 443],
            "env": {"A": "1", "B": "2"}, "sum": 4, "trimmed": 3,
        })
    );
}

#[test]
fn mixed_strings_render_to_strings() {
    let out = render(json!({
        "a": "{{ .spec.replicas }} replicas",
        "b": "{{ .spec.replicas }}{{ .spec.replicas }}",
        "c": " {{ .spec.replicas }}",
        "d": "{% if .spec.enabled %}on{% else %}off{% endif %}",
    }));
    assert_eq!(
        out,
        json!({"a": "3 replicas", "b": "33", "c": " 3", "d": "on"})
    );
}

#[test]
fn nested_objects_and_lists_render_in_place_and_keep_order() {
    let out = render(json!({
        "z": {"containers": [{"image": "{{ .spec.image }}", "n": 1}, "const"]},
        "a": [[ "{{ .metadata.namespace }}" ]],
    }));
    assert_eq!(
        out,
        json!({"z": {"containers": [{"image": "nginx:1.27", "n": 1}, "const"]}, "a": [["apps"]]})
    );
    let keys: Vec<&String> = out
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["z", "a"]);
}

#[test]
fn object_keys_can_be_templates() {
    let out = render(json!({"{{ .metadata.name }}-key": "v", "{{ .spec.replicas }}": 1}));
    assert_eq!(out, json!({"web-key": "v", "3": 1}));
}

#[test]
fn missing_paths_render_empty_or_null() {
    let out = render(json!({
        "typed": "{{ .spec.missing.deeper }}",
        "text": "[{{ .spec.missing.deeper }}]",
        "fallback": "{{ .spec.missing | default('x') }}",
        "nulltext": "[{{ none }}]",
    }));
    assert_eq!(
        out,
        json!({"typed": null, "text": "[]", "fallback": "x", "nulltext": "[]"})
    );
}

#[test]
fn args_external_and_target_are_variables() {
    let out = render(json!([
        "{{ .args.size }}",
        "{{ .external.price.value }}",
        "{{ target }}"
    ]));
    assert_eq!(out, json!(["large", 42, "blue"]));
}

#[test]
fn strings_without_markers_are_constants() {
    let engine = Engine::new();
    let value = json!({"a": "plain .spec.image", "b": [1, {"c": "{ not a template }"}]});
    let compiled = engine.compile_value(&value);
    assert!(compiled.as_ref().is_ok_and(CompiledValue::is_constant));
    assert_eq!(
        compiled.ok().map(|c| c.render(&ctx()).ok()),
        Some(Some(value))
    );
}

#[test]
fn string_literals_containing_dot_paths_are_untouched() {
    let out = render(json!([
        "{{ '.foo' }}",
        "{{ \".spec.image\" ~ .spec.image }}"
    ]));
    assert_eq!(out, json!([".foo", ".spec.imagenginx:1.27"]));
}

#[test]
fn conditions_accept_templates_and_bare_expressions() {
    assert!(condition("{{ .spec.replicas > 2 }}"));
    assert!(condition("spec.replicas > 2"));
    assert!(condition(".spec.replicas > 2 and .spec.enabled"));
    assert!(!condition(".spec.replicas > 5"));
    assert!(condition("{% if .spec.enabled %}true{% endif %}"));
    assert!(!condition("{% if not .spec.enabled %}true{% endif %}"));
}

#[test]
fn condition_truthiness_treats_empty_and_false_values_as_false() {
    for falsy in [
        "false",
        "none",
        ".spec.missing",
        ".spec.missing.deeper",
        ".spec.empty",
        "'false'",
        "'FALSE'",
        "0",
        "[]",
        "{}",
        "{{ .spec.missing }}",
        "{{ 'false' }}",
    ] {
        assert!(!condition(falsy), "{falsy} should be false");
    }
    for truthy in [
        "true",
        ".spec.image",
        "1",
        "[0]",
        ".spec.env",
        "'no'",
        "{{ .spec.replicas }}",
    ] {
        assert!(condition(truthy), "{truthy} should be true");
    }
}

#[test]
fn syntax_errors_are_found_at_compile_time_and_name_the_template() {
    let engine = Engine::new();
    let err = engine.compile_value(&json!({"spec": {"image": "{{ .spec.image | }}"}}));
    let Err(err) = err else {
        panic!("expected a compile error")
    };
    assert!(
        matches!(err, TemplateError::Compile { line: 1, .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("spec.image"), "{message}");
    assert!(message.contains("{{ .spec.image | }}"), "{message}");
    let cause = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(cause.contains("syntax error"), "{cause}");
}

#[test]
fn syntax_errors_report_the_line() {
    let engine = Engine::new();
    let err = engine.compile_documents("a: 1\nb: 2\nc: {% if %}\n");
    assert!(
        matches!(err, Err(TemplateError::Compile { line: 3, .. })),
        "{err:?}"
    );
    assert!(engine.compile_condition("spec.replicas >").is_err());
    assert!(engine.compile_condition("{% if x %}").is_err());
}

#[test]
fn a_documents_template_with_a_loop_produces_several_objects() {
    let engine = Engine::new();
    let text = r#"
{% for port in .spec.ports %}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .metadata.name }}-{{ port }}
  labels:
    {% for k, v in .metadata.labels | items %}
    {{ k }}: {{ v }}
    {% endfor %}
spec:
  ports:
    - port: {{ port }}
{% endfor %}
---
# an empty document is skipped
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .metadata.name }}
data:
  env: {{ .spec.env | toJson }}
"#;
    let docs = engine
        .compile_documents(text)
        .and_then(|c| c.render(&ctx()));
    let docs = match docs {
        Ok(docs) => docs,
        Err(e) => panic!("{e:?}"),
    };
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[0]["metadata"]["name"], "web-80");
    assert_eq!(docs[0]["metadata"]["labels"], json!({"tier": "front"}));
    assert_eq!(docs[1]["spec"]["ports"][0]["port"], 443);
    assert_eq!(docs[2]["data"]["env"], json!({"A": "1", "B": "2"}));
}

#[test]
fn documents_that_are_not_yaml_are_reported() {
    let engine = Engine::new();
    let docs = engine
        .compile_documents("a: [{{ .spec.image }}")
        .and_then(|c| c.render(&ctx()));
    assert!(matches!(docs, Err(TemplateError::Yaml { .. })), "{docs:?}");
}

#[test]
fn inrun_filters_are_available() {
    let out = render(json!({
        "json": "{{ .spec.env | toJson }}",
        "yaml": "{{ .spec.env | toYaml }}",
        "enc": "{{ .metadata.name | b64enc }}",
        "dec": "{{ 'd2Vi' | b64dec }}",
        "req": "{{ .spec.image | required('image is required') }}",
    }));
    assert_eq!(
        out,
        json!({
            "json": "{\"A\":\"1\",\"B\":\"2\"}", "yaml": "A: '1'\nB: '2'",
            "enc": "d2Vi", "dec": "web", "req": "nginx:1.27",
        })
    );
}

#[test]
fn required_fails_the_render_with_its_message() {
    let engine = Engine::new();
    let compiled = engine.compile_value(&json!(
        "{{ .spec.missing | required('spec.missing is required') }}"
    ));
    let result = compiled.and_then(|c| c.render(&ctx()));
    let Err(err) = result else {
        panic!("expected a render error")
    };
    assert!(matches!(err, TemplateError::Render { .. }));
    let cause = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(cause.contains("spec.missing is required"), "{cause}");
}

#[test]
fn compiled_templates_render_many_times_and_across_threads() {
    let engine = Engine::new();
    let compiled = engine.compile_value(&json!({"n": "{{ .spec.replicas * 2 }}"}));
    let compiled = match compiled {
        Ok(c) => std::sync::Arc::new(c),
        Err(e) => panic!("{e:?}"),
    };
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let compiled = std::sync::Arc::clone(&compiled);
            std::thread::spawn(move || {
                let cr = json!({"spec": {"replicas": i}});
                compiled.render(&Context::new(&cr)).ok()
            })
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        assert_eq!(handle.join().ok().flatten(), Some(json!({"n": i * 2})));
    }
}

#[test]
fn dropping_a_compiled_value_releases_its_templates() {
    let engine = Engine::new();
    let before = format!("{engine:?}");
    let compiled = engine.compile_value(&json!(["{{ a }}", "{{ b }} c"]));
    assert_ne!(format!("{engine:?}"), before);
    drop(compiled);
    assert_eq!(format!("{engine:?}"), before);
}

#[test]
fn engine_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Engine>();
    assert_send_sync::<CompiledValue>();
    assert_send_sync::<CompiledDocuments>();
    assert_send_sync::<CompiledCondition>();
}

/// A ConfigMap document template rendering `value` where `spot` says; the documents.
fn documents_with(spot: &str, value: &str) -> Result<Vec<Value>, TemplateError> {
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fixed\ndata:\n{spot}\n  last: fixed\n"
    );
    let object = json!({"metadata": {"name": "x"}, "spec": {"v": value}});
    Engine::new()
        .compile_documents(&text)
        .and_then(|c| c.render(&Context::new(&object)))
}

#[test]
fn a_value_interpolated_into_a_document_template_stays_one_scalar() {
    let attacks = [
        "x\nprivileged: true",
        "x\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: stolen}",
        "x\r  hostPath: /",
        "{privileged: true}",
        "[a, b]",
        "a, privileged: true",
        "x\" , privileged: \"true",
        "x' , privileged: 'true",
        "*alias",
        "!!binary AAAA",
        "a # comment",
        "a: b",
    ];
    // (the spot, whether every value must render there as the very text)
    let spots = [
        ("  v: {{ .spec.v }}", true),
        ("  v: \"{{ .spec.v }}\"", true),
        ("  v: '{{ .spec.v }}'", true),
        ("  v: pre-{{ .spec.v }}", false),
        ("  v: {a: {{ .spec.v }}}", false),
        ("  v: |\n    {{ .spec.v }}", false),
    ];
    for (spot, exact) in spots {
        for attack in attacks {
            // One ConfigMap whose `v` holds the value as text, or a YAML error: never
            // another document, key or type.
            let docs = match documents_with(spot, attack) {
                Ok(docs) => docs,
                Err(e) if !exact => {
                    assert!(matches!(e, TemplateError::Yaml { .. }), "{spot}: {e:?}");
                    continue;
                }
                Err(e) => panic!("{spot} {attack:?}: {e:?}"),
            };
            assert_eq!(docs.len(), 1, "{spot} {attack:?} made {docs:?}");
            let data = docs[0]["data"].as_object().expect("data");
            assert_eq!(
                data.keys().collect::<Vec<_>>(),
                ["v", "last"],
                "{spot} {attack:?}"
            );
            assert_eq!(
                docs[0]["metadata"],
                json!({"name": "fixed"}),
                "{spot} {attack:?}"
            );
            let v = &docs[0]["data"]["v"];
            // (Single quotes cannot hold a carriage return or a line's leading spaces.)
            let verbatim = !(spot.contains('\'') && attack.contains(['\r', '\n']));
            if exact && verbatim {
                assert_eq!(v, attack, "{spot}");
            } else if let Some(map) = v.as_object() {
                assert_eq!(map.keys().collect::<Vec<_>>(), ["a"], "{spot} {attack:?}");
                assert!(map["a"].is_string(), "{spot} {attack:?}: {v}");
            } else {
                assert!(v.is_string(), "{spot} {attack:?}: {v}");
            }
        }
    }
    // Plain values read as they always did: text, numbers, multi-line scripts.
    let docs = documents_with("  v: pre-{{ .spec.v }}", "nginx:1.27").expect("renders");
    assert_eq!(docs[0]["data"]["v"], "pre-nginx:1.27");
    let docs = documents_with("  v: |\n    {{ .spec.v }}", "echo a\necho b").expect("renders");
    assert_eq!(docs[0]["data"]["v"], "echo a\necho b\n");
    let docs = documents_with("  v: {a: {{ .spec.v }}}", "a, b").expect("renders");
    assert_eq!(docs[0]["data"]["v"], json!({"a": "a, b"}));
}
