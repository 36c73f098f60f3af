#![allow(clippy::unwrap_used)] // tests fail loudly by design

//! `agora demo network` replays the first queries of the committed agora-mode cassette offline
//! (the baseline's, see demo/network/RESULTS.md), writes its run record, and `agora demo
//! network-report` turns it into a report; a cassette that lacks a call fails the run loudly.
//!
//! The same replay with the agents split over worker processes gives the same queries.
//!
//! Needs `AGORA_JS_ENGINE` (set by `scripts/test.sh`) for the routines in the cassette.

use std::path::Path;
use std::process::Command;

fn agora() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agora"))
}

fn cassette() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/network/cassettes/agora.jsonl.gz")
}

/// Replays the first `queries` of the committed agora cassette with `extra` arguments, in
/// `dir`; asserts it succeeded and returns its stdout and run record. The record is
/// `dir/run.json`.
fn replay_committed(dir: &Path, queries: usize, extra: &[&str]) -> (String, serde_json::Value) {
    let run = dir.join("run.json");
    let output = agora()
        .args(["demo", "network", "--no-progress"])
        .args(extra)
        .args(["--queries", &queries.to_string(), "--llm"])
        .arg(format!("replay:{}", cassette().display()))
        .arg("--dir")
        .arg(dir.join("network"))
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let record = serde_json::from_str(&std::fs::read_to_string(&run).unwrap()).unwrap();
    (stdout, record)
}

#[test]
fn the_network_demo_replays_a_cassette_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, record) = replay_committed(dir.path(), 6, &[]);
    assert!(stdout.contains("agora mode, 6 queries"), "{stdout}");
    assert_eq!(record["queries"].as_array().unwrap().len(), 6);
    assert!(record["totals"]["calls"].as_u64().unwrap() > 0);

    let report = dir.path().join("report");
    let output = agora()
        .args(["demo", "network-report", "--agora"])
        .arg(dir.path().join("run.json"))
        .arg("--out")
        .arg(&report)
        .output()
        .unwrap();
    assert_succeeded(&output);
    let markdown = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(markdown.contains("54"), "{markdown}");
}

/// Fails the test with the command's stderr unless it succeeded.
fn assert_succeeded(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `agora demo network` with `args`, its folder and record in `dir`; the run must fail, and
/// its stderr is returned.
fn failed_demo(dir: &Path, args: &[&str]) -> String {
    let output = agora()
        .args(["demo", "network", "--no-progress"])
        .args(args)
        .arg("--dir")
        .arg(dir.join("network"))
        .arg("--out")
        .arg(dir.join("run.json"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_cassette_missing_a_call_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let replay = format!("replay:{}", empty.display());
    let stderr = failed_demo(dir.path(), &["--queries", "1", "--llm", &replay]);
    assert!(stderr.contains("the cassette holds no answer"), "{stderr}");
    // The call it lacks is written whole beside the cassette, for diffing against the recording.
    let missed = dir.path().join("empty.missed.json");
    assert!(stderr.contains(&missed.display().to_string()), "{stderr}");
    let call: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&missed).unwrap()).unwrap();
    assert!(
        call["messages"].as_array().is_some_and(|m| !m.is_empty()),
        "{call}"
    );
}

/// The per-query facts a replay must reproduce: outcome, ladder rung, LLM calls and tokens.
fn query_facts(record: &serde_json::Value) -> Vec<(bool, String, u64, u64, u64)> {
    record["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["success"].as_bool().unwrap(),
                q["path"].as_str().unwrap().to_string(),
                q["llm"]["calls"].as_u64().unwrap(),
                q["llm"]["prompt_tokens"].as_u64().unwrap(),
                q["llm"]["completion_tokens"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn with_its_agents_in_worker_processes_the_network_replays_the_committed_run() {
    // The committed queries reach across processes (a server's helper asking a server in another
    // worker), negotiations, server routines and sender routines.
    let queries = 60;
    let dir = tempfile::tempdir().unwrap();
    let (_, record) = replay_committed(dir.path(), queries, &["--processes", "3"]);
    assert!(
        record["llm"]
            .as_str()
            .unwrap()
            .contains("3 worker processes"),
        "{}",
        record["llm"]
    );
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/network/runs/agora.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let expected: Vec<_> = query_facts(&committed).into_iter().take(queries).collect();
    assert_eq!(query_facts(&record), expected);
    // Outputs, answering sides and verdicts too: the judge sees the same answers.
    for key in ["output", "answered_by", "verdict"] {
        let column = |r: &serde_json::Value| -> Vec<serde_json::Value> {
            r["queries"].as_array().unwrap()[..queries]
                .iter()
                .map(|q| q[key].clone())
                .collect()
        };
        assert_eq!(column(&record), column(&committed), "{key}");
    }
    assert!(record["network"]["server_routines"].as_u64().unwrap() >= 1);
    assert!(record["network"]["negotiations"].as_u64().unwrap() >= 1);
}

#[test]
fn worker_processes_refuse_to_record() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("cassette.jsonl");
    let stderr = failed_demo(
        dir.path(),
        &[
            "--processes",
            "2",
            "--llm",
            "http://127.0.0.1:9/v1",
            "--record",
            &cassette.to_string_lossy(),
        ],
    );
    assert!(
        stderr.contains("--record needs the one-process mode"),
        "{stderr}"
    );
    assert!(!dir.path().join("cassette.jsonl").exists());
}

/// `demo network generate` writes a screenplay in the committed format (300 queries, a sync after
/// every 10); `network-report --judge` gives a record's verdicts from the record alone, the same
/// as those it stores.
#[test]
fn a_generated_screenplay_and_the_judge_from_the_command_line() {
    let output = agora()
        .args([
            "demo",
            "network",
            "generate",
            "--seed",
            "3",
            "--queries",
            "300",
        ])
        .output()
        .unwrap();
    assert_succeeded(&output);
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let queries = entries
        .iter()
        .filter(|e| !e[0].as_str().unwrap().starts_with("protocolDb"));
    assert_eq!(queries.count(), 300);
    assert_eq!(entries.len(), 330);
    let record = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/network/runs/agora.json");
    let output = agora()
        .args(["demo", "network-report", "--judge"])
        .arg(&record)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("0 verdicts differ from the record's, 0 were not stored"),
        "{stdout}"
    );
    assert!(stdout.contains("skiResort2       rentSki"), "{stdout}");
}
