//! The HTTP edge under hostile or heavy use, over real loopback sockets: slow-loris clients,
//! per-client budgets, client tokens, the LLM work bound, the request deadline, idempotency keys,
//! error hygiene, and the shutdown deadline (`agora_server::edge`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agora_llm::{ChatRequest, ChatResponse, Llm, LlmError};
use agora_server::EdgeSettings;
use agora_server::app::{AppState, serve_state};
use agora_testkit::{NodeBuilder, ScriptedLlm, Served, TestServer, temp_dir};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

/// Answers every request in natural language; counts its calls.
fn answering() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(|request| match agora_testkit::schema_name(request) {
        Some("suitability") => Ok(r#"{"reason": "fine", "suitable": "yes"}"#.into()),
        _ => Ok(json!({"tool": "final_answer", "answer": "hello from the node"}).to_string()),
    })
}

/// Serves `builder`'s node with `edge` settings.
async fn spawn(builder: NodeBuilder, edge: EdgeSettings) -> TestServer {
    builder
        .spawn_with(move |served: Served| {
            Box::pin(async move {
                let state = AppState::new(served.node, None, served.max_body_bytes, 64)
                    .with_edge(&edge)
                    .unwrap();
                let _ = serve_state(served.listener, state, served.shutdown).await;
            })
        })
        .await
}

fn natural(body: &str) -> Value {
    json!({"protocolHash": null, "protocolSources": [], "body": body})
}

/// Posts `body` with extra headers; returns (status, headers, JSON body).
async fn post(
    server: &TestServer,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/", server.url))
        .json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap())
}

/// An LLM that answers only once the test opens its gate (or never).
struct GatedLlm {
    gate: tokio::sync::Semaphore,
    started: AtomicUsize,
}

impl GatedLlm {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            gate: tokio::sync::Semaphore::new(0),
            started: AtomicUsize::new(0),
        })
    }

    async fn wait_started(&self, n: usize) {
        while self.started.load(Ordering::Acquire) < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[async_trait::async_trait]
impl Llm for GatedLlm {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.started.fetch_add(1, Ordering::AcqRel);
        let _pass = self.gate.acquire().await;
        answering().chat(request).await
    }

    fn model(&self) -> String {
        "gated".into()
    }
}

