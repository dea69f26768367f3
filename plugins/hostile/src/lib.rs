//! Test guest: what a hostile plugin answers, chosen by `args.mode`:
//!
//! - `many`: 100,000 ConfigMaps;
//! - `huge`: one ConfigMap holding 32 MiB of data;
//! - `deep`: one resource nested 100,000 arrays deep;
//! - `utf8`: a resource whose text is not UTF-8 (the component model refuses to lift it);
//! - `ambient`: one ConfigMap saying what the sandbox lets it see: its environment
//!   variables, its arguments, and what reading `/`, `.` and `/etc/hostname` gave;
//! - `sized`: `args.count` ConfigMaps (named after the CR) of `args.size` bytes of data
//!   each, ordinary children a host must apply (or refuse whole);
//! - `alias`: `args.count` resources that are all one string of `args.size` bytes in the
//!   guest's memory: small there, `count` times larger if the host copied each;
//! - `burn`: `args.count` turns of a busy loop, then one ordinary ConfigMap: a fixed
//!   amount of CPU;
//! - anything else: one ordinary ConfigMap.
//!
//! It speaks the raw WIT types: the SDK's typed outcome cannot express most of these.

use inrun_sdk::bindings::reconciler2::Guest;
use inrun_sdk::bindings::types::Request;
use inrun_sdk::bindings::types2::Outcome;
use inrun_sdk::{Value, serde_json};

/// Answers as its args say.
pub struct Hostile;

fn config_map(name: &str, data: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "{name}"}}, "data": {{"v": "{data}"}}}}"#
    )
}

/// What the guest can reach without asking the host: each as JSON text.
fn ambient() -> String {
    let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    let args: Vec<String> = std::env::args().collect();
    let listed = |dir: &str| match std::fs::read_dir(dir) {
        Ok(entries) => format!("listed {} entries", entries.count()),
        Err(e) => format!("error: {e}"),
    };
    let read = match std::fs::read("/etc/hostname") {
        Ok(bytes) => format!("read {} bytes", bytes.len()),
        Err(e) => format!("error: {e}"),
    };
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ambient"},
        "data": {
            "env": serde_json::to_string(&env).unwrap_or_default(),
            "args": serde_json::to_string(&args).unwrap_or_default(),
            "root": listed("/"),
            "cwd": listed("."),
            "file": read,
        }
    })
    .to_string()
}

/// `args[key]` as a count (a number, or a number written as text), 0 when absent.
fn count(args: &Value, key: &str) -> usize {
    match &args[key] {
        Value::String(text) => text.parse().unwrap_or(0),
        other => other
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0),
    }
}

/// `count` strings sharing the one buffer of a ConfigMap of `size` bytes of data. Never
/// freed: the host refuses to copy them out, so the guest's post-return never runs.
fn aliased(count: usize, size: usize) -> Vec<String> {
    let one = std::mem::ManuallyDrop::new(config_map("alias", &"x".repeat(size)));
    (0..count)
        .map(|_| {
            // SAFETY: deliberately aliased, never written or freed (see above): the buffer
            // stays valid, and each copy only reads it.
            unsafe { String::from_raw_parts(one.as_ptr().cast_mut(), one.len(), one.capacity()) }
        })
        .collect()
}

impl Guest for Hostile {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        let args: Value = serde_json::from_str(&req.args).map_err(|e| e.to_string())?;
        let resources = match args["mode"].as_str().unwrap_or_default() {
            "many" => (0..100_000)
                .map(|i| config_map(&format!("m{i}"), "x"))
                .collect(),
            "huge" => vec![config_map("huge", &"x".repeat(32 << 20))],
            "deep" => vec!["[".repeat(100_000) + &"]".repeat(100_000)],
            "utf8" => {
                let bytes = config_map("bad", "\u{1}")
                    .replace('\u{1}', "\u{fffd}")
                    .into_bytes();
                // Replace the three bytes of U+FFFD with a lone continuation byte.
                let at = bytes
                    .windows(3)
                    .position(|w| w == [0xef, 0xbf, 0xbd])
                    .unwrap_or(0);
                let mut bad = bytes[..at].to_vec();
                bad.push(0x80);
                bad.extend_from_slice(&bytes[at + 3..]);
                // SAFETY: deliberately not UTF-8; this guest exists to hand the host a string
                // the component model must refuse to lift.
                vec![unsafe { String::from_utf8_unchecked(bad) }]
            }
            "ambient" => vec![ambient()],
            "sized" => {
                let (count, size) = (count(&args, "count"), count(&args, "size"));
                let name: Value = serde_json::from_str(&req.object).map_err(|e| e.to_string())?;
                let name = name["metadata"]["name"]
                    .as_str()
                    .unwrap_or("cr")
                    .to_string();
                let data = "x".repeat(size);
                (0..count)
                    .map(|i| config_map(&format!("{name}-{i}"), &data))
                    .collect()
            }
            "alias" => aliased(count(&args, "count"), count(&args, "size")),
            "burn" => {
                let mut turns: u64 = 0;
                for _ in 0..count(&args, "count") {
                    // `black_box` keeps the optimiser from proving the loop pointless.
                    turns = core::hint::black_box(turns.wrapping_add(1));
                }
                vec![config_map("burnt", &turns.to_string())]
            }
            _ => vec![config_map("fine", "ok")],
        };
        Ok(Outcome {
            status: None,
            resources,
            labels: vec![],
            annotations: vec![],
            requeue: false,
            requeue_after_ms: None,
            cleanup: None,
            conditions: vec![],
            events: vec![],
        })
    }
}

inrun_sdk::export_raw_reconciler!(Hostile);
