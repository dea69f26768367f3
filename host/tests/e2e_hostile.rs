//! The hostile-input catalogue, on a real kube-apiserver: one host serves a healthy CRD
//! beside CRDs whose templates, Wasm guest, remote endpoint and external call each
//! misbehave in one way. Every hostile CR gets `Ready=False` with a message that says what
//! was wrong; the healthy CR is served all along.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::Instant;

use inrun_testenv::{ControlPlane, TestResult};
use serde_json::{Value, json};
use support::{
    Host, apply_cr, eventually, get, plugin, reconciled, resource, served, unique_group,
};

/// A server that answers like a hostile remote reconciler (by the CR's `spec.mode`), and
/// serves `/gig`, a 1 GiB reply, to external calls.
async fn hostile_server() -> u16 {
    use axum::body::{Body, Bytes};
    fn gigabyte() -> Body {
        let chunk = Bytes::from(vec![b' '; 1 << 20]);
        Body::from_stream(futures::stream::iter(
            std::iter::repeat_n(chunk, 1024).map(Ok::<_, std::io::Error>),
        ))
    }
    let app = axum::Router::new()
        .route(
            "/reconcile",
            axum::routing::post(|body: axum::Json<Value>| async move {
                match body["object"]["spec"]["mode"].as_str().unwrap_or_default() {
                    "gig" => gigabyte(),
                    "deep" => Body::from("[".repeat(100_000) + &"]".repeat(100_000)),
                    "utf8" => Body::from(vec![b'{', b'"', 0xff, 0xfe, b'"', b':', b'1', b'}']),
                    _ => Body::from(r#"{"resources": []}"#),
                }
            }),
        )
        .route("/gig", axum::routing::get(|| async { gigabyte() }));
    support::serve(app).await
}

fn crd(group: &str, kind: &str, reconcile: &str) -> String {
    format!(
        "    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      reconcile:\n{reconcile}        managedResources:\n          - {{apiVersion: v1, kind: ConfigMap}}\n"
    )
}

fn blueprint(group: &str, port: u16) -> String {
    let config_map = |name: &str, extra: &str| {
        format!(
            "          - apiVersion: v1\n            kind: ConfigMap\n            metadata: {{name: \"{name}\"{extra}}}\n            data: {{a: b}}\n"
        )
    };
    let crds = [
        crd(
            group,
            "Fine",
            &format!(
                "        onReconcile:\n{}",
                config_map("{{ .metadata.name }}-fine", "")
            ),
        ),
        crd(
            group,
            "Loop",
            "        onReconcile:\n          - \"{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}\"\n",
        ),
        crd(
            group,
            "Huge",
            "        onReconcile:\n          - apiVersion: v1\n            kind: ConfigMap\n            metadata: {name: huge}\n            data: {v: \"{% for a in range(1000) %}{{ 'x' * 100000 }}{% endfor %}\"}\n",
        ),
        crd(
            group,
            "Sprawl",
            "        onReconcile:\n          - \"{% for i in range(10001) %}---\\n{a: {{ i }}}\\n{% endfor %}\"\n",
        ),
        crd(
            group,
            "BadName",
            &format!(
                "        onReconcile:\n{}",
                config_map("Not_A_DNS-1123_Name!", "")
            ),
        ),
        crd(
            group,
            "Elsewhere",
            &format!(
                "        onReconcile:\n{}",
                config_map("{{ .metadata.name }}", ", namespace: kube-system")
            ),
        ),
        crd(
            group,
            "Guest",
            &format!(
                "        default: false\n        args: {{mode: \"{{{{ .spec.mode }}}}\"}}\n        constructor: {{location: {}}}\n",
                plugin("inrun_test_hostile")
            ),
        ),
        crd(
            group,
            "Sleeper",
            &format!(
                "        default: false\n        constructor: {{location: {}, limits: {{deadline: 1s}}}}\n",
                plugin("inrun_test_sleepy")
            ),
        ),
        crd(
            group,
            "Remote",
            &format!(
                "        default: false\n        remote: {{endpoint: \"http://127.0.0.1:{port}/reconcile\", timeout: 20s}}\n"
            ),
        ),
        crd(
            group,
            "Fetch",
            &format!(
                "        external:\n          - name: gig\n            http: {{url: \"http://127.0.0.1:{port}/gig\"}}\n            timeout: 20s\n        onReconcile:\n{}",
                config_map("{{ .metadata.name }}-fetched", "")
            ),
        ),
    ];
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: hostile}}\nspec:\n  runtime:\n    backoff: {{base: 30s, max: 60s}}\n  crds:\n{}",
        crds.concat()
    )
}

