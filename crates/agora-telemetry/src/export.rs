//! The OTLP exporter: settings from the `[telemetry]` section overridden by the standard
//! `OTEL_*` variables, a batch processor on its own thread behind a bounded queue, and counters
//! of the spans exported and dropped.
//!
//! No request waits on the exporter: a finished span goes into the queue or, when the queue is
//! full, is dropped and counted. A receiver that is down costs the failed batches (counted as
//! dropped) and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, Span, SpanData,
    SpanExporter, SpanProcessor,
};
use serde::{Deserialize, Serialize};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

/// The `[telemetry]` section: where and how spans are exported. Every key has a standard
/// `OTEL_*` variable that overrides it (`docs/tracing.md`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// The OTLP receiver's base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`); none turns export off.
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc` (`OTEL_EXPORTER_OTLP_PROTOCOL`).
    pub protocol: String,
    /// The service name (`OTEL_SERVICE_NAME`); the node's name when unset.
    pub service_name: Option<String>,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`, `key=value,...`, merged over these).
    pub resource_attributes: BTreeMap<String, String>,
    /// `always_on`, `always_off`, `traceidratio`, `parentbased_always_on` (the default),
    /// `parentbased_always_off` or `parentbased_traceidratio` (`OTEL_TRACES_SAMPLER`).
    pub sampler: String,
    /// The ratio of the `traceidratio` samplers (`OTEL_TRACES_SAMPLER_ARG`), 0.0 to 1.0.
    pub sampler_arg: Option<f64>,
    /// Put prompts and completions on `chat` spans (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`). Off by default: they hold peers' and users' text.
    pub capture_content: bool,
    /// Most finished spans waiting for export; more are dropped and counted.
    pub max_queue_size: usize,
    /// Seconds one export may take before it counts as failed.
    pub export_timeout_secs: u64,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: HTTP_PROTOBUF.into(),
            service_name: None,
            resource_attributes: BTreeMap::new(),
            sampler: "parentbased_always_on".into(),
            sampler_arg: None,
            capture_content: false,
            max_queue_size: 2048,
            export_timeout_secs: 10,
        }
    }
}

const HTTP_PROTOBUF: &str = "http/protobuf";
const GRPC: &str = "grpc";

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting or `OTEL_*` variable has a value this exporter does not take.
    #[error("telemetry setting {key}: {reason}")]
    Setting {
        /// The setting or variable.
        key: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The OTLP exporter could not be built.
    #[error("building the OTLP exporter: {0}")]
    Exporter(String),
}

fn setting(key: &'static str, reason: impl Into<String>) -> TelemetryError {
    TelemetryError::Setting {
        key,
        reason: reason.into(),
    }
}

/// The settings with the environment applied: what the exporter is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportPlan {
    /// The URL spans are sent to (for HTTP, with `/v1/traces`).
    pub traces_url: String,
    /// Over gRPC rather than HTTP/protobuf.
    pub grpc: bool,
    /// The service name.
    pub service_name: String,
    /// The resource attributes besides the service name.
    pub resource_attributes: BTreeMap<String, String>,
    /// The sampler's name and ratio.
    pub sampler: (String, f64),
    /// Whether `chat` spans carry content.
    pub capture_content: bool,
    /// The queue bound.
    pub max_queue_size: usize,
    /// The export deadline.
    pub export_timeout: Duration,
}

