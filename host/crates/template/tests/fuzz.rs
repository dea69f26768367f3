//! Property tests over hostile templates: whatever a tenant or CR author writes, compiling
//! and rendering it returns a value or an error, never a panic, with bounded work (the
//! engine's fuel and output cap). `make test` runs a short smoke (`PROPTEST_CASES`, default
//! 256 here); `make fuzz` runs many more.

use inrun_template::{Context, Engine};
use proptest::prelude::*;
use serde_json::{Value, json};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

fn cr() -> Value {
    json!({
        "apiVersion": "demo.inrun.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"replicas": 3, "list": [1, 2, 3], "text": "a {{ b }} c", "nested": {"x": {"y": null}}},
    })
}

/// Text made mostly of the pieces the Go-path rewrite and minijinja's lexer branch on.
fn template_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => prop::sample::select(vec![
            "{{", "}}", "{%", "%}", "{#", "#}", "{", "}", "%", "#", "-", "+", ".", "..",
            ".metadata.name", ".spec.replicas", "$", "$.spec", " raw ", " endraw ", "|",
            " | default(1)", " | toJson", " | b64dec", " | required('x')", "\"", "'", "\\",
            "(", ")", "[", "]", ",", ":", " for x in ", " endfor ", " if ", " else ",
            " endif ", " set y = ", " range(3) ", " loop.index ", " ~ ", " * ", "\n", "---",
            " self ", " super() ", " macro m() ", " endmacro ", " include 'x' ",
        ]).prop_map(str::to_string),
        2 => "[ -~]{0,4}",
        1 => "\\PC{0,3}",
    ];
    prop::collection::vec(piece, 0..32).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn any_text_compiles_and_renders_or_fails_without_panicking(text in template_text()) {
        let engine = Engine::new();
        let ctx = Context::new(&cr());
        if let Ok(c) = engine.compile_documents(&text) {
            let _ = c.render(&ctx);
        }
        if let Ok(c) = engine.compile_value(&json!({"k": text, "list": [text.clone()]})) {
            let _ = c.render(&ctx);
        }
        if let Ok(c) = engine.compile_condition(&text) {
            let _ = c.eval(&ctx);
        }
    }

    #[test]
    fn any_expression_inside_a_block_compiles_or_fails(expr in template_text()) {
        let engine = Engine::new();
        let ctx = Context::new(&cr());
        for text in [format!("{{{{ {expr} }}}}"), format!("{{% if {expr} %}}y{{% endif %}}")] {
            if let Ok(c) = engine.compile_value(&json!(text)) {
                let _ = c.render(&ctx);
            }
        }
    }
}

#[test]
fn a_template_that_never_ends_runs_out_of_fuel() {
    let engine = Engine::new();
    let text =
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}";
    let compiled = engine.compile_value(&json!(text)).expect("compiles");
    let err = compiled.render(&Context::new(&cr())).expect_err("bounded");
    let message = format!("{err:?}").to_lowercase();
    assert!(
        message.contains("fuel") || message.contains("output"),
        "{message}"
    );
}

#[test]
fn a_template_whose_output_is_too_large_fails() {
    let engine = Engine::new();
    let text = "{% for a in range(1000) %}{{ 'x' * 100000 }}{% endfor %}";
    let compiled = engine.compile_value(&json!(text)).expect("compiles");
    let err = compiled.render(&Context::new(&cr())).expect_err("capped");
    assert!(format!("{err:?}").contains("output"), "{err:?}");
}

#[test]
fn inruns_filters_charge_fuel_for_the_bytes_they_make() {
    // 200 calls of a filter over a 200 KB value: each call is cheap in instructions, but
    // the bytes serialised or encoded add up to far more than a render's fuel.
    let big = "a".repeat(200_000);
    let cr = json!({"apiVersion": "x.dev/v1", "kind": "K", "metadata": {"name": "n"},
                    "spec": {"big": big, "obj": {"text": big}, "b64": "YWFh".repeat(50_000)}});
    let engine = Engine::new();
    for filter in [
        ".spec.obj | toJson",
        ".spec.obj | toYaml",
        ".spec.big | b64enc",
        ".spec.b64 | b64dec",
    ] {
        let text = format!("{{% for i in range(200) %}}{{% set _ = {filter} %}}{{% endfor %}}done");
        let compiled = engine.compile_value(&json!(text)).expect("compiles");
        let err = compiled
            .render(&Context::new(&cr))
            .expect_err("runs out of fuel");
        let message = format!("{err:?}").to_lowercase();
        assert!(message.contains("fuel"), "{filter}: {message}");
        // Once is within a render's fuel.
        let once = engine
            .compile_value(&json!(format!("{{% set _ = {filter} %}}done")))
            .expect("compiles");
        assert_eq!(
            once.render(&Context::new(&cr)).expect("once"),
            json!("done"),
            "{filter}"
        );
    }
}
