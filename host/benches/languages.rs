//! `cargo bench -p inrun --bench languages`: the WebApp constructor written in each guest
//! language — component size, cold compile, cached load, the first call after a restart,
//! and one `reconcile` call on a fresh instance (with the pool untuned and tuned) and on a
//! reused one; then, on a Tokio runtime as the host calls, a call between calls with its
//! instance made on the call's path and made ahead. A language whose component is not built
//! (`make plugins`) is skipped. Writes the "Guest languages" section of BENCHMARKS.md.
//!
//! `INRUN_BENCH_LANGUAGES=JavaScript,Python` measures only those languages' rows (both
//! tables), skips the pool tuning table and the cold compile, and writes nothing to
//! BENCHMARKS.md: for trying a change to one guest.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod common;

use common::{plugin_dir, write_section};

use std::time::{Duration, Instant};

use inrun::contract::Request;
use inrun::wasm::{
    CompileCache, Engine, EngineSettings, Grants, Limits, MAKE_AHEAD_OVER, Module, PoolTuning,
};
use serde_json::json;

/// (language, component file stem) of each WebApp constructor.
const WEBAPPS: [(&str, &str); 6] = [
    ("Rust", "inrun_plugin_webapp"),
    ("Python", "inrun_plugin_webapp_python"),
    ("JavaScript", "inrun_plugin_webapp_js"),
    ("TypeScript", "inrun_plugin_webapp_ts"),
    ("C", "inrun_plugin_webapp_c"),
    ("Go", "inrun_plugin_webapp_go"),
];

/// An engine compiling into the bench's cache, as `settings` say otherwise.
fn engine(cache: &dyn Fn() -> CompileCache, settings: EngineSettings) -> Engine {
    Engine::new(EngineSettings {
        cache: Some(cache()),
        ..settings
    })
    .expect("engine")
}

/// Median of `iters` runs of `f`, after `warmup` untimed runs.
fn median(warmup: usize, iters: usize, mut f: impl FnMut()) -> Duration {
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
    samples[iters / 2]
}

fn ms(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{} KB", bytes / 1024)
    }
}

fn main() {
    let dir = plugin_dir();
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = || CompileCache::new(cache_dir.path()).expect("cache");
    let engine_with = |pool: PoolTuning| {
        engine(
            &cache,
            EngineSettings {
                pool,
                ..EngineSettings::default()
            },
        )
    };
    let engine = engine_with(PoolTuning::default());
    let untuned = engine_with(PoolTuning::untuned());
    let req = Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "shop", "namespace": "team-a", "uid": "0f0e"},
               "spec": {"image": "nginx:1.27", "replicas": 3, "port": 8080,
                        "env": {"MODE": "production", "LOG": "info"}}}),
        json!({}),
    );
    let fresh = Limits::default();
    let reused = Limits {
        reuse_calls: inrun::wasm::MAX_REUSE_CALLS,
        ..Limits::default()
    };
    let call = |plugin: &inrun::wasm::Plugin, limits: &Limits| {
        futures::executor::block_on(plugin.reconcile(&req, limits, &Grants::default()))
            .expect("reconcile");
    };
    let only: Option<Vec<String>> = std::env::var("INRUN_BENCH_LANGUAGES")
        .ok()
        .map(|v| v.split(',').map(|l| l.trim().to_lowercase()).collect());
    let mut rows = Vec::new();
    for (language, name) in WEBAPPS {
        if only
            .as_ref()
            .is_some_and(|only| !only.contains(&language.to_lowercase()))
        {
            continue;
        }
        let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
            eprintln!("{language}: {name}.wasm is not built; skipped");
            continue;
        };
        // Not measured for a filtered run: it is the slowest column and rarely the question.
        let compile = if only.is_some() {
            "—".to_string()
        } else {
            ms(median(0, 3, || {
                engine.compile_uncached(name, &bytes).expect("compile");
            }))
        };
        engine.load(name, &bytes).expect("fill cache");
        // What a fetch hands over: the bytes and the digest it computed.
        let module = Module::new(bytes.clone());
        let cached = median(1, 10, || {
            engine.forget_loaded();
            engine.load_module(name, &module).expect("cached load");
        });
        // A restarted host: a new engine, the fetched bytes hashed, the cache on disk, the
        // first call.
        let restart = median(0, 5, || {
            let engine = engine_with(PoolTuning::default());
            let module = Module::new(bytes.clone());
            let plugin = engine
                .load_module(name, &module)
                .expect("load after restart");
            call(&plugin, &fresh);
        });
        let iters = 1_000;
        let plugin = untuned.load(name, &bytes).expect("load");
        let before = median(50, iters, || call(&plugin, &fresh));
        let plugin = engine.load(name, &bytes).expect("load");
        let now = median(50, iters, || call(&plugin, &fresh));
        let kept = median(50, iters, || call(&plugin, &reused));
        let row = format!(
            "| {language} | `{name}.wasm` | {} | {} | {} | {} | {} | {} | {} |",
            size(bytes.len()),
            compile,
            ms(cached),
            ms(restart),
            ms(before),
            ms(now),
            ms(kept),
        );
        eprintln!("{row}");
        rows.push(row);
    }
    let between = between_calls(&dir, &req, &cache, only.as_deref());
    if only.is_some() {
        return;
    }
    let tuning = pool_tuning(&dir, &req, &cache);
    let section = format!(
        "## Guest languages\n\n\
         `cargo bench -p inrun --bench languages`, release build, one run: the WebApp constructor \
         in each language, the same CR. **Cold compile**: Cranelift with no cache (median of 3). \
         **Cached load**: the precompiled component mapped from the on-disk cache, given the \
         bytes and the sha256 their fetch computed (median of 10). **First call after \
         restart**: a new engine, the bytes hashed (as a fetch does), the cached load and one \
         `reconcile` (median of 5). **Fresh instance + call**: a new instance and one `reconcile` (median of \
         1000, after 50), with the pool as it was before it was tuned (2 MiB reset blindly, 100 \
         warm slots, no pagemap scan) and as it is (`PoolTuning::default()`: only the dirty \
         pages found by the pagemap scan reset, 2 MiB of them kept resident, warm slots twice \
         the cores guests may use). **Reused instance**: one instance serving every call (`limits.reuse`).\n\n\
         | language | component | size | cold compile | cached load | first call after restart \
         | fresh instance + call, untuned pool | fresh instance + call | reused instance, per call |\n\
         |---|---|---|---|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    ) + &between
        + &tuning;
    println!("{section}");
    write_section("languages", &section);
}

