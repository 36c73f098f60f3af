//! A node as its operators run it, for the replica, crash and load tests: `agora node run`
//! processes (one, or several replicas on one store), a scripted OpenAI-compatible LLM server,
//! HAProxy in front of the replicas, and a blocking HTTP client that retries the way a careful
//! peer does (same `Idempotency-Key`, after 409, 502, 503 or a dropped connection).
//!
//! The scripted LLM is test code: it answers every role the node asks of it in that role's
//! schema (suitability, answer step, negotiation reply) and quotes the last user message and the
//! number of user turns it saw, so a test can tell which history reached the LLM. The real local
//! model is tested elsewhere; here the subject is the node's processes and its store.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_store::{RequestPath, Store};
use axum::Json;
use axum::extract::State;
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `agora` binary run from the repository root with `--config config`, sharing compiled
/// routines between test runs (a compile takes a second or two).
pub fn agora_command(config: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agora"));
    command
        .args(args)
        .arg("--config")
        .arg(config)
        .current_dir(repo())
        .env(
            "AGORA_ROUTINE_RUNTIME__ARTIFACT_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("agora-cli-artifacts"),
        );
    command
}

/// Spawns a server command and waits for the first line of its banner, `… listening on <url>`;
/// returns the process and the URL. The rest of its stdout is drained so it never blocks on a
/// full pipe. `Err` carries the line it printed instead (the process is killed).
pub fn spawn_listening(mut command: Command) -> Result<(Child, String), String> {
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    stdout.read_line(&mut banner).unwrap();
    let url = banner
        .contains("listening on")
        .then(|| banner.trim().rsplit(' ').next())
        .flatten()
        .filter(|url| url.starts_with("http://"))
        .map(str::to_string);
    let Some(url) = url else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(banner);
    };
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    Ok((child, url))
}

/// A free loopback port (bound, then released for the process that will use it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs a future on a fresh current-thread runtime (the tests themselves are synchronous).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A fresh, empty PostgreSQL schema in the database at `AGORA_TEST_POSTGRES_URL`; returns the
/// store URL that selects it.
pub fn postgres_schema(name: &str) -> String {
    block_on(agora_testkit::postgres_schema(name))
}

/// The scripted OpenAI-compatible LLM server, on its own thread and runtime.
pub struct FakeLlm {
    /// `http://127.0.0.1:port/v1`.
    pub url: String,
    calls: Arc<AtomicU64>,
    _runtime: tokio::runtime::Runtime,
}

impl FakeLlm {
    /// Starts the server on a free loopback port.
    pub fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let calls = Arc::new(AtomicU64::new(0));
        let app = axum::Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/v1/chat/completions", post(complete))
            .with_state(calls.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeLlm {
            url: format!("http://{address}/v1"),
            calls,
            _runtime: runtime,
        }
    }

