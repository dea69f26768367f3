//! What a reconciler's reply costs the host once parsed, measured with an allocation
//! counter: the bound a pass holds before it parses a reply ([`inrun::wasm::parsed_bound`]:
//! its text and [`inrun::wasm::PARSED_PER_TOKEN`] bytes a token) must cover what parsing
//! really keeps, for the shapes reconcilers return and the worst a hostile one can (many
//! small values, empty maps).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use serde_json::{Value, json};

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed through to the system allocator unchanged; only a count
// of the sizes asked for is kept beside.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as the caller of `alloc` promised.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as the caller of `dealloc` promised.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as the caller of `realloc` promised.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes the parsed form of `text` keeps live, as the host parses a reply (keys sorted).
fn parsed_bytes(text: &str) -> usize {
    let before = LIVE.load(Ordering::Relaxed);
    let mut value: Value = serde_json::from_str(text).expect("JSON");
    value.sort_all_objects();
    let after = LIVE.load(Ordering::Relaxed);
    let kept = usize::try_from(after - before).unwrap_or(0);
    drop(value);
    kept
}

fn config_maps(n: usize, data: &str) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i}"), "labels": {"app": "x", "tier": "y"}},
                   "data": {"a": data, "b": data, "c": data}})
        })
        .collect();
    json!({"resources": items})
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "labels": {"app": "web"}},
           "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                          "ports": [{"containerPort": 8080}],
                                          "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}})
}

#[test]
fn what_is_held_for_a_reply_covers_what_its_parsed_form_keeps_text_included() {
    let shapes = [
        ("16 KiB ConfigMaps", config_maps(50, &"x".repeat(16 << 10))),
        ("ConfigMaps of one-letter values", config_maps(2000, "x")),
        ("Deployments", json!({"resources": vec![deployment(); 500]})),
        (
            "an array of small numbers",
            json!((0..20_000).collect::<Vec<_>>()),
        ),
        ("empty maps", Value::Array(vec![json!({}); 20_000])),
        ("empty arrays", Value::Array(vec![json!([]); 20_000])),
        ("one-key maps", Value::Array(vec![json!({"a": 0}); 20_000])),
        ("empty strings", Value::Array(vec![json!(""); 20_000])),
        (
            "a map of many keys",
            Value::Object((0..20_000).map(|i| (i.to_string(), json!(0))).collect()),
        ),
    ];
    for (shape, value) in shapes {
        let text = value.to_string();
        let kept = parsed_bytes(&text);
        let bound = inrun::wasm::parsed_bound(text.as_bytes());
        eprintln!(
            "{shape}: {} bytes of text keep {kept} bytes parsed ({:.1} per byte of text, text included); held {bound} ({:.1} per byte)",
            text.len(),
            (kept + text.len()) as f64 / text.len() as f64,
            bound as f64 / text.len() as f64
        );
        assert!(
            kept + text.len() <= bound,
            "{shape}: {} bytes held for {kept} parsed and {} of text",
            bound,
            text.len()
        );
    }
}
