//! What each dashboard page shows, read from the store and the node: one function per page,
//! each returning the JSON its template renders. No HTML here, no HTTP.
//!
//! Figures the node cannot know exactly are named as estimates on the page: the tokens and
//! dollars the routines saved are the routine-answered requests times the mean LLM tokens (or
//! cost) of a request of the same protocol the LLM answered.

use std::collections::BTreeMap;

use agora_node::Node;
use agora_protocol::ProtocolHash;
use agora_store::{
    AttemptOutcome, ProtocolUsage, RequestPath, RoutineStatus, StoreError, StoredDocument,
};
use serde_json::{Value, json};

/// How many ledger rows, conversations and attempts a page lists at most.
pub const LIST_LIMIT: i64 = 200;
/// Longest text of one conversation turn or report shown before it is cut.
const TEXT_LIMIT: usize = 4000;

/// The overview's chart windows, by their query value.
const WINDOWS: &[(&str, i64)] = &[
    ("15m", 15 * 60_000),
    ("1h", 60 * 60_000),
    ("24h", 24 * 60 * 60_000),
    ("7d", 7 * 24 * 60 * 60_000),
];
/// Buckets per chart.
const BUCKETS: i64 = 60;

/// The overview: totals, the savings estimate, and the series behind its charts.
pub async fn overview(node: &Node, window: Option<&str>, now_ms: i64) -> Result<Value, StoreError> {
    let store = node.store();
    let usage = store.requests().usage_all().await?;
    let ledger = store.ledger().ledger_totals().await?;
    // Totals by path from the request log (natural-language requests have no protocol, so the
    // per-protocol counters miss them); savings from the per-protocol counters.
    let mut totals = ProtocolUsage::default();
    for bucket in store.requests().request_series(0, i64::MAX).await? {
        totals.requests += bucket.requests;
        totals.llm_cost_usd += bucket.cost_usd;
        *match bucket.path {
            RequestPath::Llm => &mut totals.llm,
            RequestPath::Routine => &mut totals.routine,
            RequestPath::Fallback => &mut totals.fallback,
            RequestPath::Rejected => &mut totals.rejected,
            RequestPath::Failed => &mut totals.failed,
        } += bucket.requests;
    }
    let (mut saved_tokens, mut saved_usd) = (0i64, 0f64);
    for (_, u) in &usage {
        saved_tokens += u.tokens_saved_estimate();
        saved_usd += usd_saved_estimate(u);
    }
    let llm_cost: f64 = ledger.iter().map(|t| t.cost_usd).sum();
    let llm_calls: i64 = ledger.iter().map(|t| t.calls).sum();

    let (window, span) = WINDOWS
        .iter()
        .find(|(name, _)| Some(*name) == window)
        .copied()
        .unwrap_or(WINDOWS[1]);
    let bucket_ms = (span / BUCKETS).max(1000);
    let start = (now_ms - span) / bucket_ms * bucket_ms;
    let buckets = store.requests().request_series(start, bucket_ms).await?;
    let slots = ((now_ms - start) / bucket_ms + 1).clamp(1, 2 * BUCKETS) as usize;
    let mut series = json!({
        "t": (0..slots).map(|i| (start + i as i64 * bucket_ms) / 1000).collect::<Vec<_>>(),
        "llm": vec![0; slots], "routine": vec![0; slots], "fallback": vec![0; slots],
        "other": vec![0; slots], "costUsd": vec![0.0; slots], "routineShare": vec![Value::Null; slots],
    });
    for bucket in &buckets {
        let Ok(slot) = usize::try_from((bucket.start_ms - start) / bucket_ms) else {
            continue;
        };
        if slot >= slots {
            continue;
        }
        let key = match bucket.path {
            RequestPath::Llm => "llm",
            RequestPath::Routine => "routine",
            RequestPath::Fallback => "fallback",
            RequestPath::Rejected | RequestPath::Failed => "other",
        };
        add(&mut series[key][slot], bucket.requests as f64);
        add(&mut series["costUsd"][slot], bucket.cost_usd);
    }
    for slot in 0..slots {
        let count = |key: &str| series[key][slot].as_f64().unwrap_or(0.0);
        let answered = count("llm") + count("routine") + count("fallback");
        if answered > 0.0 {
            series["routineShare"][slot] = json!(100.0 * count("routine") / answered);
        }
    }
    let answered = totals.llm + totals.routine + totals.fallback;
    Ok(json!({
        "totals": {
            "requests": totals.requests, "llm": totals.llm, "routine": totals.routine,
            "fallback": totals.fallback, "rejected": totals.rejected, "failed": totals.failed,
            "llmCalls": llm_calls, "llmCostUsd": llm_cost,
            "requestLlmCostUsd": totals.llm_cost_usd,
            "routineSharePct": (answered > 0).then(|| 100.0 * totals.routine as f64 / answered as f64),
            "tokensSavedEstimate": saved_tokens, "usdSavedEstimate": saved_usd,
        },
        "ledger": ledger.iter().map(|t| json!({
            "node": t.node, "category": t.category, "model": t.model, "calls": t.calls,
            "tokens": t.prompt_tokens + t.completion_tokens,
            "cachedPromptTokens": t.cached_prompt_tokens, "costUsd": t.cost_usd,
        })).collect::<Vec<_>>(),
        "window": window,
        "windows": WINDOWS.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        "bucketSeconds": bucket_ms / 1000,
        "series": series,
    }))
}