impl TelemetrySettings {
    /// Applies the `OTEL_*` variables `env` gives over these settings: `None` when no endpoint
    /// is set (export off). `default_service` names the service when nothing else does.
    pub fn plan(
        &self,
        default_service: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<ExportPlan>, TelemetryError> {
        let env = |key: &str| env(key).filter(|value| !value.trim().is_empty());
        let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| self.protocol.clone());
        let grpc = match protocol.trim() {
            HTTP_PROTOBUF => false,
            GRPC => true,
            other => {
                return Err(setting(
                    "protocol",
                    format!("{other:?} is not http/protobuf or grpc"),
                ));
            }
        };
        let traces_url = match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => url,
            None => {
                let Some(base) = env("OTEL_EXPORTER_OTLP_ENDPOINT").or(self.endpoint.clone())
                else {
                    return Ok(None);
                };
                let base = base.trim().trim_end_matches('/').to_string();
                if grpc {
                    base
                } else {
                    format!("{base}/v1/traces")
                }
            }
        };
        if !(traces_url.starts_with("http://") || traces_url.starts_with("https://")) {
            return Err(setting(
                "endpoint",
                format!("{traces_url:?} is not an http:// or https:// URL"),
            ));
        }
        let mut resource_attributes = self.resource_attributes.clone();
        if let Some(pairs) = env("OTEL_RESOURCE_ATTRIBUTES") {
            for pair in pairs.split(',').filter(|p| !p.trim().is_empty()) {
                let Some((key, value)) = pair.split_once('=') else {
                    return Err(setting(
                        "resource_attributes",
                        format!("{pair:?} in OTEL_RESOURCE_ATTRIBUTES is not key=value"),
                    ));
                };
                resource_attributes.insert(key.trim().to_string(), value.trim().to_string());
            }
        }
        let service_name = env("OTEL_SERVICE_NAME")
            .or_else(|| resource_attributes.remove("service.name"))
            .or(self.service_name.clone())
            .unwrap_or_else(|| default_service.to_string());
        resource_attributes.remove("service.name");
        let sampler = env("OTEL_TRACES_SAMPLER").unwrap_or_else(|| self.sampler.clone());
        let ratio = match env("OTEL_TRACES_SAMPLER_ARG") {
            Some(arg) => arg.trim().parse::<f64>().map_err(|_| {
                setting(
                    "sampler_arg",
                    format!("{arg:?} is not a number from 0 to 1"),
                )
            })?,
            None => self.sampler_arg.unwrap_or(1.0),
        };
        if !(0.0..=1.0).contains(&ratio) {
            return Err(setting(
                "sampler_arg",
                format!("{ratio} is not from 0 to 1"),
            ));
        }
        let plan = ExportPlan {
            traces_url,
            grpc,
            service_name,
            resource_attributes,
            sampler: (sampler.trim().to_string(), ratio),
            capture_content: self.capture_content,
            max_queue_size: self.max_queue_size.max(1),
            export_timeout: Duration::from_secs(self.export_timeout_secs.max(1)),
        };
        sampler_of(&plan.sampler)?;
        Ok(Some(plan))
    }
}

fn sampler_of((name, ratio): &(String, f64)) -> Result<Sampler, TelemetryError> {
    Ok(match name.as_str() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(*ratio),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(*ratio)))
        }
        other => {
            return Err(setting(
                "sampler",
                format!("{other:?} is not a sampler name"),
            ));
        }
    })
}

/// Spans handed to the exporter, by fate.
#[derive(Debug, Default)]
struct Counters {
    waiting: AtomicU64,
    exported: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_export_failed: AtomicU64,
}

/// How many spans were exported and dropped since the exporter started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpanCounts {
    /// Spans the receiver took.
    pub exported: u64,
    /// Spans dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// Spans dropped because their batch could not be delivered (the receiver down or slow).
    pub dropped_export_failed: u64,
    /// Spans waiting in the queue or being sent.
    pub waiting: u64,
}

