//! Node-boundary tests of the receiver with a scripted LLM: natural
//! language with tools, protocol resolution and verification, suitability,
//! multiround conversations and restarts.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agora_fetch::FetchPolicy;
use agora_llm::ChatRequest;
use agora_node::tools::WeatherForecastTool;
use agora_node::{ManualClock, Node, NodeConfig, SuitabilityMode};
use agora_protocol::{
    Body, FollowUp, HashDialect, ProtocolHash, ProtocolRef, Request, Status, data_uri,
};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, Turn, last_user_message, llm_categories, schema_name, serve_text,
    suitability, temp_dir, weather_tool,
};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

/// A script that plays a competent LLM: checks say yes (unless the PD is
/// about flights), the responder calls the weather tool once and then
/// answers from its result.
fn competent(request: &ChatRequest) -> Turn {
    match schema_name(request) {
        Some("suitability") => {
            let user = last_user_message(request);
            let doc = user.split("Protocol document:").nth(1).unwrap_or("");
            if doc.contains("flight") {
                Ok(r#"{"reason": "no booking tools", "suitable": "no"}"#.into())
            } else {
                Ok(r#"{"reason": "the weather tool covers it", "suitable": "yes"}"#.into())
            }
        }
        Some("step") => {
            let last = last_user_message(request);
            if let Some(result) = last.strip_prefix("Result of weather_forecast: ") {
                let forecast: Value = serde_json::from_str(result).unwrap();
                let protocol = request.messages[0].content.contains("Protocol document");
                let answer = if protocol {
                    json!({"temperature": forecast["temperature_c"], "precipitation": forecast["precipitation_mm"], "weatherCondition": forecast["condition"]})
                } else {
                    json!(format!(
                        "It will be {} at {} degrees.",
                        forecast["condition"].as_str().unwrap(),
                        forecast["temperature_c"]
                    ))
                };
                Ok(json!({"tool": "final_answer", "answer": answer}).to_string())
            } else {
                Ok(json!({"tool": "weather_forecast", "arguments": {"location": "London, UK", "date": "2024-09-27"}}).to_string())
            }
        }
        other => panic!("unexpected request kind {other:?}"),
    }
}

fn nl(body: &str, multiround: bool) -> Request {
    Request {
        protocol: ProtocolRef::NaturalLanguage,
        hash_dialect: HashDialect::Hex,
        sources: vec![],
        body: Body::Text(body.into()),
        multiround,
    }
}

fn protocol(text: &str, sources: Vec<String>, body: Body) -> Request {
    Request {
        protocol: ProtocolRef::Protocol(ProtocolHash::of(text.as_bytes())),
        hash_dialect: HashDialect::Base64,
        sources,
        body,
        multiround: false,
    }
}

/// A request under the protocol `text`, its document inline as a `data:` URI.
fn inline(text: &str, body: Body) -> Request {
    protocol(text, vec![data_uri::encode(text)], body)
}

/// The weather protocol's request for London on 2024-09-27, as a string body.
fn london() -> Body {
    Body::Text(r#"{"location": "London, UK", "date": "2024-09-27"}"#.into())
}

fn follow_up(text: &str) -> FollowUp {
    FollowUp {
        body: Body::Text(text.into()),
    }
}

/// A node with the weather tool that asks `llm`.
async fn weather_node(llm: Arc<ScriptedLlm>, dir: &Path) -> Node {
    weather_node_with(llm, dir, |_| {}).await
}

/// [`weather_node`], configured further by `configure`.
async fn weather_node_with(
    llm: Arc<ScriptedLlm>,
    dir: &Path,
    configure: impl FnOnce(&mut NodeConfig),
) -> Node {
    NodeBuilder::new(llm, dir)
        .config(|c| {
            c.tools = vec![weather_tool()];
            configure(c);
        })
        .build()
        .await
}

fn expected_forecast() -> Value {
    WeatherForecastTool::new(7).forecast("London, UK", "2024-09-27")
}

/// Asks `node` in words for London's weather, and checks that the answer gives the forecast's
/// temperature.
async fn assert_answers_london_in_words(node: &Node) {
    let reply = node
        .handle(nl("Weather in London on 2024-09-27?", false))
        .await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    let text = reply.body.unwrap().to_text();
    assert!(
        text.contains(&expected_forecast()["temperature_c"].to_string()),
        "{text}"
    );
}

#[tokio::test]
async fn natural_language_request_calls_a_tool_then_answers() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(competent);
    let node = weather_node(llm.clone(), dir.path()).await;
    assert_answers_london_in_words(&node).await;
    assert_eq!(llm.call_count(), 2);
    let calls = agora_testkit::llm_calls(&node).await;
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.category == "conversation"));
    let requests = agora_testkit::recent_requests(&node, 10).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].llm_calls, 2);
    assert_eq!(requests[0].query_id, calls[0].query_id.clone().unwrap());
}