fn add(slot: &mut Value, by: f64) {
    *slot = json!(slot.as_f64().unwrap_or(0.0) + by);
}

/// Dollars the routines saved on one protocol, estimated as in the module docs.
fn usd_saved_estimate(usage: &ProtocolUsage) -> f64 {
    let answered_by_llm = usage.llm + usage.fallback;
    if answered_by_llm == 0 {
        return 0.0;
    }
    usage.routine as f64 * usage.llm_cost_usd / answered_by_llm as f64
}

/// The protocols page: every stored PD with its decision, counts by path and active routine.
pub async fn protocols(node: &Node) -> Result<Value, StoreError> {
    let store = node.store();
    let usage: BTreeMap<ProtocolHash, ProtocolUsage> =
        store.requests().usage_all().await?.into_iter().collect();
    let routines = store.routines().await?;
    let mut rows = Vec::new();
    for stored in store.documents().await? {
        let hash = stored.document.hash();
        let decision = store.suitability(&hash).await?;
        let u = usage.get(&hash).cloned().unwrap_or_default();
        let protocol_routines: Vec<Value> = routines
            .iter()
            .filter(|r| r.protocol_hash == hash)
            .map(|r| json!({"id": r.id, "name": r.name, "status": r.status.as_str(), "origin": r.origin.as_str()}))
            .collect();
        rows.push(json!({
            "name": name_of(&stored),
            "hash": hash.to_hex(),
            "sources": stored.sources,
            "decision": decision.map(|d| json!({
                "allowed": d.allowed, "origin": d.origin.as_str(), "reason": d.reason,
            })),
            "requests": u.requests, "llm": u.llm, "routine": u.routine, "fallback": u.fallback,
            "rejected": u.rejected, "failed": u.failed, "llmCostUsd": u.llm_cost_usd,
            "tokensSavedEstimate": u.tokens_saved_estimate(),
            "routines": protocol_routines,
            "lastUsed": (u.last_used_ms > 0).then_some(u.last_used_ms),
        }));
    }
    Ok(json!({"protocols": rows}))
}

fn name_of(stored: &StoredDocument) -> String {
    stored
        .document
        .metadata()
        .name
        .clone()
        .unwrap_or_else(|| format!("(unnamed {})", &stored.document.hash().to_hex()[..8]))
}

async fn protocol_names(node: &Node) -> Result<BTreeMap<ProtocolHash, String>, StoreError> {
    Ok(node
        .store()
        .documents()
        .await?
        .iter()
        .map(|stored| (stored.document.hash(), name_of(stored)))
        .collect())
}