    /// Completions answered so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

async fn complete(
    State(calls): State<Arc<AtomicU64>>,
    Json(request): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let users: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let last = users.last().copied().unwrap_or_default();
    let text = format!(
        "scripted reply to [{last}] after {} user turns",
        users.len()
    );
    let format = &request["response_format"]["json_schema"];
    let content = match format["name"].as_str() {
        Some("suitability") => json!({"suitable": "yes", "reason": "scripted: every protocol"}),
        Some("step") => {
            let string_answer = format["schema"]
                .to_string()
                .contains(r#""answer":{"type":"string"}"#);
            let answer = if string_answer {
                json!(text)
            } else {
                json!({ "scripted": text })
            };
            json!({"tool": "final_answer", "answer": answer})
        }
        Some("negotiation_reply") => json!({"verdict": "agree", "message": text}),
        other => {
            let message = format!("the scripted LLM has no answer for schema {other:?}");
            return (
                axum::http::StatusCode::BAD_REQUEST,
                Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
            )
                .into_response();
        }
    };
    calls.fetch_add(1, Ordering::SeqCst);
    Json(json!({
        "id": "scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content.to_string()}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }))
    .into_response()
}

/// Settings shared by every process of one node.
pub struct NodeSetup {
    /// The folder for the configuration file and logs.
    pub dir: tempfile::TempDir,
    /// The store URL.
    pub store: String,
}

impl NodeSetup {
    /// Writes the node's configuration: Bob the weather service, with the scripted LLM, LLM
    /// suitability checks, no programmer, no rate limits (one client sends everything), routine
    /// syncs every 200 ms, and `extra` TOML appended.
    pub fn new(store: String, llm: &FakeLlm, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            r#"store = "{store}"
request_linger_ms = 5

[node]
name = "bob"
description = "Bob is a weather service. It gives weather forecasts for a location and a date."
suitability = "llm"

[[node.tools]]
name = "weather_forecast"
kind = "builtin"
builtin = "weather_forecast"
seed = 7

[node.programmer]
enabled = false

[node.negotiation]
receiver_threshold = 3

[llm]
backend = "local"

[llm.local]
url = "{llm}"

[fetch]
allow_networks = ["127.0.0.0/8"]

[routine_runtime]
sync_interval_ms = 200

[edge]
request_timeout_secs = 5

[edge.rate_limit]
enabled = false

[edge.clients]
trusted_proxies = ["127.0.0.1/32"]
{extra}"#,
            llm = llm.url,
        );
        std::fs::write(dir.path().join("node.toml"), config).unwrap();
        NodeSetup { dir, store }
    }

    /// The `agora` command with this node's configuration and the shared routine artifacts.
    pub fn agora(&self, args: &[&str]) -> Command {
        agora_command(&self.dir.path().join("node.toml"), args)
    }

    /// Runs an `agora` command and expects success; returns stdout.
    pub fn agora_ok(&self, args: &[&str]) -> String {
        let output = self.agora(args).output().unwrap();
        assert!(
            output.status.success(),
            "agora {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Opens the store, as a test reads it.
    pub async fn store(&self) -> Store {
        Store::connect(&self.store).await.expect("the store opens")
    }
}

/// One `agora node run` process on a fixed port (so a restarted replica keeps its address).
pub struct Process {
    /// `http://127.0.0.1:port`.
    pub url: String,
    port: u16,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts a node process on `port` and waits until it listens.
    pub fn start(setup: &NodeSetup, port: u16, name: &str) -> Self {
        let mut process = Process {
            url: format!("http://127.0.0.1:{port}"),
            port,
            child: None,
            log: setup.dir.path().join(format!("{name}.log")),
        };
        process.restart(setup);
        process
    }

    /// Starts the process again (after [`Process::kill`]); waits until it listens.
    pub fn restart(&mut self, setup: &NodeSetup) {
        assert!(self.child.is_none(), "the process is still running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let listen = format!("127.0.0.1:{}", self.port);
        let mut command = setup.agora(&["node", "run", "--listen", &listen]);
        command.env("RUST_LOG", "warn").stderr(log);
        let (child, _) = spawn_listening(command).unwrap_or_else(|banner| {
            panic!(
                "the node did not start: {banner:?}\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )
        });
        self.child = Some(child);
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM, and waits for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            let exit = child.wait().unwrap();
            assert!(exit.success(), "the node did not stop cleanly: {exit}");
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// HAProxy (Debian's package) balancing round-robin over the replicas, with health checks on
/// `/healthz` and `X-Forwarded-For`.
pub struct Haproxy {
    /// `http://127.0.0.1:port`.
    pub url: String,
    child: Child,
}

impl Haproxy {
    /// Starts HAProxy in the foreground in front of `replicas`.
    pub fn start(dir: &Path, replicas: &[&Process]) -> Self {
        let binary = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .expect(
                "haproxy is not installed: run scripts/install.sh (it installs Debian's haproxy)",
            );
        let port = free_port();
        let servers: String = replicas
            .iter()
            .enumerate()
            .map(|(i, r)| format!("    server r{i} 127.0.0.1:{} check\n", r.port))
            .collect();
        let config = format!(
            "global\n    maxconn 1024\n\
             defaults\n    mode http\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n\
             \x20   retries 3\n    option redispatch 1\n    retry-on conn-failure\n\
             frontend agora\n    bind 127.0.0.1:{port}\n    option forwardfor\n    default_backend replicas\n\
             backend replicas\n    balance roundrobin\n    option httpchk GET /healthz\n\
             \x20   default-server inter 300ms fall 1 rise 2\n{servers}"
        );
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while send(&url, "GET", "/healthz", &[], b"").map(|r| r.status) != Ok(200) {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Haproxy { url, child }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP reply.
#[derive(Debug, Clone)]
pub struct HttpReply {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: String,
}

impl HttpReply {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// One HTTP/1.1 exchange with extra headers; `Err` for a connection that failed or dropped.
pub fn send(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<HttpReply, String> {
    let address: SocketAddr = base
        .strip_prefix("http://")
        .unwrap()
        .parse()
        .map_err(|e| format!("{e}"))?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream
        .write_all(&bytes)
        .map_err(|e| format!("write: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("read: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no reply head in {} bytes", response.len()))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok(HttpReply {
        status,
        body: body.to_string(),
    })
}

/// A request's final reply, the attempts it took and how long from the first attempt.
pub type Sent = (Result<HttpReply, String>, u32, Duration);

/// Sends with an `Idempotency-Key` and retries what a careful peer retries (a dropped
/// connection, 409 while the key is still being answered, 502 and 503) for up to `patience`.
pub fn send_until_answered(
    base: &str,
    path: &str,
    key: &str,
    body: &[u8],
    patience: Duration,
) -> Sent {
    let started = Instant::now();
    let deadline = started + patience;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reply = send(base, "POST", path, &[("Idempotency-Key", key)], body);
        let retry = match &reply {
            Err(_) => true,
            Ok(r) => matches!(r.status, 409 | 502 | 503),
        };
        if !retry || Instant::now() >= deadline {
            return (reply, attempts, started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The weather protocol document and its hash.
pub fn weather_protocol() -> (Vec<u8>, String) {
    let document = std::fs::read(repo().join("protocols/weather-forecast.md")).unwrap();
    let hash = agora_protocol::ProtocolHash::of(&document).to_hex();
    (document, hash)
}

/// A protocol request for the weather protocol, the document named by hash only.
pub fn weather_request(location: &str) -> Vec<u8> {
    let (_, hash) = weather_protocol();
    json!({
        "protocolHash": hash,
        "protocolSources": [],
        "body": {"location": location, "date": "2024-03-01"},
    })
    .to_string()
    .into_bytes()
}

/// A request under a new protocol document that travels inline as a `data:` URI; returns the
/// request and the document's hash.
pub fn inline_protocol_request(name: &str) -> (Vec<u8>, String) {
    let document = format!(
        "---\nname: {name}\ndescription: Echo test protocol {name}.\nmultiround: false\n---\n\n\
         # {name}\n\nThe request body is any JSON object; the reply is a JSON object.\n"
    );
    let hash = agora_protocol::ProtocolHash::of(document.as_bytes()).to_hex();
    let uri = format!(
        "data:text/plain;charset=utf-8;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(document.as_bytes())
    );
    let request = json!({
        "protocolHash": hash,
        "protocolSources": [uri],
        "body": {"name": name},
    });
    (request.to_string().into_bytes(), hash)
}

/// A natural-language request; `multiround` opens a conversation.
pub fn natural_request(text: &str, multiround: bool) -> Vec<u8> {
    json!({"protocolHash": null, "protocolSources": [], "body": text, "multiround": multiround})
        .to_string()
        .into_bytes()
}

/// A follow-up body.
pub fn follow_up(text: &str) -> Vec<u8> {
    json!({ "body": text }).to_string().into_bytes()
}

/// Whether a reply came from the weather routine (the LLM's scripted replies never carry the
/// protocol's `weatherCondition`).
pub fn answered_by_routine(reply: &HttpReply) -> bool {
    reply.status == 200
        && reply.json()["status"] == "success"
        && reply.json()["body"]
            .to_string()
            .contains("weatherCondition")
}

/// What a load's clients saw acknowledged (a 200 `success` reply).
#[derive(Default, Clone)]
pub struct Acknowledged {
    /// Routine-answered requests, with when the client got each reply.
    pub routine: Vec<Instant>,
    /// LLM-answered requests (natural language, conversation turns, new protocols).
    pub llm: u64,
    /// Conversation id → the messages acknowledged in it, in order.
    pub conversations: BTreeMap<String, Vec<String>>,
    /// Protocols first met in an acknowledged request.
    pub protocols: Vec<String>,
    /// Protocols published to a protocol database (and then used from it).
    pub published: Vec<String>,
    /// Attempts beyond the first (retries after a dropped connection, 409, 502 or 503).
    pub retries: u64,
    /// Replies that never came to 200 success, with why.
    pub failures: Vec<String>,
    /// Each request's kind and how long it took to be answered (retries included).
    pub latencies: Vec<(&'static str, Duration)>,
}

/// What [`Acknowledged::verify`] counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Checked {
    /// Acknowledged writes checked: conversation turns, documents with their decisions, and
    /// request rows.
    pub writes: u64,
    /// Routine-served request rows missing (allowed: those answered in the linger window).
    pub routine_rows_missing: u64,
    /// Routine replies acknowledged in the 250 ms before a kill.
    pub at_risk: u64,
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} acknowledged writes checked, {} routine rows missing ({} routine replies in the last 250 ms before a kill)",
            self.writes, self.routine_rows_missing, self.at_risk
        )
    }
}

impl Acknowledged {
    /// Requests acknowledged.
    pub fn total(&self) -> u64 {
        self.routine.len() as u64 + self.llm
    }

    /// Checks that every acknowledged write is in `store`, after kills at `kills`:
    /// conversation turns, documents and decisions, LLM-answered request rows (written before
    /// their reply) and routine-served rows (written up to `request_linger_ms` after it, so the
    /// ones answered just before a kill may be missing), and an exact LLM ledger (no call it
    /// holds was never made, none behind an acknowledged answer is missing). `calls_before` is
    /// the scripted LLM's count when the load began, `calls_now` its count now if nothing is
    /// calling it any more (`None` while the load still runs).
    pub async fn verify(
        &self,
        store: &Store,
        kills: &[Instant],
        calls_before: u64,
        calls_now: Option<u64>,
    ) -> Checked {
        assert!(
            self.failures.is_empty(),
            "{} requests were never answered, e.g. {:#?}",
            self.failures.len(),
            &self.failures[..self.failures.len().min(3)]
        );
        let mut checked = Checked::default();
        for (id, messages) in &self.conversations {
            let stored = store.conversation(id).await.unwrap();
            let text = stored
                .unwrap_or_else(|| panic!("conversation {id} was lost"))
                .messages
                .to_string();
            for message in messages {
                assert!(
                    text.contains(message),
                    "conversation {id} lost {message:?}: {text}"
                );
                checked.writes += 1;
            }
        }
        for hash in &self.protocols {
            let hash = agora_protocol::ProtocolHash::parse(hash).unwrap();
            assert!(
                store.document(&hash).await.unwrap().is_some(),
                "document {hash} lost"
            );
            let decision = store.suitability(&hash).await.unwrap();
            assert!(
                decision.is_some_and(|d| d.allowed),
                "decision on {hash} lost"
            );
            checked.writes += 2;
        }
        let rows = store.requests().recent_requests(i64::MAX).await.unwrap();
        let routine_rows = rows
            .iter()
            .filter(|r| r.path == RequestPath::Routine)
            .count() as u64;
        let llm_rows = rows.iter().filter(|r| r.llm_calls > 0).count() as u64;
        let window = Duration::from_millis(250);
        checked.at_risk = self
            .routine
            .iter()
            .filter(|at| {
                kills
                    .iter()
                    .any(|kill| **at <= *kill && **at + window >= *kill)
            })
            .count() as u64;
        let acknowledged_routine = self.routine.len() as u64;
        checked.routine_rows_missing = acknowledged_routine.saturating_sub(routine_rows);
        assert!(
            checked.routine_rows_missing <= checked.at_risk,
            "routine rows lost beyond the linger window: {checked}"
        );
        assert!(
            llm_rows >= self.llm,
            "LLM-answered rows lost: {llm_rows} rows for {} acknowledged",
            self.llm
        );
        checked.writes += acknowledged_routine + self.llm;
        let ledger_calls: i64 = store
            .ledger()
            .ledger_totals()
            .await
            .unwrap()
            .iter()
            .map(|t| t.calls)
            .sum();
        let ledger_calls = ledger_calls as u64;
        if let Some(calls_now) = calls_now {
            assert!(
                ledger_calls <= calls_now,
                "the ledger holds calls never made"
            );
        }
        assert!(
            ledger_calls >= calls_before + self.llm,
            "the ledger lost calls"
        );
        checked
    }
}

/// Load clients: each worker repeats [`one_round`] against one URL until stopped.
pub struct Load {
    acknowledged: Arc<Mutex<Acknowledged>>,
    stop: Arc<AtomicBool>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// Starts `workers` clients.
    pub fn start(url: &str, workers: usize) -> Self {
        Self::start_with(url, workers, None)
    }

    /// Starts `workers` clients; with `protocol_db`, each round also publishes a document there
    /// and sends the node a request whose only source is the database.
    pub fn start_with(url: &str, workers: usize, protocol_db: Option<&str>) -> Self {
        let acknowledged = Arc::new(Mutex::new(Acknowledged::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..workers)
            .map(|worker| {
                let url = url.to_string();
                let protocol_db = protocol_db.map(str::to_string);
                let acknowledged = acknowledged.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let prefix = uuid::Uuid::new_v4().simple().to_string();
                    let mut round = 0;
                    while !stop.load(Ordering::SeqCst) {
                        round += 1;
                        let name = format!("{prefix}-w{worker}-r{round}");
                        one_round(&url, &name, &acknowledged);
                        if let Some(protocol_db) = &protocol_db {
                            published_round(&url, protocol_db, &name, &acknowledged);
                        }
                    }
                })
            })
            .collect();
        Load {
            acknowledged,
            stop,
            workers,
        }
    }

    /// What has been acknowledged so far.
    pub fn snapshot(&self) -> Acknowledged {
        self.acknowledged.lock().unwrap().clone()
    }

    /// Lets every worker finish its round, then returns everything acknowledged.
    pub fn stop(self) -> Acknowledged {
        self.stop.store(true, Ordering::SeqCst);
        for worker in self.workers {
            worker.join().unwrap();
        }
        self.acknowledged.lock().unwrap().clone()
    }
}

/// Counts a request's retries and latency; true when it was answered `success`, else records
/// the failure.
fn record(acknowledged: &Mutex<Acknowledged>, what: &'static str, sent: &Sent) -> bool {
    let (reply, attempts, took) = sent;
    let ok = matches!(reply, Ok(r) if r.status == 200 && r.json()["status"] == "success");
    let mut acknowledged = acknowledged.lock().unwrap();
    acknowledged.retries += u64::from(attempts.saturating_sub(1));
    acknowledged.latencies.push((what, *took));
    if !ok {
        acknowledged.failures.push(format!("{what}: {reply:?}"));
    }
    ok
}

/// One round of a load client: a routine request, a natural-language request, a new protocol,
/// and a three-turn conversation, each retried with its idempotency key until answered.
fn one_round(url: &str, round: &str, acknowledged: &Mutex<Acknowledged>) {
    let patience = Duration::from_secs(60);
    let key = |kind: &str| format!("{round}-{kind}");
    let answered = |what, sent: &Sent| record(acknowledged, what, sent);

    let sent = send_until_answered(
        url,
        "/",
        &key("routine"),
        &weather_request("Lima"),
        patience,
    );
    if answered("routine", &sent) {
        let by_routine = sent.0.as_ref().is_ok_and(answered_by_routine);
        let mut acknowledged = acknowledged.lock().unwrap();
        if by_routine {
            acknowledged.routine.push(Instant::now());
        } else {
            acknowledged.failures.push(format!(
                "routine request answered without the routine: {:?}",
                sent.0
            ));
        }
    }

    let text = format!("question {}", key("natural"));
    let sent = send_until_answered(
        url,
        "/",
        &key("natural"),
        &natural_request(&text, false),
        patience,
    );
    if answered("natural", &sent) {
        acknowledged.lock().unwrap().llm += 1;
    }

    let (request, hash) = inline_protocol_request(&key("protocol"));
    let sent = send_until_answered(url, "/", &key("protocol"), &request, patience);
    if answered("protocol", &sent) {
        let mut acknowledged = acknowledged.lock().unwrap();
        acknowledged.llm += 1;
        acknowledged.protocols.push(hash);
    }

    let first = format!("conversation {}", key("turn1"));
    let sent = send_until_answered(
        url,
        "/",
        &key("turn1"),
        &natural_request(&first, true),
        patience,
    );
    if !answered("conversation", &sent) {
        return;
    }
    let id = sent.0.as_ref().map(|r| {
        r.json()["conversationId"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    let id = id.unwrap_or_default();
    {
        let mut acknowledged = acknowledged.lock().unwrap();
        acknowledged.llm += 1;
        acknowledged.conversations.insert(id.clone(), vec![first]);
    }
    for turn in 2..=3 {
        let text = format!("conversation {} turn {turn}", key("turn"));
        let path = format!("/conversations/{id}");
        let turn_key = key(&format!("turn{turn}"));
        let sent = send_until_answered(url, &path, &turn_key, &follow_up(&text), patience);
        if !answered("follow-up", &sent) {
            return;
        }
        let mut acknowledged = acknowledged.lock().unwrap();
        acknowledged.llm += 1;
        if let Some(messages) = acknowledged.conversations.get_mut(&id) {
            messages.push(text);
        }
    }
}

/// Publishes a new document to the protocol database, then sends the node a request that names
/// only the database as the document's source.
fn published_round(url: &str, protocol_db: &str, round: &str, acknowledged: &Mutex<Acknowledged>) {
    let name = format!("{round}-published");
    let document = format!(
        "---\nname: {name}\ndescription: Published test protocol {name}.\nmultiround: false\n---\n\n\
         # {name}\n\nThe request body is any JSON object; the reply is a JSON object.\n"
    );
    let started = Instant::now();
    let body = json!({ "text": document }).to_string();
    let posted = send(protocol_db, "POST", "/protocols", &[], body.as_bytes());
    let mut acknowledged_now = acknowledged.lock().unwrap();
    acknowledged_now
        .latencies
        .push(("publish", started.elapsed()));
    let hash = match &posted {
        Ok(r) if r.status == 201 => r.json()["hash"].as_str().unwrap_or_default().to_string(),
        other => {
            acknowledged_now
                .failures
                .push(format!("publish: {other:?}"));
            return;
        }
    };
    acknowledged_now.published.push(hash.clone());
    drop(acknowledged_now);
    let request = json!({
        "protocolHash": hash,
        "protocolSources": [format!("{protocol_db}/protocols/{hash}")],
        "body": {"name": name},
    })
    .to_string();
    let sent = send_until_answered(
        url,
        "/",
        &format!("{round}-from-db"),
        request.as_bytes(),
        Duration::from_secs(60),
    );
    let ok = matches!(&sent.0, Ok(r) if r.status == 200 && r.json()["status"] == "success");
    let mut acknowledged = acknowledged.lock().unwrap();
    acknowledged.retries += u64::from(sent.1.saturating_sub(1));
    acknowledged.latencies.push(("from-protocol-db", sent.2));
    if ok {
        acknowledged.llm += 1;
        acknowledged.protocols.push(hash);
    } else {
        acknowledged
            .failures
            .push(format!("from-protocol-db: {:?}", sent.0));
    }
}
