//! Starting and owning a local llama.cpp `llama-server`.
//!
//! The offline default of agora is a small instruct model served by
//! llama.cpp on loopback, reached through the same OpenAI-compatible code
//! path as production ([`crate::OpenAiBackend`]). This module starts that
//! process, waits until it has loaded the model (`GET /health` answers 200),
//! and owns it: the process is killed when the [`LocalServer`] is stopped or
//! dropped, so a node or a test never leaks a model-sized server.
//!
//! The server's output goes to a log file when one is configured. Otherwise
//! it is drained by two tasks owned by the `LocalServer` that keep the last
//! lines in memory; either way, a server that dies during startup is
//! reported with the end of its log, which is where llama.cpp says why.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

use crate::{LlmError, OpenAiConfig};

/// How many log lines an error message quotes.
const TAIL_LINES: usize = 20;
/// Pause between two health probes.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Limit of one health probe, so a stuck connection cannot eat the deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How to start `llama-server`.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalServerConfig {
    /// The `llama-server` executable (a bare name is looked up in `PATH`).
    pub binary: PathBuf,
    /// The GGUF model file.
    pub model: PathBuf,
    /// Address to listen on; `127.0.0.1` by default.
    pub host: String,
    /// Port to listen on; 0 (the default) picks a free one.
    pub port: u16,
    /// Context size in tokens, shared by all slots (`-c`); 4096 by default.
    pub context_size: u32,
    /// CPU threads for generation (`-t`); 2 by default.
    pub threads: u32,
    /// Requests served in parallel (`-np`); 1 by default.
    pub slots: u32,
    /// How long loading the model may take; 60 s by default.
    pub startup_timeout: Duration,
    /// File that receives the server's stdout and stderr (appended to);
    /// `None` keeps only the last lines in memory for error messages.
    pub log_file: Option<PathBuf>,
}

impl LocalServerConfig {
    /// The recommended settings for a 2-core machine: loopback, a free port,
    /// `-c 4096 -t 2 -np 1`, 60 s to load, no log file.
    pub fn new(binary: impl Into<PathBuf>, model: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            model: model.into(),
            host: "127.0.0.1".to_owned(),
            port: 0,
            context_size: 4096,
            threads: 2,
            slots: 1,
            startup_timeout: Duration::from_secs(60),
            log_file: None,
        }
    }
}

/// Where the server's output goes.
enum Output {
    File(PathBuf),
    Captured {
        tail: Arc<Mutex<VecDeque<String>>>,
        drains: JoinSet<()>,
    },
}

/// A running `llama-server`, killed on [`LocalServer::stop`] or drop.
pub struct LocalServer {
    child: Child,
    host: String,
    port: u16,
    model_name: String,
    slots: u32,
    output: Output,
}

impl std::fmt::Debug for LocalServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalServer")
            .field("pid", &self.child.id())
            .field("base_url", &self.base_url())
            .field("model", &self.model_name)
            .finish_non_exhaustive()
    }
}