#[tokio::test]
async fn invalid_tool_arguments_go_back_to_the_llm() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(|request| {
        let last = last_user_message(request);
        if last.contains("invalid arguments") {
            Ok(json!({"tool": "final_answer", "answer": "gave up"}).to_string())
        } else {
            Ok(json!({"tool": "weather_forecast", "arguments": {"location": "Paris", "date": "tomorrow"}}).to_string())
        }
    });
    let node = weather_node(llm.clone(), dir.path()).await;
    let reply = node.handle(nl("Weather in Paris tomorrow?", false)).await;
    assert_eq!(reply.body.unwrap().to_text(), "gave up");
    assert_eq!(llm.call_count(), 2);
}

#[tokio::test]
async fn the_tool_loop_is_bounded() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(|request| {
        if last_user_message(request).contains("No more tool calls") {
            Ok(json!({"tool": "final_answer", "answer": "done"}).to_string())
        } else {
            Ok(json!({"tool": "weather_forecast", "arguments": {"location": "Paris", "date": "2024-01-01"}}).to_string())
        }
    });
    let node = weather_node_with(llm.clone(), dir.path(), |c| c.responder.max_tool_calls = 3).await;
    let reply = node.handle(nl("loop forever", false)).await;
    assert_eq!(reply.body.unwrap().to_text(), "done");
    assert_eq!(llm.call_count(), 4);
}

#[tokio::test]
async fn unknown_protocol_is_fetched_verified_checked_and_answered() {
    let source = serve_text(WEATHER_PD).await;
    let document = agora_protocol::VerifiedDocument::from_text(WEATHER_PD);
    let url = source.url.clone();

    let dir = temp_dir();
    let llm = ScriptedLlm::new(competent);
    let node = weather_node(llm.clone(), dir.path()).await;
    let body = london();
    let reply = node
        .handle(protocol(WEATHER_PD, vec![url.clone()], body))
        .await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    let answer: Value = serde_json::from_str(&reply.body.unwrap().to_text()).unwrap();
    assert_eq!(answer["temperature"], expected_forecast()["temperature_c"]);

    let stored = node
        .store()
        .document(&document.hash())
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.sources, vec![url]);
    let decision = suitability(&node, &document.hash()).await;
    assert!(decision.allowed);
    assert_eq!(
        llm_categories(&node).await,
        ["checking", "conversation", "conversation"]
    );

    // Known now: no sources needed, no second check.
    let again = node.handle(protocol(WEATHER_PD, vec![], london())).await;
    assert_eq!(again.status, Status::Success);
    assert_eq!(
        llm.calls()
            .iter()
            .filter(|r| schema_name(r) == Some("suitability"))
            .count(),
        1
    );
    let usage = agora_testkit::usage(&node, &document.hash()).await;
    assert_eq!((usage.requests, usage.llm), (2, 2));
}

#[tokio::test]
async fn a_json_body_gets_a_json_reply() {
    let dir = temp_dir();
    let node = weather_node(ScriptedLlm::new(competent), dir.path()).await;
    let body = Body::Json(json!({"location": "London, UK", "date": "2024-09-27"}));
    let reply = node.handle(inline(WEATHER_PD, body)).await;
    match reply.body {
        Some(Body::Json(value)) => {
            assert_eq!(value["weatherCondition"], expected_forecast()["condition"])
        }
        other => panic!("expected a JSON body, got {other:?}"),
    }
}

#[tokio::test]
async fn tampered_document_is_rejected_and_not_stored() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(competent);
    let node = NodeBuilder::new(llm.clone(), dir.path()).build().await;
    let tampered = WEATHER_PD.replace("Celsius", "Fahrenheit");
    let request = protocol(
        WEATHER_PD,
        vec![
            data_uri::encode(&tampered),
            data_uri::encode_base64(&tampered),
        ],
        Body::Text("{}".into()),
    );
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let reply = node.handle(request).await;
    assert_eq!(reply.status, Status::Failure);
    let error = reply.error.unwrap();
    assert!(error.contains("hash mismatch"), "{error}");
    assert!(node.store().document(&hash).await.unwrap().is_none());
    assert!(node.store().documents().await.unwrap().is_empty());
    assert_eq!(llm.call_count(), 0);
}

