//! `/metrics`, through `prometheus-client`: one [`Registry`] per node.
//!
//! A global metrics recorder is deliberately not used: one process may host many nodes (the
//! 100-agent demo), and each must report only its own numbers. So every [`AppState`] owns a
//! registry. HTTP counters live in it as a counter family; the LLM, protocol and routine figures
//! come from the store (the ledger, the usage counters, the routines' run and failure counts),
//! so they are per node and survive restarts, and a collector in the same registry encodes them
//! as they were read for the scrape ([`Exposition`]). The protocol database's `/metrics` is built
//! the same way.
//!
//! Every family keeps its `node` label first, and the HTTP `method` label is bounded: the
//! methods the routes use and a few more by name, every other one as `other`.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use agora_protocol::ProtocolHash;
use agora_store::{
    LedgerTotals, ProgrammingTotals, ProtocolUsage, Routine, RoutineStatus, ShadowTally, Store,
};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::TypedMetric;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::app::Shared;

/// Why `/metrics` could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The store failed while the figures were read.
    #[error("reading the figures: {0}")]
    Store(#[from] agora_store::StoreError),
    /// A metric could not be encoded.
    #[error("encoding the metrics failed")]
    Encode(#[from] std::fmt::Error),
}

/// Figures read at scrape time and encoded by the registry's collector.
pub(crate) trait Figures: std::fmt::Debug + Send + Sync + 'static {
    /// Writes every family of these figures.
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result;
}

/// The collector of an [`Exposition`]: encodes the figures read for the scrape in progress.
#[derive(Debug)]
struct ScrapeCollector<F> {
    figures: Mutex<Option<F>>,
}

impl<F: Figures> Collector for ScrapeCollector<F> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let figures = self.figures.lock().map_err(|_| std::fmt::Error)?;
        match figures.as_ref() {
            Some(figures) => figures.encode(&mut encoder),
            None => Ok(()),
        }
    }
}

/// A registry whose collector reports figures read for each scrape.
#[derive(Debug)]
pub(crate) struct Exposition<F> {
    registry: Registry,
    collector: Arc<ScrapeCollector<F>>,
    /// One scrape at a time, so a scrape encodes the figures it read itself.
    scrape: tokio::sync::Mutex<()>,
}

impl<F: Figures> Exposition<F> {
    /// The exposition of `registry` (holding the live metrics) and of the figures each scrape
    /// reads.
    pub(crate) fn new(mut registry: Registry) -> Self {
        let collector = Arc::new(ScrapeCollector {
            figures: Mutex::new(None),
        });
        registry.register_collector(Box::new(Arc::clone(&collector)));
        Self {
            registry,
            collector,
            scrape: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads the figures with `read`, then encodes the whole registry in the OpenMetrics text
    /// format.
    pub(crate) async fn render<E>(
        &self,
        read: impl Future<Output = Result<F, E>>,
    ) -> Result<String, MetricsError>
    where
        MetricsError: From<E>,
    {
        let _scrape = self.scrape.lock().await;
        let figures = read.await?;
        self.set(Some(figures));
        let mut text = String::new();
        let encoded = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        self.set(None);
        encoded?;
        Ok(text)
    }

    fn set(&self, figures: Option<F>) {
        if let Ok(mut slot) = self.collector.figures.lock() {
            *slot = figures;
        }
    }
}

/// The `/metrics` response: the OpenMetrics media type for a scraper that asks for it (as
/// Prometheus does), plain text for everyone else. The body is the same.
pub(crate) fn response(headers: &HeaderMap, text: String) -> Response {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

/// Writes one family: its descriptor, then one sample per label set.
pub(crate) fn family<L, M>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, M)>,
) -> std::fmt::Result
where
    L: EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, M::TYPE)?;
    for (labels, sample) in samples {
        sample.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes a family of one sample without labels.
pub(crate) fn single<M: EncodeMetric + TypedMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    sample: M,
) -> std::fmt::Result {
    sample.encode(encoder.encode_descriptor(name, help, None, M::TYPE)?)
}

/// A counter sample from a stored count (never negative; a negative one reads as 0).
pub(crate) fn count(value: i64) -> ConstCounter<u64> {
    ConstCounter::new(u64::try_from(value).unwrap_or(0))
}

/// The HTTP methods counted by name; every other one is `other`, so a client cannot grow the
/// label set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum HttpMethod {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
    Other,
}