impl LocalServer {
    /// Spawns `llama-server -m MODEL --host H --port P -c CTX -t THREADS -np
    /// SLOTS --no-webui` and waits until it is healthy.
    ///
    /// Fails with [`LlmError::Unavailable`] when the model file is missing,
    /// the binary cannot be run, the process exits during startup, or it is
    /// not healthy within `startup_timeout` (the process is then killed).
    pub async fn start(config: LocalServerConfig) -> Result<LocalServer, LlmError> {
        if !config.model.is_file() {
            return Err(LlmError::Unavailable(format!(
                "model file {} not found",
                config.model.display()
            )));
        }
        let port = match config.port {
            0 => free_port(&config.host)?,
            port => port,
        };
        let mut command = Command::new(&config.binary);
        command
            .arg("-m")
            .arg(&config.model)
            .args(["--host", &config.host])
            .args(["--port", &port.to_string()])
            .args(["-c", &config.context_size.to_string()])
            .args(["-t", &config.threads.to_string()])
            .args(["-np", &config.slots.to_string()])
            .arg("--no-webui")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        match &config.log_file {
            Some(path) => {
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|error| {
                        LlmError::Unavailable(format!(
                            "cannot open log file {}: {error}",
                            path.display()
                        ))
                    })?;
                let log_for_stderr = log.try_clone().map_err(|error| {
                    LlmError::Unavailable(format!("cannot share log file: {error}"))
                })?;
                command.stdout(log).stderr(log_for_stderr);
            }
            None => {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        let mut child = command.spawn().map_err(|error| {
            LlmError::Unavailable(format!("cannot run {}: {error}", config.binary.display()))
        })?;
        let output = match &config.log_file {
            Some(path) => Output::File(path.clone()),
            None => capture_output(&mut child),
        };
        let mut server = LocalServer {
            child,
            host: url_host(&config.host),
            port,
            model_name: config
                .model
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_else(|| "local".to_owned()),
            slots: config.slots,
            output,
        };
        tracing::info!(pid = server.child.id(), port, model = %config.model.display(), "starting llama-server");
        let health_url = format!("http://{}:{port}/health", server.host);
        match poll_health(&health_url, config.startup_timeout, Some(&mut server.child)).await {
            Ok(()) => Ok(server),
            Err(reason) => {
                if let Err(error) = server.child.kill().await {
                    tracing::warn!(%error, "could not kill llama-server after a failed start");
                }
                server.drain_rest().await;
                let tail = server.log_tail();
                Err(LlmError::Unavailable(format!(
                    "llama-server {reason}; last log lines:\n{tail}"
                )))
            }
        }
    }

    /// The OpenAI base URL, e.g. `http://127.0.0.1:8080/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}:{}/v1", self.host, self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while the process runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// A backend config for this server: its base URL, a dummy key, the
    /// model file's stem as model name, and one call in flight per slot.
    pub fn openai_config(&self, timeout: Duration) -> OpenAiConfig {
        OpenAiConfig {
            base_url: self.base_url(),
            api_key: "sk-local".to_owned(),
            model: self.model_name.clone(),
            timeout,
            max_concurrency: usize::try_from(self.slots).unwrap_or(1),
        }
    }

    /// Kills the server, waits for it to exit, and stops the log drains.
    pub async fn stop(mut self) {
        if let Err(error) = self.child.kill().await {
            tracing::warn!(%error, "could not kill llama-server");
        }
        if let Output::Captured { drains, .. } = &mut self.output {
            drains.shutdown().await;
        }
    }

    /// After the process is gone, lets the drains read what is left in the
    /// pipes (bounded: a grandchild could keep a pipe open).
    async fn drain_rest(&mut self) {
        if let Output::Captured { drains, .. } = &mut self.output {
            let all_read = async { while drains.join_next().await.is_some() {} };
            if tokio::time::timeout(Duration::from_secs(1), all_read)
                .await
                .is_err()
            {
                drains.abort_all();
            }
        }
    }

    /// The last lines the server wrote.
    fn log_tail(&self) -> String {
        match &self.output {
            Output::File(path) => read_tail(path),
            Output::Captured { tail, .. } => {
                let tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                tail.iter().cloned().collect::<Vec<_>>().join("\n")
            }
        }
    }
}

/// Waits until an already running llama-server answers `GET /health` with
/// 200 (it answers 503 while loading the model). `base_url` is the server
/// root, e.g. `http://127.0.0.1:8080`; a trailing `/v1` is tolerated.
pub async fn wait_healthy(base_url: &str, timeout: Duration) -> Result<(), LlmError> {
    let root = base_url.trim_end_matches('/');
    let root = root.strip_suffix("/v1").unwrap_or(root);
    poll_health(&format!("{root}/health"), timeout, None)
        .await
        .map_err(|reason| LlmError::Unavailable(format!("{root}: {reason}")))
}

/// Probes `url` until it answers 200. The error is a phrase for a message:
/// "exited during startup (...)" or "not healthy within ...".
async fn poll_health(
    url: &str,
    timeout: Duration,
    mut child: Option<&mut Child>,
) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(PROBE_TIMEOUT)
        .build()
        .map_err(|error| format!("cannot build an HTTP client: {error}"))?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(child) = child.as_deref_mut() {
            match child.try_wait() {
                Ok(Some(status)) => return Err(format!("exited during startup ({status})")),
                Ok(None) => {}
                Err(error) => return Err(format!("cannot be watched: {error}")),
            }
        }
        let last = match client.get(url).send().await {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) => format!("health answered {}", response.status()),
            Err(error) => format!("health probe failed: {error}"),
        };
        if tokio::time::Instant::now() + POLL_INTERVAL > deadline {
            return Err(format!("not healthy within {timeout:?} ({last})"));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Asks the OS for a free port on `host`. Another process could take it
/// before llama-server binds it; the startup error then says so in the log.
fn free_port(host: &str) -> Result<u16, LlmError> {
    std::net::TcpListener::bind((host, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| {
            LlmError::Unavailable(format!("cannot find a free port on {host}: {error}"))
        })
}

/// The host as it appears in a URL: brackets around IPv6, and loopback for
/// a wildcard listen address.
fn url_host(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        Ok(IpAddr::V6(ip)) if ip.is_unspecified() => "[::1]".to_owned(),
        Ok(IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => host.to_owned(),
    }
}

/// Starts the tasks that drain the child's piped output into a bounded tail.
/// They must keep reading whatever the bytes are: a full pipe would block
/// the server.
fn capture_output(child: &mut Child) -> Output {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
    let mut drains = JoinSet::new();
    if let Some(stdout) = child.stdout.take() {
        drains.spawn(drain(stdout, tail.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        drains.spawn(drain(stderr, tail.clone()));
    }
    Output::Captured { tail, drains }
}

async fn drain(stream: impl AsyncRead + Unpin, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                tracing::trace!(target: "agora.llm.server", "{text}");
                let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(text);
            }
        }
    }
}

/// The last lines of a log file (reads at most its last 16 KiB).
fn read_tail(path: &Path) -> String {
    const WINDOW: u64 = 16 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_host_brackets_ipv6_and_maps_wildcards_to_loopback() {
        assert_eq!(url_host("127.0.0.1"), "127.0.0.1");
        assert_eq!(url_host("0.0.0.0"), "127.0.0.1");
        assert_eq!(url_host("::"), "[::1]");
        assert_eq!(url_host("::1"), "[::1]");
        assert_eq!(url_host("localhost"), "localhost");
    }

    #[test]
    fn defaults_match_the_recommendation() {
        let config = LocalServerConfig::new("llama-server", "m.gguf");
        assert_eq!(config.host, "127.0.0.1");
        assert_eq!(config.port, 0);
        assert_eq!(config.context_size, 4096);
        assert_eq!(config.threads, 2);
        assert_eq!(config.slots, 1);
        assert_eq!(config.startup_timeout, Duration::from_secs(60));
        assert_eq!(config.log_file, None);
    }

    #[test]
    fn read_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).expect("writable");
        let tail = read_tail(&path);
        assert_eq!(tail.lines().count(), TAIL_LINES);
        assert!(tail.ends_with("line 99"));
        assert!(read_tail(&dir.path().join("missing")).starts_with("(cannot read"));
    }
}