#[tokio::test]
async fn a_failing_source_does_not_stop_the_next() {
    let dir = temp_dir();
    let node = weather_node(ScriptedLlm::new(competent), dir.path()).await;
    let sources = vec![
        "http://127.0.0.1:1/unreachable".to_string(),
        "ftp://example.org/pd".to_string(),
        data_uri::encode("not the document"),
        data_uri::encode(WEATHER_PD),
    ];
    let reply = node.handle(protocol(WEATHER_PD, sources, london())).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
}

#[tokio::test]
async fn private_addresses_are_refused_by_default() {
    let source = serve_text(WEATHER_PD).await;
    let dir = temp_dir();
    let node = NodeBuilder::new(ScriptedLlm::new(competent), dir.path())
        .fetch(FetchPolicy::default())
        .build()
        .await;
    let reply = node
        .handle(protocol(
            WEATHER_PD,
            vec![source.url.clone()],
            Body::Text("{}".into()),
        ))
        .await;
    assert_eq!(reply.status, Status::Failure);
    let error = reply.error.unwrap();
    assert!(error.contains("loopback"), "{error}");
}

#[tokio::test]
async fn unsuitable_protocol_is_rejected_once_and_remembered() {
    let flights = "---\nname: FlightBooking\ndescription: Book a flight\n---\nSend {\"from\": ..., \"to\": ...}; reply with a booking reference for the flight.";
    let dir = temp_dir();
    let llm = ScriptedLlm::new(competent);
    let node = weather_node(llm.clone(), dir.path()).await;
    for _ in 0..2 {
        let reply = node.handle(inline(flights, Body::Text("{}".into()))).await;
        assert_eq!(reply.status, Status::Rejected);
        let error = reply.error.unwrap();
        assert!(error.contains("is not suitable for execution"), "{error}");
        // The hash is quoted in the sender's dialect (base64 here).
        assert!(
            error.starts_with(&ProtocolHash::of(flights.as_bytes()).to_base64()),
            "{error}"
        );
    }
    assert_eq!(llm.call_count(), 1);
    let usage = agora_testkit::usage(&node, &ProtocolHash::of(flights.as_bytes())).await;
    assert_eq!(usage.rejected, 2);
}

#[tokio::test]
async fn operator_decisions_override_the_checker() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(competent);
    let node = weather_node(llm.clone(), dir.path()).await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    node.set_operator_decision(&hash, false, "not today")
        .await
        .unwrap();
    let reply = node
        .handle(inline(WEATHER_PD, Body::Text("{}".into())))
        .await;
    assert_eq!(reply.status, Status::Rejected);
    assert!(reply.error.unwrap().contains("not today"));
    assert_eq!(llm.call_count(), 0);
}

#[tokio::test]
async fn operator_only_mode_rejects_unlisted_protocols_without_the_llm() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(competent);
    let node = NodeBuilder::new(llm.clone(), dir.path())
        .config(|c| c.suitability = SuitabilityMode::OperatorOnly)
        .build()
        .await;
    let reply = node
        .handle(inline(WEATHER_PD, Body::Text("{}".into())))
        .await;
    assert_eq!(reply.status, Status::Rejected);
    assert_eq!(llm.call_count(), 0);
}

#[tokio::test]
async fn multiround_conversation_lifecycle_and_expiry() {
    let dir = temp_dir();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let llm = ScriptedLlm::new(|request| {
        // Answers with the number of earlier user turns it can see.
        let earlier = request
            .messages
            .iter()
            .filter(|m| m.role == agora_llm::Role::User)
            .count()
            - 1;
        Ok(json!({"tool": "final_answer", "answer": format!("turn {earlier}")}).to_string())
    });
    let node = NodeBuilder::new(llm.clone(), dir.path())
        .clock(clock.clone())
        .build()
        .await;
    let first = node.handle(nl("hello", true)).await;
    assert_eq!(first.body.clone().unwrap().to_text(), "turn 0");
    let id = first.conversation_id.clone().expect("a conversation id");
    assert_eq!(first.conversation_expires, Some(1_700_000_000 + 300));

    clock.advance(Duration::from_secs(200));
    let second = node.follow_up(&id, follow_up("again")).await.unwrap();
    assert_eq!(second.body.unwrap().to_text(), "turn 1");
    // The idle timer restarted at the follow-up.
    assert_eq!(second.conversation_expires, Some(1_700_000_000 + 200 + 300));

    clock.advance(Duration::from_secs(299));
    assert!(node.follow_up(&id, follow_up("still here")).await.is_ok());
    clock.advance(Duration::from_secs(301));
    assert!(node.follow_up(&id, follow_up("too late")).await.is_err());
    assert_eq!(node.purge_expired_conversations().await.unwrap(), 1);

    let other = node.handle(nl("hi", true)).await.conversation_id.unwrap();
    assert!(node.close_conversation(&other).await.unwrap());
    assert!(!node.close_conversation(&other).await.unwrap());
    assert!(node.follow_up(&other, follow_up("x")).await.is_err());
}

