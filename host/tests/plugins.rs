//! The real guests in `plugins/` against the Wasm engine: each misbehaving guest fails only
//! its own call, with a message that says how, and the next call works.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use inrun::contract::{Outcome, Request};
use inrun::wasm::{
    CallFailure, CompileCache, CompileFailure, Compiler, Engine, EngineSettings, Grants, Limits,
    LoadError, Plugin, World,
};
use serde_json::json;

/// Drives a plugin call to completion from a plain test (calls are futures that yield to
/// the caller at each epoch tick).
trait Blocking {
    fn reconcile_now(
        &self,
        req: &Request,
        limits: &Limits,
    ) -> Result<Outcome, inrun::wasm::CallError>;
    fn hook_now(
        &self,
        f: &str,
        req: &Request,
        current: &Outcome,
        limits: &Limits,
    ) -> Result<Outcome, inrun::wasm::CallError>;
}

impl Blocking for Plugin {
    fn reconcile_now(
        &self,
        req: &Request,
        limits: &Limits,
    ) -> Result<Outcome, inrun::wasm::CallError> {
        futures::executor::block_on(self.reconcile(req, limits, &Grants::default()))
    }
    fn hook_now(
        &self,
        f: &str,
        req: &Request,
        current: &Outcome,
        limits: &Limits,
    ) -> Result<Outcome, inrun::wasm::CallError> {
        futures::executor::block_on(self.call_hook(f, req, current, limits, &Grants::default()))
    }
}

fn plugin_dir() -> PathBuf {
    std::env::var_os("INRUN_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/target/wasm32-wasip2/release")
        })
}

fn engine() -> Engine {
    Engine::new(EngineSettings::default()).expect("engine")
}

fn load(engine: &Engine, name: &str) -> Plugin {
    let path = plugin_dir().join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    engine
        .load_file(&path)
        .unwrap_or_else(|e| panic!("loading {name}: {e:?}"))
}

fn webapp_request() -> Request {
    Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "shop", "namespace": "team-a", "uid": "u1"},
               "spec": {"image": "nginx:1.27", "replicas": 3, "port": 8080}}),
        json!({}),
    )
}

fn short(deadline_ms: u64) -> Limits {
    Limits {
        deadline: Duration::from_millis(deadline_ms),
        ..Limits::default()
    }
}

#[test]
fn webapp_constructor_builds_a_deployment_a_service_and_status() {
    let engine = engine();
    let webapp = load(&engine, "inrun_plugin_webapp");
    assert_eq!(webapp.world(), World::Reconciler);
    let out = webapp
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("reconcile");
    let kinds: Vec<_> = out
        .resources
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["Deployment", "Service"]);
    assert_eq!(out.resources[0]["spec"]["replicas"], 3);
    assert_eq!(out.resources[0]["metadata"]["namespace"], "team-a");
    let status = out.status.expect("status");
    assert_eq!(status["image"], "nginx:1.27");
    assert_eq!(status["replicas"], 3);
}

#[test]
fn webapp_error_result_names_the_plugin_and_its_message() {
    let engine = engine();
    let webapp = load(&engine, "inrun_plugin_webapp");
    let mut req = webapp_request();
    req.object["spec"] = json!({});
    let err = webapp.reconcile_now(&req, &Limits::default()).unwrap_err();
    assert!(matches!(err.failure, CallFailure::Returned(_)), "{err:?}");
    let text = inrun::errors::chain(&err);
    assert!(
        text.starts_with("plugin inrun_plugin_webapp@sha256:"),
        "{text}"
    );
    assert!(text.contains("spec.image is required"), "{text}");
}