fn assert_failure(body: &Value, code: &str) {
    assert_eq!(body["status"], "failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_clients_are_cut_off_while_others_are_served() {
    let dir = temp_dir();
    let mut edge = EdgeSettings {
        header_timeout_secs: 1,
        body_timeout_secs: 1,
        ..EdgeSettings::default()
    };
    edge.rate_limit.enabled = false;
    let server = spawn(NodeBuilder::new(answering(), dir.path()), edge).await;
    let address = server.url.trim_start_matches("http://").to_string();
    // 150 clients trickle their headers, 150 their body, a byte every 200 ms.
    let mut slow = Vec::new();
    for n in 0..300 {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        let opening = if n % 2 == 0 {
            "POST / HTTP/1.1\r\nHost: x\r\n".to_string()
        } else {
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{".to_string()
        };
        stream.write_all(opening.as_bytes()).await.unwrap();
        slow.push(tokio::spawn(async move {
            let started = Instant::now();
            let mut buffer = [0u8; 1024];
            let mut answer = Vec::new();
            loop {
                tokio::select! {
                    read = stream.read(&mut buffer) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&buffer[..n]),
                    },
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {
                        if stream.write_all(b"a").await.is_err() {
                            break;
                        }
                    }
                }
                assert!(started.elapsed() < Duration::from_secs(20), "never cut off");
            }
            (
                started.elapsed(),
                String::from_utf8_lossy(&answer).into_owned(),
            )
        }));
    }
    // Meanwhile every normal request is answered, each well inside the slow clients' time.
    for n in 0..20 {
        let started = Instant::now();
        let (status, _, body) = post(&server, &natural(&format!("hello {n}")), &[]).await;
        assert_eq!(
            (status, &body["status"]),
            (200, &json!("success")),
            "{body}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    let mut timed_out_bodies = 0;
    for handle in slow {
        let (lasted, answer) = handle.await.unwrap();
        assert!(
            lasted >= Duration::from_millis(500),
            "cut off too soon: {lasted:?}"
        );
        if answer.starts_with("HTTP/1.1 408") {
            assert!(answer.contains("\"code\":\"timeout\""), "{answer}");
            timed_out_bodies += 1;
        }
    }
    assert_eq!(
        timed_out_bodies, 150,
        "each trickled body got a 408 in the error shape"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_refuse_with_429_and_retry_after_and_routines_have_their_own() {
    let dir = temp_dir();
    let mut edge = EdgeSettings::default();
    edge.rate_limit.llm_per_minute = 1;
    edge.rate_limit.llm_burst = 2;
    let builder = NodeBuilder::new(answering(), dir.path()).routine_engine(Arc::new(
        agora_testkit::ScriptedRoutineEngine::new().routine("shout", |body, _tools| async move {
            Ok(body.to_uppercase())
        }),
    ));
    let server = spawn(builder, edge).await;
    let spec = agora_testkit::human_routine("shout", WEATHER_PD, "shout", &[]);
    server.node.add_routine(spec).await.unwrap();
    for n in 0..2 {
        let (status, _, body) = post(&server, &natural(&format!("q{n}")), &[]).await;
        assert_eq!((status, &body["status"]), (200, &json!("success")));
    }
    let (status, headers, body) = post(&server, &natural("one too many"), &[]).await;
    assert_eq!(status, 429);
    assert_failure(&body, "rate_limited");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // The routine-served protocol spends from the other budget.
    let hash = agora_protocol::ProtocolHash::of(WEATHER_PD.as_bytes());
    let routine_request =
        json!({"protocolHash": hash.to_hex(), "protocolSources": [], "body": "paris"});
    for _ in 0..5 {
        let (status, _, body) = post(&server, &routine_request, &[]).await;
        assert_eq!((status, &body["body"]), (200, &json!("PARIS")));
    }
    // The refused request left no row: it never reached the engine.
    let requests = agora_testkit::recent_requests(&server.node, 20).await;
    assert_eq!(requests.len(), 7);
    assert!(
        requests
            .iter()
            .all(|r| r.client.as_deref() == Some("ip:127.0.0.1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tokens_name_the_client_in_the_ledger_and_strangers_get_401() {
    let dir = temp_dir();
    let mut edge = EdgeSettings::default();
    edge.clients.tokens = [("partner".to_string(), "p-token".to_string())].into();
    edge.rate_limit.llm_burst = 1;
    edge.rate_limit.llm_per_minute = 1;
    let server = spawn(NodeBuilder::new(answering(), dir.path()), edge).await;
    let (status, headers, body) = post(&server, &natural("hi"), &[]).await;
    assert_eq!(status, 401);
    assert_failure(&body, "unauthorized");
    assert_eq!(headers["www-authenticate"], "Bearer");
    let wrong = [("authorization", "Bearer nope")];
    assert_eq!(post(&server, &natural("hi"), &wrong).await.0, 401);
    let token = [("authorization", "Bearer p-token")];
    let (status, _, body) = post(&server, &natural("hi"), &token).await;
    assert_eq!((status, &body["status"]), (200, &json!("success")));
    let requests = agora_testkit::recent_requests(&server.node, 5).await;
    assert_eq!(requests.len(), 1, "refused requests never reach the engine");
    assert_eq!(requests[0].client.as_deref(), Some("token:partner"));
    // The budget is the token's, whatever address it comes from.
    assert_eq!(post(&server, &natural("again"), &token).await.0, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_work_past_its_bound_is_answered_busy_and_the_deadline_answers_timeout() {
    let dir = temp_dir();
    let llm = GatedLlm::new();
    let mut edge = EdgeSettings {
        request_timeout_secs: 2,
        ..EdgeSettings::default()
    };
    edge.llm_work.max_concurrent = 1;
    edge.llm_work.max_queued = 0;
    let server = Arc::new(spawn(NodeBuilder::new(llm.clone(), dir.path()), edge).await);
    let first = tokio::spawn({
        let server = server.clone();
        async move { post(&server, &natural("slow"), &[]).await }
    });
    llm.wait_started(1).await;
    let (status, headers, body) = post(&server, &natural("second"), &[]).await;
    assert_eq!(status, 503);
    assert_failure(&body, "busy");
    assert!(headers.contains_key("retry-after"));
    // The gate never opens: the first request meets the deadline.
    let (status, _, body) = first.await.unwrap();
    assert_eq!(status, 503);
    assert_failure(&body, "timeout");
    // Its place is free again.
    llm.gate.add_permits(100);
    let (status, _, body) = post(&server, &natural("third"), &[]).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("success")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_replays_the_reply_without_a_second_llm_call() {
    let dir = temp_dir();
    let llm = answering();
    let server = spawn(
        NodeBuilder::new(llm.clone(), dir.path()),
        EdgeSettings::default(),
    )
    .await;
    let key = [("idempotency-key", "order-42")];
    let (status, headers, first) = post(&server, &natural("book it"), &key).await;
    assert_eq!((status, &first["status"]), (200, &json!("success")));
    assert!(!headers.contains_key("idempotency-replayed"));
    let calls = llm.calls().len();
    let (status, headers, again) = post(&server, &natural("book it"), &key).await;
    assert_eq!((status, &again), (200, &first));
    assert_eq!(headers["idempotency-replayed"], "true");
    assert_eq!(llm.calls().len(), calls, "no second LLM call");
    assert_eq!(
        agora_testkit::recent_requests(&server.node, 5).await.len(),
        1
    );
    // Other content under the same key is refused; a malformed key too.
    let (status, _, body) = post(&server, &natural("book another"), &key).await;
    assert_eq!(status, 422);
    assert_failure(&body, "idempotency_key_reused");
    let (status, _, body) = post(&server, &natural("x"), &[("idempotency-key", "")]).await;
    assert_eq!(status, 400);
    assert_failure(&body, "bad_request");
    // Without a key, the same request is answered again.
    post(&server, &natural("book it"), &[]).await;
    assert!(llm.calls().len() > calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_llm_leaves_no_internal_detail_in_the_reply_and_all_of_it_in_the_ledger() {
    let dir = temp_dir();
    // Port 9 (discard) on loopback refuses at once.
    let llm = Arc::new(agora_llm::OpenAiBackend::new(agora_llm::OpenAiConfig {
        base_url: "http://127.0.0.1:9/v1".into(),
        api_key: "none".into(),
        model: "absent".into(),
        timeout: Duration::from_secs(5),
        max_concurrency: 1,
    }));
    let server = spawn(NodeBuilder::new(llm, dir.path()), EdgeSettings::default()).await;
    let key = [("idempotency-key", "retry-me")];
    let (status, _, body) = post(&server, &natural("hello"), &key).await;
    assert_eq!(status, 200);
    assert_failure(&body, "handler_failed");
    let message = body["error"].as_str().unwrap();
    for leak in [
        "127.0.0.1",
        "os error",
        "http://",
        "tcp",
        "Connection refused",
    ] {
        assert!(!message.contains(leak), "{leak:?} leaked: {message}");
    }
    let records = agora_testkit::recent_requests(&server.node, 5).await;
    assert!(
        message.contains(&records[0].query_id),
        "the peer can quote the query: {message}"
    );
    let detail = records[0].error_detail.as_deref().unwrap();
    assert!(detail.contains("127.0.0.1:9"), "{detail}");
    // A transient failure is not kept under the key: the retry is answered afresh.
    post(&server, &natural("hello"), &key).await;
    assert_eq!(
        agora_testkit::recent_requests(&server.node, 5).await.len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_what_is_still_running_busy_at_the_end_of_the_grace() {
    let dir = temp_dir();
    let llm = GatedLlm::new();
    let node = NodeBuilder::new(llm.clone(), dir.path()).build().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let edge = EdgeSettings {
        shutdown_grace_secs: 1,
        ..EdgeSettings::default()
    };
    let state = AppState::new(node, None, 1 << 20, 64)
        .with_edge(&edge)
        .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(serve_state(listener, state, shutdown.clone()));
    let request = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .json(&natural("slow"))
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    });
    llm.wait_started(1).await;
    let stopped = Instant::now();
    shutdown.cancel();
    let (status, body) = request.await.unwrap();
    assert_eq!(status, 503);
    assert_failure(&body, "busy");
    serving.await.unwrap().unwrap();
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "{took:?}"
    );
}
