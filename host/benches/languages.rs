//! `cargo bench -p inrun --bench languages`: the WebApp constructor written in each guest
//! language — component size, cold compile, cached load, and a fresh instance + one
//! `reconcile` call. A language whose component is not built (`make plugins`) is skipped.
//! Writes the "Guest languages" section of BENCHMARKS.md.

mod common;

use common::{plugin_dir, write_section};

use std::time::{Duration, Instant};

use inrun::contract::Request;
use inrun::wasm::{CompileCache, Engine, EngineSettings, Grants, Limits};
use serde_json::json;

/// (language, component file stem) of each WebApp constructor.
const WEBAPPS: [(&str, &str); 5] = [
    ("Rust", "inrun_plugin_webapp"),
    ("Python", "inrun_plugin_webapp_python"),
    ("JavaScript", "inrun_plugin_webapp_js"),
    ("C", "inrun_plugin_webapp_c"),
    ("Go", "inrun_plugin_webapp_go"),
];

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
    let engine = Engine::new(EngineSettings {
        cache: Some(CompileCache::new(cache_dir.path()).expect("cache")),
        ..EngineSettings::default()
    })
    .expect("engine");
    let req = Request::for_object(
        json!({"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": "shop", "namespace": "team-a", "uid": "0f0e"},
               "spec": {"image": "nginx:1.27", "replicas": 3, "port": 8080,
                        "env": {"MODE": "production", "LOG": "info"}}}),
        json!({}),
    );
    let limits = Limits::default();
    let mut rows = Vec::new();
    for (language, name) in WEBAPPS {
        let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
            eprintln!("{language}: {name}.wasm is not built; skipped");
            continue;
        };
        let compile = median(0, 3, || {
            engine.compile_uncached(name, &bytes).expect("compile");
        });
        engine.load(name, &bytes).expect("fill cache");
        let cached = median(1, 10, || {
            engine.forget_loaded();
            engine.load(name, &bytes).expect("cached load");
        });
        let plugin = engine.load(name, &bytes).expect("load");
        let iters = 1_000;
        let call = median(50, iters, || {
            futures::executor::block_on(plugin.reconcile(&req, &limits, &Grants::default()))
                .expect("reconcile");
        });
        let row = format!(
            "| {language} | `{name}.wasm` | {} | {} | {} | {} |",
            size(bytes.len()),
            ms(compile),
            ms(cached),
            ms(call)
        );
        eprintln!("{row}");
        rows.push(row);
    }
    let section = format!(
        "## Guest languages\n\n\
         `cargo bench -p inrun --bench languages`, release build, one run: the WebApp constructor \
         in each language, the same CR. Cold compile is Cranelift with no cache (median of 3); \
         cached load reads the precompiled component from the on-disk cache (median of 10); \
         instantiate + call is a fresh instance and one `reconcile` (median of 1000, after 50).\n\n\
         | language | component | size | cold compile | cached load | instantiate + call |\n\
         |---|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    );
    println!("{section}");
    write_section("languages", &section);
}