#[test]
fn hooks_asleep_when_asked_their_functions_fail_to_load_at_the_deadline() {
    // Loading asks a hooks component which functions it serves; this one sleeps an hour in
    // a WASI clock wait. No runtime is around (as in `inrun validate`): the load makes one.
    let path = plugin_dir().join("inrun_test_sleepy_hooks.wasm");
    assert!(
        path.exists(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    let engine = engine();
    let started = Instant::now();
    let err = engine.load_file(&path).expect_err("the load is stopped");
    let took = started.elapsed();
    let text = inrun::errors::chain(&err);
    assert!(
        text.contains("hook functions") && text.contains("deadline"),
        "{text}"
    );
    assert!(took < Duration::from_secs(5), "stopped late: {took:?}");
    // The engine loads the next plugin as usual.
    load(&engine, "inrun_plugin_labels_hooks");
}

#[test]
fn a_load_asks_a_hooks_component_its_functions_under_the_operators_ceilings() {
    // The operator's deadline ceiling (here 300 ms, below the 2 s default) holds for the
    // call a load makes, not only for reconciles.
    let path = plugin_dir().join("inrun_test_sleepy_hooks.wasm");
    assert!(
        path.exists(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    let engine = Engine::new(EngineSettings {
        load_limits: inrun::wasm::Limits {
            deadline: Duration::from_millis(300),
            ..inrun::wasm::Limits::default()
        },
        ..EngineSettings::default()
    })
    .expect("engine");
    let err = engine.load_file(&path).expect_err("the load is stopped");
    let text = inrun::errors::chain(&err);
    assert!(text.contains("exceeded its 0.3s deadline"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_asleep_in_a_host_call_is_stopped_at_its_deadline() {
    // The guest sleeps an hour in a WASI clock wait, where the epoch interrupt cannot reach
    // it: the call's outer deadline drops it.
    let engine = engine();
    let sleepy = load(&engine, "inrun_test_sleepy");
    let started = Instant::now();
    let err = sleepy
        .reconcile(&webapp_request(), &short(300), &Grants::default())
        .await
        .expect_err("stopped");
    let took = started.elapsed();
    assert!(matches!(err.failure, CallFailure::Deadline(_)), "{err:?}");
    assert!(
        took >= Duration::from_millis(300),
        "stopped early: {took:?}"
    );
    assert!(took < Duration::from_secs(1), "stopped late: {took:?}");
    // The engine serves the next call as usual.
    let webapp = load(&engine, "inrun_plugin_webapp");
    webapp
        .reconcile(&webapp_request(), &Limits::default(), &Grants::default())
        .await
        .expect("a normal call right after");
}

#[test]
fn endless_loop_hits_its_deadline_within_twice_the_limit_and_the_next_call_works() {
    let engine = engine();
    let spin = load(&engine, "inrun_test_spin");
    let webapp = load(&engine, "inrun_plugin_webapp");
    let started = Instant::now();
    let err = spin
        .reconcile_now(&webapp_request(), &short(300))
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err.failure, CallFailure::Deadline(_)), "{err:?}");
    assert!(
        inrun::errors::chain(&err).contains("exceeded its 0.3s deadline"),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(300),
        "interrupted early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(600),
        "deadline fired late: {took:?}"
    );
    webapp
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("a normal call right after");
    // The same component again: a fresh store, so the previous interrupt leaves no trace.
    let again = spin
        .reconcile_now(&webapp_request(), &short(100))
        .unwrap_err();
    assert!(matches!(again.failure, CallFailure::Deadline(_)));
}

#[test]
fn unbounded_allocation_hits_the_memory_cap_and_the_next_call_works() {
    let engine = engine();
    let hog = load(&engine, "inrun_test_hog");
    let limits = Limits {
        memory_bytes: 32 << 20,
        ..Limits::default()
    };
    let err = hog.reconcile_now(&webapp_request(), &limits).unwrap_err();
    assert!(matches!(err.failure, CallFailure::Memory(_)), "{err:?}");
    assert!(
        inrun::errors::chain(&err).contains("exceeded its memory cap of 32 MiB"),
        "{err}"
    );
    let webapp = load(&engine, "inrun_plugin_webapp");
    webapp
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("a normal call right after");
}

#[test]
fn a_panic_is_a_trap_that_carries_the_panic_message() {
    let engine = engine();
    let panic = load(&engine, "inrun_test_panic");
    let err = panic
        .reconcile_now(&webapp_request(), &Limits::default())
        .unwrap_err();
    let CallFailure::Trap { stderr, .. } = &err.failure else {
        panic!("not a trap: {err:?}")
    };
    assert!(
        stderr.as_deref().unwrap_or_default().contains("panicked"),
        "{err}"
    );
    load(&engine, "inrun_plugin_webapp")
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("a normal call right after");
}

#[test]
fn garbage_output_is_a_bad_outcome_naming_the_resource() {
    let engine = engine();
    let garbage = load(&engine, "inrun_test_garbage");
    let err = garbage
        .reconcile_now(&webapp_request(), &Limits::default())
        .unwrap_err();
    assert!(matches!(err.failure, CallFailure::BadOutput(_)), "{err:?}");
    assert!(inrun::errors::chain(&err).contains("is not JSON"), "{err}");
}

#[test]
fn output_caps_apply_per_plugin() {
    let engine = engine();
    let webapp = load(&engine, "inrun_plugin_webapp");
    let tiny = Limits {
        output_bytes: 64,
        ..Limits::default()
    };
    let err = webapp.reconcile_now(&webapp_request(), &tiny).unwrap_err();
    assert!(
        inrun::errors::chain(&err).contains("more than its limit of 64 bytes"),
        "{err}"
    );
    let one = Limits {
        max_resources: 1,
        ..Limits::default()
    };
    let err = webapp.reconcile_now(&webapp_request(), &one).unwrap_err();
    assert!(
        inrun::errors::chain(&err).contains("2 resources, more than its limit of 1"),
        "{err}"
    );
}

#[test]
fn a_plugin_sees_no_environment_or_files_of_the_host_and_only_its_name_as_argv() {
    let engine = engine();
    let hostile = load(&engine, "inrun_test_hostile");
    let mut req = webapp_request();
    req.args = json!({"mode": "ambient"});
    let out = hostile
        .reconcile_now(&req, &Limits::default())
        .expect("reconcile");
    let data = &out.resources[0]["data"];
    // The host has an environment and a filesystem; the guest sees neither.
    assert!(std::env::vars().next().is_some());
    assert_eq!(
        data["env"], "[]",
        "no environment variable reaches a plugin"
    );
    assert_eq!(
        data["args"], r#"["inrun_test_hostile"]"#,
        "no argument but argv[0], the plugin's own name"
    );
    for what in ["root", "cwd", "file"] {
        let seen = data[what].as_str().unwrap_or_default();
        assert!(seen.starts_with("error: "), "{what}: {seen}");
    }
}

#[test]
fn a_package_sees_no_environment_or_files_of_the_host_and_only_its_name_as_argv() {
    use inrun::contract::package::{Descriptor, Event, Options};
    let engine = engine();
    let infra = load(&engine, "inrun_test_infra");
    let opts = Options {
        config: json!({"probe": "ambient"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        profile: "ns--a".into(),
        state: "running".into(),
        event: Event::Changed,
        resource: Descriptor {
            group: "t.inrun.dev".into(),
            version: "v1".into(),
            plural: "things".into(),
            kind: "Thing".into(),
        },
        namespace: Some("ns".into()),
        name: "a".into(),
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let lines = runtime
        .block_on(infra.package_validate(&opts, &Limits::default(), &Grants::default()))
        .expect("validate");
    let line = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= line in {lines:?}"))
            .to_string()
    };
    // The host has an environment and a filesystem; the package sees neither.
    assert!(std::env::vars().next().is_some());
    assert_eq!(
        line("env"),
        "[]",
        "no environment variable reaches a package"
    );
    assert_eq!(line("args"), r#"["inrun_test_infra"]"#);
    for what in ["root", "cwd", "file"] {
        assert!(line(what).starts_with("error: "), "{what}: {lines:?}");
    }
}

#[test]
fn guest_output_is_captured_and_the_call_still_succeeds() {
    let engine = engine();
    let chatty = load(&engine, "inrun_test_chatty");
    let out = chatty
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("reconcile");
    assert_eq!(out.resources[0]["kind"], "ConfigMap");
}

#[test]
fn hooks_component_lists_its_functions_and_transforms_an_outcome() {
    let engine = engine();
    let hooks = load(&engine, "inrun_plugin_labels_hooks");
    assert_eq!(hooks.world(), World::Hooks);
    let mut functions = hooks.info().functions.clone();
    functions.sort();
    assert_eq!(functions, ["add-labels", "add-sidecar", "annotate"]);
    hooks
        .expect_functions(["add-labels", "annotate"])
        .expect("exported");
    let err = hooks
        .expect_functions(["add-label"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no hook function \"add-label\""), "{err}");

    let current = Outcome {
        resources: vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        ],
        ..Outcome::default()
    };
    let out = hooks
        .hook_now("annotate", &webapp_request(), &current, &Limits::default())
        .expect("hook");
    assert_eq!(
        out.resources[0]["metadata"]["annotations"]["demo.inrun.dev/rendered-by"],
        "hooks"
    );
}

#[test]
fn a_reconciler_component_used_as_hooks_is_refused_at_load() {
    let engine = engine();
    let webapp = load(&engine, "inrun_plugin_webapp");
    let err = webapp
        .expect_functions(["add-labels"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is a `reconciler` component, but it is used as a `hooks` component"),
        "{err}"
    );
}

#[test]
fn bytes_that_are_not_a_component_fail_to_load_without_harming_others() {
    let engine = engine();
    let err = engine
        .load("junk", b"\0asm not really")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("compiling plugin junk@sha256:"), "{err}");
    load(&engine, "inrun_plugin_webapp");
}

#[test]
fn the_compile_cache_serves_a_second_engine_without_compiling() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = || EngineSettings {
        cache: Some(CompileCache::new(dir.path()).expect("cache")),
        ..EngineSettings::default()
    };
    let first = Engine::new(settings()).expect("engine");
    let a = load(&first, "inrun_plugin_webapp");
    let entries: Vec<_> = std::fs::read_dir(dir.path()).expect("read").collect();
    assert_eq!(entries.len(), 1, "one compiled entry written");
    let second = Engine::new(settings()).expect("engine");
    let b = load(&second, "inrun_plugin_webapp");
    assert_eq!(a.id(), b.id());
    b.reconcile_now(&webapp_request(), &Limits::default())
        .expect("reconcile from cached code");

    // An entry replaced by garbage is recompiled, not trusted. It is replaced whole (a new
    // file renamed over it), as every writer of the cache replaces entries: rewriting a
    // file in place under a process that maps it, as `b`'s engine does, would crash that
    // process (SIGBUS), which is why the cache's directory is the host's user's alone.
    let entry = std::fs::read_dir(dir.path())
        .expect("read")
        .next()
        .expect("entry")
        .expect("entry")
        .path();
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"garbage").expect("write garbage");
    std::fs::rename(&garbage, &entry).expect("corrupt");
    let third = Engine::new(settings()).expect("engine");
    load(&third, "inrun_plugin_webapp")
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("recompiled");
}

#[test]
fn replicas_sharing_a_cache_compile_concurrently_without_tearing_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metrics = std::sync::Arc::new(inrun::metrics::Metrics::default());
    let settings = || EngineSettings {
        cache: Some(CompileCache::new(dir.path()).expect("cache")),
        pooling: false,
        observer: metrics.clone(),
        ..EngineSettings::default()
    };
    // Three "replicas" start at once on an empty cache and all compile the same module.
    let engines: Vec<Engine> = (0..3)
        .map(|_| Engine::new(settings()).expect("engine"))
        .collect();
    std::thread::scope(|s| {
        for engine in &engines {
            s.spawn(|| {
                load(engine, "inrun_plugin_webapp")
                    .reconcile_now(&webapp_request(), &Limits::default())
                    .expect("reconcile");
            });
        }
    });
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        1,
        "one whole entry, no temporary files: {names:?}"
    );
    assert!(names[0].ends_with(".cwasm"), "{names:?}");
    // A later replica loads that entry rather than compiling.
    let before = metrics.plugin_loads("cache");
    let later = Engine::new(settings()).expect("engine");
    load(&later, "inrun_plugin_webapp")
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("reconcile from the shared cache");
    let after = metrics.plugin_loads("cache");
    assert!(after > before, "loaded from the cache");
}

#[tokio::test(flavor = "current_thread")]
async fn an_endless_loop_yields_to_other_tasks_on_the_same_thread() {
    let engine = engine();
    let spin = load(&engine, "inrun_test_spin");
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = ticks.clone();
    // Another task on the one runtime thread: it only runs if the plugin call yields.
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let err = spin
        .reconcile(&webapp_request(), &short(300), &Grants::default())
        .await
        .unwrap_err();
    ticker.abort();
    assert!(matches!(err.failure, CallFailure::Deadline(_)), "{err:?}");
    let n = ticks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        n >= 10,
        "the other task ran only {n} times while the plugin looped for 300 ms"
    );
}

#[test]
fn both_contract_versions_load_and_a_0_1_0_hook_passes_on_what_it_cannot_see() {
    let engine = engine();
    // The Rust SDK exports 0.2.0; the Python SDK builds the webapp against 0.1.0.
    let reporter = load(&engine, "inrun_test_reporter");
    assert_eq!(
        (reporter.world(), reporter.info().contract),
        (World::Reconciler, "0.2.0")
    );
    let old = load(&engine, "inrun_plugin_hooks_python");
    assert_eq!((old.world(), old.info().contract), (World::Hooks, "0.1.0"));
    let new = load(&engine, "inrun_plugin_labels_hooks");
    assert_eq!((new.world(), new.info().contract), (World::Hooks, "0.2.0"));

    let mut req = webapp_request();
    req.object["spec"]["size"] = json!(2);
    let out = reporter
        .reconcile_now(&req, &Limits::default())
        .expect("reconcile");
    assert_eq!(
        out.conditions,
        [inrun::contract::Condition::new(
            "Sized",
            true,
            "SizeSet",
            "size is 2"
        )]
    );
    assert_eq!(
        out.events,
        [inrun::contract::Event::normal("Resized", "size 2")]
    );
    // Through a 0.1.0 hook and a 0.2.0 one, the conditions and events go on.
    let after_old = old
        .hook_now("add-labels", &req, &out, &Limits::default())
        .expect("0.1.0 hook");
    assert_eq!(after_old.conditions, out.conditions);
    assert_eq!(after_old.events, out.events);
    let after_new = new
        .hook_now("add-labels", &req, &after_old, &Limits::default())
        .expect("0.2.0 hook");
    assert_eq!(after_new.conditions, out.conditions);
    assert_eq!(after_new.events, out.events);
}

/// An engine with a pool of 8 instances, where a tenant may hold 2 calls and 96 MiB, and
/// two guests run at once.
fn budgeted_engine() -> Engine {
    Engine::new(EngineSettings {
        max_instances: 8,
        budgets: Some(inrun::wasm::Budgets {
            running: 2,
            calls: 8,
            memory_bytes: 1 << 30,
            held_bytes: 1 << 30,
            tenant: inrun::wasm::TenantBudget {
                calls: 2,
                memory_bytes: 96 << 20,
                log_lines_per_second: 100,
                held_bytes: 256 << 20,
                cpu: None,
            },
        }),
        ..EngineSettings::default()
    })
    .expect("engine")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_asleep_in_every_call_holds_its_share_of_the_pool_not_the_pool() {
    let engine = budgeted_engine();
    let a = engine.for_tenant("a", None);
    let sleepy = load(&a, "inrun_test_sleepy");
    // Tenant a asks for the whole pool: 8 calls asleep until their deadline.
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let sleepy = sleepy.clone();
            tokio::spawn(async move {
                sleepy
                    .reconcile(&webapp_request(), &short(1500), &Grants::default())
                    .await
            })
        })
        .collect();
    // Tenant b's calls still find instances, while a's sleep.
    let b = engine.for_tenant("b", None);
    let webapp = load(&b, "inrun_plugin_webapp");
    for _ in 0..4 {
        webapp
            .reconcile(&webapp_request(), &Limits::default(), &Grants::default())
            .await
            .expect("tenant b is served beside a's sleeping calls");
    }
    let mut budget = 0;
    for call in calls {
        let err = call.await.unwrap().expect_err("asleep until the deadline");
        if let CallFailure::Budget(why) = &err.failure {
            assert!(
                why.contains("tenant a's budget of 2 calls in flight"),
                "{why}"
            );
            budget += 1;
        } else {
            assert!(matches!(err.failure, CallFailure::Deadline(_)), "{err:?}");
        }
    }
    // Two ran to their deadline at a time; the rest waited behind them, not behind b.
    assert!(budget >= 4, "{budget} calls stopped by the budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_memory_is_summed_across_its_calls_and_given_back() {
    let engine = budgeted_engine();
    let a = engine.for_tenant("a", None);
    let hog = load(&a, "inrun_test_hog");
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    // Two hogs at once: each may grow to 64 MiB, the two together to 96 MiB.
    let (req, grants) = (webapp_request(), Grants::default());
    let (one, two) = tokio::join!(
        hog.reconcile(&req, &limits, &grants),
        hog.reconcile(&req, &limits, &grants),
    );
    let failures: Vec<_> = [one, two]
        .into_iter()
        .map(|r| r.expect_err("a hog never ends").failure)
        .collect();
    assert!(
        failures.iter().any(|f| matches!(f, CallFailure::Budget(why)
            if why.contains("tenant a's memory budget of 96 MiB"))),
        "{failures:?}"
    );
    assert_eq!(engine.memory_in_use(), 0, "memory given back");
    // Another tenant is not charged for a's memory.
    let b = engine.for_tenant("b", None);
    let webapp = load(&b, "inrun_plugin_webapp");
    webapp
        .reconcile(&webapp_request(), &Limits::default(), &Grants::default())
        .await
        .expect("tenant b");
}

/// An engine compiling in a child process of the `inrun` program under these limits.
fn compiling_in_a_child(timeout: Duration, memory_bytes: u64) -> Engine {
    Engine::new(EngineSettings {
        compiler: Some(Compiler {
            program: PathBuf::from(env!("CARGO_BIN_EXE_inrun")),
            timeout,
            memory_bytes,
        }),
        ..EngineSettings::default()
    })
    .expect("engine")
}

#[test]
fn a_plugin_compiled_in_a_child_process_loads_and_runs_and_garbage_is_named() {
    let engine = compiling_in_a_child(Duration::from_secs(120), 512 << 20);
    let webapp = load(&engine, "inrun_plugin_webapp");
    let out = webapp
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("reconcile");
    assert_eq!(out.resources.len(), 2);
    let err = engine.load("garbage", b"\0asm not really").unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err:?}");
    let text = inrun::errors::chain(&err);
    assert!(text.contains("compiling plugin garbage"), "{text}");
}

#[test]
fn a_compile_past_its_time_or_memory_limit_is_stopped_and_only_that_load_fails() {
    // An 18 MB Python guest takes seconds and far more than 64 MiB to compile.
    let python = plugin_dir().join("inrun_plugin_webapp_python.wasm");
    let bytes = std::fs::read(&python).expect("the Python webapp: run `make plugins`");
    let quick = compiling_in_a_child(Duration::from_millis(300), 512 << 20);
    let started = Instant::now();
    let err = quick.load("python", &bytes).unwrap_err();
    assert!(
        matches!(
            &err,
            LoadError::CompileStopped {
                source: CompileFailure::Time(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped at its limit, not at its end: {:?}",
        started.elapsed()
    );
    assert!(
        inrun::errors::chain(&err).contains("took longer than the limit of 0.3s"),
        "{err}"
    );
    let small = compiling_in_a_child(Duration::from_secs(120), 64 << 20);
    let err = small.load("python", &bytes).unwrap_err();
    assert!(
        matches!(
            &err,
            LoadError::CompileStopped {
                source: CompileFailure::Memory(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        inrun::errors::chain(&err).contains("more than its memory limit of 64 MiB"),
        "{err}"
    );
    // The engine goes on loading what fits.
    let webapp = load(&small, "inrun_plugin_webapp");
    webapp
        .reconcile_now(&webapp_request(), &Limits::default())
        .expect("reconcile");
}

/// The hostile guest answering `mode` with `args`.
fn hostile_request(args: serde_json::Value) -> Request {
    let mut req = webapp_request();
    req.args = args;
    req
}

#[test]
fn resources_that_alias_one_string_in_the_guest_are_refused_before_the_host_copies_them() {
    let engine = engine();
    let hostile = load(&engine, "inrun_test_hostile");
    // 64 resources that are all one 4 MiB string: 4 MiB in the guest, 256 MiB if the host
    // copied each out.
    let req = hostile_request(json!({"mode": "alias", "count": 64, "size": 4 << 20}));
    let started = Instant::now();
    let err = hostile.reconcile_now(&req, &Limits::default()).unwrap_err();
    let CallFailure::BadOutput(why) = &err.failure else {
        panic!("{err:?}");
    };
    assert!(
        why.contains("copied more than its limit of 1048576 bytes out of the guest"),
        "refused while copying, not after: {why}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The plugin serves its next call.
    let fine = hostile
        .reconcile_now(&hostile_request(json!({})), &Limits::default())
        .expect("an ordinary call");
    assert_eq!(fine.resources.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_is_held_against_its_tenants_host_memory_until_the_pass_ends() {
    let engine = budgeted_engine();
    let a = engine.for_tenant("a", None);
    let hostile = load(&a, "inrun_test_hostile");
    let memory = a.host_memory().expect("a tenant's handle");
    let limits = Limits {
        output_bytes: 4 << 20,
        max_resources: 1000,
        ..Limits::default()
    };
    // 100 ConfigMaps of 16 KiB: about 1.6 MB of text.
    let req = hostile_request(json!({"mode": "sized", "count": 100, "size": 16 << 10}));
    let held = memory
        .scope(async {
            let out = hostile
                .reconcile(&req, &limits, &Grants::default())
                .await
                .unwrap_or_else(|e| panic!("fits a's 256 MiB: {}", e.failure.outcome()));
            assert_eq!(out.resources.len(), 100);
            inrun::wasm::held_by_pass()
        })
        .await;
    assert!(
        held > 100 * (16 << 10) * 2,
        "the parsed outcome is held, not only its text: {held}"
    );
    assert_eq!(memory.held(), 0, "given back when the pass ended");

    // A tenant whose share is smaller than what an outcome parses to fails that call
    // alone, naming its budget, before the outcome is parsed: 1,000 tiny ConfigMaps are
    // 90 KB of text and megabytes once parsed.
    let small = engine.for_tenant(
        "small",
        Some(inrun::wasm::TenantBudget {
            held_bytes: 1 << 20,
            ..engine.budgets().tenant
        }),
    );
    let hostile = load(&small, "inrun_test_hostile");
    let memory = small.host_memory().expect("a tenant's handle");
    let tiny = hostile_request(json!({"mode": "sized", "count": 1000, "size": 10}));
    let fits = Limits {
        output_bytes: 256 << 10,
        ..limits
    };
    let err = memory
        .scope(hostile.reconcile(&tiny, &fits, &Grants::default()))
        .await
        .expect_err("more than its share once parsed");
    let CallFailure::Budget(why) = &err.failure else {
        panic!("{}", err.failure.outcome());
    };
    assert!(
        why.contains("tenant small's host-memory budget of 1 MiB"),
        "{why}"
    );
    assert_eq!(memory.held(), 0);
    // An output cap past the whole share is refused before the guest runs.
    let err = memory
        .scope(hostile.reconcile(&req, &limits, &Grants::default()))
        .await
        .expect_err("its output cap alone passes its share");
    assert!(
        matches!(err.failure, CallFailure::Budget(_)),
        "{}",
        err.failure.outcome()
    );
}

/// A component of `modules` core modules, each with one linear memory of `pages` pages
/// initialised by two one-byte data segments at its first and last bytes: a few hundred
/// bytes a module, whose memory images, kept whole, would take `modules × pages × 64 KiB`.
fn sparse_images(modules: usize, pages: usize) -> Vec<u8> {
    let last = pages * 65536 - 1;
    let body: String = (0..modules)
        .map(|i| {
            format!(
                "(core module $m{i} (memory {pages}) (data (i32.const 0) \"{i}\") (data (i32.const {last}) \"b\"))\n(core instance (instantiate $m{i}))\n"
            )
        })
        .collect();
    wat::parse_str(format!("(component {body})")).expect("component text")
}

/// The bytes of the one compiled entry in `cache`.
fn cached_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("cache dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .map(|e| e.metadata().expect("entry").len())
        .sum()
}

#[test]
fn sparse_memory_images_compile_to_what_their_data_takes_not_their_span() {
    // Four modules (the most memories a component may have), each two bytes 64 MiB
    // apart: 256 MiB if the images were kept whole.
    let bytes = sparse_images(4, 1024);
    assert!(bytes.len() < 1024, "{} bytes", bytes.len());
    let child = Compiler {
        program: PathBuf::from(env!("CARGO_BIN_EXE_inrun")),
        timeout: Duration::from_secs(120),
        memory_bytes: 512 << 20,
    };
    for compiler in [None, Some(child)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = Engine::new(EngineSettings {
            cache: Some(CompileCache::new(dir.path()).expect("cache")),
            compiler,
            ..EngineSettings::default()
        })
        .expect("engine");
        let err = engine.load("sparse", &bytes).unwrap_err();
        assert!(matches!(err, LoadError::UnknownWorld { .. }), "{err:?}");
        let compiled = cached_size(dir.path());
        assert!(
            compiled > 0 && compiled < 2 << 20,
            "compiled to {compiled} bytes: the images were kept whole"
        );
    }
}

#[test]
fn a_tenant_whose_compile_ran_past_its_limit_may_not_compile_for_a_while_and_others_may() {
    let python = plugin_dir().join("inrun_plugin_webapp_python.wasm");
    let bytes = std::fs::read(&python).expect("the Python webapp: run `make plugins`");
    // Seconds for a Rust guest, far less than the Python guest needs.
    let engine = compiling_in_a_child(Duration::from_secs(3), 512 << 20);
    let a = engine.for_tenant("a", None);
    let err = a.load("python", &bytes).unwrap_err();
    assert!(
        matches!(
            &err,
            LoadError::CompileStopped {
                source: CompileFailure::Time(_),
                ..
            }
        ),
        "{err:?}"
    );
    // A's next load, however small, waits out its pause.
    let webapp = std::fs::read(plugin_dir().join("inrun_plugin_webapp.wasm")).expect("webapp");
    let err = a.load("webapp", &webapp).unwrap_err();
    assert!(matches!(err, LoadError::CompilePaused { .. }), "{err:?}");
    let text = inrun::errors::chain(&err);
    assert!(text.contains("may compile again only in"), "{text}");
    // B compiles as ever.
    let b = engine.for_tenant("b", None);
    b.load("webapp", &webapp).expect("tenant b compiles");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_cpu_cap_waits_for_its_share_whatever_else_is_idle() {
    let engine = budgeted_engine();
    let hostile_of = |name: &str, cpu| {
        let tenant = engine.for_tenant(
            name,
            Some(inrun::wasm::TenantBudget {
                cpu,
                ..engine.budgets().tenant
            }),
        );
        load(&tenant, "inrun_test_hostile")
    };
    let limits = Limits {
        deadline: Duration::from_secs(60),
        ..Limits::default()
    };
    let req = hostile_request(json!({"mode": "burn", "count": 600_000_000u64}));
    let timed = async |plugin: &Plugin| {
        let started = Instant::now();
        plugin
            .reconcile(&req, &limits, &Grants::default())
            .await
            .expect("the loop ends");
        started.elapsed()
    };
    let free = timed(&hostile_of("free", None)).await;
    // A tenant capped at a tenth of a core: a tenth of a second at once, then a tenth of
    // each second.
    let capped = hostile_of("capped", Some(inrun::wasm::Millicores::new(100)));
    let slow = timed(&capped).await;
    assert!(
        slow > free * 3,
        "capped at 100m the same work took {slow:?}, uncapped {free:?}"
    );
    let usage = engine.tenant_usage("capped").expect("capped's usage");
    assert!(usage.cpu_throttled_ms > 0, "{usage:?}");
}
