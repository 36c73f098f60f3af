//! Protocol negotiation between two nodes over loopback HTTP, with scripted LLMs.
//!
//! The sender's script plays its negotiator (`negotiation_turn`); the receiver's plays its
//! negotiator (`negotiation_reply`) and its responder (`step`). Neither may call the
//! suitability checker: a negotiated protocol is allowed by the negotiation itself.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::Spawn;
use agora_llm::ChatRequest;
use agora_node::{Category, NegotiationError, Task};
use agora_protocol::negotiation::FinalProtocol;
use agora_protocol::{ProtocolDocument, VerifiedDocument};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, TestServer, last_user_message, schema_name, temp_dir,
};
use serde_json::{Value, json};

const PROTOCOL_TEXT: &str = "Request: a JSON object {\"location\": string, \"date\": \"YYYY-MM-DD\"}.\n\
    Reply: a JSON object {\"temperature\": number (degrees Celsius), \"precipitation\": number (mm), \
    \"weatherCondition\": \"sunny\" | \"cloudy\" | \"rainy\" | \"snowy\"}.\n\
    On a bad request the reply is {\"error\": string}.";

fn task() -> Task {
    Task {
        name: "weather_forecast".into(),
        description: "The weather forecast for a location on a date.".into(),
        input_schema: json!({"type": "object", "properties": {"location": {"type": "string"}, "date": {"type": "string"}}, "required": ["location", "date"]}),
        output_schema: json!({"type": "object", "properties": {"temperature": {"type": "number"}, "precipitation": {"type": "number"}, "weatherCondition": {"type": "string"}}}),
    }
}

/// A sender negotiator that proposes, then closes with `final_protocol` once the receiver
/// answered; as a querier it writes the protocol's request and reads its reply.
fn closing_sender(final_protocol: Value) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(move |request: &ChatRequest| {
        match schema_name(request) {
        None => Ok(r#"{"location": "London, UK", "date": "2024-09-27"}"#.into()),
        Some("task_output") => Ok(json!({"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"}).to_string()),
        Some("negotiation_turn") if last_user_message(request).contains("The receiver answered") => {
            Ok(json!({"message": "Thank you, here is the final protocol.", "final_protocol": final_protocol}).to_string())
        }
        Some("negotiation_turn") => Ok(json!({
            "message": format!("I propose this protocol. {PROTOCOL_TEXT}"),
            "final_protocol": null
        })
        .to_string()),
        other => panic!("unexpected sender LLM request {other:?}"),
    }
    })
}

/// A receiver whose negotiator says `verdict` and whose responder answers the protocol.
fn receiver_llm(verdict: &'static str) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(move |request: &ChatRequest| {
        match schema_name(request) {
        Some("negotiation_reply") => Ok(json!({"verdict": verdict, "message": "Fine with the fields and units."}).to_string()),
        Some("step") => Ok(json!({"tool": "final_answer", "answer": {"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"}}).to_string()),
        other => panic!("unexpected receiver LLM request {other:?}"),
    }
    })
}

async fn pair(
    sender_llm: Arc<ScriptedLlm>,
    receiver_llm: Arc<ScriptedLlm>,
    sender_dir: &std::path::Path,
    receiver_dir: &std::path::Path,
) -> (TestServer, TestServer) {
    let sender = NodeBuilder::new(sender_llm, sender_dir)
        .config(|c| {
            c.name = "alice".into();
        })
        .spawn()
        .await;
    (sender, receiver(receiver_llm, receiver_dir).await)
}

fn london() -> Value {
    json!({"location": "London, UK", "date": "2024-09-27"})
}

/// `sender` runs the task for London against `receiver` under `document`.
async fn send_london(
    sender: &agora_node::Node,
    receiver: &TestServer,
    document: &VerifiedDocument,
) -> agora_node::SendOutcome {
    sender
        .send(&receiver.url, &task(), &london(), Some((document, &[])))
        .await
        .unwrap()
}

/// Bob, the weather receiver, asking `llm`.
async fn receiver(llm: Arc<ScriptedLlm>, dir: &std::path::Path) -> TestServer {
    NodeBuilder::new(llm, dir)
        .config(|c| {
            c.name = "bob".into();
            c.description = "Bob gives weather forecasts.".into();
            c.tools = vec![agora_testkit::weather_tool()];
            // The script answers a fixed forecast without looking it up: the negotiation is
            // under test here, not the answer, which the answer checks would send back.
            c.responder.check_answers = false;
        })
        .spawn()
        .await
}