/// Waits for `Ready=False` on `kind/name` and returns its message.
async fn refused(group: &str, ns: &str, kind: &str, name: &str) -> String {
    let ar = resource(group, kind);
    eventually(&format!("{kind}/{name} refused"), || async {
        let cr = get(&ar, Some(ns), name).await?;
        let (status, _, message) = reconciled(&cr)?;
        (status == "False").then_some(message)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_input_fails_only_its_own_cr_with_a_clear_error() -> TestResult {
    let port = hostile_server().await;
    let group = unique_group("hostile");
    let ns = ControlPlane::shared().namespace("hostile").await?;
    let host = Host::start(&blueprint(&group, port)).await;
    for kind in [
        "Fine",
        "Loop",
        "Huge",
        "Sprawl",
        "BadName",
        "Elsewhere",
        "Guest",
        "Sleeper",
        "Remote",
        "Fetch",
    ] {
        served(&resource(&group, kind)).await;
    }
    let cr = |kind: &str, name: &str, mode: &str| {
        serde_yaml_ng::to_string(&json!({
            "apiVersion": format!("{group}/v1alpha1"), "kind": kind,
            "metadata": {"name": name}, "spec": {"mode": mode}}))
        .expect("yaml")
    };
    // A CR larger than the host keeps (anyone who may create CRs could fill its memory).
    let bloated = "x".repeat(inrun::runtime::DEFAULT_MAX_CR_BYTES + 1024);
    // (kind, name, spec.mode, what the message must say)
    let cases = [
        ("Fine", "bloated", bloated.as_str(), "KiB (--max-cr-size)"),
        ("Loop", "loop", "", "fuel"),
        ("Huge", "huge", "", "output"),
        ("Sprawl", "sprawl", "", "more than the 10000"),
        ("BadName", "bad-name", "", "RFC 1123 subdomain"),
        ("Elsewhere", "elsewhere", "", "kube-system"),
        (
            "Guest",
            "many",
            "many",
            "more than its limit of 1048576 bytes",
        ),
        ("Guest", "huge", "huge", "memory cap of 64 MiB"),
        ("Guest", "deep", "deep", "recursion limit exceeded"),
        ("Guest", "utf8", "utf8", "invalid utf-8"),
        ("Sleeper", "sleeper", "", "exceeded its 1s deadline"),
        ("Remote", "gig", "gig", "more than 16777216 bytes"),
        ("Remote", "deep", "deep", "recursion limit exceeded"),
        ("Remote", "utf8", "utf8", "not JSON"),
        ("Fetch", "gig", "", "larger than 4194304 bytes"),
    ];
    for (kind, name, mode, _) in &cases {
        apply_cr(&resource(&group, kind), &ns, &cr(kind, name, mode)).await;
    }
    // The healthy CR, created after all of them, is served at once.
    let fine = resource(&group, "Fine");
    let started = Instant::now();
    apply_cr(&fine, &ns, &cr("Fine", "fine", "")).await;
    eventually("the healthy CR Ready", || async {
        let cr = get(&fine, Some(&ns), "fine").await?;
        (reconciled(&cr)?.0 == "True").then_some(())
    })
    .await;
    let healthy = started.elapsed();
    let mut table = Vec::new();
    let mut wrong = Vec::new();
    for (kind, name, _, says) in &cases {
        let message = refused(&group, &ns, kind, name).await;
        if !message.contains(says) || message.len() >= 4096 || message.contains("Status {") {
            wrong.push(format!("{kind}/{name}: {message:?} does not say {says:?}"));
        }
        table.push(format!("{kind}/{name}: {message}"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    eprintln!(
        "the healthy CR was Ready {:.0} ms after its create, beside {} hostile ones:\n{}",
        healthy.as_secs_f64() * 1e3,
        cases.len(),
        table.join("\n")
    );
    // Nothing of the hostile CRs was written; the healthy CR's child was.
    assert!(
        get(support::configmaps(), Some(&ns), "huge")
            .await
            .is_none()
    );
    assert!(
        get(support::configmaps(), Some("kube-system"), "elsewhere")
            .await
            .is_none()
    );
    assert!(
        get(support::configmaps(), Some(&ns), "bloated-fine")
            .await
            .is_none()
    );
    assert_eq!(
        support::event(&ns, "bloated", "Invalid").await,
        refused(&group, &ns, "Fine", "bloated").await,
        "the event says why, as the condition does"
    );
    assert!(
        get(support::configmaps(), Some(&ns), "fine-fine")
            .await
            .is_some()
    );
    host.stop().await;
    Ok(())
}
