//! The HTTP edge over a real loopback socket: status codes and the error
//! shape for bad input, discovery, documents, admin auth and metrics.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use crate::support::{Spawn, raw};
use agora_protocol::{ProtocolHash, data_uri};
use agora_testkit::{NodeBuilder, ScriptedLlm, TestServer, temp_dir};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

fn answering() -> std::sync::Arc<ScriptedLlm> {
    ScriptedLlm::new(|request| match agora_testkit::schema_name(request) {
        Some("suitability") => Ok(r#"{"reason": "fine", "suitable": "yes"}"#.into()),
        _ => Ok(json!({"tool": "final_answer", "answer": "hello from the node"}).to_string()),
    })
}

async fn server(dir: &std::path::Path) -> TestServer {
    NodeBuilder::new(answering(), dir)
        .admin_token("secret-token")
        .spawn()
        .await
}

/// [`server`] with a routine engine.
async fn routine_server(dir: &std::path::Path) -> TestServer {
    NodeBuilder::new(answering(), dir)
        .routine_engine(routine_engine())
        .admin_token("secret-token")
        .spawn()
        .await
}

/// Calls the admin API with the test token; returns (status, body text).
async fn admin(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, String) {
    let url = format!("{}/admin{path}", server.url);
    let mut request = reqwest::Client::new()
        .request(method, url)
        .bearer_auth("secret-token");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// [`admin`], for a call that answers JSON.
async fn admin_json(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let (_, text) = admin(server, method, path, body).await;
    serde_json::from_str(&text).unwrap()
}

fn assert_error_shape(body: &str) -> Value {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    assert_eq!(value["status"], "failure", "{value}");
    assert!(
        value["error"].is_string() && value["message"].is_string(),
        "{value}"
    );
    value
}

#[tokio::test]
async fn malformed_input_gets_4xx_in_the_protocol_error_shape() {
    let dir = temp_dir();
    let server = server(dir.path()).await;
    for (body, status) in [
        ("{not json", 400),
        ("", 400),
        ("[1, 2]", 400),
        (r#"{"protocolSources": [], "body": "x"}"#, 400),
        (r#"{"protocolHash": null, "protocolSources": []}"#, 400),
        (
            r#"{"protocolHash": "not-a-hash", "protocolSources": [], "body": "x"}"#,
            400,
        ),
        (
            r#"{"protocolHash": 7, "protocolSources": [], "body": "x"}"#,
            400,
        ),
    ] {
        let (code, text, content_type) = raw(&server, reqwest::Method::POST, "/", Some(body)).await;
        assert_eq!(code, status, "{body} -> {text}");
        assert!(content_type.unwrap().starts_with("application/json"));
        assert_error_shape(&text);
    }
    let huge = format!(
        r#"{{"protocolHash": null, "protocolSources": [], "body": "{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    let (code, text, _) = raw(&server, reqwest::Method::POST, "/", Some(&huge)).await;
    assert_eq!(code, 413);
    assert_eq!(assert_error_shape(&text)["code"], "payload_too_large");

    let (code, text, _) = raw(&server, reqwest::Method::GET, "/", None).await;
    assert_eq!(code, 405);
    assert_error_shape(&text);
    let (code, text, _) = raw(&server, reqwest::Method::GET, "/nowhere", None).await;
    assert_eq!(code, 404);
    assert_error_shape(&text);
}

#[tokio::test]
async fn natural_language_and_conversations_over_http() {
    let dir = temp_dir();
    let server = server(dir.path()).await;
    let (status, reply) = server
        .post(
            "/",
            &json!({"protocolHash": null, "protocolSources": [], "body": "hi", "multiround": true}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(reply["status"], "success");
    assert_eq!(reply["body"], "hello from the node");
    let id = reply["conversationId"].as_str().unwrap().to_string();
    assert!(reply["conversationExpires"].as_i64().unwrap() > 1_600_000_000);

    // The Python sender repeats the whole envelope on follow-ups.
    let (status, follow) = server
        .post(&format!("/conversations/{id}"), &json!({"protocolHash": null, "protocolSources": [], "body": "again", "multiround": true}))
        .await;
    assert_eq!((status, follow["status"].as_str()), (200, Some("success")));

    let (code, text, _) = raw(
        &server,
        reqwest::Method::DELETE,
        &format!("/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["status"],
        "success"
    );
    // Unknown ids: DELETE still answers 200 (the Python sender insists), POST answers 404.
    let (code, _, _) = raw(
        &server,
        reqwest::Method::DELETE,
        "/conversations/nope",
        None,
    )
    .await;
    assert_eq!(code, 200);
    let (status, body) = server
        .post(&format!("/conversations/{id}"), &json!({"body": "gone?"}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "conversation_not_found");
}

#[tokio::test]
async fn wellknown_and_documents_are_served() {
    let dir = temp_dir();
    let server = server(dir.path()).await;
    let (_, empty, _) = raw(&server, reqwest::Method::GET, "/.wellknown", None).await;
    assert_eq!(serde_json::from_str::<Value>(&empty).unwrap(), json!({}));

    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let (status, reply) = server
        .post("/", &json!({"protocolHash": hash.to_base64(), "protocolSources": [data_uri::encode(WEATHER_PD)], "body": "{}"}))
        .await;
    assert_eq!(
        (status, reply["status"].as_str()),
        (200, Some("success")),
        "{reply}"
    );

    for path in ["/.wellknown", "/wellknown"] {
        let (code, text, _) = raw(&server, reqwest::Method::GET, path, None).await;
        assert_eq!(code, 200);
        let listing: Value = serde_json::from_str(&text).unwrap();
        let sources = listing[hash.to_hex()].as_array().expect("listed");
        assert_eq!(
            sources[0],
            format!("{}/protocols/{}", server.url, hash.to_hex())
        );
    }
    let (code, text, content_type) = raw(
        &server,
        reqwest::Method::GET,
        &format!("/protocols/{}", hash.to_hex()),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(content_type.as_deref(), Some("text/plain; charset=utf-8"));
    assert_eq!(text, WEATHER_PD);
    assert_eq!(ProtocolHash::of(text.as_bytes()), hash);
    let (code, _, _) = raw(
        &server,
        reqwest::Method::GET,
        &format!("/protocols/{}", ProtocolHash::of(b"x").to_hex()),
        None,
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn admin_api_requires_the_token() {
    let dir = temp_dir();
    let server = server(dir.path()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/admin/protocols", server.url);
    assert_eq!(
        client.get(&url).send().await.unwrap().status().as_u16(),
        401
    );
    assert_eq!(
        client
            .get(&url)
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    let add = Some(json!({"text": WEATHER_PD, "sources": []}));
    let added = admin_json(&server, reqwest::Method::POST, "/protocols", add).await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    assert_eq!(added["hash"], hash.to_hex());
    let decision = format!("/protocols/{}/decision", hash.to_hex());
    let allow = Some(json!({"allowed": true, "reason": "ours"}));
    let (status, _) = admin(&server, reqwest::Method::PUT, &decision, allow).await;
    assert_eq!(status, 200);
    let listed = admin_json(&server, reqwest::Method::GET, "/protocols", None).await;
    assert_eq!(listed[0]["decision"]["allowed"], true);
    assert_eq!(listed[0]["decision"]["origin"], "operator");

    // Without a configured token the admin API is off.
    let other_dir = temp_dir();
    let open = NodeBuilder::new(answering(), other_dir.path())
        .spawn()
        .await;
    let status = client
        .get(format!("{}/admin/protocols", open.url))
        .bearer_auth("")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 403);
}

#[tokio::test]
async fn metrics_report_the_ledger() {
    let dir = temp_dir();
    let server = server(dir.path()).await;
    server
        .post(
            "/",
            &json!({"protocolHash": null, "protocolSources": [], "body": "hi"}),
        )
        .await;
    let (code, text, content_type) = raw(&server, reqwest::Method::GET, "/metrics", None).await;
    assert_eq!(code, 200);
    assert!(content_type.unwrap().starts_with("text/plain"));
    assert!(text.contains("agora_llm_calls_total{node=\"test-node\",category=\"conversation\",model=\"scripted\"} 1"), "{text}");
    assert!(text.contains("agora_http_requests_total{node=\"test-node\",method=\"POST\",route=\"/\",status=\"200\"} 1"), "{text}");
}

/// Prompt tokens the endpoint read from its cache (the scripted model counts the prompt's
/// beginning shared with its previous call) are kept in the ledger, charged at the table's
/// cached-input price, and exported.
#[tokio::test]
async fn cached_prompt_tokens_are_kept_priced_and_exported() {
    let dir = temp_dir();
    let prices = agora_llm::PriceTable {
        prompt_usd_per_million: 5.0,
        completion_usd_per_million: 15.0,
        cached_prompt_usd_per_million: Some(0.5),
    };
    let server = NodeBuilder::new(answering(), dir.path())
        .prices(prices.clone())
        .spawn()
        .await;
    for body in ["hello there", "hello again"] {
        let (status, _) = server
            .post(
                "/",
                &json!({"protocolHash": null, "protocolSources": [], "body": body}),
            )
            .await;
        assert_eq!(status, 200);
    }
    let calls = agora_testkit::llm_calls(&server.node).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].cached_prompt_tokens, 0);
    let cached = calls[1].cached_prompt_tokens;
    assert!(
        cached > 0 && cached < calls[1].prompt_tokens,
        "the second call shares the node's rules, not the message: {calls:?}"
    );
    for call in &calls {
        let usage = agora_llm::Usage {
            prompt_tokens: call.prompt_tokens as u32,
            completion_tokens: call.completion_tokens as u32,
            cached_prompt_tokens: call.cached_prompt_tokens as u32,
        };
        let expected = ((call.prompt_tokens - call.cached_prompt_tokens) as f64 * 5.0
            + call.cached_prompt_tokens as f64 * 0.5
            + call.completion_tokens as f64 * 15.0)
            / 1e6;
        assert!((call.cost_usd - expected).abs() < 1e-12, "{call:?}");
        assert!((prices.cost(&usage) - expected).abs() < 1e-12);
    }
    let metrics = server.get_text("/metrics").await;
    let line = format!(
        "agora_llm_cached_prompt_tokens_total{{node=\"test-node\",category=\"conversation\",model=\"scripted\"}} {cached}"
    );
    assert!(metrics.contains(&line), "{line} in {metrics}");
}

fn routine_engine() -> std::sync::Arc<agora_testkit::ScriptedRoutineEngine> {
    std::sync::Arc::new(agora_testkit::ScriptedRoutineEngine::new().routine(
        "shout",
        |body, _tools| async move { Ok(body.to_uppercase()) },
    ))
}

#[tokio::test]
async fn routine_admin_routes_require_the_token() {
    let dir = temp_dir();
    let server = routine_server(dir.path()).await;
    let other_dir = temp_dir();
    let disabled = NodeBuilder::new(answering(), other_dir.path())
        .routine_engine(routine_engine())
        .spawn()
        .await;
    let client = reqwest::Client::new();
    let add = json!({"name": "shout", "protocolText": WEATHER_PD, "source": "shout"});
    for (method, path) in [
        (reqwest::Method::GET, "/admin/routines"),
        (reqwest::Method::POST, "/admin/routines"),
        (reqwest::Method::GET, "/admin/routines/shout"),
        (reqwest::Method::POST, "/admin/routines/shout/enable"),
        (reqwest::Method::POST, "/admin/routines/shout/disable"),
        (reqwest::Method::POST, "/admin/routines/shout/test"),
        (reqwest::Method::GET, "/admin/routines/shout/review"),
        (reqwest::Method::POST, "/admin/routines/shout/approve"),
        (reqwest::Method::POST, "/admin/routines/shout/reject"),
        (reqwest::Method::POST, "/admin/routines/shout/edit"),
        (reqwest::Method::DELETE, "/admin/routines/shout"),
    ] {
        for (url, token, expected) in [
            (&server.url, None, 401),
            (&server.url, Some("wrong"), 401),
            (&disabled.url, None, 403),
            (&disabled.url, Some("secret-token"), 403),
        ] {
            let mut request = client
                .request(method.clone(), format!("{url}{path}"))
                .json(&add);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status().as_u16(),
                expected,
                "{method} {path} {token:?}"
            );
            assert_error_shape(&response.text().await.unwrap());
        }
    }
    // Nothing got through.
    assert!(server.node.routines().list().await.unwrap().is_empty());
    assert!(disabled.node.routines().list().await.unwrap().is_empty());
}

#[tokio::test]
async fn routines_are_managed_over_the_admin_api() {
    let dir = temp_dir();
    let server = routine_server(dir.path()).await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let question = json!({"protocolHash": hash.to_hex(), "protocolSources": [data_uri::encode(WEATHER_PD)], "body": "quiet please"});
    let ask = || server.post("/", &question);

    let (status, added) = admin(&server, reqwest::Method::POST,
        "/routines",
        Some(json!({"name": "shout", "protocolText": WEATHER_PD, "source": "shout", "timeoutMs": 500, "memoryMb": 16})),
    )
    .await;
    assert_eq!(status, 201);
    let added: Value = serde_json::from_str(&added).unwrap();
    assert_eq!(added["status"], "active");
    assert_eq!(added["protocolHash"], hash.to_hex());
    assert_eq!(
        (added["timeoutMs"].as_i64(), added["memoryMb"].as_f64()),
        (Some(500), Some(16.0))
    );
    // Applied at once: the routine answers, not the LLM.
    let (_, reply) = ask().await;
    assert_eq!(reply["body"], "QUIET PLEASE");

    let again = json!({"name": "shout", "protocolHash": hash.to_hex(), "source": "shout"});
    let (status, _) = admin(&server, reqwest::Method::POST, "/routines", Some(again)).await;
    assert_eq!(status, 409);
    let broken =
        json!({"name": "broken", "protocolHash": hash.to_hex(), "source": "syntax error("});
    let (status, broken) = admin(&server, reqwest::Method::POST, "/routines", Some(broken)).await;
    assert_eq!(status, 422);
    assert!(
        assert_error_shape(&broken)["error"]
            .as_str()
            .unwrap()
            .contains("does not build")
    );
    let (status, _) = admin(&server, reqwest::Method::GET, "/routines/nope", None).await;
    assert_eq!(status, 404);

    let listed = admin_json(&server, reqwest::Method::GET, "/routines", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(
        (listed[0]["name"].as_str(), listed[0]["runs"].as_i64()),
        (Some("shout"), Some(1))
    );
    let shown = admin_json(&server, reqwest::Method::GET, "/routines/shout", None).await;
    assert_eq!(shown["source"], "shout");
    let test = Some(json!({"body": "hi"}));
    let tested = admin_json(&server, reqwest::Method::POST, "/routines/shout/test", test).await;
    assert_eq!(
        (tested["status"].as_str(), tested["body"].as_str()),
        (Some("success"), Some("HI"))
    );

    let disabled = admin_json(
        &server,
        reqwest::Method::POST,
        "/routines/shout/disable",
        None,
    )
    .await;
    assert_eq!(disabled["status"], "disabled");
    let (_, reply) = ask().await;
    assert_eq!(reply["body"], "hello from the node");
    let enable = format!("/routines/{}/enable", added["id"]);
    let enabled = admin_json(&server, reqwest::Method::POST, &enable, None).await;
    assert_eq!(enabled["status"], "active");
    let (_, reply) = ask().await;
    assert_eq!(reply["body"], "QUIET PLEASE");

    let metrics = server.get_text("/metrics").await;
    assert!(metrics.contains(&format!("agora_routine_runs_total{{node=\"test-node\",routine=\"shout\",protocol=\"{}\",origin=\"human\"}} 2", hash.to_hex())), "{metrics}");
    assert!(
        metrics.contains("agora_routine_failures_total{node=\"test-node\",routine=\"shout\""),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "agora_protocol_tokens_saved_estimate{{node=\"test-node\",protocol=\"{}\"}} ",
            hash.to_hex()
        )),
        "{metrics}"
    );

    let (status, _) = admin(&server, reqwest::Method::DELETE, "/routines/shout", None).await;
    assert_eq!(status, 200);
    let listed = admin_json(&server, reqwest::Method::GET, "/routines", None).await;
    assert_eq!(listed, json!([]));
    let (_, reply) = ask().await;
    assert_eq!(reply["body"], "hello from the node");
}

/// A routine waiting for review (as the programmer leaves one under `activation = "review"`):
/// it does not answer, cannot be enabled, and answers once approved; the review page shows it
/// and the decisions; an edit that fails its examination is refused with its report; every
/// decision needs a reviewer and is made once.
#[tokio::test]
async fn a_pending_routine_is_reviewed_over_the_admin_api() {
    let dir = temp_dir();
    let server = routine_server(dir.path()).await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let question = json!({"protocolHash": hash.to_hex(), "protocolSources": [data_uri::encode(WEATHER_PD)], "body": "quiet please"});
    let ask = || server.post("/", &question);
    let post = reqwest::Method::POST;
    let add =
        json!({"name": "shout", "protocolText": WEATHER_PD, "source": "shout", "activate": false});
    let (status, added) = admin(&server, post.clone(), "/routines", Some(add)).await;
    assert_eq!(status, 201, "{added}");
    let id = serde_json::from_str::<Value>(&added).unwrap()["id"]
        .as_i64()
        .unwrap();
    let store = server.node.store();
    let pending = agora_store::RoutineStatus::Pending;
    store.set_routine_status(id, pending, 1).await.unwrap();
    server.node.sync_routines().await.unwrap();

    let (_, reply) = ask().await;
    assert_eq!(
        reply["body"], "hello from the node",
        "a pending routine does not answer"
    );
    let (status, _) = admin(&server, post.clone(), "/routines/shout/enable", None).await;
    assert_eq!(status, 400, "enabling would skip the review");
    let page = review_page(&server).await;
    assert_eq!(
        (
            page["routine"]["status"].as_str(),
            page["routine"]["source"].as_str()
        ),
        (Some("pending"), Some("shout"))
    );
    assert_eq!(
        (&page["replaces"], &page["reviews"]),
        (&Value::Null, &json!([]))
    );

    // The routine's own reply to the one kept example, next to the LLM's.
    let page = review_page(&server).await;
    let example = &page["examples"][0];
    assert_eq!(
        (
            example["llmReply"].as_str(),
            example["routineReply"].as_str()
        ),
        (Some("hello from the node"), Some("QUIET PLEASE"))
    );
    assert_eq!(example["agrees"], false, "{example}");

    let approve = "/routines/shout/approve";
    let (status, body) = admin(&server, post.clone(), approve, Some(json!({}))).await;
    assert_eq!(status, 400);
    assert!(body.contains("reviewer"), "{body}");
    let reason = json!({"reviewer": "ada"});
    let (status, _) = admin(
        &server,
        post.clone(),
        "/routines/shout/reject",
        Some(reason),
    )
    .await;
    assert_eq!(status, 400, "a rejection needs a reason");
    // The LLM's answer above is the protocol's one example; "shout" does not give it back.
    let edit = json!({"reviewer": "ada", "source": "shout"});
    let (status, body) = admin(&server, post.clone(), "/routines/shout/edit", Some(edit)).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("failed its examination"), "{body}");
    let listed = admin_json(&server, reqwest::Method::GET, "/routines", None).await;
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "a failed edit is not stored"
    );

    let (status, approved) = admin(&server, post.clone(), approve, Some(reason_free())).await;
    assert_eq!(status, 200, "{approved}");
    assert!(approved.contains("\"active\""), "{approved}");
    let (_, reply) = ask().await;
    assert_eq!(reply["body"], "QUIET PLEASE");
    let (status, _) = admin(&server, post.clone(), approve, Some(reason_free())).await;
    assert_eq!(status, 400, "decided once");
    let page = review_page(&server).await;
    assert_eq!(page["reviews"][0]["decision"], "approved");
    assert_eq!(page["reviews"][0]["reviewer"], "ada");
}

fn reason_free() -> Value {
    json!({"reviewer": "ada"})
}

/// `GET /admin/routines/shout/review`.
async fn review_page(server: &TestServer) -> Value {
    admin_json(server, reqwest::Method::GET, "/routines/shout/review", None).await
}

#[tokio::test]
async fn each_node_reports_only_its_own_numbers_and_methods_are_bounded() {
    let (dir_a, dir_b) = (temp_dir(), temp_dir());
    let a = server(dir_a.path()).await;
    let b = NodeBuilder::new(answering(), dir_b.path())
        .config(|c| c.name = "other-node".into())
        .spawn()
        .await;
    let purge = reqwest::Method::from_bytes(b"PURGE").unwrap();
    let (code, _, _) = raw(&a, purge, "/healthz", None).await;
    assert_eq!(code, 405);
    for node in [&a, &b] {
        let (code, _, _) = raw(node, reqwest::Method::GET, "/healthz", None).await;
        assert_eq!(code, 200);
    }
    let (_, text_a, _) = raw(&a, reqwest::Method::GET, "/metrics", None).await;
    let (_, text_b, _) = raw(&b, reqwest::Method::GET, "/metrics", None).await;
    assert!(text_a.contains("agora_http_requests_total{node=\"test-node\",method=\"GET\",route=\"/healthz\",status=\"200\"} 1"), "{text_a}");
    assert!(
        text_a.contains("method=\"other\"") && !text_a.contains("PURGE"),
        "an unknown method is counted as other: {text_a}"
    );
    assert!(
        text_a.contains("# TYPE agora_http_requests counter"),
        "{text_a}"
    );
    assert!(text_b.contains("agora_http_requests_total{node=\"other-node\",method=\"GET\",route=\"/healthz\",status=\"200\"} 1"), "{text_b}");
    assert!(
        !text_b.contains("test-node") && !text_b.contains("method=\"other\""),
        "{text_b}"
    );

    let scraped = reqwest::Client::new()
        .get(format!("{}/metrics", b.url))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap();
    let content_type = scraped.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(scraped.text().await.unwrap().ends_with("# EOF\n"));
}