/// Disagreeing shadow checks shown on a routine's page.
const SHADOW_EXAMPLES: i64 = 10;

/// The routines page: every routine with its counters and its shadow checks.
pub async fn routines(node: &Node) -> Result<Value, StoreError> {
    let names = protocol_names(node).await?;
    let tallies = node.store().programming().shadow_tallies().await?;
    let rows: Vec<Value> = node
        .store()
        .routines()
        .await?
        .iter()
        .map(|r| {
            let tally = tallies.iter().find(|t| t.routine_id == r.id);
            json!({
                "shadowChecks": tally.map(|t| t.checks).unwrap_or(0),
                "shadowDisagreements": tally.map(|t| t.disagreements).unwrap_or(0),
                "shadowUnchecked": node.shadow_unchecked(r.id),
                "id": r.id, "name": r.name, "protocolHash": r.protocol_hash.to_hex(),
                "protocol": names.get(&r.protocol_hash),
                "origin": r.origin.as_str(), "status": r.status.as_str(),
                "active": r.status == RoutineStatus::Active,
                "runs": r.runs, "failures": r.failures, "lastError": r.last_error,
                "lastFailureAt": r.last_failure_at_ms, "updatedAt": r.updated_at_ms,
            })
        })
        .collect();
    Ok(json!({"routines": rows}))
}

/// One routine: its manifest, its source, the latest example body to test it on, and every
/// attempt of the programmer jobs for its protocol (for an LLM-written one, the job that wrote
/// it among them). `None` if there is no such routine.
pub async fn routine(node: &Node, id: i64) -> Result<Option<Value>, StoreError> {
    let store = node.store();
    let Some(routine) = store.routine(id).await? else {
        return Ok(None);
    };
    let code = store.routine_code(id).await?;
    let protocol = store
        .document(&routine.protocol_hash)
        .await?
        .map(|stored| name_of(&stored));
    let attempts: Vec<Value> = store
        .programming()
        .attempts(Some(&routine.protocol_hash))
        .await?
        .into_iter()
        .rev()
        .take(LIST_LIMIT as usize)
        .map(|a| {
            json!({
                "job": a.job, "attempt": a.attempt, "reason": a.reason.as_str(),
                "outcome": a.outcome.as_str(), "passed": a.outcome == AttemptOutcome::Passed,
                "report": cut(&a.report), "source": a.source,
                "tokens": a.prompt_tokens + a.completion_tokens, "costUsd": a.cost_usd,
                "routineId": a.routine_id, "wroteThis": a.routine_id == Some(routine.id),
                "createdAt": a.created_at_ms,
            })
        })
        .collect();
    // Shown for a routine waiting for review, and once the protocol's routines were reviewed
    // (the review runs the routine on the examples: only then).
    let reviews = store.programming().reviews(Some(&routine.protocol_hash));
    let reviewed = routine.status == RoutineStatus::Pending || !reviews.await?.is_empty();
    let review = match reviewed {
        true => Some(crate::admin::routines::review_of(node, &routine).await?),
        false => None,
    };
    let tally = store.programming().shadow_tally(routine.id).await?;
    let tally = tally.as_ref();
    let disagreements: Vec<Value> = store
        .programming()
        .shadow_checks(routine.id, true, SHADOW_EXAMPLES)
        .await?
        .into_iter()
        .map(|c| {
            json!({
                "queryId": c.query_id, "body": c.body, "routineReply": c.routine_reply,
                "llmReply": c.llm_reply, "difference": c.difference, "at": c.created_at_ms,
            })
        })
        .collect();
    let shadow = json!({
        "share": node.config().routines.shadow.share,
        "checks": tally.map(|t| t.checks).unwrap_or(0),
        "disagreements": tally.map(|t| t.disagreements).unwrap_or(0),
        "costUsd": tally.map(|t| t.cost_usd).unwrap_or(0.0),
        "unchecked": node.shadow_unchecked(routine.id),
        "latest": disagreements,
    });
    let example = store
        .programming()
        .examples(&routine.protocol_hash, 1)
        .await?
        .pop()
        .map(|e| e.body);
    Ok(Some(json!({
        "routine": {
            "id": routine.id, "name": routine.name, "protocolHash": routine.protocol_hash.to_hex(),
            "protocol": protocol,
            "language": routine.language.as_str(), "tools": routine.tools,
            "timeoutMs": routine.timeout_ms, "memoryMb": routine.memory_bytes >> 20,
            "origin": routine.origin.as_str(), "status": routine.status.as_str(),
            "active": routine.status == RoutineStatus::Active,
            "runs": routine.runs, "failures": routine.failures, "lastError": routine.last_error,
            "createdAt": routine.created_at_ms, "updatedAt": routine.updated_at_ms,
        },
        "source": code.and_then(|c| c.source),
        "exampleBody": example.unwrap_or_else(|| "{}".into()),
        "attempts": attempts,
        "review": review,
        "shadow": shadow,
    })))
}