impl From<&Method> for HttpMethod {
    fn from(method: &Method) -> Self {
        match *method {
            Method::GET => HttpMethod::Get,
            Method::HEAD => HttpMethod::Head,
            Method::POST => HttpMethod::Post,
            Method::PUT => HttpMethod::Put,
            Method::PATCH => HttpMethod::Patch,
            Method::DELETE => HttpMethod::Delete,
            Method::OPTIONS => HttpMethod::Options,
            _ => HttpMethod::Other,
        }
    }
}

impl EncodeLabelValue for HttpMethod {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            HttpMethod::Get => "GET",
            HttpMethod::Head => "HEAD",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
            HttpMethod::Options => "OPTIONS",
            HttpMethod::Other => "other",
        })
    }
}

/// The labels of one HTTP request count (after the registry's `node`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HttpLabels {
    method: HttpMethod,
    /// The matched route pattern (`/conversations/{id}`), or `unmatched`: bounded by the router.
    route: String,
    status: u16,
}

/// One node's metrics.
#[derive(Debug)]
pub struct NodeMetrics {
    node: String,
    http: Family<HttpLabels, Counter>,
    exposition: Exposition<NodeFigures>,
}

impl NodeMetrics {
    /// The registry of the node called `node`.
    pub fn new(node: &str) -> Self {
        let mut registry = Registry::default();
        let http = Family::<HttpLabels, Counter>::default();
        registry
            .sub_registry_with_label(("node".into(), node.to_string().into()))
            .register(
                "agora_http_requests",
                "HTTP requests by method, route and status",
                http.clone(),
            );
        Self {
            node: node.to_string(),
            http,
            exposition: Exposition::new(registry),
        }
    }

    /// Renders every metric of the node, reading its store now.
    pub async fn render(&self, store: &Store) -> Result<String, MetricsError> {
        self.exposition
            .render(NodeFigures::read(&self.node, store))
            .await
    }
}

/// Middleware counting every response.
pub async fn count_request(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let method = HttpMethod::from(request.method());
    let response = next.run(request).await;
    let labels = HttpLabels {
        method,
        route,
        status: response.status().as_u16(),
    };
    state.metrics.http.get_or_create(&labels).inc();
    response
}

/// A node's stored figures, read for one scrape.
#[derive(Debug)]
struct NodeFigures {
    node: String,
    ledger: Vec<LedgerTotals>,
    usage: Vec<(ProtocolHash, ProtocolUsage)>,
    programming: Vec<(ProtocolHash, ProgrammingTotals)>,
    routines: Vec<Routine>,
    shadows: Vec<ShadowTally>,
}

impl NodeFigures {
    async fn read(node: &str, store: &Store) -> Result<Self, agora_store::StoreError> {
        Ok(Self {
            node: node.to_string(),
            ledger: store.ledger().ledger_totals().await?,
            usage: store.requests().usage_all().await?,
            programming: store.programming().programming_totals().await?,
            routines: store.routines().await?,
            shadows: store.programming().shadow_tallies().await?,
        })
    }
}

