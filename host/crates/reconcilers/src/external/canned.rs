//! Canned answers for `reconcile.external` calls (`inrun render --external-fixture`,
//! `inrun test`): templates rendered and URLs fenced as for a real call, nothing reached.

use serde_json::Value;

use super::compile::{Call, Compiled, Conn};
use super::render::{render, render_text};
use super::{CallError, ExternalCalls};
use inrun_template::Context;

/// Answers `reconcile.external` calls by name instead of reaching anything, for testing
/// Blueprints offline (`inrun render --external-fixture`, `inrun test`). The call's
/// templates are still rendered, so their errors show.
pub trait CannedExternal: Send + Sync {
    /// The canned result of the call named `name`: `None` when there is none, `Some(Err)`
    /// for a canned failure (which `onError: default` turns into the call's default).
    fn answer(&self, name: &str) -> Option<Result<Value, String>>;
    /// Where the answers come from, for error messages (e.g. a file name).
    fn source_name(&self) -> String;
}

impl ExternalCalls {
    /// A call answered from `canned`: its templates rendered and its URL fenced as for a
    /// real call, then the canned result; no credentials are read and nothing is reached.
    pub(super) fn canned(
        &self,
        canned: &dyn CannedExternal,
        c: &Compiled,
        ctx: &Context,
    ) -> Result<Value, CallError> {
        match &c.call {
            Call::Http {
                url, headers, body, ..
            } => {
                self.fence(&url.render(ctx)?)?;
                for (k, v) in headers {
                    render_text(v, ctx, &format!("headers.{k}"))?;
                }
                if let Some(b) = body {
                    render(b, ctx, "body")?;
                }
            }
            Call::Prometheus { url, query } => {
                self.fence(&render_text(url, ctx, "url")?)?;
                render_text(query, ctx, "query")?;
            }
            Call::Postgres { conn, params, .. } => {
                if let Conn::Url(t) = conn {
                    render_text(t, ctx, "url")?;
                }
                for (i, p) in params.iter().enumerate() {
                    render(p, ctx, &format!("params[{i}]"))?;
                }
            }
            Call::Redis { conn, command } => {
                if let Conn::Url(t) = conn {
                    render_text(t, ctx, "url")?;
                }
                for (i, a) in command.iter().enumerate() {
                    render_text(a, ctx, &format!("command[{i}]"))?;
                }
            }
        }
        match canned.answer(&c.name) {
            Some(answer) => answer.map_err(CallError::Canned),
            None => Err(CallError::NotCanned {
                source_name: canned.source_name(),
            }),
        }
    }
}
