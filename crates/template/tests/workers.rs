//! A template that spends its whole fuel does not stall the async runtime it is rendered
//! from: other tasks on the same (single) worker keep their timing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use inrun_template::{Context, Engine};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_template_burning_its_fuel_leaves_other_tasks_on_time() {
    let engine = Engine::new();
    let text =
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}";
    let compiled = Arc::new(engine.compile_value(&json!(text)).expect("compiles"));
    let done = Arc::new(AtomicBool::new(false));
    // A ticker beside the renders, as lease renewal or a probe would be: how late is it?
    let ticker = tokio::spawn({
        let done = done.clone();
        async move {
            let mut worst = Duration::ZERO;
            while !done.load(Ordering::SeqCst) {
                let asked = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                worst = worst.max(asked.elapsed().saturating_sub(Duration::from_millis(5)));
            }
            worst
        }
    });
    let mut longest = Duration::ZERO;
    for _ in 0..4 {
        let compiled = compiled.clone();
        // Each render runs in a task of the one worker, as a reconcile does.
        let took = tokio::spawn(async move {
            let started = Instant::now();
            let cr = json!({"metadata": {"name": "x"}});
            compiled
                .render(&Context::new(&cr))
                .expect_err("runs out of fuel");
            started.elapsed()
        })
        .await
        .expect("render task");
        longest = longest.max(took);
    }
    done.store(true, Ordering::SeqCst);
    let worst = ticker.await.expect("ticker");
    eprintln!(
        "longest render {:.1} ms; the ticker beside it was at worst {:.1} ms late",
        longest.as_secs_f64() * 1e3,
        worst.as_secs_f64() * 1e3
    );
    assert!(
        longest > Duration::from_millis(20),
        "the render must be long for this to show anything: {longest:?}"
    );
    assert!(
        worst < longest / 2,
        "a task beside the render waited {worst:?} (renders took up to {longest:?})"
    );
}
