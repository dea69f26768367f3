//! Opt-in instance reuse (`limits.reuse.calls`), with the `memo` test guest: it keeps every
//! CR key it reconciled in a global and reports them, so each test sees exactly which
//! calls shared an instance. Off by default; on, an instance serves one tenant (and one
//! namespace when the grants reach namespaced data), at most N calls, and is discarded on
//! any failure. Instances made ahead (on by default, under a Tokio runtime) serve one call
//! each, as fresh as one instantiated on the call's path. The last test runs reuse through
//! a Blueprint on a real kube-apiserver.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use inrun::contract::{Outcome, Request};
use inrun::wasm::{
    CallError, ClusterGrant, Engine, EngineSettings, Grants, Limits, Namespaces, NoCluster, Plugin,
    ReadGrant,
};
use inrun_testenv::{ControlPlane, TestResult};
use serde_json::{Value, json};
use support::{Host, apply_cr, eventually, get, resource, served, unique_group};

fn plugin_dir() -> PathBuf {
    std::env::var_os("INRUN_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/target/wasm32-wasip2/release")
        })
}

fn load(engine: &Engine) -> Plugin {
    let path = plugin_dir().join("inrun_test_memo.wasm");
    assert!(
        path.exists(),
        "{} is missing: run `make plugins`",
        path.display()
    );
    engine.load_file(&path).expect("load memo")
}

fn reusing(calls: u32) -> Limits {
    Limits {
        reuse_calls: calls,
        ..Limits::default()
    }
}

fn cr(namespace: &str, name: &str, spec: Value) -> Request {
    Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "Memo",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}),
        json!({}),
    )
}

fn call(
    plugin: &Plugin,
    req: &Request,
    limits: &Limits,
    grants: &Grants,
) -> Result<Outcome, CallError> {
    futures::executor::block_on(plugin.reconcile(req, limits, grants))
}

/// What the guest reported: its instance's calls, and the keys it had seen before.
fn memo(plugin: &Plugin, ns: &str, name: &str, limits: &Limits) -> (u64, Vec<String>) {
    memo_with(plugin, ns, name, limits, &Grants::default())
}

fn memo_with(
    plugin: &Plugin,
    ns: &str,
    name: &str,
    limits: &Limits,
    grants: &Grants,
) -> (u64, Vec<String>) {
    let out = call(plugin, &cr(ns, name, json!({})), limits, grants)
        .unwrap_or_else(|e| panic!("{}", inrun::errors::chain(&e)));
    let status = out.status.expect("status");
    let seen = serde_json::from_value(status["seen"].clone()).expect("seen");
    (status["calls"].as_u64().expect("calls"), seen)
}

#[test]
fn by_default_every_call_gets_a_fresh_instance_and_none_is_kept() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let plugin = load(&engine);
    for name in ["a", "b", "c"] {
        assert_eq!(memo(&plugin, "ns", name, &Limits::default()), (1, vec![]));
    }
    assert_eq!(plugin.idle_instances(), 0);
    assert_eq!(engine.idle_instances(), 0);
}

#[test]
fn an_instance_serves_at_most_its_calls_then_a_fresh_one_starts() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let plugin = load(&engine);
    let limits = reusing(3);
    let got: Vec<_> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| memo(&plugin, "ns", n, &limits))
        .collect();
    let keys = |k: &[&str]| k.iter().map(|k| format!("ns/{k}")).collect::<Vec<_>>();
    assert_eq!(
        got,
        [
            (1, vec![]),
            (2, keys(&["a"])),
            (3, keys(&["a", "b"])),
            // The third call was its last: the fourth CR gets a new instance.
            (1, vec![]),
            (2, keys(&["d"])),
        ]
    );
    assert_eq!(
        plugin.idle_instances(),
        1,
        "the second instance waits for its third call"
    );
    drop(plugin);
    assert_eq!(
        engine.idle_instances(),
        0,
        "a plugin's idle instances go with it"
    );
}

#[test]
fn an_instance_is_discarded_after_an_error_or_a_trap() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let plugin = load(&engine);
    let limits = reusing(100);
    for (spec, says) in [
        (json!({"fail": true}), "memo failed on purpose for ns/bad"),
        (json!({"trap": true}), "panicked"),
    ] {
        assert_eq!(memo(&plugin, "ns", "ok", &limits).0, 1, "a fresh instance");
        assert_eq!(memo(&plugin, "ns", "ok", &limits).0, 2, "reused");
        let err =
            call(&plugin, &cr("ns", "bad", spec), &limits, &Grants::default()).expect_err("fails");
        let chain = inrun::errors::chain(&err);
        assert!(chain.contains(says), "{chain}");
        assert_eq!(plugin.idle_instances(), 0, "the failed instance is gone");
        // The next call never sees what the failed one kept.
        assert_eq!(memo(&plugin, "ns", "after", &limits), (1, vec![]));
        // Start the next round from a fresh instance too.
        drop(call(
            &plugin,
            &cr("ns", "x", json!({"fail": true})),
            &limits,
            &Grants::default(),
        ));
    }
}

