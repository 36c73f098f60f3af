//! `/metrics` in the Prometheus text format.
//!
//! The LLM, protocol and routine figures come from the store (the ledger, the
//! usage counters, the routines' run and failure counts), so they are per node
//! and survive restarts; HTTP counters are kept in memory. A global
//! metrics recorder is deliberately not used: one process may host many
//! nodes (the 100-agent demo), and each must report only its own numbers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;

/// HTTP request counters by route and status.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    counts: Mutex<BTreeMap<(String, String, u16), u64>>,
}

/// Middleware counting every response.
pub async fn count(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = request.method().to_string();
    let response = next.run(request).await;
    if let Ok(mut counts) = state.metrics.counts.lock() {
        *counts
            .entry((method, route, response.status().as_u16()))
            .or_default() += 1;
    }
    response
}

/// Renders every metric.
pub async fn render(state: &AppState) -> Result<String, agora_store::StoreError> {
    let store = state.node.store();
    let node = &state.node.config().name;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP agora_http_requests_total HTTP requests by method, route and status."
    );
    let _ = writeln!(out, "# TYPE agora_http_requests_total counter");
    if let Ok(counts) = state.metrics.counts.lock() {
        for ((method, route, status), n) in counts.iter() {
            let _ = writeln!(
                out,
                "agora_http_requests_total{{node=\"{}\",method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}",
                esc(node),
                esc(method),
                esc(route)
            );
        }
    }
    let ledger = store.ledger_totals().await?;
    let _ = writeln!(
        out,
        "# HELP agora_llm_calls_total LLM calls by category and model."
    );
    let _ = writeln!(out, "# TYPE agora_llm_calls_total counter");
    for t in &ledger {
        let _ = writeln!(
            out,
            "agora_llm_calls_total{{node=\"{}\",category=\"{}\",model=\"{}\"}} {}",
            esc(&t.node),
            esc(&t.category),
            esc(&t.model),
            t.calls
        );
    }
    let _ = writeln!(
        out,
        "# HELP agora_llm_tokens_total LLM tokens by category, model and kind."
    );
    let _ = writeln!(out, "# TYPE agora_llm_tokens_total counter");
    for t in &ledger {
        for (kind, n) in [
            ("prompt", t.prompt_tokens),
            ("completion", t.completion_tokens),
        ] {
            let _ = writeln!(
                out,
                "agora_llm_tokens_total{{node=\"{}\",category=\"{}\",model=\"{}\",kind=\"{kind}\"}} {n}",
                esc(&t.node),
                esc(&t.category),
                esc(&t.model)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP agora_llm_cost_usd_total LLM cost at the price table's rates, in US dollars."
    );
    let _ = writeln!(out, "# TYPE agora_llm_cost_usd_total counter");
    for t in &ledger {
        let _ = writeln!(
            out,
            "agora_llm_cost_usd_total{{node=\"{}\",category=\"{}\",model=\"{}\"}} {}",
            esc(&t.node),
            esc(&t.category),
            esc(&t.model),
            t.cost_usd
        );
    }
    let usage = store.usage_all().await?;
    let _ = writeln!(
        out,
        "# HELP agora_protocol_requests_total Requests per protocol by the path that answered them."
    );
    let _ = writeln!(out, "# TYPE agora_protocol_requests_total counter");
    for (hash, u) in &usage {
        for (path, n) in [
            ("llm", u.llm),
            ("routine", u.routine),
            ("fallback", u.fallback),
            ("rejected", u.rejected),
            ("failed", u.failed),
        ] {
            let _ = writeln!(
                out,
                "agora_protocol_requests_total{{node=\"{}\",protocol=\"{}\",path=\"{path}\"}} {n}",
                esc(node),
                hash.to_hex()
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP agora_protocol_llm_tokens_total LLM tokens spent answering each protocol."
    );
    let _ = writeln!(out, "# TYPE agora_protocol_llm_tokens_total counter");
    for (hash, u) in &usage {
        let _ = writeln!(
            out,
            "agora_protocol_llm_tokens_total{{node=\"{}\",protocol=\"{}\"}} {}",
            esc(node),
            hash.to_hex(),
            u.llm_prompt_tokens + u.llm_completion_tokens
        );
    }
    let _ = writeln!(
        out,
        "# HELP agora_protocol_tokens_saved_estimate LLM tokens routines saved on each protocol: \
         routine-answered requests times the mean LLM tokens of an LLM-answered one."
    );
    let _ = writeln!(out, "# TYPE agora_protocol_tokens_saved_estimate gauge");
    for (hash, u) in &usage {
        let _ = writeln!(
            out,
            "agora_protocol_tokens_saved_estimate{{node=\"{}\",protocol=\"{}\"}} {}",
            esc(node),
            hash.to_hex(),
            u.tokens_saved_estimate()
        );
    }
    let programming = store.programming_totals().await?;
    let _ = writeln!(
        out,
        "# HELP agora_programmer_attempts_total Routine candidates the LLM wrote for each protocol, \
         by whether they passed their examination."
    );
    let _ = writeln!(out, "# TYPE agora_programmer_attempts_total counter");
    for (hash, t) in &programming {
        for (outcome, n) in [("passed", t.passed), ("failed", t.attempts - t.passed)] {
            let _ = writeln!(
                out,
                "agora_programmer_attempts_total{{node=\"{}\",protocol=\"{}\",outcome=\"{outcome}\"}} {n}",
                esc(node),
                hash.to_hex()
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP agora_programmer_tokens_total LLM tokens spent writing routines for each protocol."
    );
    let _ = writeln!(out, "# TYPE agora_programmer_tokens_total counter");
    for (hash, t) in &programming {
        let _ = writeln!(
            out,
            "agora_programmer_tokens_total{{node=\"{}\",protocol=\"{}\"}} {}",
            esc(node),
            hash.to_hex(),
            t.tokens
        );
    }
    let routines = store.routines().await?;
    for (name, help, value) in [
        (
            "agora_routine_runs_total",
            "Requests each routine ran for, answered or failed.",
            (|r: &agora_store::Routine| r.runs) as fn(&agora_store::Routine) -> i64,
        ),
        (
            "agora_routine_failures_total",
            "Routine runs that failed (error, trap, timeout, out of memory, busy).",
            |r| r.failures,
        ),
        (
            "agora_routine_active",
            "1 for the routine answering its protocol, 0 for a disabled one.",
            |r| i64::from(r.status == agora_store::RoutineStatus::Active),
        ),
    ] {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for routine in &routines {
            let _ = writeln!(
                out,
                "{name}{{node=\"{}\",routine=\"{}\",protocol=\"{}\",origin=\"{}\"}} {}",
                esc(node),
                esc(&routine.name),
                routine.protocol_hash.to_hex(),
                routine.origin,
                value(routine)
            );
        }
    }
    Ok(out)
}

/// Escapes a Prometheus label value.
pub(crate) fn esc(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