#[tokio::test]
async fn a_restart_keeps_documents_decisions_and_conversations() {
    let dir = temp_dir();
    let (hash, conversation_id) = {
        let node = weather_node(ScriptedLlm::new(competent), dir.path()).await;
        let body = london();
        let reply = node.handle(inline(WEATHER_PD, body)).await;
        assert_eq!(reply.status, Status::Success);
        let opened = node
            .handle(nl("Weather in London on 2024-09-27?", true))
            .await;
        (
            ProtocolHash::of(WEATHER_PD.as_bytes()),
            opened.conversation_id.unwrap(),
        )
    };
    let llm = ScriptedLlm::new(competent);
    let node = weather_node(llm.clone(), dir.path()).await;
    // Known document, known decision: no sources, no check.
    let body = london();
    let reply = node.handle(protocol(WEATHER_PD, vec![], body)).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    assert!(
        llm.calls()
            .iter()
            .all(|r| schema_name(r) != Some("suitability"))
    );
    assert!(suitability(&node, &hash).await.allowed);
    // The conversation survived, with its history.
    let follow = node
        .follow_up(&conversation_id, follow_up("And the day after?"))
        .await
        .unwrap();
    assert_eq!(follow.status, Status::Success);
    let last = llm.calls().last().unwrap().clone();
    assert!(
        last.messages
            .iter()
            .any(|m| m.content.contains("Weather in London on 2024-09-27?"))
    );
    assert_eq!(node.wellknown().await.unwrap().len(), 1);
}

#[tokio::test]
async fn llm_failure_is_a_failure_reply_not_a_crash() {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(|_| {
        Err(agora_llm::LlmError::Unavailable(
            "connection refused".into(),
        ))
    });
    let node = NodeBuilder::new(llm, dir.path()).build().await;
    let reply = node.handle(nl("hello", true)).await;
    assert_eq!(reply.status, Status::Failure);
    assert!(reply.conversation_id.is_none());
    let requests = agora_testkit::recent_requests(&node, 1).await;
    assert_eq!(requests[0].status, "failure");
}

#[tokio::test]
async fn native_tool_calling_when_the_backend_supports_it() {
    let dir = temp_dir();
    let llm = ScriptedLlm::with_tool_calls(|request| {
        assert!(
            request.format == agora_llm::OutputFormat::Text,
            "no schema in native mode"
        );
        let last = last_user_message(request);
        if let Some(result) = last.strip_prefix("Result of weather_forecast: ") {
            let forecast: Value = serde_json::from_str(result).unwrap();
            Ok((
                format!("It will be {} degrees.", forecast["temperature_c"]),
                vec![],
            ))
        } else {
            assert_eq!(request.tools.len(), 1, "the tools are offered natively");
            Ok((
                String::new(),
                vec![agora_llm::ToolCallRequest {
                    name: "weather_forecast".into(),
                    arguments: json!({"location": "London, UK", "date": "2024-09-27"}),
                }],
            ))
        }
    });
    let node =
        weather_node_with(llm.clone(), dir.path(), |c| c.responder.native_tools = true).await;
    assert_answers_london_in_words(&node).await;
    assert_eq!(llm.call_count(), 2);
}

/// The last user message of each responder step the LLM was asked, in order.
fn step_messages(llm: &ScriptedLlm) -> Vec<String> {
    llm.calls()
        .iter()
        .filter(|c| schema_name(c) == Some("step"))
        .map(|c| last_user_message(c).to_string())
        .collect()
}

