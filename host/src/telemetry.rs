//! Logging setup: a filter, text or JSON lines, and wasmtime/cranelift kept quiet; and,
//! when asked, OpenTelemetry traces of the host's own spans (one trace per reconcile)
//! exported by OTLP over HTTP (protobuf) to a collector.

use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{LevelFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

/// Where and how much to trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Traces {
    /// The collector's traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// The share of reconciles traced, 0 to 1 (a trace started elsewhere keeps its own
    /// decision).
    pub ratio: f64,
    /// `service.name` of the spans.
    pub service: String,
}

impl Traces {
    /// `--otlp-endpoint` (a base URL, `/v1/traces` added) or the standard variables:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL), `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (a base), `OTEL_TRACES_SAMPLER_ARG` (the ratio, else `ratio`), `OTEL_SERVICE_NAME`
    /// (else `inrun`), read through `env`. `None`: no endpoint, traces off.
    ///
    /// # Errors
    /// An endpoint that is not an `http` or `https` URL, or a ratio that is not a number
    /// from 0 to 1, named with where it came from: the host refuses to start rather than
    /// trace nothing, or everything, without a word.
    pub fn resolve(
        flag: Option<&str>,
        ratio: Option<f64>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Traces>, String> {
        let base = |url: &str| format!("{}/v1/traces", url.trim_end_matches('/'));
        let (endpoint, from) = match flag {
            Some(url) => (base(url), "--otlp-endpoint"),
            None => match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").filter(|u| !u.is_empty()) {
                Some(url) => (url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                None => match env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|u| !u.is_empty()) {
                    Some(url) => (base(&url), "OTEL_EXPORTER_OTLP_ENDPOINT"),
                    None => return Ok(None),
                },
            },
        };
        match reqwest::Url::parse(&endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            _ => {
                return Err(format!(
                    "{from}: `{endpoint}` is not an http or https URL of an OTLP collector"
                ));
            }
        }
        let (ratio, from) = match ratio {
            Some(r) => (r, "--otlp-sample-ratio"),
            None => match env("OTEL_TRACES_SAMPLER_ARG") {
                Some(text) => (
                    text.trim().parse().map_err(|_| {
                        format!("OTEL_TRACES_SAMPLER_ARG: `{text}` is not a number from 0 to 1")
                    })?,
                    "OTEL_TRACES_SAMPLER_ARG",
                ),
                None => (1.0, ""),
            },
        };
        if !(0.0..=1.0).contains(&ratio) {
            return Err(format!("{from}: {ratio} is not a share from 0 to 1"));
        }
        Ok(Some(Traces {
            endpoint,
            ratio,
            service: env("OTEL_SERVICE_NAME").unwrap_or_else(|| "inrun".into()),
        }))
    }
}

/// The trace provider while traces are exported; flushes what is left when dropped.
#[derive(Debug)]
pub struct Guard(Option<SdkTracerProvider>);

impl Guard {
    /// What reads a reconcile span's trace id while traces are exported (for
    /// [`crate::runtime::Shared::with_trace_ids`]); `None` when they are not.
    pub fn trace_ids(&self) -> Option<crate::runtime::TraceIds> {
        self.0
            .as_ref()
            .map(|_| trace_id as crate::runtime::TraceIds)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: flushing the traces: {e}");
        }
    }
}

/// Installs the global subscriber. `filter` uses `RUST_LOG` syntax; wasmtime and
/// cranelift are held at `warn` unless the filter names them. With `traces`, the host's
/// own spans (the reconcile, and under it at `debug` its steps, plugin calls and API
/// writes) and its events at `info` and above also go to the collector, whatever the log
/// filter, and each reconcile's log lines carry its `trace_id`. Whatever is asked, the
/// host's spans feed each reconcile's timeline on the console
/// ([`crate::console::timeline`]).
///
/// # Errors
/// A filter that is not valid, with why: the command refuses to run rather than log less
/// than it was asked to.
pub fn init(filter: &str, json: bool, traces: Option<&Traces>) -> Result<Guard, BadFilter> {
    let mut spec = filter.to_string();
    for noisy in ["cranelift", "wasmtime"] {
        if !spec.contains(noisy) {
            spec.push_str(&format!(",{noisy}=warn"));
        }
    }
    let filter = EnvFilter::try_new(&spec).map_err(|source| BadFilter {
        filter: filter.to_string(),
        source,
    })?;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = if json {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    let provider = traces.map(provider);
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("inrun"))
            .with_filter(LevelFilter::DEBUG)
            .with_filter(filter_fn(|meta| {
                // Every span of the host's own (the steps, plugin calls and API writes
                // under a reconcile are at debug, so they cost nothing untraced), and the
                // events that say something went wrong or happened.
                meta.target().starts_with("inrun")
                    && (meta.is_span() || *meta.level() <= tracing::Level::INFO)
            }))
    });
    // Each reconcile's steps for the console's timeline: the host's own spans only.
    let timeline = crate::console::timeline::Layer.with_filter(filter_fn(|meta| {
        meta.is_span() && meta.target().starts_with("inrun")
    }));
    let _ = Registry::default()
        .with(fmt.with_filter(filter))
        .with(timeline)
        .with(otel)
        .try_init();
    Ok(Guard(provider))
}

