//! OpenTelemetry for a node: the span and attribute names of the GenAI semantic conventions
//! ([`conventions`]), W3C trace context across agents ([`propagation`]) and the OTLP exporter
//! ([`export`]). [`init`] installs the process's subscriber: compact logs on stderr, and spans
//! exported when an endpoint is configured.

pub mod conventions;
pub mod export;
pub mod propagation;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

pub use export::{ExportPlan, Exporter, SpanCounts, TelemetryError, TelemetrySettings};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

static INSTALLED: OnceLock<Exporter> = OnceLock::new();
static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// The process's telemetry; dropping it flushes and stops the exporter.
#[derive(Debug)]
#[must_use = "dropping the guard stops the exporter"]
pub struct Telemetry {
    exporter: Option<Exporter>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(exporter) = &self.exporter {
            exporter.shutdown();
        }
    }
}

/// Installs the global subscriber once (later calls install nothing): `RUST_LOG`-style
/// filtering of the stderr log (`default_filter` when `RUST_LOG` is unset), and the exporter
/// when `settings` or the `OTEL_*` variables name an endpoint. `service` names the service
/// when nothing else does.
pub fn init(
    default_filter: &str,
    settings: &TelemetrySettings,
    service: &str,
) -> Result<Telemetry, TelemetryError> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .compact()
        .with_filter(filter);
    let plan = settings.plan(service, |key| std::env::var(key).ok())?;
    let exporter = plan.as_ref().map(Exporter::start).transpose()?;
    let otel = exporter.as_ref().map(|exporter| exporter.layer());
    let installed = tracing_subscriber::registry()
        .with(log)
        .with(otel)
        .try_init()
        .is_ok();
    if installed && let Some(exporter) = &exporter {
        set_capture_content(exporter.plan().capture_content);
        let _ = INSTALLED.set(exporter.clone());
    }
    Ok(Telemetry {
        exporter: exporter.filter(|_| installed),
    })
}

/// The counts of the exporter [`init`] installed, if any.
pub fn installed_counts() -> Option<SpanCounts> {
    INSTALLED.get().map(Exporter::counts)
}

/// Whether `chat` spans carry prompts and completions.
pub fn capture_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

fn set_capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

/// Marks `span` failed: `error.type` (a class of failure, never a peer's or the OS's text) and
/// the error status.
pub fn record_error(span: &tracing::Span, error_type: &str) {
    span.record(conventions::ERROR_TYPE, error_type);
    span.record(conventions::OTEL_STATUS, "error");
}

/// The current span's trace id as 32 hex digits, if it is exported.
pub fn current_trace_id() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