/// The ledger page: the newest LLM calls, filtered by category and protocol.
pub async fn ledger(
    node: &Node,
    category: Option<&str>,
    protocol: Option<&str>,
) -> Result<Value, StoreError> {
    let store = node.store();
    let names = protocol_names(node).await?;
    let protocol_hash = protocol.and_then(|p| ProtocolHash::parse(p).ok());
    let calls = store
        .ledger()
        .recent_llm_calls(category, protocol_hash.as_ref(), LIST_LIMIT)
        .await?;
    let mut categories: Vec<String> = store
        .ledger()
        .ledger_totals()
        .await?
        .into_iter()
        .map(|t| t.category)
        .collect();
    categories.sort();
    categories.dedup();
    let rows: Vec<Value> = calls
        .iter()
        .map(|(id, c)| {
            json!({
                "id": id, "at": c.created_at_ms, "node": c.node, "category": c.category,
                "model": c.model, "protocolHash": c.protocol_hash.map(|h| h.to_hex()),
                "protocol": c.protocol_hash.and_then(|h| names.get(&h)),
                "promptTokens": c.prompt_tokens, "cachedPromptTokens": c.cached_prompt_tokens,
                "completionTokens": c.completion_tokens,
                "latencyMs": c.latency_ms, "costUsd": c.cost_usd, "queryId": c.query_id,
            })
        })
        .collect();
    let shown_cost: f64 = calls.iter().map(|(_, c)| c.cost_usd).sum();
    Ok(json!({
        "calls": rows,
        "shownCostUsd": shown_cost,
        "limit": LIST_LIMIT,
        "categories": categories,
        "protocols": names.iter().map(|(h, n)| json!({"hash": h.to_hex(), "name": n})).collect::<Vec<_>>(),
        "category": category,
        "protocol": protocol_hash.map(|h| h.to_hex()),
    }))
}

