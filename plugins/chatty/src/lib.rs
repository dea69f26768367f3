//! Test guest: a reconciler that writes to stdout, stderr and the host log at every
//! level, then returns an ordinary ConfigMap.

use inrun_sdk::{Outcome, Reconciler, Request, json, log};

/// Talks a lot, then behaves.
pub struct Chatty;

impl Reconciler for Chatty {
    fn reconcile(req: Request) -> Result<Outcome, String> {
        println!("chatty: stdout while reconciling {}", req.key);
        eprintln!("chatty: stderr while reconciling {}", req.key);
        log::trace!("chatty: trace for {}", req.key);
        log::debug!("chatty: debug for {}", req.key);
        log::info!("chatty: info for {}", req.key);
        log::warn!("chatty: warn for {}", req.key);
        log::error!("chatty: error for {}", req.key);
        Ok(Outcome::new()
            .resource(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": req.name(), "namespace": req.namespace()},
                "data": {"said": "hello"},
            }))
            .status("chatted", true))
    }
}

inrun_sdk::export_reconciler!(Chatty);