/// A protocol answer given before the tool its rules name was called is sent back once with a
/// reminder; a natural-language answer is not (its focus is everything).
#[tokio::test]
async fn an_answer_before_the_rules_tool_is_sent_back_once() {
    let hasty = |request: &ChatRequest| -> Turn {
        let last = last_user_message(request);
        if schema_name(request) == Some("suitability") {
            return Ok(r#"{"reason": "weather", "suitable": "yes"}"#.into());
        }
        if last.starts_with("Not yet") {
            return Ok(json!({"tool": "weather_forecast", "arguments": {"location": "London, UK", "date": "2024-09-27"}}).to_string());
        }
        competent(request).map(|turn| {
            // Answer at once, with nothing looked up, unless a result is in.
            if last.starts_with("Result of") {
                turn
            } else if request.messages[0].content.contains("Protocol document") {
                json!({"tool": "final_answer", "answer": {"temperature": 20}}).to_string()
            } else {
                json!({"tool": "final_answer", "answer": "Sunny, I think."}).to_string()
            }
        })
    };
    let llm = ScriptedLlm::new(hasty);
    let dir = temp_dir();
    let node = weather_node_with(llm.clone(), dir.path(), |c| {
        c.description = "Bob's weather desk. It forecasts the weather for a location and a date \
            with its weather_forecast tool."
            .into();
    })
    .await;
    let reply = node.handle(inline(WEATHER_PD, london())).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    let answer: Value = serde_json::from_str(&reply.body.unwrap().to_text()).unwrap();
    assert_eq!(answer["temperature"], expected_forecast()["temperature_c"]);
    let steps = step_messages(&llm);
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(
        steps[1].starts_with("Not yet: the rules for this request use weather_forecast"),
        "{steps:?}"
    );

    let before = llm.call_count();
    let reply = node
        .handle(nl("Weather in London on 2024-09-27?", false))
        .await;
    assert_eq!(reply.body.unwrap().to_text(), "Sunny, I think.");
    assert_eq!(llm.call_count(), before + 1);
}

const DSL_PD: &str = include_str!("../../../../protocols/agent-dsl-weather.md");

/// A query of the agent message DSL (seed 000) for London.
fn dsl_query() -> Body {
    Body::Text(
        json!({"header": {"version": "1.0", "sender": "alice", "receiver": "bob",
            "type": "QUERY", "id": "msg-1", "timestamp": "2024-09-26T10:00:00Z",
            "content_type": "application/json", "conversation_id": "conv-1"},
            "body": r#"{"location": "London, UK", "date": "2024-09-27"}"#})
        .to_string(),
    )
}

/// The mistakes the local 1.5B model makes under the seed envelope protocols, in the order it
/// made them (see `agora_node::responder`): a forecast from nowhere, then the tool's member
/// names, then the payload without its envelope. Each reminder gets the next answer.
fn careless(request: &ChatRequest) -> Turn {
    let last = last_user_message(request);
    if schema_name(request) == Some("suitability") {
        return Ok(r#"{"reason": "weather", "suitable": "yes"}"#.into());
    }
    let forecast = expected_forecast();
    let tools_names = json!({"temperature_c": forecast["temperature_c"],
        "precipitation_mm": forecast["precipitation_mm"], "condition": forecast["condition"]});
    let named = json!({"temperature": forecast["temperature_c"],
        "precipitation": forecast["precipitation_mm"], "weatherCondition": forecast["condition"]});
    let answer = |value: Value| Ok(json!({"tool": "final_answer", "answer": value}).to_string());
    if last.starts_with("Request body:") {
        answer(json!({"temperature_c": 15.5, "precipitation_mm": 10.0, "condition": "rainy"}))
    } else if last.starts_with("Not yet: 15.5 in your answer is in no tool result") {
        Ok(json!({"tool": "weather_forecast",
            "arguments": {"location": "London, UK", "date": "2024-09-27"}})
        .to_string())
    } else if last.starts_with("Result of weather_forecast") {
        answer(tools_names)
    } else if last.starts_with("Not yet: the protocol document names no member temperature_c") {
        assert!(
            last.contains("temperature for temperature_c")
                && last.contains("weatherCondition for condition"),
            "the document's names are suggested: {last}"
        );
        answer(named)
    } else if last.starts_with("Not yet: your answer is not a whole message") {
        assert!(
            last.contains("header (an object), body (a string)"),
            "{last}"
        );
        answer(
            json!({"header": {"version": "1.0", "sender": "bob", "receiver": "alice",
            "type": "RESPONSE", "id": "msg-2", "timestamp": "2024-09-26T10:00:01Z",
            "content_type": "application/json", "reply_to": "msg-1",
            "conversation_id": "conv-1"}, "body": named.to_string()}),
        )
    } else {
        panic!("an unexpected step: {last}")
    }
}

/// A protocol answer is checked before it is sent: numbers from nowhere, member names the
/// document never uses, and a payload out of the request's envelope are each sent back once.
#[tokio::test]
async fn a_protocol_answer_from_nowhere_misnamed_or_out_of_its_envelope_is_sent_back() {
    let llm = ScriptedLlm::new(careless);
    let dir = temp_dir();
    let node = weather_node_with(llm.clone(), dir.path(), |c| {
        c.description = "Bob is a weather service.".into();
    })
    .await;
    let reply = node.handle(inline(DSL_PD, dsl_query())).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    let message: Value = serde_json::from_str(&reply.body.unwrap().to_text()).unwrap();
    assert_eq!(message["header"]["type"], "RESPONSE", "{message}");
    let body: Value = serde_json::from_str(message["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["temperature"], expected_forecast()["temperature_c"]);
    let steps = step_messages(&llm);
    let expected = [
        "Request body:",
        "Not yet: 15.5 in your answer is in no tool result",
        "Result of weather_forecast:",
        "Not yet: the protocol document names no member temperature_c",
        "Not yet: your answer is not a whole message",
    ];
    assert_eq!(steps.len(), expected.len(), "{steps:#?}");
    for (step, start) in steps.iter().zip(expected) {
        assert!(step.starts_with(start), "{start:?}: {steps:#?}");
    }

    // With the checks off, the first answer is sent as it is.
    let llm = ScriptedLlm::new(careless);
    let dir = temp_dir();
    let node = weather_node_with(llm.clone(), dir.path(), |c| {
        c.description = "Bob is a weather service.".into();
        c.responder.check_answers = false;
    })
    .await;
    let reply = node.handle(inline(DSL_PD, dsl_query())).await;
    let answer: Value = serde_json::from_str(&reply.body.unwrap().to_text()).unwrap();
    assert_eq!(answer["temperature_c"], 15.5);
    assert_eq!(
        llm.calls()
            .iter()
            .filter(|c| schema_name(c) == Some("step"))
            .count(),
        1
    );
}

/// A rental desk's one tool: it runs a "statement", and knows a `SELECT` from a write.
struct Desk {
    spec: agora_node::tools::ToolSpec,
    statements: std::sync::Mutex<Vec<String>>,
}

impl Desk {
    fn new() -> Arc<Desk> {
        Arc::new(Desk {
            spec: agora_node::tools::ToolSpec {
                name: "desk".into(),
                description: "Runs one statement on the rentals database.".into(),
                parameters: json!({"type": "object", "properties": {"statement": {"type": "string"}}, "required": ["statement"]}),
                returns: None,
            },
            statements: std::sync::Mutex::new(Vec::new()),
        })
    }
}

#[async_trait::async_trait]
impl agora_node::Tool for Desk {
    fn spec(&self) -> &agora_node::tools::ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, agora_node::tools::ToolError> {
        let statement = arguments["statement"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.statements.lock().unwrap().push(statement);
        Ok(json!([{"SkiId": "A321"}]))
    }

    fn changes_state(&self, arguments: &Value) -> Option<bool> {
        let statement = arguments["statement"].as_str()?;
        Some(!statement.starts_with("SELECT"))
    }
}

const RENT_PD: &str = "---\nname: rent\n---\n\nThe request is a JSON object with `type`, the \
kind of ski to rent. The reply is a JSON object with `status`: `success` if the ski was rented, \
`failure` if not.\n";

/// A node with `desk`, `llm` and, when given, a routine `engine`, configured by `configure`, in
/// a new temporary folder.
async fn desk_node(
    llm: Arc<ScriptedLlm>,
    desk: &Arc<Desk>,
    engine: Option<agora_testkit::ScriptedRoutineEngine>,
    configure: impl FnOnce(&mut agora_node::NodeConfig),
) -> (tempfile::TempDir, Node) {
    let dir = temp_dir();
    let mut builder = NodeBuilder::new(llm, dir.path())
        .connected_tools(vec![desk.clone()])
        .config(configure);
    if let Some(engine) = engine {
        builder = builder.routine_engine(Arc::new(engine));
    }
    let node = builder.build().await;
    (dir, node)
}

/// A carving ski asked for under `document`.
async fn ask_for_carving(node: &Node, document: &str) -> agora_protocol::Reply {
    node.handle(inline(document, Body::Json(json!({"type": "carving"}))))
        .await
}

/// A carving ski rented under [`RENT_PD`] from a node with `desk` and `llm`, configured by
/// `configure`; the request must be answered.
async fn rent_carving(
    llm: &Arc<ScriptedLlm>,
    desk: &Arc<Desk>,
    configure: impl FnOnce(&mut agora_node::NodeConfig),
) {
    let (_dir, node) = desk_node(llm.clone(), desk, None, configure).await;
    let reply = ask_for_carving(&node, RENT_PD).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
}

/// A protocol answer that says the request was done, when every tool call only read, is sent
/// back once with `responder.require_effects` (and only then): told so, the LLM writes.
#[tokio::test]
async fn a_success_that_only_read_is_sent_back_once_when_effects_are_required() {
    let lazy = |request: &ChatRequest| -> Turn {
        if schema_name(request) == Some("suitability") {
            return Ok(r#"{"reason": "rentals", "suitable": "yes"}"#.into());
        }
        let last = last_user_message(request);
        let statement = if last.starts_with("Not yet: your answer says the request was done") {
            "INSERT INTO SkiRentals VALUES ('A321')"
        } else if last.starts_with("Result of desk") {
            return Ok(
                json!({"tool": "final_answer", "answer": {"status": "success"}}).to_string(),
            );
        } else {
            "SELECT SkiId FROM Skis"
        };
        Ok(json!({"tool": "desk", "arguments": {"statement": statement}}).to_string())
    };
    for on in [true, false] {
        let llm = ScriptedLlm::new(lazy);
        let desk = Desk::new();
        rent_carving(&llm, &desk, |c| c.responder.require_effects = on).await;
        let statements = desk.statements.lock().unwrap().clone();
        let steps = step_messages(&llm);
        if on {
            assert_eq!(
                statements,
                [
                    "SELECT SkiId FROM Skis",
                    "INSERT INTO SkiRentals VALUES ('A321')"
                ]
            );
            // SELECT, the answer sent back, INSERT, the answer kept (it followed a write).
            assert_eq!(steps.len(), 4, "{steps:?}");
            assert_eq!(steps[2], agora_node::responder::NOT_DONE);
        } else {
            assert_eq!(statements, ["SELECT SkiId FROM Skis"]);
            assert_eq!(steps.len(), 2, "{steps:?}");
        }
    }
}

/// Code as action under `responder.require_effects`: a program whose reply says the rental was
/// done while its only tool call read is sent back with [`agora_node::acting::PROGRAM_NOT_DONE`]
/// (the local model's first booking programs looked the table up, found it free and replied
/// `success`); the repaired program rents, and its answer is the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_whose_success_only_read_is_sent_back_when_effects_are_required() {
    async fn desk(tools: &Arc<dyn agora_node::ToolHost>, statement: &str) {
        let arguments = json!({ "statement": statement }).to_string();
        tools.call_tool("desk", &arguments).await.unwrap();
    }
    let engine = agora_testkit::ScriptedRoutineEngine::new()
        .routine("looks only", |_body, tools| async move {
            desk(&tools, "SELECT SkiId FROM Skis").await;
            Ok(json!({"status": "success"}).to_string())
        })
        .routine("rents", |_body, tools| async move {
            desk(&tools, "SELECT SkiId FROM Skis").await;
            desk(&tools, "INSERT INTO SkiRentals VALUES ('A321')").await;
            Ok(json!({"status": "success"}).to_string())
        });
    let llm = ScriptedLlm::new(|request: &ChatRequest| -> Turn {
        if schema_name(request) == Some("suitability") {
            return Ok(r#"{"reason": "rentals", "suitable": "yes"}"#.into());
        }
        let last = last_user_message(request);
        if last.starts_with(agora_node::acting::PROGRAM_NOT_DONE) {
            Ok("```javascript\nrents\n```".into())
        } else {
            Ok("```javascript\nlooks only\n```".into())
        }
    });
    let desk_tool = Desk::new();
    let (_dir, node) = desk_node(llm.clone(), &desk_tool, Some(engine), |c| {
        c.responder.code_as_action = true
    })
    .await;
    let reply = ask_for_carving(&node, RENT_PD).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    assert_eq!(
        desk_tool.statements.lock().unwrap().clone(),
        [
            "SELECT SkiId FROM Skis",
            "SELECT SkiId FROM Skis",
            "INSERT INTO SkiRentals VALUES ('A321')"
        ]
    );
    let programs: Vec<String> = llm
        .calls()
        .iter()
        .filter(|r| schema_name(r) != Some("suitability"))
        .map(|r| last_user_message(r).to_string())
        .collect();
    assert_eq!(
        programs.len(),
        2,
        "a program, then its repair: {programs:?}"
    );
    assert!(programs[1].starts_with(agora_node::acting::PROGRAM_NOT_DONE));
}

/// [`RENT_PD`] saying in its front matter that its requests change nothing: a question.
const SKIS_PD: &str = "---\nname: skis\nread_only: true\n---\n\nThe request is a JSON object \
with `type`, the kind of ski. The reply is a JSON object with `status`: `success` if such a ski \
is free, `failure` if not.\n";

/// A routine that looks a ski up, then rents it.
fn looks_up_and_rents() -> agora_testkit::ScriptedRoutineEngine {
    agora_testkit::ScriptedRoutineEngine::new().routine(
        "looks up and rents",
        |_body, tools| async move {
            let call = |statement: &str| json!({ "statement": statement }).to_string();
            tools
                .call_tool("desk", &call("SELECT SkiId FROM Skis"))
                .await
                .map_err(agora_node::RoutineError::Failed)?;
            tools
                .call_tool("desk", &call("INSERT INTO SkiRentals VALUES ('A321')"))
                .await
                .map_err(agora_node::RoutineError::Failed)?;
            Ok(json!({"status": "success"}).to_string())
        },
    )
}

/// A routine answering a question may only read: under a document that says `read_only: true`
/// (or one the operator lists in `routines.read_only_protocols`) its INSERT fails before it
/// reaches the tool, and the routine fails; under one that does not, the same
/// routine rents.
#[tokio::test]
async fn a_routine_for_a_question_may_not_call_a_tool_that_acts() {
    let cases = [
        (SKIS_PD, false, false),
        (RENT_PD, true, false),
        (RENT_PD, false, true),
    ];
    for (document, declared, acts) in cases {
        let desk = Desk::new();
        let engine = Some(looks_up_and_rents());
        let (_dir, node) = desk_node(ScriptedLlm::unreachable(), &desk, engine, |c| {
            c.routines.fallback_to_llm = false;
            if declared {
                c.routines
                    .read_only_protocols
                    .insert(ProtocolHash::of(document.as_bytes()));
            }
        })
        .await;
        let spec = agora_testkit::human_routine("rent", document, "looks up and rents", &["desk"]);
        node.add_routine(spec).await.unwrap();
        let reply = ask_for_carving(&node, document).await;
        let statements = desk.statements.lock().unwrap().clone();
        if acts {
            assert_eq!(reply.status, Status::Success, "{reply:?}");
            assert_eq!(statements.len(), 2);
        } else {
            // The peer is told the routine failed; the operator's record says why.
            assert_eq!(reply.status, Status::Failure, "{reply:?}");
            let routine = node.store().routines().await.unwrap().remove(0);
            let error = routine.last_error.unwrap_or_default();
            assert!(error.contains("answers a question"), "{error}");
            assert_eq!(
                statements,
                ["SELECT SkiId FROM Skis"],
                "declared: {declared}"
            );
        }
    }
}

/// No routine is written for a question from examples that acted: the LLM's tool loop rented a
/// ski while answering a protocol the operator declared read-only, and the programmer refuses
/// with no LLM call, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_routine_is_written_for_a_question_from_examples_that_acted() {
    let llm = ScriptedLlm::new(|request: &ChatRequest| -> Turn {
        if schema_name(request) == Some("suitability") {
            return Ok(r#"{"reason": "rentals", "suitable": "yes"}"#.into());
        }
        assert_eq!(schema_name(request), Some("step"), "no programmer call");
        let results = request
            .messages
            .iter()
            .filter(|m| m.content.starts_with("Result of desk"))
            .count();
        Ok(match results {
            0 => json!({"tool": "desk", "arguments": {"statement": "SELECT SkiId FROM Skis"}}),
            1 => json!({"tool": "desk", "arguments": {"statement": "INSERT INTO SkiRentals VALUES ('A321')"}}),
            _ => json!({"tool": "final_answer", "answer": {"status": "success"}}),
        }
        .to_string())
    });
    let desk = Desk::new();
    let hash = ProtocolHash::of(RENT_PD.as_bytes());
    let (_dir, node) = desk_node(llm, &desk, Some(looks_up_and_rents()), |c| {
        c.thresholds.implementation = 1;
        c.routines.read_only_protocols.insert(hash);
    })
    .await;
    let reply = ask_for_carving(&node, RENT_PD).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    node.programmer_idle().await;
    let attempts = agora_testkit::attempts(&node, &hash).await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].outcome.as_str(), "tests_failed");
    assert!(
        attempts[0].report.starts_with(
            "refused: the protocol is a question (read-only), and example 1 called desk"
        ),
        "{}",
        attempts[0].report
    );
    assert!(node.store().routines().await.unwrap().is_empty());
    assert!(
        !llm_categories(&node)
            .await
            .iter()
            .any(|c| c == "implementing")
    );
}
