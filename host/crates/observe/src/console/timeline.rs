//! A reconcile's timeline for the console: the spans under its `reconcile` span (the pass's
//! steps, plugin and remote calls, every API write), each with when it started, how long
//! it took and what it says, gathered by a [`Layer`] and read back by the reconcile as it
//! ends ([`current`]). The spans are the ones OpenTelemetry exports; this layer keeps only
//! their times and fields, in the reconcile's own span, so nothing outlives it.

use std::fmt::Write as _;
use std::time::Instant;

use serde::Serialize;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The root span whose descendants make the timeline.
const ROOT: &str = "reconcile";
/// Steps kept per reconcile at most (a pass writing many children keeps its first ones).
const MOST: usize = 64;

/// One span under a reconcile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// The span's name (`maintain`, `reconciler`, `plugin.call`, `k8s.write`, …).
    pub name: String,
    /// Its fields, `key=value` (a write's verb, path and answer; a plugin's name).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// How far under the reconcile (1: a step of the pass).
    pub depth: usize,
    /// When it started, in milliseconds after the reconcile did.
    pub start_ms: f64,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
}

/// What the reconcile's span keeps.
struct Timeline {
    started: Instant,
    steps: Vec<Step>,
}

/// What a span under a reconcile keeps until it closes.
struct Open {
    started: Instant,
    detail: String,
    depth: usize,
}

/// Writes fields as `key=value`, space separated.
struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        let _ = write!(self.0, "{}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        let _ = write!(self.0, "{}={value}", field.name());
    }
}

/// Gathers the timeline of every reconcile (install it with a filter that enables the
/// host's own spans: the steps under a reconcile are at `debug`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Layer;

impl<S> tracing_subscriber::Layer<S> for Layer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if attrs.metadata().name() == ROOT {
            span.extensions_mut().insert(Timeline {
                started: Instant::now(),
                steps: Vec::new(),
            });
            return;
        }
        let Some(depth) = span.scope().skip(1).position(|s| s.name() == ROOT) else {
            return;
        };
        let mut detail = String::new();
        attrs.record(&mut Fields(&mut detail));
        span.extensions_mut().insert(Open {
            started: Instant::now(),
            detail,
            depth: depth + 1,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<Open>()
        {
            values.record(&mut Fields(&mut open.detail));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let Some(root) = span.scope().find(|s| s.name() == ROOT) else {
            return;
        };
        let mut extensions = root.extensions_mut();
        let Some(timeline) = extensions.get_mut::<Timeline>() else {
            return;
        };
        if timeline.steps.len() >= MOST {
            return;
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        timeline.steps.push(Step {
            name: span.name().to_string(),
            detail: open.detail,
            depth: open.depth,
            start_ms: ms(open.started.saturating_duration_since(timeline.started)),
            duration_ms: ms(open.started.elapsed()),
        });
    }
}

/// The steps gathered so far under the `reconcile` span the caller runs in, by start;
/// empty when there is none or the layer is not installed.
pub fn current() -> Vec<Step> {
    let steps = tracing::Span::current().with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
        let span = registry.span(id)?;
        let root = span.scope().find(|s| s.name() == ROOT)?;
        let extensions = root.extensions();
        Some(extensions.get::<Timeline>()?.steps.clone())
    });
    let mut steps = steps.flatten().unwrap_or_default();
    steps.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn the_spans_under_a_reconcile_become_its_steps_with_their_fields_and_times() {
        let subscriber = tracing_subscriber::Registry::default().with(Layer);
        tracing::subscriber::with_default(subscriber, || {
            let outside = tracing::info_span!("elsewhere");
            outside.in_scope(|| {});
            let reconcile = tracing::info_span!(ROOT, object.ref = "WebApp/a/shop");
            let steps = reconcile.in_scope(|| {
                tracing::debug_span!("maintain").in_scope(|| {});
                tracing::debug_span!("apply").in_scope(|| {
                    let write = tracing::debug_span!(
                        "k8s.write",
                        http.request.method = "PATCH",
                        http.response.status_code = tracing::field::Empty
                    );
                    write.record("http.response.status_code", 201);
                    write.in_scope(|| {});
                });
                current()
            });
            let names: Vec<(&str, usize)> =
                steps.iter().map(|s| (s.name.as_str(), s.depth)).collect();
            assert_eq!(names, [("maintain", 1), ("apply", 1), ("k8s.write", 2)]);
            let write = &steps[2];
            assert!(
                write.detail.contains("http.request.method=PATCH")
                    && write.detail.contains("http.response.status_code=201"),
                "{}",
                write.detail
            );
            assert!(
                steps
                    .iter()
                    .all(|s| s.start_ms >= 0.0 && s.duration_ms >= 0.0)
            );
            // Outside a reconcile there is nothing.
            assert!(current().is_empty());
        });
    }
}