/// The pool settings tried one by one: what each does to a fresh instance + call and to the
/// memory the process keeps resident.
const TUNINGS: [(&str, PoolTuning); 5] = [
    (
        "untuned: 2 MiB reset blindly, 100 warm slots",
        PoolTuning {
            keep_resident: 2 << 20,
            warm_slots: Some(100),
            pagemap_scan: false,
        },
    ),
    (
        "2 MiB, pagemap scan (the default)",
        PoolTuning {
            keep_resident: 2 << 20,
            warm_slots: None,
            pagemap_scan: true,
        },
    ),
    (
        "32 MiB reset blindly",
        PoolTuning {
            keep_resident: 32 << 20,
            warm_slots: None,
            pagemap_scan: false,
        },
    ),
    (
        "32 MiB, pagemap scan",
        PoolTuning {
            keep_resident: 32 << 20,
            warm_slots: None,
            pagemap_scan: true,
        },
    ),
    (
        "64 MiB, pagemap scan",
        PoolTuning {
            keep_resident: 64 << 20,
            warm_slots: None,
            pagemap_scan: true,
        },
    ),
];

/// The pause before each call of the "between calls" table: a host whose guests are not
/// busy on every core.
const PAUSE: Duration = Duration::from_millis(1);

/// CPU time this process has used, user and system, from `/proc/self/stat` (in ticks of
/// `CLK_TCK`, 100 a second).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are 14th and 15th.
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The "A call between calls" table: on a Tokio runtime as the host runs calls, a fresh
/// instance + call after a pause ([`PAUSE`]), with every instance made on its call's path
/// (`make_ahead_over: None`), every one made ahead in the background after the call before
/// (`Some(0)`), and the default ([`MAKE_AHEAD_OVER`]: made ahead for plugins slower to
/// instantiate); each call starts once the making is over. With the CPU time a call costs
/// in all (the making included).
fn between_calls(
    dir: &std::path::Path,
    req: &Request,
    cache: &dyn Fn() -> CompileCache,
    only: Option<&[String]>,
) -> String {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    for (language, name) in WEBAPPS {
        if only.is_some_and(|only| !only.contains(&language.to_lowercase())) {
            continue;
        }
        let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
            continue;
        };
        let mut cells = Vec::new();
        for make_ahead in [None, Some(Duration::ZERO), Some(MAKE_AHEAD_OVER)] {
            let engine = engine(
                cache,
                EngineSettings {
                    make_ahead_over: make_ahead,
                    ..EngineSettings::default()
                },
            );
            let plugin = engine.load(name, &bytes).expect("load");
            let (warmup, iters): (u32, u32) = (50, 1_000);
            let (latency, cpu) = runtime.block_on(async {
                let mut samples = Vec::new();
                let mut cpu = Duration::ZERO;
                for i in 0..warmup + iters {
                    tokio::time::sleep(PAUSE).await;
                    while plugin.making_ahead() {
                        tokio::time::sleep(Duration::from_micros(50)).await;
                    }
                    if i == warmup {
                        cpu = cpu_time();
                    }
                    let t = Instant::now();
                    plugin
                        .reconcile(req, &Limits::default(), &Grants::default())
                        .await
                        .expect("reconcile");
                    samples.push(t.elapsed());
                }
                // The last call's making, counted in the CPU as every other call's was.
                while plugin.making_ahead() {
                    tokio::time::sleep(Duration::from_micros(50)).await;
                }
                let cpu = cpu_time().saturating_sub(cpu) / iters;
                let mut samples = samples.split_off(warmup as usize);
                samples.sort();
                (samples[iters as usize / 2], cpu)
            });
            let ahead = plugin.calls_made_ahead();
            if make_ahead == Some(Duration::ZERO) {
                assert_eq!(
                    ahead,
                    u64::from(warmup + iters - 1),
                    "every call but the first was served by an instance made ahead"
                );
            }
            let how = match make_ahead {
                Some(over) if !over.is_zero() => format!(
                    " ({ahead} of {} calls made ahead; instantiation {})",
                    warmup + iters,
                    ms(plugin.instantiation_time())
                ),
                _ => String::new(),
            };
            cells.push(format!("{} · {} CPU{how}", ms(latency), ms(cpu)));
        }
        let row = format!("| {language} | {} |", cells.join(" | "));
        eprintln!("{row}");
        rows.push(row);
    }
    format!(
        "\n### A call between calls\n\n\
         The host's own way to call (a Tokio runtime, 2 workers): a pause of {} before each \
         call, then a fresh instance and one `reconcile` (median of 1000, after 50) · the CPU \
         time the process used a call, in all (the making of the next instance included). \
         **On the call's path**: `make_ahead_over: None`. **Always made ahead**: `Some(0)`; after \
         a call succeeds the plugin's next instance is made in the background, and each call \
         here starts once it is made. **The default**: made ahead only for a plugin whose \
         instantiation took {} or more. Every call gets an instance no call used before: \
         the work is the same, off the call's path; taking an instance made on another core \
         costs the call a little, which only a slow instantiation repays.\n\n\
         | language | on the call's path | always made ahead | the default |\n|---|---|---|---|\n{}\n",
        ms(PAUSE),
        ms(MAKE_AHEAD_OVER),
        rows.join("\n")
    )
}

