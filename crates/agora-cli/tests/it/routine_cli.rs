//! The `agora routine` commands, run as a user runs them: the `agora` binary against a
//! temporary SQLite store (`AGORA_STORE`) and a configuration file naming the node's tools.
//!
//! `add` and `test` build and run routines with the real routine runtime, so these tests need
//! `AGORA_JS_ENGINE` (`scripts/test.sh` sources `~/.cache/agora/env.sh`, which sets it); without
//! it they fail and say so.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::path::Path;
use std::process::{Command, Output, Stdio};

use agora_node::tools::WeatherForecastTool;
use agora_protocol::ProtocolHash;
use common::http;
use serde_json::Value;

use crate::cluster::{agora_command, repo, spawn_listening};
use crate::common;

struct Cli {
    dir: tempfile::TempDir,
}

impl Cli {
    fn new() -> Self {
        let engine = std::env::var_os("AGORA_JS_ENGINE").filter(|p| !p.is_empty());
        assert!(
            engine.is_some_and(|p| Path::new(&p).is_file()),
            "AGORA_JS_ENGINE is not set or missing: run scripts/install.sh, then \
             `source ~/.cache/agora/env.sh` (scripts/test.sh does both)"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("node.toml"),
            "[[node.tools]]\nname = \"weather_forecast\"\nkind = \"builtin\"\nbuiltin = \"weather_forecast\"\nseed = 3\n",
        )
        .unwrap();
        Self { dir }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// The `agora` command with these arguments, the configuration file and the store.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = agora_command(&self.dir.path().join("node.toml"), args);
        command.env(
            "AGORA_STORE",
            format!("sqlite://{}", self.dir.path().join("node.db").display()),
        );
        command
    }

