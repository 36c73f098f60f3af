//! `LocalServer` and `wait_healthy` without a real llama-server: fake
//! binaries are small shell scripts, the health endpoint is an axum server.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agora_llm::{LlmError, LocalServer, LocalServerConfig, wait_healthy};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// An executable shell script `name` in `dir` running `body`. A child process writes it: a file
/// this process held open for writing could be inherited by a child another test forks at that
/// moment, and executing it then fails with "Text file busy" (seen once under the whole
/// workspace's tests).
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"printf '#!/bin/sh\n%s\n' "$1" > "$2" && chmod 755 "$2""#)
        .arg("script")
        .arg(body)
        .arg(&path)
        .status()
        .expect("sh runs");
    assert!(status.success(), "writing {}", path.display());
    path
}

fn model_file(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, b"GGUF").expect("temp dir is writable");
    path
}

fn unavailable_message(error: LlmError) -> String {
    match error {
        LlmError::Unavailable(message) => message,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_model_is_unavailable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = LocalServerConfig::new("/bin/true", dir.path().join("missing.gguf"));
    let message = unavailable_message(LocalServer::start(config).await.expect_err("no model"));
    assert!(message.contains("missing.gguf"), "{message}");
}

#[tokio::test]
async fn a_missing_binary_is_unavailable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = LocalServerConfig::new(dir.path().join("no-such-server"), model_file(dir.path()));
    let message = unavailable_message(LocalServer::start(config).await.expect_err("no binary"));
    assert!(message.contains("no-such-server"), "{message}");
}

#[tokio::test]
async fn an_exit_during_startup_quotes_the_log_and_the_arguments() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = script(
        dir.path(),
        "fake-server",
        "echo \"args: $*\"\necho 'error: failed to load model' >&2\nexit 1",
    );
    let model = model_file(dir.path());
    let config = LocalServerConfig::new(binary, &model);
    let message = unavailable_message(LocalServer::start(config).await.expect_err("exits"));
    assert!(message.contains("exited during startup"), "{message}");
    assert!(message.contains("error: failed to load model"), "{message}");
    let head = format!("args: -m {} --host 127.0.0.1 --port ", model.display());
    assert!(message.contains(&head), "{message}");
    assert!(
        message.contains(" -c 4096 -t 2 -np 1 --no-webui"),
        "{message}"
    );
}

#[tokio::test]
async fn a_log_file_receives_the_output_and_feeds_the_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = script(dir.path(), "fake-server", "echo 'bind failed' >&2\nexit 3");
    let log = dir.path().join("server.log");
    let mut config = LocalServerConfig::new(binary, model_file(dir.path()));
    config.log_file = Some(log.clone());
    let message = unavailable_message(LocalServer::start(config).await.expect_err("exits"));
    assert!(message.contains("bind failed"), "{message}");
    let logged = std::fs::read_to_string(&log).expect("log written");
    assert!(logged.contains("bind failed"), "{logged}");
}

#[tokio::test]
async fn a_server_that_never_gets_healthy_is_killed_at_the_deadline() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pid_file = dir.path().join("pid");
    let binary = script(
        dir.path(),
        "fake-server",
        &format!("echo $$ > {}\nexec sleep 30", pid_file.display()),
    );
    let mut config = LocalServerConfig::new(binary, model_file(dir.path()));
    config.startup_timeout = Duration::from_millis(600);
    let message = unavailable_message(LocalServer::start(config).await.expect_err("never healthy"));
    assert!(message.contains("not healthy within"), "{message}");
    let pid = std::fs::read_to_string(&pid_file).expect("script ran");
    let proc_dir = PathBuf::from(format!("/proc/{}", pid.trim()));
    assert!(
        !proc_dir.exists(),
        "fake server {} still running",
        pid.trim()
    );
}

async fn health(State(probes): State<Arc<AtomicUsize>>) -> StatusCode {
    // Like llama-server: 503 while the model loads, then 200.
    if probes.fetch_add(1, Ordering::SeqCst) < 2 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

#[tokio::test]
async fn wait_healthy_waits_through_loading() {
    let probes = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .route("/health", get(health))
        .with_state(probes.clone());
    let (address, server) = crate::support::serve(app).await;

    wait_healthy(&format!("http://{address}/v1"), Duration::from_secs(10))
        .await
        .expect("healthy after loading");
    assert_eq!(probes.load(Ordering::SeqCst), 3);
    server.abort();
}

#[tokio::test]
async fn wait_healthy_gives_up_on_a_closed_port() {
    let url = crate::support::closed_url();
    let waited = wait_healthy(&url, Duration::from_millis(500)).await;
    let error = waited.expect_err("nobody listens");
    let message = unavailable_message(error);
    assert!(message.contains("not healthy within"), "{message}");
}
