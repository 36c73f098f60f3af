//! `agora stats`: the LLM ledger and per-protocol usage, from the store.

use std::path::Path;

use serde_json::json;

pub async fn run(config: Option<&Path>, as_json: bool) -> anyhow::Result<()> {
    let store = crate::pd_cmd::open(config).await?;
    let ledger = store.ledger().ledger_totals().await?;
    let usage = store.requests().usage_all().await?;
    let programming: std::collections::HashMap<_, _> = store
        .programming()
        .programming_totals()
        .await?
        .into_iter()
        .collect();
    let programmed = |hash| programming.get(hash).cloned().unwrap_or_default();
    let sent = store.sender().sender_totals().await?;
    if as_json {
        // Sender routines and every attempt at one (with its source), JSON only.
        let sender_routines = store.sender().sender_routines().await?;
        let sender_attempts = store.sender().sender_attempts().await?;
        let value = json!({
            "ledger": ledger.iter().map(|t| json!({"node": t.node, "category": t.category, "model": t.model, "calls": t.calls, "promptTokens": t.prompt_tokens, "cachedPromptTokens": t.cached_prompt_tokens, "completionTokens": t.completion_tokens, "costUsd": t.cost_usd})).collect::<Vec<_>>(),
            "protocols": usage.iter().map(|(h, u)| json!({"hash": h.to_hex(), "requests": u.requests, "llm": u.llm, "routine": u.routine, "fallback": u.fallback, "rejected": u.rejected, "failed": u.failed, "llmTokens": u.llm_prompt_tokens + u.llm_completion_tokens, "llmCostUsd": u.llm_cost_usd, "tokensSavedEstimate": u.tokens_saved_estimate(), "routineAttempts": programmed(h).attempts, "routineAttemptsPassed": programmed(h).passed, "implementingTokens": programmed(h).tokens})).collect::<Vec<_>>(),
            "sender": sent.iter().map(|t| json!({"target": t.target, "task": t.task, "rung": t.rung, "runs": t.runs, "successes": t.successes, "llmCalls": t.llm_calls, "tokens": t.tokens})).collect::<Vec<_>>(),
            "senderRoutines": sender_routines.iter().map(|r| json!({"id": r.id, "target": r.key.target, "task": r.key.task, "protocol": r.key.protocol_hash.to_hex(), "status": r.status.as_str(), "runs": r.runs, "failures": r.failures, "lastError": r.last_error, "source": r.source})).collect::<Vec<_>>(),
            "senderRoutineAttempts": sender_attempts.iter().map(|a| json!({"target": a.key.target, "task": a.key.task, "protocol": a.key.protocol_hash.to_hex(), "job": a.job, "attempt": a.attempt, "reason": a.reason.as_str(), "outcome": a.outcome.as_str(), "report": a.report, "tokens": a.prompt_tokens + a.completion_tokens, "routineId": a.routine_id, "source": a.source})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("LLM ledger");
    println!(
        "{:<16} {:<14} {:<36} {:>6} {:>10} {:>10} {:>10} {:>10}",
        "node", "category", "model", "calls", "prompt", "cached", "completion", "cost $"
    );
    for t in &ledger {
        println!(
            "{:<16} {:<14} {:<36} {:>6} {:>10} {:>10} {:>10} {:>10.4}",
            t.node,
            t.category,
            t.model,
            t.calls,
            t.prompt_tokens,
            t.cached_prompt_tokens,
            t.completion_tokens,
            t.cost_usd
        );
    }
    println!();
    println!("Protocols");
    println!(
        "{:<42} {:>8} {:>6} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10} {:>10} {:>9} {:>10}",
        "hash",
        "requests",
        "llm",
        "routine",
        "fallback",
        "rejected",
        "failed",
        "llm tokens",
        "llm cost $",
        "saved tok~",
        "attempts",
        "impl tok"
    );
    for (hash, u) in &usage {
        println!(
            "{:<42} {:>8} {:>6} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10.4} {:>10} {:>9} {:>10}",
            hash.to_hex(),
            u.requests,
            u.llm,
            u.routine,
            u.fallback,
            u.rejected,
            u.failed,
            u.llm_prompt_tokens + u.llm_completion_tokens,
            u.llm_cost_usd,
            u.tokens_saved_estimate(),
            format!("{}/{}", programmed(hash).passed, programmed(hash).attempts),
            programmed(hash).tokens
        );
    }
    println!(
        "\nsaved tok~: LLM tokens the routines saved, estimated from the mean LLM tokens of an \
         LLM-answered request; attempts: routine candidates passed/written; impl tok: tokens \
         spent writing them."
    );
    if !sent.is_empty() {
        println!("\nSender (tasks this node sent, by target, task and rung)");
        println!(
            "{:<36} {:<20} {:<9} {:>6} {:>9} {:>9} {:>9}",
            "target", "task", "rung", "runs", "success", "llm calls", "tokens"
        );
        for t in &sent {
            println!(
                "{:<36} {:<20} {:<9} {:>6} {:>9} {:>9} {:>9}",
                t.target, t.task, t.rung, t.runs, t.successes, t.llm_calls, t.tokens
            );
        }
    }
    Ok(())
}
