//! The sender's ladder over real HTTP between nodes on 127.0.0.1, with scripted LLMs: natural
//! language, then exploring (the target's `/.wellknown`, the sender's own memory), then a
//! negotiated protocol; a protocol of another task skipped unasked; a receiver-requested
//! negotiation; a rejection learned per target. Every run is in the sender's log.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;

use crate::fixtures::{ladder_sender, negotiating_sender, temperature_output, weather_task};
use crate::support::Spawn;
use agora_llm::ChatRequest;
use agora_node::{Node, Task};
use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, TestServer, llm_categories, schema_name, sender_memory, suitability,
    temp_dir, weather_tool,
};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");
/// A protocol of another task (from the network demo): it names a date and whether a restaurant
/// is open, not the weather task's location and temperature.
const IS_OPEN_PD: &str = include_str!("../../../agora-node/tests/data/protocol-fit/is-open.md");
const NEGOTIATED: &str = "Request: a JSON object {\"location\": string, \"date\": \"YYYY-MM-DD\"}.\n\
    Reply: a JSON object {\"temperature\": number, \"precipitation\": number, \
    \"weatherCondition\": string}.";

fn task() -> Task {
    weather_task(temperature_output())
}

fn data() -> Value {
    json!({"location": "Oslo, Norway", "date": "2025-02-03"})
}

/// Alice: writes bodies, reads replies, says yes to every candidate protocol, negotiates.
fn alice_llm() -> Arc<ScriptedLlm> {
    let protocol = json!({"name": "Weather", "description": "Forecasts.", "document": NEGOTIATED});
    negotiating_sender(data(), protocol)
}

/// A receiver that answers everything, accepts (or refuses) unknown protocols and agrees in
/// negotiations.
async fn receiver(
    dir: &std::path::Path,
    suitable: bool,
    ask_to_negotiate_after: u64,
) -> TestServer {
    let llm = ScriptedLlm::new(move |request: &ChatRequest| match schema_name(request) {
        Some("suitability") if suitable => {
            Ok(json!({"suitable": "yes", "reason": "ok"}).to_string())
        }
        Some("suitability") => Ok(json!({"suitable": "no", "reason": "not for us"}).to_string()),
        Some("negotiation_reply") => {
            Ok(json!({"verdict": "agree", "message": "Agreed."}).to_string())
        }
        Some("step") => {
            Ok(json!({"tool": "final_answer", "answer": "It will be 3.5 degrees."}).to_string())
        }
        other => panic!("unexpected receiver LLM request {other:?}"),
    });
    NodeBuilder::new(llm, dir)
        .config(|c| {
            c.tools = vec![weather_tool()];
            c.negotiation.receiver_threshold = ask_to_negotiate_after;
        })
        .spawn()
        .await
}

async fn alice(dir: &std::path::Path, explore: i64, negotiate: i64) -> Node {
    ladder_sender(alice_llm(), dir, explore, negotiate).await
}

/// Adds the document `text` to the receiver and serves it by the operator's decision.
async fn serve(receiver: &TestServer, text: &str) -> VerifiedDocument {
    let document = receiver.node.add_document(text, &[]).await.unwrap();
    receiver
        .node
        .set_operator_decision(&document.hash(), true, "served here")
        .await
        .unwrap();
    document
}

async fn checking_calls(node: &Node) -> usize {
    let calls = agora_testkit::llm_calls(node).await;
    calls.iter().filter(|c| c.category == "checking").count()
}