#[test]
fn an_instance_whose_outcome_fails_the_hosts_checks_is_discarded() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let plugin = load(&engine);
    let limits = Limits {
        max_resources: 1,
        ..reusing(100)
    };
    assert_eq!(memo(&plugin, "ns", "ok", &limits).0, 1);
    assert_eq!(memo(&plugin, "ns", "ok", &limits).0, 2, "reused");
    // The guest answers, but with more resources than the call allows.
    let err = call(
        &plugin,
        &cr("ns", "big", json!({"configMaps": 2})),
        &limits,
        &Grants::default(),
    )
    .expect_err("a bad outcome");
    assert!(
        matches!(err.failure, inrun::wasm::CallFailure::BadOutput(_)),
        "{}",
        inrun::errors::chain(&err)
    );
    assert_eq!(
        plugin.idle_instances(),
        0,
        "the instance that answered it is gone"
    );
    assert_eq!(memo(&plugin, "ns", "after", &limits), (1, vec![]));
}

#[test]
fn a_reused_instance_gets_each_calls_deadline_and_goes_when_it_passes() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let plugin = load(&engine);
    let limits = Limits {
        deadline: std::time::Duration::from_millis(200),
        ..reusing(100)
    };
    for n in 1..=3 {
        assert_eq!(memo(&plugin, "ns", "ok", &limits).0, n, "the same instance");
    }
    let started = std::time::Instant::now();
    let err = call(
        &plugin,
        &cr("ns", "spin", json!({"spin": true})),
        &limits,
        &Grants::default(),
    )
    .expect_err("stopped");
    assert!(
        matches!(err.failure, inrun::wasm::CallFailure::Deadline(_)),
        "{}",
        inrun::errors::chain(&err)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "its own deadline"
    );
    assert_eq!(
        memo(&plugin, "ns", "after", &limits),
        (1, vec![]),
        "a fresh instance"
    );
}

#[test]
fn a_tenant_never_gets_an_instance_another_tenant_used() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let a = load(&engine.for_tenant("a", None));
    let b = load(&engine.for_tenant("b", None));
    let host = load(&engine);
    let limits = reusing(100);
    assert_eq!(memo(&a, "ns", "secret-of-a", &limits).0, 1);
    assert_eq!(memo(&a, "ns", "more-of-a", &limits).0, 2);
    // Same component, same engine, same namespace: b and the host start fresh.
    assert_eq!(memo(&b, "ns", "b1", &limits), (1, vec![]));
    assert_eq!(memo(&host, "ns", "h1", &limits), (1, vec![]));
    assert_eq!(
        memo(&b, "ns", "b2", &limits),
        (2, vec!["ns/b1".to_string()])
    );
    assert_eq!(engine.idle_instances(), 3, "one idle instance each");
}

