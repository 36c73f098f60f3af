//! Protocols built on protocols (a PD's `references`, `agora_protocol::references`), between two
//! nodes over HTTP on 127.0.0.1:
//! - `protocols/osnap-weather-task.md` references the weather forecast protocol by hash; Bob
//!   serves it with `routines/osnap-weather-task`, which hands the task's payload to the weather
//!   protocol's routine through `call_protocol`; Alice sends, and neither calls its LLM;
//! - a missing reference, a malformed list and a chain deeper than the resolver's bound fail the
//!   request with a sentence saying so;
//! - a node without the routine shows its LLM (the suitability checker and the responder) the
//!   referenced document.
//!
//! Like `wasm_routines`, the first needs the JavaScript engine (`AGORA_JS_ENGINE`).

use std::sync::Arc;

use crate::fixtures::{expected_forecast, js_runtime};
use crate::seed_protocols::{add_folder, document, node_info_tool};
use crate::support::Spawn;
use crate::wasm_routines::same;
use agora_llm::ChatRequest;
use agora_node::ToolConfig;
use agora_protocol::{ProtocolHash, VerifiedDocument, data_uri};
use agora_store::RequestPath;
use agora_testkit::{NodeBuilder, ScriptedLlm, schema_name, system_prompt, temp_dir, weather_tool};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

fn call_protocol_tool() -> ToolConfig {
    ToolConfig::builtin("call_protocol", "call_protocol", 0)
}

#[test]
fn the_task_protocol_references_the_shipped_weather_protocol() {
    let task = document("osnap-weather-task");
    let references = task.metadata().references().unwrap();
    let weather = ProtocolHash::of(WEATHER_PD.as_bytes());
    assert_eq!(references.len(), 1);
    assert_eq!(
        references[0].hash, weather,
        "the PD names the weather PD's hash"
    );
    let routine = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../routines/osnap-weather-task/routine.js"),
    )
    .unwrap();
    assert!(
        routine.contains(&weather.to_hex()),
        "the routine calls the referenced protocol"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_carrying_the_weather_protocol_is_answered_by_two_routines_and_no_llm() {
    let (bob_dir, alice_dir) = (temp_dir(), temp_dir());
    let bob = NodeBuilder::new(ScriptedLlm::unreachable(), bob_dir.path())
        .routine_engine(Arc::new(js_runtime()))
        .config(|c| {
            c.name = "bob".into();
            c.tools = vec![weather_tool(), node_info_tool(), call_protocol_tool()];
        })
        .spawn()
        .await;
    add_folder(&bob.node, "weather-forecast").await;
    add_folder(&bob.node, "osnap-weather-task").await;
    let alice = NodeBuilder::new(ScriptedLlm::unreachable(), alice_dir.path())
        .build()
        .await;
    let task_pd = document("osnap-weather-task");
    let places = [("London, UK", "2024-09-27"), ("Oslo, Norway", "2025-01-15")];
    for (n, (location, date)) in places.into_iter().enumerate() {
        let task = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
            "message_type": "task_request",
            "payload": {"task_id": format!("task-{n}"), "task_name": "weather_forecast",
                "task_data": {"location": location, "date": date}}});
        let sources = vec![data_uri::encode(task_pd.text())];
        let reply = alice
            .send_protocol_message(&bob.url, &task_pd, &sources, &task.to_string())
            .await
            .unwrap();
        let reply: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(reply["message_type"], "status_update", "{reply}");
        assert_eq!(reply["sender_agent_id"], "bob");
        assert_eq!(reply["payload"]["task_id"], format!("task-{n}"));
        assert_eq!(reply["payload"]["task_status"], "completed");
        let expected = expected_forecast(location, date);
        assert!(same(&reply["payload"]["task_result"], &expected), "{reply}");
    }
    // The inner protocol's error reply comes back in the outer protocol's error shape.
    let bad = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
        "message_type": "task_request",
        "payload": {"task_id": "t-x", "task_name": "weather_forecast",
            "task_data": {"location": "London, UK", "date": "tomorrow"}}});
    let reply = alice
        .send_protocol_message(&bob.url, &task_pd, &[], &bad.to_string())
        .await
        .unwrap();
    let reply: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        (&reply["message_type"], &reply["payload"]["error_code"]),
        (&json!("error_handling"), &json!("1004")),
        "{reply}"
    );
    assert!(
        reply["payload"]["error_description"]
            .as_str()
            .unwrap()
            .contains("date")
    );

    assert!(agora_testkit::llm_calls(&alice).await.is_empty());
    assert!(agora_testkit::llm_calls(&bob.node).await.is_empty());
    let requests = agora_testkit::recent_requests(&bob.node, 10).await;
    assert_eq!(
        requests.len(),
        3,
        "the inner run is part of the outer request"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.path == RequestPath::Routine && r.llm_calls == 0)
    );
}