async fn rungs(node: &Node, target: &str) -> Vec<(String, String)> {
    agora_testkit::sender_runs(node, target, "weather", 100)
        .await
        .into_iter()
        .map(|run| {
            (
                run.rung,
                run.steps.split(' ').next().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_ladder_climbs_from_natural_language_to_a_negotiated_protocol() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = receiver(b.path(), true, 0).await;
    let alice = alice(a.path(), 2, 4).await;
    for _ in 0..5 {
        let run = alice.run_task(&bob.url, &task(), &data()).await.unwrap();
        assert_eq!(run.outcome.output, json!({"temperature": 3.5}));
    }
    let steps = rungs(&alice, &bob.url).await;
    assert_eq!(
        steps,
        [
            ("natural".into(), "".into()),
            ("natural".into(), "explored".into()), // Bob's /.wellknown lists nothing yet
            ("natural".into(), "".into()),
            ("protocol".into(), "negotiated".into()),
            ("protocol".into(), "".into()),
        ]
    );
    let memory = sender_memory(&alice, &bob.url, "weather").await;
    let hash = memory.protocol_hash.unwrap();
    assert!(
        memory.protocol_sources[0].starts_with("data:"),
        "no protocol DB configured"
    );
    // Bob registered the negotiated protocol and answered under it without a suitability check.
    assert!(suitability(&bob.node, &hash).await.allowed);
    let categories = llm_categories(&alice).await;
    assert!(categories.contains(&"negotiation".to_string()));
    let totals = alice.store().sender().sender_totals().await.unwrap();
    let protocol_runs: i64 = totals
        .iter()
        .filter(|t| t.rung == "protocol")
        .map(|t| t.runs)
        .sum();
    assert_eq!(protocol_runs, 2);
}

#[tokio::test]
async fn exploring_finds_the_targets_wellknown_protocol() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = receiver(b.path(), true, 0).await;
    let document = serve(&bob, WEATHER_PD).await;
    let alice = alice(a.path(), 2, 100).await;
    alice.run_task(&bob.url, &task(), &data()).await.unwrap();
    let run = alice.run_task(&bob.url, &task(), &data()).await.unwrap();
    assert_eq!(run.protocol, Some(document.hash()));
    assert_eq!(run.steps[0], "explored");
    assert!(run.steps[1].starts_with("found "));
    let memory = sender_memory(&alice, &bob.url, "weather").await;
    assert!(
        memory.protocol_sources[0].ends_with(&format!("/protocols/{}", document.hash().to_hex()))
    );
    let categories = llm_categories(&alice).await;
    let fit_checks = categories.iter().filter(|c| *c == "checking").count();
    assert_eq!(fit_checks, 1);
}

#[tokio::test]
async fn exploring_skips_a_protocol_of_another_task_that_the_llm_would_accept() {
    let (a, b, c) = (temp_dir(), temp_dir(), temp_dir());
    // Bob serves only the isOpen protocol. Alice's LLM would say yes to it, but it is never
    // asked: the protocol does not name the task's fields.
    let bob = receiver(b.path(), true, 0).await;
    let is_open = serve(&bob, IS_OPEN_PD).await;
    let alice = alice(a.path(), 1, 100).await;
    let run = alice.run_task(&bob.url, &task(), &data()).await.unwrap();
    assert_eq!(run.protocol, None);
    assert_eq!(run.steps, ["explored"]);
    assert_eq!(checking_calls(&alice).await, 0);
    let memory = sender_memory(&alice, &bob.url, "weather").await;
    assert_eq!(memory.rejected, vec![is_open.hash()]);

    // Carol serves both: the weather protocol is asked about and used, the other is skipped.
    let carol = receiver(c.path(), true, 0).await;
    for text in [IS_OPEN_PD, WEATHER_PD] {
        serve(&carol, text).await;
    }
    let run = alice.run_task(&carol.url, &task(), &data()).await.unwrap();
    assert_eq!(
        run.protocol,
        Some(VerifiedDocument::from_text(WEATHER_PD).hash())
    );
    assert_eq!(checking_calls(&alice).await, 1);
    let memory = sender_memory(&alice, &carol.url, "weather").await;
    assert_eq!(memory.rejected, vec![is_open.hash()]);
}

#[tokio::test]
async fn a_receiver_asking_to_negotiate_gets_a_negotiation() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = receiver(b.path(), true, 1).await;
    let alice = alice(a.path(), 100, 100).await;
    let first = alice.run_task(&bob.url, &task(), &data()).await.unwrap();
    assert!(first.outcome.negotiation_requested);
    let second = alice.run_task(&bob.url, &task(), &data()).await.unwrap();
    assert!(
        second.steps[0].starts_with("negotiated "),
        "{:?}",
        second.steps
    );
    assert!(second.protocol.is_some());
}

#[tokio::test]
async fn a_rejection_is_learned_per_target() {
    let (a, b, c) = (temp_dir(), temp_dir(), temp_dir());
    let carol = receiver(c.path(), true, 0).await;
    let bob = receiver(b.path(), false, 0).await;
    let alice = alice(a.path(), 1, 100).await;
    // Carol publishes the weather protocol; Alice finds it there and uses it with her.
    let document = serve(&carol, WEATHER_PD).await;
    let run = alice.run_task(&carol.url, &task(), &data()).await.unwrap();
    assert_eq!(run.protocol, Some(document.hash()));

    // With Bob, Alice's own memory offers the same protocol; Bob refuses it, the run still
    // succeeds in natural language, and the refusal is remembered for Bob only.
    let run = alice.run_task(&bob.url, &task(), &data()).await.unwrap();
    assert_eq!(run.protocol, None);
    assert!(
        run.steps.iter().any(|s| s.starts_with("rejected ")),
        "{:?}",
        run.steps
    );
    let memory = sender_memory(&alice, &bob.url, "weather").await;
    assert_eq!(memory.rejected, vec![document.hash()]);
    let run = alice.run_task(&bob.url, &task(), &data()).await.unwrap();
    assert_eq!(run.protocol, None, "not offered to Bob again");
    assert_eq!(run.steps, ["explored"]);
    let with_carol = alice.run_task(&carol.url, &task(), &data()).await.unwrap();
    assert_eq!(
        with_carol.protocol,
        Some(document.hash()),
        "Carol still gets it"
    );
    let _: ProtocolHash = VerifiedDocument::from_text(WEATHER_PD).hash();
}