/// This process's resident memory, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The "Pool tuning" table: each of [`TUNINGS`] in an engine of its own, a fresh instance
/// and one call per language (median of 1000), and how much more the process holds
/// resident after those calls than before the engine was built.
fn pool_tuning(dir: &std::path::Path, req: &Request, cache: &dyn Fn() -> CompileCache) -> String {
    let mut rows = Vec::new();
    for (label, pool) in TUNINGS {
        let mut cells = Vec::new();
        for (_, name) in WEBAPPS {
            let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
                cells.push("—".to_string());
                continue;
            };
            let before = rss_kib();
            let engine = engine(
                cache,
                EngineSettings {
                    pool,
                    ..EngineSettings::default()
                },
            );
            let plugin = engine.load(name, &bytes).expect("load");
            let call = median(50, 1_000, || {
                futures::executor::block_on(plugin.reconcile(
                    req,
                    &Limits::default(),
                    &Grants::default(),
                ))
                .expect("reconcile");
            });
            let grew = rss_kib().saturating_sub(before);
            cells.push(format!("{} · +{:.1} MiB", ms(call), grew as f64 / 1024.0));
        }
        let row = format!("| {label} | {} |", cells.join(" | "));
        eprintln!("{row}");
        rows.push(row);
    }
    let head: Vec<&str> = WEBAPPS.iter().map(|(language, _)| *language).collect();
    format!(
        "\n### Pool tuning\n\n\
         Each setting of the pooling allocator in an engine of its own, one after the other: a \
         fresh instance + call (median of 1000, after 50) · how much more the process held \
         resident afterwards than before the engine was built (the loaded component's code \
         included).\n\n| pool | {} |\n|---|{}\n{}\n",
        head.join(" | "),
        "---|".repeat(head.len()),
        rows.join("\n")
    )
}
