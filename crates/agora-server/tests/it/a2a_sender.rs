//! The node as an A2A client (`agora_a2a::sender`): a scripted A2A agent shows how messages,
//! tasks, failures and errors are read and that a card pointing elsewhere is not followed;
//! Agora nodes, with a card or without, are spoken to in Agora; and `a2a_interop_*` sends to an
//! agent built with the official Python SDK (its helloworld sample).

use agora_testkit::{NodeBuilder, ScriptedLlm, temp_dir};
use serde_json::{Value, json};

use crate::a2a::{llm, node};

/// A sender that knows A2A, with Alice's scripted LLM: it writes "Please greet Ada." and reads
/// the greeting out of the reply.
async fn alice(dir: &std::path::Path) -> agora_node::Node {
    let llm = ScriptedLlm::new(|request| match agora_testkit::schema_name(request) {
        Some("task_output") => {
            let reply = agora_testkit::last_user_message(request);
            let greeting = if reply.contains("Hello World") {
                "Hello World"
            } else {
                "none"
            };
            Ok(json!({"greeting": greeting}).to_string())
        }
        _ => Ok("Please greet Ada.".into()),
    });
    let node = NodeBuilder::new(llm, dir)
        .config(|c| c.tasks = vec![greeting_task()])
        .build()
        .await;
    let targets = agora_fetch::TargetClient::new(agora_fetch::TargetPolicy::default()).unwrap();
    let sender = agora_a2a::A2aSender::new(targets, std::time::Duration::from_secs(20), 1 << 20);
    assert!(node.add_foreign_sender(sender));
    node
}

fn greeting_task() -> agora_node::Task {
    agora_node::Task {
        name: "greet".into(),
        description: "Greet a person by name.".into(),
        input_schema: json!({"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}}}),
        output_schema: json!({"type": "object", "required": ["greeting"],
            "properties": {"greeting": {"type": "string"}}}),
    }
}

/// An Agora node is spoken to in Agora even though it serves an agent card (its card declares
/// the Agora extension), and so is one without a card.
#[tokio::test]
async fn the_a2a_sender_leaves_agora_nodes_to_agora() {
    let (a, b, c) = (temp_dir(), temp_dir(), temp_dir());
    let alice = alice(a.path()).await;
    let with_card = node(b.path()).await;
    let without_card = crate::support::Spawn::spawn(NodeBuilder::new(llm(), c.path())).await;
    for bob in [&with_card, &without_card] {
        let reply = alice.send_message(&bob.url, "Will it rain?").await.unwrap();
        assert!(reply.body.contains("Will it rain?"), "{}", reply.body);
        let requests = agora_testkit::recent_requests(&bob.node, 10).await;
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].channel, "natural");
    }
}

/// The SDK's helloworld agent (`scripts/python/a2a_helloworld.py`) on 127.0.0.1, stopped on drop.
struct HelloWorld {
    url: String,
    _process: tokio::process::Child,
}

async fn hello_world() -> HelloWorld {
    use tokio::io::AsyncBufReadExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/python/a2a_helloworld.py"
    );
    let mut process =
        tokio::process::Command::new(agora_testkit::installed_peer("AGORA_A2A_PYTHON"))
            .args([script, &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
    let stdout = process.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line()).await;
    assert_eq!(ready.unwrap().unwrap().as_deref(), Some("ready"));
    HelloWorld {
        url: format!("http://127.0.0.1:{port}"),
        _process: process,
    }
}

