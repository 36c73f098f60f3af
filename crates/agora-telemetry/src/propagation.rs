//! W3C trace context (`traceparent`, `tracestate`) across agents: injected into every outgoing
//! request from the current span, extracted from every incoming one into the span that answers
//! it, so a chain of agents is one trace. A request without the header starts a new trace; a
//! malformed header is ignored (it is a peer's text, never a reason to fail a request).

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The headers that carry the current span's context to a peer: empty when no exporter is on
/// (the span then has no OpenTelemetry context).
pub fn outgoing_headers() -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    let context = tracing::Span::current().context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(&mut headers));
    }
    headers
}

/// Makes `span` a child of the trace `headers` name, if they name a valid one.
pub fn adopt_parent(span: &tracing::Span, headers: &http::HeaderMap) {
    if headers.contains_key("traceparent") {
        adopt(span, &HeaderExtractor(headers));
    }
}

/// Makes `span` a child of the context `carrier` holds, if it is valid.
fn adopt(span: &tracing::Span, carrier: &dyn opentelemetry::propagation::Extractor) {
    let parent = TraceContextPropagator::new().extract(carrier);
    if parent.span().span_context().is_valid() {
        // Fails only when the span is disabled or already started its OpenTelemetry twin.
        let _ = span.set_parent(parent);
    }
}

/// The current span's context as `traceparent` (and `tracestate`) entries, for a carrier that
/// is not an HTTP header map: MCP's `params._meta` (SEP-414). Empty when no exporter is on.
pub fn outgoing_fields() -> Vec<(String, String)> {
    let mut fields = std::collections::HashMap::new();
    let context = tracing::Span::current().context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut fields);
    }
    let mut fields: Vec<(String, String)> = fields.into_iter().collect();
    fields.sort();
    fields
}

/// Makes `span` a child of the trace that `traceparent` (and `tracestate`) name, if they are
/// well formed: for carriers other than HTTP headers (MCP's `_meta`).
pub fn adopt_parent_from_fields(
    span: &tracing::Span,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) {
    let Some(traceparent) = traceparent else {
        return;
    };
    let mut fields = std::collections::HashMap::new();
    fields.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(state) = tracestate {
        fields.insert("tracestate".to_string(), state.to_string());
    }
    adopt(span, &fields);
}
