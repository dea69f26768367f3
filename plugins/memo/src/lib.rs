//! Test guest: a reconciler with a memory. It keeps, in a global, every CR key it has
//! reconciled in this instance and says so in the status: `calls` (this instance's calls,
//! this one included) and `seen` (the keys before this one). A fresh instance per call
//! always says `calls: 1, seen: []`; a reused one shows what it kept.
//!
//! `spec.fail: true` returns an error, `spec.trap: true` panics, `spec.spin: true` loops
//! until the host stops it, all after remembering the key; `spec.configMaps: n` declares
//! n ConfigMaps (more than the call's limit is a bad outcome).

use std::sync::Mutex;

use inrun_sdk::{Outcome, Reconciler, Request, json};

static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remembers every CR it reconciles.
pub struct Memo;

impl Reconciler for Memo {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        let before = seen.clone();
        seen.push(req.key.clone());
        let spec = &req.object["spec"];
        if spec["trap"] == json!(true) {
            panic!("memo trapped on purpose for {}", req.key);
        }
        if spec["spin"] == json!(true) {
            drop(seen);
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        if spec["fail"] == json!(true) {
            return Err(format!("memo failed on purpose for {}", req.key));
        }
        let mut out = Outcome::new()
            .status("calls", seen.len())
            .status("seen", before);
        for i in 0..spec["configMaps"].as_u64().unwrap_or(0) {
            out = out.resource(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("memo-{i}")}}));
        }
        Ok(out)
    }
}

inrun_sdk::export_reconciler!(Memo);