/// The node as an A2A client, against the official Python SDK's helloworld agent: a message,
/// and a task on the natural-language rung, each one `SendMessage` call.
#[tokio::test]
#[ignore = "needs the A2A Python SDK from scripts/install.sh; run by scripts/test.sh"]
async fn a2a_interop_sender_to_the_python_sdk_helloworld_agent() {
    let dir = temp_dir();
    let agent = hello_world().await;
    let alice = alice(dir.path()).await;
    let reply = alice.send_message(&agent.url, "hi there").await.unwrap();
    assert_eq!(reply.body, "Hello World (you said: hi there)");

    let task = alice.task("greet").unwrap().clone();
    let run = alice
        .run_task(&agent.url, &task, &json!({"name": "Ada"}))
        .await
        .unwrap();
    assert_eq!(run.rung, agora_node::Rung::NaturalLanguage);
    assert_eq!(run.outcome.output, json!({"greeting": "Hello World"}));
    assert!(
        run.outcome
            .reply_body
            .starts_with("Hello World (you said: Please greet Ada."),
        "{}",
        run.outcome.reply_body
    );
}

/// A scripted A2A agent on 127.0.0.1 (not an Agora node: its card has no Agora extension). Its
/// answer depends on the words it gets: `message`, `task`, `failed`, `error`. Its card puts the
/// JSON-RPC interface at `/rpc`, or on another port when `elsewhere`; `POST /` answers in Agora,
/// so a test sees which protocol the node spoke.
async fn scripted_agent(elsewhere: bool) -> (String, tokio_util::sync::CancellationToken) {
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let interface = if elsewhere {
        "http://127.0.0.1:9/rpc".to_string()
    } else {
        format!("{url}/rpc")
    };
    let card = json!({
        "name": "scripted", "description": "", "version": "1",
        "supportedInterfaces": [{"url": interface, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
    });
    let rpc = |headers: axum::http::HeaderMap, axum::Json(call): axum::Json<Value>| async move {
        let text = call["params"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap_or("");
        let id = call["id"].clone();
        let status = |state: &str, said: &str| {
            json!({"state": state, "message":
            {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": said}]}})
        };
        let result = if headers.get("a2a-version").and_then(|v| v.to_str().ok()) != Some("1.0") {
            return axum::Json(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32009, "message": "version not supported"}}));
        } else if text.contains("message") {
            json!({"message": {"messageId": "m", "role": "ROLE_AGENT",
                "parts": [{"text": "a message"}, {"data": {"n": 1}}]}})
        } else if text.contains("task") {
            json!({"task": {"id": "t", "contextId": "c", "status": status("TASK_STATE_COMPLETED", "done"),
                "artifacts": [{"artifactId": "a", "parts": [{"text": "the artifact"}]}]}})
        } else if text.contains("failed") {
            json!({"task": {"id": "t", "contextId": "c", "status": status("TASK_STATE_FAILED", "it broke")}})
        } else {
            return axum::Json(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32603, "message": "scripted error"}}));
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    };
    let router = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            get(move || async move { axum::Json(card) }),
        )
        .route("/rpc", post(rpc))
        .route(
            "/",
            post(|| async { axum::Json(json!({"status": "success", "body": "spoken in Agora"})) }),
        );
    (url, crate::fixtures::serve_router(listener, router))
}

#[tokio::test]
async fn the_a2a_sender_reads_messages_and_tasks_and_reports_failures() {
    let dir = temp_dir();
    let alice = alice(dir.path()).await;
    let (agent, _stop) = scripted_agent(false).await;
    let reply = alice
        .send_message(&agent, "a message please")
        .await
        .unwrap();
    assert_eq!(reply.body, "a message\n{\"n\":1}");
    let reply = alice.send_message(&agent, "a task please").await.unwrap();
    assert_eq!(reply.body, "the artifact");
    let failed = alice.send_message(&agent, "failed").await.unwrap_err();
    assert!(
        matches!(&failed, agora_node::SendError::Failed(m) if m == "it broke"),
        "{failed:?}"
    );
    let error = alice
        .send_message(&agent, "anything else")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("scripted error"), "{error}");

    // A card whose interface is on another origin is not followed: the node speaks Agora.
    let (elsewhere, _stop) = scripted_agent(true).await;
    let reply = alice
        .send_message(&elsewhere, "a message please")
        .await
        .unwrap();
    assert_eq!(reply.body, "spoken in Agora");
}