/// The trace id of `span`, as the collector shows it; `None` when it is not sampled.
fn trace_id(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    (span_context.is_valid() && span_context.is_sampled())
        .then(|| span_context.trace_id().to_string())
}

fn provider(traces: &Traces) -> SdkTracerProvider {
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(traces.service.clone())
        .build();
    SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            traces.ratio,
        ))))
        .with_resource(resource)
        .with_batch_exporter(Otlp::new(traces.endpoint.clone()))
        .build()
}

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// OTLP over HTTP with protobuf bodies (`application/x-protobuf`), sent from the batch
/// processor's own thread on a runtime of its own.
struct Otlp {
    endpoint: String,
    client: reqwest::Client,
    runtime: Option<tokio::runtime::Runtime>,
    resource: ResourceAttributesWithSchema,
}

impl std::fmt::Debug for Otlp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Otlp")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Otlp {
    fn new(endpoint: String) -> Self {
        Otlp {
            endpoint,
            client: reqwest::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .build()
                .unwrap_or_default(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok(),
            resource: ResourceAttributesWithSchema::default(),
        }
    }
}

impl SpanExporter for Otlp {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        };
        let body = prost::Message::encode_to_vec(&request);
        // Made and sent inside the runtime: the request's timer needs it.
        let sent = self.runtime.as_ref().map(|runtime| {
            runtime.block_on(async {
                self.client
                    .post(&self.endpoint)
                    .header("content-type", "application/x-protobuf")
                    .body(body)
                    .send()
                    .await
            })
        });
        let result = match sent {
            None => Err(OTelSdkError::InternalFailure(
                "no runtime to export traces on".into(),
            )),
            Some(Err(e)) => Err(OTelSdkError::InternalFailure(format!(
                "sending traces to {}: {e}",
                self.endpoint
            ))),
            Some(Ok(answer)) if !answer.status().is_success() => {
                Err(OTelSdkError::InternalFailure(format!(
                    "{} answered {} to the traces",
                    self.endpoint,
                    answer.status()
                )))
            }
            Some(Ok(_)) => Ok(()),
        };
        std::future::ready(result)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.resource = resource.into();
    }
}

/// A log filter (`--log`, `INRUN_LOG` or `RUST_LOG`) that is not valid.
#[derive(Debug, thiserror::Error)]
#[error("log filter {filter:?} (--log, INRUN_LOG or RUST_LOG) is not valid")]
pub struct BadFilter {
    filter: String,
    #[source]
    source: tracing_subscriber::filter::ParseError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_off_without_an_endpoint_and_the_standard_variables_are_read() {
        let none = |_: &str| None;
        assert_eq!(Traces::resolve(None, None, none), Ok(None));
        let flag = Traces::resolve(Some("http://127.0.0.1:4318/"), Some(0.25), none)
            .expect("valid")
            .expect("on");
        assert_eq!(flag.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!((flag.ratio, flag.service.as_str()), (0.25, "inrun"));
        let env = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://collector:4318".to_string()),
            "OTEL_TRACES_SAMPLER_ARG" => Some("0.1".to_string()),
            "OTEL_SERVICE_NAME" => Some("inrun-prod".to_string()),
            _ => None,
        };
        let from_env = Traces::resolve(None, None, env)
            .expect("valid")
            .expect("on");
        assert_eq!(from_env.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(
            (from_env.ratio, from_env.service.as_str()),
            (0.1, "inrun-prod")
        );
        let full = |k: &str| {
            (k == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").then(|| "http://c/custom".to_string())
        };
        let whole = Traces::resolve(None, None, full)
            .expect("valid")
            .expect("on");
        assert_eq!(whole.endpoint, "http://c/custom");
    }

    #[test]
    fn a_bad_endpoint_or_ratio_is_refused_naming_where_it_came_from() {
        let none = |_: &str| None;
        let e = Traces::resolve(Some("collector:4318"), None, none).expect_err("no scheme");
        assert!(e.starts_with("--otlp-endpoint: `collector:4318"), "{e}");
        let e = Traces::resolve(Some("ftp://c"), None, none).expect_err("not http");
        assert!(e.contains("not an http or https URL"), "{e}");
        let e = Traces::resolve(Some("http://c"), Some(7.0), none).expect_err("ratio");
        assert!(e.starts_with("--otlp-sample-ratio: 7"), "{e}");
        let bad_ratio = |k: &str| (k == "OTEL_TRACES_SAMPLER_ARG").then(|| "half".to_string());
        let e = Traces::resolve(Some("http://c"), None, bad_ratio).expect_err("ratio");
        assert!(e.starts_with("OTEL_TRACES_SAMPLER_ARG: `half`"), "{e}");
    }
}