impl Figures for NodeFigures {
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let node = self.node.as_str();
        let model = |t: &'_ LedgerTotals| {
            [
                ("node", t.node.clone()),
                ("category", t.category.clone()),
                ("model", t.model.clone()),
            ]
        };
        family(
            encoder,
            "agora_llm_calls",
            "LLM calls by category and model.",
            self.ledger.iter().map(|t| (model(t), count(t.calls))),
        )?;
        family(
            encoder,
            "agora_llm_tokens",
            "LLM tokens by category, model and kind.",
            self.ledger.iter().flat_map(|t| {
                [
                    ("prompt", t.prompt_tokens),
                    ("completion", t.completion_tokens),
                ]
                .map(|(kind, n)| ((model(t), [("kind", kind)]), count(n)))
            }),
        )?;
        family(
            encoder,
            "agora_llm_cached_prompt_tokens",
            "Of the prompt tokens, those the endpoint read from its prompt cache.",
            self.ledger
                .iter()
                .map(|t| (model(t), count(t.cached_prompt_tokens))),
        )?;
        family(
            encoder,
            "agora_llm_cost_usd",
            "LLM cost at the price table's rates, in US dollars.",
            self.ledger
                .iter()
                .map(|t| (model(t), ConstCounter::new(t.cost_usd))),
        )?;
        if let Some(spans) = agora_telemetry::installed_counts() {
            // The exporter is the process's: every node it serves reports the same figures.
            family(
                encoder,
                "agora_telemetry_spans",
                "Spans handed to the OTLP exporter, by fate: exported, dropped_queue_full (the \
                 queue was at its bound), dropped_export_failed (the receiver was down or slow).",
                [
                    ("exported", spans.exported),
                    ("dropped_queue_full", spans.dropped_queue_full),
                    ("dropped_export_failed", spans.dropped_export_failed),
                ]
                .map(|(fate, n)| {
                    (
                        [("node", node.to_string()), ("fate", fate.to_string())],
                        ConstCounter::new(n),
                    )
                }),
            )?;
        }
        let protocol =
            |hash: &ProtocolHash| [("node", node.to_string()), ("protocol", hash.to_hex())];
        family(
            encoder,
            "agora_protocol_requests",
            "Requests per protocol by the path that answered them.",
            self.usage.iter().flat_map(|(hash, u)| {
                [
                    ("llm", u.llm),
                    ("routine", u.routine),
                    ("fallback", u.fallback),
                    ("rejected", u.rejected),
                    ("failed", u.failed),
                ]
                .map(|(path, n)| ((protocol(hash), [("path", path)]), count(n)))
            }),
        )?;
        family(
            encoder,
            "agora_protocol_llm_tokens",
            "LLM tokens spent answering each protocol.",
            self.usage.iter().map(|(hash, u)| {
                let tokens = u.llm_prompt_tokens + u.llm_completion_tokens;
                (protocol(hash), count(tokens))
            }),
        )?;
        family(
            encoder,
            "agora_protocol_tokens_saved_estimate",
            "LLM tokens routines saved on each protocol: routine-answered requests times the \
             mean LLM tokens of an LLM-answered one.",
            self.usage
                .iter()
                .map(|(hash, u)| (protocol(hash), ConstGauge::new(u.tokens_saved_estimate()))),
        )?;
        family(
            encoder,
            "agora_programmer_attempts",
            "Routine candidates the LLM wrote for each protocol, by whether they passed their \
             examination.",
            self.programming.iter().flat_map(|(hash, t)| {
                [("passed", t.passed), ("failed", t.attempts - t.passed)]
                    .map(|(outcome, n)| ((protocol(hash), [("outcome", outcome)]), count(n)))
            }),
        )?;
        family(
            encoder,
            "agora_programmer_tokens",
            "LLM tokens spent writing routines for each protocol.",
            self.programming
                .iter()
                .map(|(hash, t)| (protocol(hash), count(t.tokens))),
        )?;
        let routine = |r: &Routine| {
            [
                ("node", node.to_string()),
                ("routine", r.name.clone()),
                ("protocol", r.protocol_hash.to_hex()),
                ("origin", r.origin.to_string()),
            ]
        };
        family(
            encoder,
            "agora_routine_runs",
            "Requests each routine ran for, answered or failed.",
            self.routines.iter().map(|r| (routine(r), count(r.runs))),
        )?;
        family(
            encoder,
            "agora_routine_failures",
            "Routine runs that failed (error, trap, timeout, out of memory, busy).",
            self.routines
                .iter()
                .map(|r| (routine(r), count(r.failures))),
        )?;
        let checked = |id: i64| self.routines.iter().find(|r| r.id == id).map(routine);
        family(
            encoder,
            "agora_routine_shadow_checks",
            "Routine answers checked again by the LLM on scratch state (shadow checks).",
            self.shadows
                .iter()
                .filter_map(|t| Some((checked(t.routine_id)?, count(t.checks)))),
        )?;
        family(
            encoder,
            "agora_routine_shadow_disagreements",
            "Shadow checks where the LLM's answer (reply or effects) differed from the routine's.",
            self.shadows
                .iter()
                .filter_map(|t| Some((checked(t.routine_id)?, count(t.disagreements)))),
        )?;
        family(
            encoder,
            "agora_routine_active",
            "1 for the routine answering its protocol, 0 for a disabled one.",
            self.routines.iter().map(|r| {
                let active = i64::from(r.status == RoutineStatus::Active);
                (routine(r), ConstGauge::new(active))
            }),
        )
    }
}