    /// Runs and expects success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "agora {args:?} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// Runs a `list --json` command; returns each listed routine's status.
    fn statuses(&self, args: &[&str]) -> Vec<String> {
        let listed: Value = serde_json::from_str(&self.ok(args)).unwrap();
        let listed = listed.as_array().unwrap().iter();
        listed
            .map(|r| r["status"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Runs and expects failure; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(!output.status.success(), "agora {args:?} succeeded");
        String::from_utf8_lossy(&output.stderr).into_owned()
    }
}

/// `agora routine add` of the weather routine's JavaScript file under the weather protocol.
const ADD_WEATHER_JS: [&str; 5] = [
    "routine",
    "add",
    "--protocol",
    "protocols/weather-forecast.md",
    "routines/weather-forecast/routine.js",
];

#[test]
fn routines_are_added_listed_tested_switched_and_removed() {
    let cli = Cli::new();
    // A routine folder: protocol, tools and limits come from its manifest.
    let added = cli.ok(&["routine", "add", "routines/weather-forecast"]);
    assert!(added.contains("added routine weather-forecast"), "{added}");
    // A single file, with everything on the command line.
    let options = [
        "--tools",
        "weather_forecast",
        "--name",
        "weather-2",
        "--timeout-ms",
        "500",
        "--memory-mb",
        "32",
        "--disabled",
    ];
    cli.ok(&[&ADD_WEATHER_JS[..], &options].concat());

    let table = cli.ok(&["routine", "list"]);
    assert!(
        table.contains("weather-forecast") && table.contains("weather-2"),
        "{table}"
    );
    let listed: Value = serde_json::from_str(&cli.ok(&["routine", "list", "--json"])).unwrap();
    let routines = listed.as_array().unwrap();
    assert_eq!(routines.len(), 2);
    assert_eq!(routines[0]["status"], "active");
    assert_eq!(
        routines[0]["tools"],
        serde_json::json!(["weather_forecast"])
    );
    assert_eq!(routines[0]["language"], "javascript");
    assert_eq!(routines[0]["failures"], 0);
    assert_eq!(
        (
            routines[1]["status"].as_str(),
            routines[1]["timeoutMs"].as_i64()
        ),
        (Some("disabled"), Some(500))
    );

    // The protocol was stored and allowed with the routine.
    let pds = cli.ok(&["pd", "list"]);
    assert!(
        pds.contains("WeatherForecastQuery") && pds.contains("allowed"),
        "{pds}"
    );

    // A test run uses the node's tools (seed 3 here).
    let reply = cli.ok(&[
        "routine",
        "test",
        "weather-forecast",
        "--body",
        r#"{"location": "London, UK", "date": "2024-09-27"}"#,
    ]);
    let reply: Value = serde_json::from_str(reply.trim()).unwrap();
    let forecast = WeatherForecastTool::new(3).forecast("London, UK", "2024-09-27");
    assert_eq!(reply["weatherCondition"], forecast["condition"]);
    assert_eq!(
        reply["temperature"].as_f64(),
        forecast["temperature_c"].as_f64()
    );

    cli.ok(&["routine", "enable", "weather-2"]);
    let listed: Value = serde_json::from_str(&cli.ok(&["routine", "list", "--json"])).unwrap();
    assert_eq!(listed[0]["status"], "disabled");
    assert_eq!(listed[1]["status"], "active");
    let shown = cli.ok(&["routine", "show", "weather-2"]);
    assert!(shown.contains("callTool(\"weather_forecast\""), "{shown}");
    // A protocol hash shows the programmer's attempts for it (none: these are human routines).
    let hash = listed[0]["protocolHash"].as_str().unwrap().to_string();
    let attempts = cli.ok(&["routine", "show", &hash]);
    assert!(attempts.contains("no routine attempts for"), "{attempts}");

    cli.ok(&["routine", "rm", "weather-forecast"]);
    let listed: Value = serde_json::from_str(&cli.ok(&["routine", "list", "--json"])).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
}

/// `approve` and `reject` decide routines waiting for review (as the programmer leaves them
/// under `activation = "review"`), once each, with the reviewer on record.
#[test]
fn pending_routines_are_approved_or_rejected_with_a_reviewer() {
    let cli = Cli::new();
    for name in ["first", "second"] {
        let mut add = ADD_WEATHER_JS.to_vec();
        add.extend(["--name", name, "--disabled"]);
        cli.ok(&add);
    }
    let url = format!("sqlite://{}", cli.dir.path().join("node.db").display());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = agora_store::Store::connect(&url).await.unwrap();
        for id in [1, 2] {
            let pending = agora_store::RoutineStatus::Pending;
            store.set_routine_status(id, pending, 1).await.unwrap();
        }
        store.close().await;
    });
    let refused = cli.fails(&["routine", "enable", "first"]);
    assert!(refused.contains("approved or rejected"), "{refused}");

    let approved = cli.ok(&["routine", "approve", "first", "--reviewer", "ada"]);
    assert!(approved.contains("approved first"), "{approved}");
    let no_reason = cli.fails(&["routine", "reject", "second"]);
    assert!(no_reason.contains("--reason"), "{no_reason}");
    let rejected = cli.ok(&[
        "routine",
        "reject",
        "second",
        "--reason",
        "Too slow.",
        "--reviewer",
        "ada",
    ]);
    assert!(rejected.contains("rejected second"), "{rejected}");
    let twice = cli.fails(&["routine", "approve", "second", "--reviewer", "ada"]);
    assert!(twice.contains("not pending"), "{twice}");
    let edit = cli.dir.path().join("edit.js");
    std::fs::write(&edit, "function handle(body) { return body; }").unwrap();
    let edit = edit.to_str().unwrap();
    let refused = cli.fails(&[
        "routine",
        "edit",
        "second",
        "--source",
        edit,
        "--reviewer",
        "ada",
    ]);
    assert!(refused.contains("not pending"), "{refused}");

