//! Tracing at the HTTP edge: the server span every request is answered in, a child of the
//! caller's trace when the request carries W3C `traceparent` (see `agora_telemetry`). Spans are
//! named `agora.<area>.<op>` in logs and by the GenAI conventions when exported.

use agora_telemetry::conventions as conv;
use axum::extract::Request;

pub use agora_telemetry::{Telemetry, TelemetryError, TelemetrySettings};

/// Installs the process's subscriber with no exporter configured but the `OTEL_*` variables
/// (for commands without a node configuration); see [`agora_telemetry::init`].
pub fn init(default_filter: &str) -> Result<Telemetry, TelemetryError> {
    agora_telemetry::init(default_filter, &TelemetrySettings::default(), "agora")
}

/// Paths polled by scrapers: answered without a span, so that each scrape is not a trace of its
/// own in the receiver.
const UNTRACED_PATHS: [&str; 1] = ["/metrics"];

/// The span an incoming request is answered in: `otel.kind = server`, named by its method, its
/// parent the caller's span when `traceparent` names one; none for [`UNTRACED_PATHS`].
pub(crate) fn server_span(request: &Request) -> tracing::Span {
    if UNTRACED_PATHS.contains(&request.uri().path()) {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        "agora.http.server",
        { conv::OTEL_NAME } = %request.method(),
        { conv::OTEL_KIND } = "server",
        "http.request.method" = %request.method(),
        "url.path" = %request.uri().path(),
    );
    agora_telemetry::propagation::adopt_parent(&span, request.headers());
    span
}
