//! `make bench`: Wasm plugin costs side by side with the same logic compiled natively and
//! behind a remote (loopback HTTP) endpoint, in
//! one run. Writes the "Wasm plugins" section of BENCHMARKS.md.

mod common;

use common::{plugin_dir, write_section};

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inrun::contract::Request;
use inrun::reconcilers::Reconciler;
use inrun::reconcilers::http::http_client;
use inrun::reconcilers::remote::Remote;
use inrun::reconcilers::wasm::Constructor;
use inrun::wasm::{CompileCache, Engine, EngineSettings, Grants, Limits, Plugin};
use serde_json::{Value, json};

/// Median and 90th percentile of `iters` runs of `f`, after `warmup` untimed runs.
fn measure(warmup: usize, iters: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..warmup {
        f();
    }
    let mut samples: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    (samples[iters / 2], samples[iters * 9 / 10])
}

/// Like [`measure`], but each call is awaited inside one task on `runtime`'s worker threads,
/// where the controller runs reconciles (no `block_on` per call).
fn measure_async<F, Fut>(
    runtime: &tokio::runtime::Runtime,
    warmup: usize,
    iters: usize,
    f: F,
) -> (Duration, Duration)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let mut samples = runtime
        .block_on(runtime.spawn(async move {
            for _ in 0..warmup {
                f().await;
            }
            let mut samples = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t = Instant::now();
                f().await;
                samples.push(t.elapsed());
            }
            samples
        }))
        .expect("bench task");
    samples.sort();
    (samples[iters / 2], samples[iters * 9 / 10])
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn webapp_object() -> Value {
    json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
           "metadata": {"name": "shop", "namespace": "team-a", "uid": "0f0e", "generation": 3,
                        "labels": {"team": "payments"}},
           "spec": {"image": "nginx:1.27", "replicas": 3, "port": 8080,
                    "env": {"MODE": "production", "LOG": "info"}}})
}

/// The webapp logic natively, crossing a JSON boundary exactly as the Wasm call does:
/// the object goes in as text, each resource and the status come back as text and are parsed.
fn native_with_json(object_text: &str) -> usize {
    let object: Value = serde_json::from_str(object_text).expect("object");
    let req = inrun_sdk::Request::for_object(object, json!({}));
    let out = inrun_plugin_webapp::reconcile(&req).expect("native reconcile");
    let mut n = 0;
    for r in &out.resources {
        let text = r.to_string();
        let back: Value = serde_json::from_str(&text).expect("json");
        n += back.as_object().map_or(0, |m| m.len());
    }
    if let Some(status) = &out.status {
        let text = Value::Object(status.clone()).to_string();
        n += text.len();
    }
    n
}

/// The webapp logic natively behind an HTTP endpoint: what a remote reconciler would be.
async fn remote_webapp(axum::Json(req): axum::Json<Value>) -> axum::Json<Value> {
    let sdk_req = inrun_sdk::Request::for_object(req["object"].clone(), req["args"].clone());
    axum::Json(match inrun_plugin_webapp::reconcile(&sdk_req) {
        Ok(out) => json!({"result": "ok", "resources": out.resources, "status": out.status,
                          "labels": out.labels, "annotations": out.annotations}),
        Err(_) => json!({"result": "error", "error": "webapp failed"}),
    })
}

/// Serves [`remote_webapp`] on 127.0.0.1 from its own runtime thread; returns the URL.
fn remote_server(server: &tokio::runtime::Runtime) -> String {
    let listener = server
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route("/reconcile", axum::routing::post(remote_webapp));
    server.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/reconcile")
}

fn main() {
    let dir = plugin_dir();
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::new(EngineSettings {
        cache: Some(CompileCache::new(cache_dir.path()).expect("cache")),
        ..EngineSettings::default()
    })
    .expect("engine");
    let load_rows = load_rows(&engine, &dir);
    let iters = 5_000;
    let rows = call_rows(&engine, &dir, iters);
    let section = section(iters, &rows, &load_rows);
    println!("{section}");
    write_section("wasm", &section);
}

/// Compile (cold) and cached load, one row per plugin built: every example plugin (the
/// WebApp constructors in other languages are in the languages bench).
fn load_rows(engine: &Engine, dir: &Path) -> Vec<String> {
    let plugins = [
        "inrun_plugin_webapp",
        "inrun_plugin_labels_hooks",
        "inrun_plugin_hooks_c",
        "inrun_plugin_hooks_js",
        "inrun_plugin_hooks_python",
    ];
    let mut load_rows = Vec::new();
    for name in plugins {
        let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
            eprintln!("{name}.wasm is not built (`make plugins`); skipped");
            continue;
        };
        let (compile, _) = measure(1, 5, || {
            engine.compile_uncached(name, &bytes).expect("compile")
        });
        engine.load(name, &bytes).expect("fill cache");
        let (cached, _) = measure(2, 20, || {
            engine.forget_loaded();
            engine.load(name, &bytes).expect("cached load");
        });
        load_rows.push(format!(
            "| {name} | {} KB | {} | {} | {:.0}× |",
            bytes.len() / 1024,
            ms(compile),
            ms(cached),
            compile.as_secs_f64() / cached.as_secs_f64()
        ));
    }
    load_rows
}