#[test]
fn with_grants_that_read_namespaced_data_an_instance_serves_one_namespace() {
    let engine = Engine::new(EngineSettings::default()).expect("engine");
    let plugin = load(&engine);
    let limits = reusing(100);
    let reads = Grants {
        cluster: Some(ClusterGrant {
            reads: vec![ReadGrant {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespaces: Namespaces::Own(vec![]),
            }]
            .into(),
            reader: Arc::new(NoCluster),
        }),
        ..Grants::default()
    };
    let at = |ns, name| memo_with(&plugin, ns, name, &limits, &reads);
    assert_eq!(at("one", "a"), (1, vec![]));
    assert_eq!(
        at("two", "b"),
        (1, vec![]),
        "another namespace: another instance"
    );
    assert_eq!(at("one", "c"), (2, vec!["one/a".to_string()]));
    assert_eq!(at("two", "d"), (2, vec!["two/b".to_string()]));
    // Without such grants, one instance serves every namespace of the tenant.
    let open = |ns, name| memo(&plugin, ns, name, &limits);
    assert_eq!(open("one", "e").0, 1);
    assert_eq!(open("two", "f"), (2, vec!["one/e".to_string()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_instances_are_bounded_per_tenant_and_calls_beyond_them_still_run() {
    // 8 calls at once: the pool keeps 2 slots for idle instances, a tenant half a slot
    // (at least one).
    let engine = Engine::new(EngineSettings {
        max_instances: 8,
        ..EngineSettings::default()
    })
    .expect("engine");
    let a = load(&engine.for_tenant("a", None));
    let limits = reusing(100);
    let calls = (0..8).map(|i| {
        let a = a.clone();
        tokio::spawn(async move {
            a.reconcile(
                &cr("ns", &format!("cr-{i}"), json!({})),
                &limits,
                &Grants::default(),
            )
            .await
        })
    });
    for call in futures::future::join_all(calls).await {
        call.expect("joined").expect("every call runs");
    }
    assert_eq!(
        a.idle_instances(),
        1,
        "a tenant keeps its share of idle instances"
    );
    let b = load(&engine.for_tenant("b", None));
    memo(&b, "ns", "b", &limits);
    assert_eq!(
        engine.idle_instances(),
        2,
        "and another tenant still keeps its own"
    );
}

/// [`memo`], awaited on the test's runtime.
async fn memo_now(plugin: &Plugin, ns: &str, name: &str) -> (u64, Vec<String>) {
    let out = plugin
        .reconcile(
            &cr(ns, name, json!({})),
            &Limits::default(),
            &Grants::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", inrun::errors::chain(&e)));
    let status = out.status.expect("status");
    let seen = serde_json::from_value(status["seen"].clone()).expect("seen");
    (status["calls"].as_u64().expect("calls"), seen)
}

/// An engine of `settings` that makes every plugin's instances ahead, however quick to
/// instantiate (memo takes microseconds, under the default threshold).
fn making_ahead(settings: EngineSettings) -> Engine {
    Engine::new(EngineSettings {
        make_ahead_over: Some(Duration::ZERO),
        ..settings
    })
    .expect("engine")
}

/// Waits until none of `plugins` is making an instance ahead.
async fn made(plugins: &[&Plugin]) {
    eventually("the instances made ahead", || async {
        plugins.iter().all(|p| !p.making_ahead()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_call_the_next_instance_is_made_ahead_and_serves_the_next_call_fresh() {
    let engine = making_ahead(EngineSettings::default());
    let plugin = load(&engine);
    assert!(!plugin.ready_ahead(), "nothing is made before a call");
    for (served, name) in ["a", "b", "c"].into_iter().enumerate() {
        assert_eq!(
            memo_now(&plugin, "ns", name).await,
            (1, vec![]),
            "{name}: a fresh instance, whoever made it"
        );
        assert_eq!(
            plugin.calls_made_ahead(),
            served as u64,
            "every call after the first was served by an instance made ahead"
        );
        made(&[&plugin]).await;
        assert!(plugin.ready_ahead(), "the next one waits");
    }
    assert_eq!(engine.instances_ahead(), 1, "one at a time");
    assert_eq!(plugin.idle_instances(), 0, "none is kept after its call");
    drop(plugin);
    assert_eq!(engine.instances_ahead(), 0, "it goes with its plugin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_makes_nothing_ahead_and_its_instance_is_never_served_again() {
    let engine = making_ahead(EngineSettings::default());
    let plugin = load(&engine);
    let (limits, grants) = (Limits::default(), Grants::default());
    let bad = |spec| cr("ns", "bad", spec);
    plugin
        .reconcile(&bad(json!({"fail": true})), &limits, &grants)
        .await
        .expect_err("fails");
    assert!(
        !plugin.making_ahead() && !plugin.ready_ahead(),
        "a call that failed makes nothing"
    );
    assert_eq!(memo_now(&plugin, "ns", "ok").await, (1, vec![]));
    made(&[&plugin]).await;
    // The instance made ahead serves a call that traps: it goes, and the next call
    // instantiates its own.
    let err = plugin
        .reconcile(&bad(json!({"trap": true})), &limits, &grants)
        .await
        .expect_err("traps");
    assert!(inrun::errors::chain(&err).contains("panicked"), "{err:?}");
    assert_eq!(plugin.calls_made_ahead(), 1);
    assert!(!plugin.making_ahead() && !plugin.ready_ahead());
    assert_eq!(memo_now(&plugin, "ns", "after").await, (1, vec![]));
    assert_eq!(
        plugin.calls_made_ahead(),
        1,
        "instantiated on the call's path"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_made_ahead_are_bounded_per_tenant_and_made_only_when_the_engine_says_so() {
    // A pool of 8 keeps 2 slots for instances made ahead: a tenant holds one.
    let engine = making_ahead(EngineSettings {
        max_instances: 8,
        ..EngineSettings::default()
    });
    let a = engine.for_tenant("a", None);
    let (a1, a2) = (load(&a), load(&a));
    memo_now(&a1, "ns", "x").await;
    memo_now(&a2, "ns", "y").await;
    made(&[&a1, &a2]).await;
    assert_eq!(engine.instances_ahead(), 1, "a tenant holds its share");
    assert!(
        a1.ready_ahead() != a2.ready_ahead(),
        "one of a's plugins has one"
    );
    let b = load(&engine.for_tenant("b", None));
    memo_now(&b, "ns", "z").await;
    made(&[&b]).await;
    assert!(b.ready_ahead(), "another tenant still makes its own");
    assert_eq!(engine.instances_ahead(), 2);

    // Off, and a plugin quicker to instantiate than the threshold (memo: microseconds).
    for make_ahead in [None, Some(Duration::from_secs(1))] {
        let engine = Engine::new(EngineSettings {
            make_ahead_over: make_ahead,
            ..EngineSettings::default()
        })
        .expect("engine");
        let plugin = load(&engine);
        memo_now(&plugin, "ns", "x").await;
        assert!(plugin.instantiation_time() < Duration::from_secs(1));
        assert!(
            !plugin.making_ahead() && !plugin.ready_ahead(),
            "{make_ahead:?}"
        );
        memo_now(&plugin, "ns", "y").await;
        assert_eq!(plugin.calls_made_ahead(), 0, "{make_ahead:?}");
    }
}

/// The `status` of every CR of `kind` in `ns`, by name, once each has one.
async fn statuses(group: &str, kind: &str, ns: &str, names: &[&str]) -> Vec<(u64, Vec<String>)> {
    let mut out = Vec::new();
    for name in names {
        let status = eventually(&format!("{kind} {ns}/{name} reconciled"), || async {
            let cr = get(resource(group, kind), Some(ns), name).await?;
            let status = cr.data.get("status")?.clone();
            status.get("calls")?.as_u64()?;
            Some(status)
        })
        .await;
        let seen = serde_json::from_value(status["seen"].clone()).expect("seen");
        out.push((status["calls"].as_u64().expect("calls"), seen));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blueprints_reuse_limit_lets_one_instance_serve_its_crs_and_only_its_own() -> TestResult {
    let group = unique_group("reuse");
    let memo = support::plugin("inrun_test_memo");
    // One plugin, two CRDs: `Kept` lets an instance serve 100 calls, `Fresh` says nothing.
    let blueprint = format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: reuse}}
spec:
  runtime: {{workers: 1}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: Kept
      reconcile:
        default: false
        constructor: {{location: "{memo}", limits: {{reuse: {{calls: 100}}}}}}
        managedResources: [{{apiVersion: v1, kind: ConfigMap}}]
    - group: {group}
      version: v1alpha1
      kind: Fresh
      reconcile:
        default: false
        constructor: {{location: "{memo}"}}
        managedResources: [{{apiVersion: v1, kind: ConfigMap}}]
"#
    );
    let host = Host::start(&blueprint).await;
    let ns = ControlPlane::shared().namespace("reuse").await?;
    for (kind, names) in [("Kept", ["a", "b", "c"]), ("Fresh", ["x", "y", "z"])] {
        let ar = resource(&group, kind);
        served(&ar).await;
        for name in names {
            let yaml = format!(
                "apiVersion: {group}/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {{}}\n"
            );
            apply_cr(&ar, &ns, &yaml).await;
        }
    }
    let kept = statuses(&group, "Kept", &ns, &["a", "b", "c"]).await;
    let fresh = statuses(&group, "Fresh", &ns, &["x", "y", "z"]).await;
    // Every Fresh CR had an instance of its own, though the same plugin served Kept CRs
    // with reuse on in between.
    assert!(fresh.iter().all(|s| *s == (1, vec![])), "{fresh:?}");
    // Kept CRs shared instances: some CR was served by an instance that had served
    // another Kept CR before it, and never one of Fresh's.
    assert!(kept.iter().any(|(calls, _)| *calls >= 2), "{kept:?}");
    let own: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| format!("{ns}/{n}"))
        .collect();
    for (_, seen) in &kept {
        assert!(seen.iter().all(|k| own.contains(k)), "{kept:?}");
    }
    host.stop().await;
    Ok(())
}
