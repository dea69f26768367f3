//! `rollout.requirePlan`: before the first CR moves, the new version is planned over every
//! CR the controller holds — each rendered by it as `inrun plan` renders it (the pass
//! offline: nothing written, a package only observed) — and the rollout starts only if it
//! fails on none that the old version serves well.

use std::sync::Arc;

use futures::StreamExt;
use inrun_pass::render::{RenderInput, render};

use super::Rollout;
use crate::cached::CachedCr;
use crate::context::Ctx;

/// CRs rendered at once: a plan shares the tenant's budgets with its passes.
const AT_ONCE: usize = 4;

/// Most failures a verdict names.
const NAMED: usize = 3;

/// Why the new version may not start: the CRs it fails on (and the old one does not),
/// the first few with the message; `None` when it fails on none.
pub(super) async fn plan(ctx: &Ctx, rollout: &Rollout, crs: &[Arc<CachedCr>]) -> Option<String> {
    let failed: Vec<(String, String)> = futures::stream::iter(crs.iter().cloned())
        .map(|cr| async move {
            let object = cr.value();
            let input = || RenderInput {
                object: object.clone(),
                observed: None,
                now: None,
            };
            let message = match render(&ctx.assembly, input(), None, false).await {
                Err(e) if !e.holds_back() => inrun_contract::errors::chain(&e),
                _ => return None,
            };
            // Failing on the old version too, it is not the change's doing.
            let old = render(&rollout.previous, input(), None, false).await;
            if old.as_ref().is_err_and(|e| !e.holds_back()) {
                return None;
            }
            Some((Ctx::key(cr.as_ref()), message))
        })
        .buffer_unordered(AT_ONCE)
        .filter_map(std::future::ready)
        .collect()
        .await;
    if failed.is_empty() {
        return None;
    }
    let named: Vec<String> = failed
        .iter()
        .take(NAMED)
        .map(|(cr, message)| format!("{cr}: {message}"))
        .collect();
    Some(format!(
        "the plan required before the first step failed on {} of {} CRs ({})",
        failed.len(),
        crs.len(),
        named.join("; ")
    ))
}