/// Instantiate + call of the webapp constructor, against the same logic natively and
/// behind a remote endpoint: one row per mode, each timed `iters` times.
fn call_rows(engine: &Engine, dir: &Path, iters: usize) -> Vec<String> {
    let webapp = engine
        .load_file(&dir.join("inrun_plugin_webapp.wasm"))
        .expect("webapp");
    let object = webapp_object();
    let req = Request::for_object(object.clone(), json!({}));
    let limits = Limits::default();
    let (wasm_med, wasm_p90) = measure(200, iters, || {
        futures::executor::block_on(webapp.reconcile(&req, &limits, &Grants::default()))
            .expect("wasm reconcile");
    });
    let object_text = object.to_string();
    let (native_json_med, native_json_p90) = measure(200, iters, || {
        std::hint::black_box(native_with_json(&object_text));
    });
    let sdk_req = inrun_sdk::Request::for_object(object.clone(), json!({}));
    let (native_med, native_p90) = measure(200, iters, || {
        std::hint::black_box(inrun_plugin_webapp::reconcile(&sdk_req).expect("native"));
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let shared_req = Arc::new(req.clone());
    let (path_med, path_p90) = through_trait(&runtime, webapp, limits, &shared_req, iters);
    let (remote_med, remote_p90) = through_remote(&runtime, shared_req, iters);
    vec![
        format!(
            "| Wasm: fresh instance + `reconcile` (WASI context built only if used), polled to completion | {} | {} | {:.1}× |",
            us(wasm_med),
            us(wasm_p90),
            wasm_med.as_secs_f64() / native_json_med.as_secs_f64()
        ),
        format!(
            "| Wasm through the `Reconciler` trait, awaited on a runtime worker as the controller does (contract checks, intent expansion) | {} | {} | {:.1}× |",
            us(path_med),
            us(path_p90),
            path_med.as_secs_f64() / native_json_med.as_secs_f64()
        ),
        format!(
            "| remote: HTTP POST over loopback (keep-alive) to the same logic natively (axum), through the `Reconciler` trait | {} | {} | {:.1}× |",
            us(remote_med),
            us(remote_p90),
            remote_med.as_secs_f64() / native_json_med.as_secs_f64()
        ),
        format!(
            "| native: same logic, same JSON boundary (object in as text, resources out as text) | {} | {} | 1.0× |",
            us(native_json_med),
            us(native_json_p90)
        ),
        format!(
            "| native: same logic, typed values, no JSON | {} | {} | {:.2}× |",
            us(native_med),
            us(native_p90),
            native_med.as_secs_f64() / native_json_med.as_secs_f64()
        ),
    ]
}

/// The whole reconciler path the runtime takes: async trait, blocking pool, checks,
/// intents.
fn through_trait(
    runtime: &tokio::runtime::Runtime,
    webapp: Plugin,
    limits: Limits,
    req: &Arc<Request>,
    iters: usize,
) -> (Duration, Duration) {
    let constructor = Arc::new(
        Constructor::new(
            inrun::plugins::PluginSlot::fixed(webapp),
            limits,
            Grants::default(),
        )
        .expect("constructor"),
    );
    let (c, r) = (constructor, req.clone());
    measure_async(runtime, 200, iters, move || {
        let (c, r) = (c.clone(), r.clone());
        async move {
            c.reconcile(&r).await.expect("reconcile");
        }
    })
}

/// The same logic behind loopback HTTP, through the remote reconciler (keep-alive).
fn through_remote(
    runtime: &tokio::runtime::Runtime,
    req: Arc<Request>,
    iters: usize,
) -> (Duration, Duration) {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server rt");
    let spec = inrun::blueprint::RemoteSpec {
        endpoint: remote_server(&server),
        auth: None,
        timeout: Duration::from_secs(10),
        rollout: None,
    };
    let remote = Arc::new(Remote::new(
        &spec,
        http_client().expect("http client"),
        Arc::new(inrun::secrets::StaticSecrets::new()),
    ));
    measure_async(runtime, 200, iters, move || {
        let (c, r) = (remote.clone(), req.clone());
        async move {
            c.reconcile(&r).await.expect("remote");
        }
    })
}

/// The "Wasm plugins" section of BENCHMARKS.md.
fn section(iters: usize, rows: &[String], load_rows: &[String]) -> String {
    format!(
        "## Wasm plugins\n\n\
         `make bench` (`cargo bench -p inrun --bench wasm`), release build, {iters} calls per row after warm-up, one run.\n\n\
         ### Instantiate + call: the `webapp` constructor vs the same Rust logic compiled natively, and behind a remote (HTTP) endpoint\n\n\
         | mode | median | p90 | vs native (JSON boundary) |\n|---|---|---|---|\n{}\n\n\
         ### Compile vs cached load\n\n\
         Cold compile (Cranelift, no cache) against loading the precompiled component from the on-disk cache (keyed by sha256 + engine settings).\n\n\
         | plugin | size | cold compile (median of 5) | cached load (median of 20) | speed-up |\n|---|---|---|---|---|\n{}\n",
        rows.join("\n"),
        load_rows.join("\n")
    )
}
