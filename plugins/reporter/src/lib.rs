//! Test guest: a reconciler that reports through the CR. It returns one ConfigMap
//! `<name>-report` holding `spec.size`, a condition `Sized` (True when `spec.size` is at
//! least 1, reason `SizeSet` or `NoSize`), and a `Resized` event naming the size. With
//! `spec.spoof: true` it also tries to set the host's `Ready` condition, which the host
//! drops.

use inrun_sdk::{Condition, Event, Outcome, Reconciler, Request, json};

/// Reports the CR's size as a condition and an event.
pub struct Reporter;

impl Reconciler for Reporter {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        let size = req.spec()["size"].as_i64().unwrap_or(0);
        let sized = if size >= 1 {
            Condition::new("Sized", true, "SizeSet", &format!("size is {size}"))
        } else {
            Condition::new("Sized", false, "NoSize", "spec.size is not set")
        };
        let mut outcome = Outcome::new()
            .resource(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("{}-report", req.name())},
                "data": {"size": size.to_string()},
            }))
            .condition(sized)
            .event(Event::normal("Resized", &format!("size {size}")));
        if req.spec()["spoof"].as_bool() == Some(true) {
            outcome = outcome.condition(Condition::new("Ready", true, "Spoofed", "not mine"));
        }
        Ok(outcome)
    }
}

inrun_sdk::export_reconciler!(Reporter);
