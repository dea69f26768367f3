//! Test guest: what a hostile plugin answers, chosen by `args.mode`:
//!
//! - `many`: 100,000 ConfigMaps;
//! - `huge`: one ConfigMap holding 32 MiB of data;
//! - `deep`: one resource nested 100,000 arrays deep;
//! - `utf8`: a resource whose text is not UTF-8 (the component model refuses to lift it);
//! - `ambient`: one ConfigMap saying what the sandbox lets it see: its environment
//!   variables, its arguments, and what reading `/`, `.` and `/etc/hostname` gave;
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
