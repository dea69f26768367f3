//! A template that spends its whole fuel does not stall the async runtime it is rendered
//! from: other tasks on the same (single) worker keep running while it renders.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use inrun_template::{Context, Engine};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_template_burning_its_fuel_leaves_other_tasks_running() {
    let engine = Engine::new();
    let text =
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}";
    let compiled = Arc::new(engine.compile_value(&json!(text)).expect("compiles"));
    let done = Arc::new(AtomicBool::new(false));
    let ticks = Arc::new(AtomicU64::new(0));
    // A ticker beside the renders, as lease renewal or a probe would be. With one worker
    // and a render that kept it, the ticker could not run at all until the render ended;
    // counting its ticks during each render says whether it did, whatever the machine's
    // load does to timing.
    let ticker = tokio::spawn({
        let (done, ticks) = (done.clone(), ticks.clone());
        async move {
            while !done.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    // Let the ticker start before the first render.
    while ticks.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    for round in 0..4 {
        let (compiled, ticks) = (compiled.clone(), ticks.clone());
        // Each render runs in a task of the one worker, as a reconcile does.
        let (took, ticked) = tokio::spawn(async move {
            let started = Instant::now();
            let before = ticks.load(Ordering::SeqCst);
            let cr = json!({"metadata": {"name": "x"}});
            compiled
                .render(&Context::new(&cr))
                .expect_err("runs out of fuel");
            (started.elapsed(), ticks.load(Ordering::SeqCst) - before)
        })
        .await
        .expect("render task");
        eprintln!(
            "render {round}: {:.1} ms, the ticker beside it ticked {ticked} times",
            took.as_secs_f64() * 1e3
        );
        assert!(
            took > Duration::from_millis(10),
            "the render must be long for this to show anything: {took:?}"
        );
        assert!(
            ticked > 0,
            "the ticker did not run during a {took:?} render: the render held the worker"
        );
    }
    done.store(true, Ordering::SeqCst);
    ticker.await.expect("ticker");
}