#[tokio::test]
async fn a_negotiated_protocol_is_stored_on_both_sides_and_then_used() {
    let (a, b) = (temp_dir(), temp_dir());
    let final_protocol = json!({"name": "WeatherForecast", "description": "Forecast by location and date.", "document": PROTOCOL_TEXT});
    let sender_llm = closing_sender(final_protocol);
    let bob_llm = receiver_llm("agree");
    let (alice, bob) = pair(sender_llm.clone(), bob_llm.clone(), a.path(), b.path()).await;

    let negotiated = alice.node.negotiate(&bob.url, &task()).await.unwrap();
    assert_eq!(negotiated.rounds, 2);
    assert!(negotiated.registered_by_receiver);
    let hash = negotiated.document.hash();
    let parsed = ProtocolDocument::parse(negotiated.document.text());
    assert_eq!(parsed.metadata.name.as_deref(), Some("WeatherForecast"));
    assert!(parsed.body.contains("weatherCondition"));

    // Both stores hold the same verified bytes; the receiver allows the protocol.
    let ours = alice.node.store().document(&hash).await.unwrap().unwrap();
    let theirs = bob.node.store().document(&hash).await.unwrap().unwrap();
    assert_eq!(ours.document.text(), theirs.document.text());
    assert_eq!(theirs.document.hash(), hash);
    let decision = bob.node.store().suitability(&hash).await.unwrap().unwrap();
    assert!(decision.allowed, "{decision:?}");
    // The receiver's negotiator saw the proposal; the sender's saw the receiver's agreement.
    let bob_calls = bob_llm.calls();
    assert_eq!(bob_calls.len(), 1);
    assert!(last_user_message(&bob_calls[0]).contains("weatherCondition"));
    assert!(last_user_message(&sender_llm.calls()[1]).contains("I agree."));

    // Every negotiation LLM call is in the ledger under its category, on both sides.
    for (node, calls) in [(&alice, 2), (&bob, 1)] {
        let ledger = agora_testkit::llm_calls(&node.node).await;
        assert_eq!(ledger.len(), calls);
        assert!(
            ledger
                .iter()
                .all(|c| c.category == Category::Negotiation.as_str())
        );
    }

    // The sender then uses the protocol by hash alone: the receiver knows it, and serves it
    // without asking its checker.
    let outcome = send_london(&alice.node, &bob, &negotiated.document).await;
    assert_eq!(outcome.output["weatherCondition"], "rainy");
    let served: Value = serde_json::from_str(&outcome.reply_body).unwrap();
    assert_eq!(served["temperature"], 11.0);
    assert!(
        bob_llm
            .calls()
            .iter()
            .all(|c| schema_name(c) != Some("suitability"))
    );
    let usage = agora_testkit::usage(&bob.node, &hash).await;
    assert_eq!(usage.requests, 1, "{usage:?}");
}

#[tokio::test]
async fn the_round_limit_ends_a_negotiation_with_a_clear_error() {
    let (a, b) = (temp_dir(), temp_dir());
    let sender_llm = ScriptedLlm::new(|request: &ChatRequest| {
        assert_eq!(schema_name(request), Some("negotiation_turn"));
        Ok(json!({"message": "How about {\"city\": string}?", "final_protocol": null}).to_string())
    });
    let bob_llm = receiver_llm("change");
    let (alice, bob) = pair(sender_llm.clone(), bob_llm.clone(), a.path(), b.path()).await;
    let alice = {
        drop(alice);
        NodeBuilder::new(sender_llm.clone(), a.path())
            .config(|c| {
                c.negotiation.max_rounds = 3;
            })
            .build()
            .await
    };

    let error = alice.negotiate(&bob.url, &task()).await.unwrap_err();
    assert!(
        matches!(error, NegotiationError::RoundLimit { rounds: 3 }),
        "{error}"
    );
    assert!(error.to_string().contains("within 3 rounds"), "{error}");
    assert_eq!(sender_llm.call_count(), 3);
    assert_eq!(bob_llm.call_count(), 3);
    assert!(alice.store().documents().await.unwrap().is_empty());
    assert!(bob.node.store().documents().await.unwrap().is_empty());

    // A receiver with a lower limit than its sender refuses to go on.
    let (c, d) = (temp_dir(), temp_dir());
    let strict = NodeBuilder::new(receiver_llm("change"), d.path())
        .config(|c| c.negotiation.max_rounds = 2)
        .spawn()
        .await;
    let eager = NodeBuilder::new(sender_llm.clone(), c.path()).build().await;
    let error = eager.negotiate(&strict.url, &task()).await.unwrap_err();
    match error {
        NegotiationError::Refused(reason) => assert!(reason.contains("2 rounds"), "{reason}"),
        other => panic!("expected a refusal, got {other}"),
    }
}

