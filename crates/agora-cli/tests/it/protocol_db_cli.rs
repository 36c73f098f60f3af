//! `agora protocol-db run` as operators run it: two `agora` processes on loopback ports, each
//! with its own SQLite store, configured by flags and `AGORA_PROTOCOL_DB_*` variables; B has A
//! as its peer. Requests are plain HTTP/1.1 over std sockets, so the test needs no client crate.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use agora_protocol::ProtocolHash;
use common::http;

use crate::common;

const TOKEN: &str = "cli-test-token";

/// A running `agora protocol-db run`, killed on drop.
struct Db {
    child: Child,
    url: String,
    // Held open: the rest of the banner is printed after the first line, and a closed pipe
    // would make that printing fail.
    _stdout: BufReader<ChildStdout>,
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, name: &str, peers: &[&str]) -> Db {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agora"));
    command
        .args(["protocol-db", "run", "--listen", "127.0.0.1:0", "--store"])
        .arg(format!(
            "sqlite://{}",
            dir.join(format!("{name}.db")).display()
        ))
        .env("AGORA_PROTOCOL_DB_TOKEN", TOKEN)
        .env("AGORA_PROTOCOL_DB_SYNC_INTERVAL_SECS", "0")
        .env("AGORA_PROTOCOL_DB_SYNC_EVERY_ADDITIONS", "0")
        .env(
            "AGORA_PROTOCOL_DB_FETCH__ALLOW_NETWORKS",
            "[\"127.0.0.0/8\"]",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for peer in peers {
        command.args(["--peer", peer]);
    }
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first_line = String::new();
    stdout.read_line(&mut first_line).unwrap();
    let url = first_line
        .trim()
        .rsplit(' ')
        .next()
        .filter(|url| url.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in the banner: {first_line:?}"))
        .to_string();
    Db {
        child,
        url,
        _stdout: stdout,
    }
}

#[test]
fn two_protocol_database_processes_sync_over_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path(), "a", &[]);
    let b = start(dir.path(), "b", &[&a.url]);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protocols/weather-forecast.md"),
    )
    .unwrap();
    let hash = ProtocolHash::of(text.as_bytes()).to_hex();

    assert_eq!(
        http(&a.url, "POST", "/protocols", None, text.as_bytes()).0,
        401
    );
    let (status, body) = http(&a.url, "POST", "/protocols", Some(TOKEN), text.as_bytes());
    assert_eq!(status, 201, "{body}");
    assert!(body.contains(&hash), "{body}");

    let (status, report) = http(&b.url, "POST", "/sync?wait=true", Some(TOKEN), b"");
    assert_eq!(status, 200, "{report}");
    assert!(report.contains("\"stored\":1"), "{report}");
    let (status, served) = http(&b.url, "GET", &format!("/protocols/{hash}"), None, b"");
    assert_eq!((status, served.as_str()), (200, text.as_str()));
    let (_, hits) = http(&b.url, "GET", "/protocols?q=weather", None, b"");
    assert!(
        hits.contains(&format!("{}/protocols/{hash}", b.url)),
        "{hits}"
    );
}