    assert_eq!(
        cli.statuses(&["routine", "list", "--json"]),
        ["active", "rejected"]
    );
    let reviews = runtime.block_on(async {
        let store = agora_store::Store::connect(&url).await.unwrap();
        store.programming().reviews(None).await.unwrap()
    });
    let decided: Vec<(&str, &str, &str)> = reviews
        .iter()
        .map(|r| (r.decision.as_str(), r.reviewer.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        decided,
        [("approved", "ada", ""), ("rejected", "ada", "Too slow.")]
    );
}

/// A protocol whose latest programmer job found its examples contradicting each other is listed
/// under the routines, with the report; a later job that got further takes it off.
#[test]
fn a_protocol_with_contradicting_examples_is_listed_as_not_programmed() {
    let cli = Cli::new();
    cli.ok(&ADD_WEATHER_JS);
    let hash =
        ProtocolHash::of(&std::fs::read(repo().join("protocols/weather-forecast.md")).unwrap());
    let url = format!("sqlite://{}", cli.dir.path().join("node.db").display());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let add = |job: &str, outcome: agora_store::AttemptOutcome, report: &str| {
        let attempt = agora_store::Attempt {
            id: 0,
            key: hash,
            job: job.into(),
            attempt: 1,
            reason: agora_store::JobReason::Threshold,
            source: None,
            outcome,
            report: report.into(),
            examples_upto: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: 0.0,
            routine_id: None,
            created_at_ms: 1,
        };
        runtime.block_on(async {
            let store = agora_store::Store::connect(&url).await.unwrap();
            store.programming().add_attempt(&attempt).await.unwrap();
            store.close().await;
        });
    };
    let report = "nothing compiled: examples 1, 2 reply differently on `temperature`";
    add(
        "a",
        agora_store::AttemptOutcome::TestsFailed,
        "compiled from examples 1-2",
    );
    add("b", agora_store::AttemptOutcome::Contradicted, report);
    let table = cli.ok(&["routine", "list"]);
    let line = format!(
        "protocol {}: not programmed, its examples contradict each other ({report})",
        &hash.to_hex()[..12]
    );
    assert!(table.contains(&line), "{table}");

    add(
        "c",
        agora_store::AttemptOutcome::TestsFailed,
        "compiled from examples 1-3",
    );
    let table = cli.ok(&["routine", "list"]);
    assert!(!table.contains("not programmed"), "{table}");
}

/// `--sender` decides the node's sender routines waiting for review the same way, by id.
#[test]
fn pending_sender_routines_are_decided_by_id_with_a_reviewer() {
    let cli = Cli::new();
    let url = format!("sqlite://{}", cli.dir.path().join("node.db").display());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = agora_store::Store::connect(&url).await.unwrap();
        for target in ["http://bob", "http://carol", "http://dan"] {
            let key = agora_store::SenderKey {
                target: target.into(),
                task: "weather".into(),
                protocol_hash: ProtocolHash::of(b"# Weather"),
            };
            let sender = store.sender();
            sender
                .add_sender_routine(&key, "function handle(i) {}", b"c", 1, true)
                .await
                .unwrap();
        }
        store.close().await;
    });
    let listed = cli.ok(&["routine", "list", "--sender"]);
    assert!(
        listed.contains("   1  pending") && listed.contains("weather to http://carol"),
        "{listed}"
    );
    let approve = ["routine", "approve", "--sender", "1", "--reviewer", "ada"];
    let approved = cli.ok(&approve);
    assert!(
        approved.contains("sender routine 1 (weather to http://bob) is active"),
        "{approved}"
    );
    let twice = cli.fails(&approve);
    assert!(twice.contains("not pending"), "{twice}");
    let by_name = cli.fails(&["routine", "approve", "--sender", "bob", "--reviewer", "ada"]);
    assert!(by_name.contains("by its id"), "{by_name}");
    let reject = |reason| {
        let mut args: Vec<&str> = "routine reject --sender 2 --reviewer ada --reason"
            .split(' ')
            .collect();
        args.push(reason);
        args
    };
    let blank = cli.fails(&reject(" "));
    assert!(blank.contains("needs a reason"), "{blank}");
    let rejected = cli.ok(&reject("Too chatty."));
    assert!(rejected.contains("is rejected"), "{rejected}");
    let edit = cli.dir.path().join("edit.js");
    std::fs::write(&edit, "function handle(input) { return input; }").unwrap();
    let edit = [
        "routine",
        "edit",
        "--sender",
        "3",
        "--source",
        edit.to_str().unwrap(),
        "--reviewer",
        "ada",
    ];
    let unexamined = cli.fails(&edit);
    assert!(unexamined.contains("no kept examples"), "{unexamined}");

    let listed = cli.statuses(&["routine", "list", "--sender", "--json"]);
    assert_eq!(listed, ["active", "rejected", "pending"]);
    let reviews = runtime.block_on(async {
        let store = agora_store::Store::connect(&url).await.unwrap();
        store.sender().sender_reviews(None).await.unwrap()
    });
    let decided: Vec<(i64, &str, &str)> = reviews
        .iter()
        .map(|r| (r.sender_routine_id, r.decision.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        decided,
        [(1, "approved", ""), (2, "rejected", "Too chatty.")]
    );
}