#[tokio::test]
async fn a_malformed_final_protocol_is_a_clear_error_on_either_side() {
    let (a, b) = (temp_dir(), temp_dir());
    let sender_llm = closing_sender(json!({"name": " ", "description": "", "document": "tbd"}));
    let bob_llm = receiver_llm("agree");
    let (alice, bob) = pair(sender_llm, bob_llm, a.path(), b.path()).await;
    let error = alice.node.negotiate(&bob.url, &task()).await.unwrap_err();
    assert!(
        matches!(error, NegotiationError::MalformedProtocol(_)),
        "{error}"
    );
    assert!(error.to_string().contains("malformed"), "{error}");
    assert!(bob.node.store().documents().await.unwrap().is_empty());

    // A receiver refuses a final document without front matter, and one that is not its hash.
    let (status, opened) = bob
        .post("/", &json!({"protocolHash": "negotiation", "protocolSources": null, "body": "Hello, shall we agree on a weather protocol?", "multiround": true}))
        .await;
    assert_eq!(status, 200, "{opened}");
    let id = opened["conversationId"].as_str().unwrap();
    let bare = VerifiedDocument::from_text(PROTOCOL_TEXT);
    let (_, refused) = bob
        .post(
            &format!("/conversations/{id}"),
            &json!({"body": FinalProtocol::to_body(&bare)}),
        )
        .await;
    assert_eq!(refused["status"], "failure", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("malformed"),
        "{refused}"
    );
    let tampered =
        json!({"finalProtocol": "---\nname: X\n---\n\nbody", "protocolHash": bare.hash().to_hex()})
            .to_string();
    let (_, refused) = bob
        .post(&format!("/conversations/{id}"), &json!({"body": tampered}))
        .await;
    assert!(
        refused["message"].as_str().unwrap().contains("hash"),
        "{refused}"
    );
    assert!(bob.node.store().documents().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_busy_receiver_asks_its_senders_to_negotiate() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(|request: &ChatRequest| match schema_name(request) {
        Some("step") => Ok(json!({"tool": "final_answer", "answer": "Sunny."}).to_string()),
        other => panic!("unexpected {other:?}"),
    });
    let bob = NodeBuilder::new(llm, dir.path())
        .config(|c| c.negotiation.receiver_threshold = 2)
        .spawn()
        .await;
    let ask =
        json!({"protocolHash": null, "protocolSources": [], "body": "Weather in Oslo tomorrow?"});
    let (_, first) = bob.post("/", &ask).await;
    assert_eq!(first["status"], "success");
    assert!(first.get("negotiationRequested").is_none(), "{first}");
    let (_, second) = bob.post("/", &ask).await;
    assert_eq!(second["negotiationRequested"], true, "{second}");
    let reply = agora_protocol::Reply::from_json(&second).unwrap();
    assert!(reply.negotiation_requested);
}

/// Negotiating with its LLM, the sender never adopts a final document that leaves out a task
/// field.
#[tokio::test]
async fn a_final_document_without_the_task_fields_is_refused() {
    let (a, b) = (temp_dir(), temp_dir());
    let lacking = json!({"name": "Weather", "description": "d", "document": "Request: {\"city\": string}. Reply: {\"degrees\": number}."});
    let (alice, bob) = pair(
        closing_sender(lacking),
        receiver_llm("agree"),
        a.path(),
        b.path(),
    )
    .await;
    let error = alice.node.negotiate(&bob.url, &task()).await.unwrap_err();
    match error {
        NegotiationError::MalformedProtocol(reason) => {
            assert!(
                reason.contains("does not name the task's fields location, date"),
                "{reason}"
            )
        }
        other => panic!("expected a malformed protocol, got {other}"),
    }
    assert!(alice.node.store().documents().await.unwrap().is_empty());
}
