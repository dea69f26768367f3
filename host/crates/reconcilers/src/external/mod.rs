//! `reconcile.external`: named calls (HTTP, Prometheus, PostgreSQL, Redis) made in the
//! prepare step, before the reconciler; their results are `.external.<name>` in args,
//! templates and `emit.status`.
//!
//! Templates are compiled once at assembly ([`compile`](ExternalCalls::compile)); each call
//! runs with its own timeout, in Blueprint order (a call sees the results of the calls
//! before it). A failed call either fails the reconcile, naming the call, or yields its
//! declared `default`. The clients of each kind are in `http`, `postgres` and `redis`;
//! `inrun render` answers calls from [`CannedExternal`].

mod call;
mod canned;
mod compile;
mod error;
mod http;
mod postgres;
mod redis;
mod render;
mod url;

pub use canned::CannedExternal;
pub use error::{CallError, CompileError, ExternalError};

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::secrets::Secrets;
use compile::Compiled;
use inrun_blueprint::OnError;
use inrun_template::Context;

/// The shared pieces calls need: the HTTP client and where credentials come from.
#[derive(Clone)]
pub struct Clients {
    /// HTTP client for `http` and `prometheus` calls.
    pub http: reqwest::Client,
    /// Secret values.
    pub secrets: Arc<dyn Secrets>,
    /// Where calls may go, for a Blueprint resource; `None`: anywhere.
    pub egress: Option<crate::egress::Egress>,
    /// Canned results: when set, no call reaches anything and each is answered from here.
    pub canned: Option<Arc<dyn CannedExternal>>,
}

/// One reconcile block's external calls, compiled.
pub struct ExternalCalls {
    calls: Vec<Compiled>,
    clients: Clients,
    /// Info lines about failures answered with a default: a few a second at most, the
    /// rest at debug (a CR requeued every 100 ms would otherwise log at every pass).
    told: std::sync::Mutex<inrun_wasm::TokenRate>,
}

/// Info lines a second about external calls answered with their default, per block.
const TOLD_PER_SECOND: u32 = 1;
const TOLD_BURST: u32 = 10;

impl ExternalCalls {
    /// Whether there are no calls.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Runs every call in order against `base` (the CR's context); returns the results by
    /// name. Secret references without a namespace use `cr_namespace`.
    ///
    /// # Errors
    /// [`ExternalError`] for the first call that failed with `onError: fail`.
    pub async fn run(&self, base: &Context, cr_namespace: &str) -> Result<Value, ExternalError> {
        let mut results = Map::new();
        // Each call sees the results before it; each result is converted for templates
        // once, never copied again for the calls after it.
        let mut ctx = base.clone();
        for c in &self.calls {
            // One span a call, under the pass's `prepare` step.
            let span = tracing::debug_span!(
                "external.call",
                external.name = %c.name,
                external.kind = c.call.kind()
            );
            let call = tracing::Instrument::instrument(
                tokio::time::timeout(c.timeout, self.call(c, &ctx, cr_namespace)),
                span,
            );
            let outcome = match call.await {
                Ok(r) => r,
                Err(_) => Err(CallError::Timeout(c.timeout)),
            };
            let value = match outcome {
                Ok(v) => v,
                Err(source) => match self.default_instead(c, &source) {
                    Some(default) => default,
                    None => {
                        return Err(ExternalError {
                            name: c.name.clone(),
                            kind: c.call.kind(),
                            source,
                        });
                    }
                },
            };
            ctx = ctx.with_external_result(&c.name, &value);
            results.insert(c.name.clone(), value);
        }
        Ok(Value::Object(results))
    }

    /// What the call `c`, failed with `source`, yields instead of failing the pass: its
    /// `default` under `onError: default`, told a few times a second at most; `None` when
    /// the failure stands. A call that canned answers do not answer fails whatever its
    /// `onError` says.
    fn default_instead(&self, c: &Compiled, source: &CallError) -> Option<Value> {
        if matches!(source, CallError::NotCanned { .. }) || c.on_error == OnError::Fail {
            return None;
        }
        let error = inrun_contract::errors::chain(source);
        let tell = self
            .told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(std::time::Instant::now())
            .is_ok();
        if tell {
            tracing::info!(external.name = %c.name, external.kind = c.call.kind(), %error,
                "external call failed; using its default");
        } else {
            tracing::debug!(external.name = %c.name, external.kind = c.call.kind(), %error,
                "external call failed; using its default");
        }
        Some(c.default.clone())
    }
}

/// A float as a JSON number, or `null` when it is not finite.
fn number(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}
