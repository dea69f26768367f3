//! Families registered with their help text exactly as given: controller-runtime's and
//! client-go's dashboards match the texts, and [`Registry::register`] would append a
//! period.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::registry::Registry;

/// A family written with its help text exactly as given. [`Registry::register`] appends a
/// period, which would change controller-runtime's and client-go's texts.
#[derive(Debug)]
pub(super) struct Exact<M> {
    name: &'static str,
    help: &'static str,
    metric: M,
}

impl<M: EncodeMetric + std::fmt::Debug + Send + Sync + 'static> Collector for Exact<M> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Like the registry, a family with no series is left out.
        if self.metric.is_empty() {
            return Ok(());
        }
        let family =
            encoder.encode_descriptor(self.name, self.help, None, self.metric.metric_type())?;
        self.metric.encode(family)
    }
}

/// Registers `metric` as `name` (a counter without its `_total`) with `help` as is.
pub(super) fn register_exact<M: EncodeMetric + std::fmt::Debug + Send + Sync + 'static>(
    registry: &mut Registry,
    name: &'static str,
    help: &'static str,
    metric: M,
) {
    registry.register_collector(Box::new(Exact { name, help, metric }));
}