/// The sender page: the node's tasks, what it remembers per (target, task), its rungs, and its
/// sender routines.
pub async fn sender(node: &Node) -> Result<Value, StoreError> {
    let store = node.store();
    let names = protocol_names(node).await?;
    let memories: Vec<Value> = store
        .sender()
        .sender_memories()
        .await?
        .iter()
        .map(|m| {
            json!({
                "target": m.target, "task": m.task, "uses": m.uses,
                "protocolHash": m.protocol_hash.map(|h| h.to_hex()),
                "protocol": m.protocol_hash.and_then(|h| names.get(&h)),
                "sources": m.protocol_sources,
                "rejected": m.rejected.iter().map(|h| h.to_hex()).collect::<Vec<_>>(),
                "negotiationRequested": m.negotiation_requested,
                "nextNegotiationAt": m.next_negotiation_at, "updatedAt": m.updated_at_ms,
            })
        })
        .collect();
    let rungs: Vec<Value> = store
        .sender()
        .sender_totals()
        .await?
        .iter()
        .map(|t| {
            json!({
                "target": t.target, "task": t.task, "rung": t.rung, "runs": t.runs,
                "successes": t.successes, "llmCalls": t.llm_calls, "tokens": t.tokens,
            })
        })
        .collect();
    let routines: Vec<Value> = store
        .sender()
        .sender_routines()
        .await?
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "target": r.key.target, "task": r.key.task,
                "protocolHash": r.key.protocol_hash.to_hex(),
                "protocol": names.get(&r.key.protocol_hash),
                "status": r.status.as_str(), "runs": r.runs, "failures": r.failures,
                "lastError": r.last_error, "updatedAt": r.updated_at_ms,
            })
        })
        .collect();
    let attempts = store.sender().sender_attempts().await?;
    let passed = attempts
        .iter()
        .filter(|a| a.outcome == AttemptOutcome::Passed)
        .count();
    Ok(json!({
        "tasks": node.config().tasks.iter().map(|t| json!({"name": t.name, "description": t.description})).collect::<Vec<_>>(),
        "memories": memories,
        "rungs": rungs,
        "routines": routines,
        "attempts": attempts.len(),
        "attemptsPassed": passed,
    }))
}

/// The conversations page: the most recently active ones, open or expired, with their turns.
pub async fn conversations(node: &Node, now_ms: i64) -> Result<Value, StoreError> {
    let names = protocol_names(node).await?;
    let rows: Vec<Value> = node
        .store()
        .recent_conversations(LIST_LIMIT)
        .await?
        .iter()
        .map(|c| {
            let turns: Vec<Value> = c
                .messages
                .as_array()
                .map(|messages| messages.iter().map(turn).collect())
                .unwrap_or_default();
            json!({
                "id": c.id, "kind": c.kind.as_str(),
                "protocolHash": c.protocol_hash.map(|h| h.to_hex()),
                "protocol": c.protocol_hash.and_then(|h| names.get(&h)),
                "createdAt": c.created_at_ms, "lastActive": c.last_active_ms,
                "expiresAt": c.expires_at_ms, "open": c.expires_at_ms > now_ms,
                "turns": turns,
            })
        })
        .collect();
    let open = rows.iter().filter(|r| r["open"] == json!(true)).count();
    Ok(json!({"conversations": rows, "open": open}))
}

/// One turn of an LLM history: its role and its text (or the JSON of whatever else it holds).
fn turn(message: &Value) -> Value {
    let role = message["role"].as_str().unwrap_or("?");
    let text = match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Null => match message.get("tool_calls") {
            Some(calls) => calls.to_string(),
            None => String::new(),
        },
        other => other.to_string(),
    };
    json!({"role": role, "text": cut(&text)})
}

/// `text`, cut to [`TEXT_LIMIT`] bytes on a character boundary, with a mark when it was cut.
fn cut(text: &str) -> String {
    if text.len() <= TEXT_LIMIT {
        return text.to_string();
    }
    let mut end = TEXT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savings_are_estimated_from_the_llm_answered_requests() {
        let usage = ProtocolUsage {
            llm: 3,
            fallback: 1,
            routine: 10,
            llm_cost_usd: 0.4,
            ..ProtocolUsage::default()
        };
        assert!((usd_saved_estimate(&usage) - 1.0).abs() < 1e-9);
        assert_eq!(usd_saved_estimate(&ProtocolUsage::default()), 0.0);
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        let text = "é".repeat(TEXT_LIMIT);
        let shown = cut(&text);
        assert!(
            shown.len() < text.len() && shown.ends_with(&format!("({} bytes in all)", text.len()))
        );
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn a_turn_shows_its_role_and_text_or_its_tool_calls() {
        assert_eq!(
            turn(&json!({"role": "user", "content": "hi"})),
            json!({"role": "user", "text": "hi"})
        );
        let shown =
            turn(&json!({"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}));
        assert_eq!(shown["text"], json!("[{\"id\":\"1\"}]"));
    }
}