#[test]
fn bad_routines_are_refused_with_a_reason() {
    let cli = Cli::new();
    let unknown = "0000000000000000000000000000000000000000";
    let error = cli.fails(&[
        "routine",
        "add",
        "--protocol",
        unknown,
        "routines/weather-forecast/routine.js",
    ]);
    assert!(error.contains("no protocol document"), "{error}");
    let broken = cli.dir.path().join("broken.js");
    std::fs::write(&broken, "function handle(body) { return ; ; )").unwrap();
    let error = cli.fails(&[
        "routine",
        "add",
        "--protocol",
        "protocols/weather-forecast.md",
        broken.to_str().unwrap(),
    ]);
    assert!(error.contains("does not build"), "{error}");
    let error = cli.fails(&[&ADD_WEATHER_JS[..], &["--tools", "teleport"]].concat());
    assert!(error.contains("unknown tool \"teleport\""), "{error}");
    let error = cli.fails(&["routine", "disable", "nope"]);
    assert!(error.contains("no routine \"nope\""), "{error}");
    let listed: Value = serde_json::from_str(&cli.ok(&["routine", "list", "--json"])).unwrap();
    assert_eq!(listed, serde_json::json!([]));
}

/// A node answers with its routine, records each request without waiting for the commit, and
/// on SIGTERM (what a service manager sends) stops cleanly having written every record.
#[test]
fn a_node_stopped_by_sigterm_has_recorded_every_answered_request() {
    let cli = Cli::new();
    cli.ok(&["routine", "add", "routines/weather-forecast"]);
    // No LLM is needed (the routine answers); an empty cassette stands in for one.
    let cassette = cli.dir.path().join("empty.jsonl");
    std::fs::write(&cassette, "").unwrap();
    let mut command = cli.command(&["node", "run", "--listen", "127.0.0.1:0", "--llm", "replay"]);
    command
        .env("AGORA_LLM__REPLAY", &cassette)
        // Longer than the test: the records reach the database only because stopping writes
        // what is queued.
        .env("AGORA_REQUEST_LINGER_MS", "600000")
        .stderr(Stdio::null());
    let (mut node, url) = spawn_listening(command)
        .unwrap_or_else(|banner| panic!("no URL in the banner: {banner:?}"));

    let pd = std::fs::read(repo().join("protocols/weather-forecast.md")).unwrap();
    let request = serde_json::json!({
        "protocolHash": ProtocolHash::of(&pd).to_hex(),
        "protocolSources": [],
        "body": {"location": "Paris", "date": "2024-03-01"},
    })
    .to_string();
    const REQUESTS: i64 = 40;
    for _ in 0..REQUESTS {
        let (status, reply) = http(&url, "POST", "/", None, request.as_bytes());
        assert_eq!(status, 200, "{reply}");
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["status"], "success", "{reply}");
    }

    let terminated = Command::new("kill")
        .args(["-TERM", &node.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let exit = node.wait().unwrap();
    assert!(exit.success(), "the node did not stop cleanly: {exit}");

    let listed: Value = serde_json::from_str(&cli.ok(&["routine", "list", "--json"])).unwrap();
    assert_eq!(listed[0]["runs"], REQUESTS, "{listed}");
    let stats = cli.ok(&["stats"]);
    assert!(stats.contains(&REQUESTS.to_string()), "{stats}");
    let stats: Value = serde_json::from_str(&cli.ok(&["stats", "--json"])).unwrap();
    let usage = &stats["protocols"][0];
    assert_eq!(
        (&usage["requests"], &usage["routine"]),
        (&REQUESTS.into(), &REQUESTS.into()),
        "{stats}"
    );
}