/// A PD named `name` referencing `references` (hash, sources).
fn referencing(name: &str, references: &[(ProtocolHash, Vec<String>)]) -> String {
    let list: Vec<Value> = references
        .iter()
        .map(|(hash, sources)| json!({"hash": hash.to_hex(), "sources": sources}))
        .collect();
    format!(
        "---\nname: {name}\ndescription: A test protocol.\nreferences: {}\n---\n\nThe request \
         is {{\"location\": string, \"date\": \"YYYY-MM-DD\"}}; the reply is the referenced \
         protocol's.\n",
        Value::Array(list)
    )
}

#[tokio::test]
async fn references_that_cannot_be_followed_fail_the_request_with_a_reason() {
    let dir = temp_dir();
    let bob = NodeBuilder::new(ScriptedLlm::unreachable(), dir.path())
        .config(|c| c.suitability = agora_node::SuitabilityMode::AllowAll)
        .spawn()
        .await;
    let body = json!({"location": "London, UK", "date": "2024-09-27"}).to_string();
    let post = |text: String| {
        let bob = &bob;
        let body = body.clone();
        async move {
            let hash = ProtocolHash::of(text.as_bytes());
            let (_, reply) = bob
                .post(
                    "/",
                    &json!({"protocolHash": hash.to_hex(),
                    "protocolSources": [data_uri::encode(&text)], "body": body}),
                )
                .await;
            reply
        }
    };

    // A reference nobody can fetch.
    let unknown = ProtocolHash::of(b"a document nobody has");
    let reply = post(referencing("Missing", &[(unknown, vec![])])).await;
    assert_eq!(reply["status"], "failure", "{reply}");
    let message = reply["error"].as_str().unwrap();
    assert!(
        message.contains(&unknown.to_hex()) && message.contains("unavailable"),
        "{message}"
    );

    // A malformed list.
    let reply = post("---\nname: Bad\nreferences: 7\n---\n\nBody.\n".to_string()).await;
    assert!(
        reply["error"].as_str().unwrap().contains("malformed"),
        "{reply}"
    );

    // A chain deeper than the bound: each document in the store references the next.
    let mut next: Option<ProtocolHash> = None;
    for level in 0..6 {
        let text = match next {
            Some(hash) => referencing(&format!("Level{level}"), &[(hash, vec![])]),
            None => "---\nname: Bottom\n---\n\nThe bottom.\n".to_string(),
        };
        next = Some(bob.node.add_document(&text, &[]).await.unwrap().hash());
    }
    let reply = post(referencing("Top", &[(next.unwrap(), vec![])])).await;
    assert!(
        reply["error"].as_str().unwrap().contains("deeper"),
        "{reply}"
    );
    assert!(agora_testkit::llm_calls(&bob.node).await.is_empty());
}

#[tokio::test]
async fn the_llm_reads_the_referenced_document() {
    let dir = temp_dir();
    // The suitability checker says yes only when it was shown the weather document too.
    let llm = ScriptedLlm::new(|request: &ChatRequest| match schema_name(request) {
        Some("suitability") => {
            let question = agora_testkit::last_user_message(request);
            let shown = question.contains("# Weather forecast query")
                && question.contains("OSNAP tasks carrying the weather forecast protocol");
            let suitable = if shown { "yes" } else { "no" };
            Ok(json!({"suitable": suitable, "reason": "scripted"}).to_string())
        }
        Some("step") => {
            let prompt = system_prompt(request);
            let shown = prompt.contains("# Weather forecast query")
                && prompt.contains("OSNAP tasks carrying the weather forecast protocol");
            let answer = json!({"sender_agent_id": "bob", "message_type": "status_update",
                "payload": {"task_id": "t-1", "task_status": "completed", "shown": shown}});
            Ok(json!({"tool": "final_answer", "answer": answer}).to_string())
        }
        other => panic!("unexpected LLM request {other:?}"),
    });
    let bob = NodeBuilder::new(llm, dir.path()).spawn().await;
    let task_pd = document("osnap-weather-task");
    let weather = VerifiedDocument::from_text(WEATHER_PD);
    // The task PD names no source for the weather PD: this node has it from elsewhere.
    bob.node.add_document(weather.text(), &[]).await.unwrap();
    let task = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
        "message_type": "task_request", "payload": {"task_id": "t-1",
        "task_name": "weather_forecast", "task_data": {"location": "Rome, Italy", "date": "2025-06-01"}}});
    let (_, reply) = bob
        .post(
            "/",
            &json!({"protocolHash": task_pd.hash().to_hex(),
            "protocolSources": [data_uri::encode(task_pd.text())], "body": task}),
        )
        .await;
    assert_eq!(reply["status"], "success", "{reply}");
    assert_eq!(reply["body"]["payload"]["shown"], true, "{reply}");
}