impl Counters {
    fn snapshot(&self) -> SpanCounts {
        SpanCounts {
            exported: self.exported.load(Ordering::Relaxed),
            dropped_queue_full: self.dropped_queue_full.load(Ordering::Relaxed),
            dropped_export_failed: self.dropped_export_failed.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }
}

/// The OTLP exporter counting what it delivers.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    counters: Arc<Counters>,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let spans = batch.len() as u64;
        let counters = self.counters.clone();
        let sent = self.inner.export(batch);
        async move {
            let outcome = sent.await;
            counters.waiting.fetch_sub(spans, Ordering::Relaxed);
            match outcome {
                Ok(()) => counters.exported.fetch_add(spans, Ordering::Relaxed),
                Err(_) => counters
                    .dropped_export_failed
                    .fetch_add(spans, Ordering::Relaxed),
            };
            outcome
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The batch processor behind a queue bound this crate counts: a span past the bound is
/// dropped here, before it could block or grow anything.
#[derive(Debug)]
struct BoundedProcessor {
    inner: BatchSpanProcessor,
    counters: Arc<Counters>,
    max_waiting: u64,
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.counters.waiting.load(Ordering::Relaxed) >= self.max_waiting {
            self.counters
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.counters.waiting.fetch_add(1, Ordering::Relaxed);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A running exporter: the tracer provider, its layer for a `tracing` subscriber, and counts.
#[derive(Debug, Clone)]
pub struct Exporter {
    provider: SdkTracerProvider,
    counters: Arc<Counters>,
    plan: ExportPlan,
}

impl Exporter {
    /// Starts exporting as `plan` says. Needs a Tokio runtime for gRPC.
    pub fn start(plan: &ExportPlan) -> Result<Exporter, TelemetryError> {
        let counters = Arc::new(Counters::default());
        let exporter = if plan.grpc {
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(plan.traces_url.clone())
                .with_timeout(plan.export_timeout)
                .build()
        } else {
            // The exporter's own blocking client: the batch processor exports on its own thread.
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(plan.traces_url.clone())
                .with_timeout(plan.export_timeout)
                .build()
        }
        .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
        let exporter = CountingExporter {
            inner: exporter,
            counters: counters.clone(),
        };
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    // The bound is kept by `BoundedProcessor`; this queue never fills first.
                    .with_max_queue_size(plan.max_queue_size + 1)
                    .with_scheduled_delay(Duration::from_millis(500))
                    .build(),
            )
            .build();
        let processor = BoundedProcessor {
            inner: batch,
            counters: counters.clone(),
            max_waiting: plan.max_queue_size as u64,
        };
        let resource = Resource::builder_empty()
            .with_service_name(plan.service_name.clone())
            .with_attributes(
                plan.resource_attributes
                    .iter()
                    .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler_of(&plan.sampler)?)
            .with_resource(resource)
            .build();
        Ok(Exporter {
            provider,
            counters,
            plan: plan.clone(),
        })
    }

    /// The `tracing` layer that turns this node's spans (targets `agora*`) into exported ones.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let tracer = self.provider.tracer("agora");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(Targets::new().with_target("agora", LevelFilter::INFO))
    }

    /// The spans exported and dropped so far.
    pub fn counts(&self) -> SpanCounts {
        self.counters.snapshot()
    }

    /// What this exporter was started with.
    pub fn plan(&self) -> &ExportPlan {
        &self.plan
    }

    /// Sends what is queued, waiting at most the export deadline.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }

    /// Flushes and stops the exporter.
    pub fn shutdown(&self) {
        let _ = self.provider.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    #[test]
    fn no_endpoint_means_no_export() {
        let plan = TelemetrySettings::default().plan("node", env(&[])).unwrap();
        assert_eq!(plan, None);
    }

    #[test]
    fn the_environment_overrides_the_section() {
        let settings = TelemetrySettings {
            endpoint: Some("http://collector:4318".into()),
            service_name: Some("from-file".into()),
            ..TelemetrySettings::default()
        };
        let plan = settings
            .plan(
                "node",
                env(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:6006/"),
                    ("OTEL_SERVICE_NAME", "hotel"),
                    (
                        "OTEL_RESOURCE_ATTRIBUTES",
                        "deployment.environment=test, a=b",
                    ),
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
                ]),
            )
            .unwrap()
            .unwrap();
        assert_eq!(plan.traces_url, "http://127.0.0.1:6006/v1/traces");
        assert!(!plan.grpc);
        assert_eq!(plan.service_name, "hotel");
        assert_eq!(plan.resource_attributes["deployment.environment"], "test");
        assert_eq!(plan.resource_attributes["a"], "b");
        assert_eq!(plan.sampler, ("traceidratio".to_string(), 0.25));
    }

    #[test]
    fn grpc_takes_the_endpoint_as_it_is_and_the_node_names_the_service() {
        let plan = TelemetrySettings::default()
            .plan(
                "restaurant1",
                env(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ]),
            )
            .unwrap()
            .unwrap();
        assert_eq!(plan.traces_url, "http://127.0.0.1:4317");
        assert!(plan.grpc);
        assert_eq!(plan.service_name, "restaurant1");
    }

    #[test]
    fn bad_values_are_named() {
        let settings = TelemetrySettings {
            endpoint: Some("http://127.0.0.1:4318".into()),
            ..TelemetrySettings::default()
        };
        for (pairs, key) in [
            (
                vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
                "protocol",
            ),
            (vec![("OTEL_TRACES_SAMPLER", "sometimes")], "sampler"),
            (vec![("OTEL_TRACES_SAMPLER_ARG", "2")], "sampler_arg"),
            (
                vec![("OTEL_RESOURCE_ATTRIBUTES", "novalue")],
                "resource_attributes",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318")],
                "endpoint",
            ),
        ] {
            match settings.plan("node", env(&pairs)) {
                Err(TelemetryError::Setting { key: named, .. }) => assert_eq!(named, key),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }
}
