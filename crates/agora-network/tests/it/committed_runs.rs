#![allow(clippy::unwrap_used)] // tests fail loudly by design

//! The baseline committed under `demo/network/` replays offline to its committed numbers.
//!
//! Each run record (`runs/<name>.json`) was written by `agora demo network --record <name>.jsonl`
//! on the local model, with the product's defaults, and the cassette committed gzipped as
//! `cassettes/<name>.jsonl.gz`. Replaying the cassette
//! on a fresh network, with the real routine runtime, must give every query the same outcome,
//! path, LLM calls, tokens and cost, and the same totals: the report is built from those records,
//! so this is what ties the committed report to the committed cassette. Any LLM call the cassette
//! does not hold fails the replay (`ReplayLlm`), so a change to a prompt or a default shows up
//! here, and the baseline is recorded again (`demo/network/RESULTS.md` says how).
//!
//! Needs `AGORA_JS_ENGINE` (the routines the model wrote are JavaScript), like every test that
//! runs real routines: `scripts/test.sh` sets it, and runs these in its slow phase.
//!
//! What each query wrote to its server's database is not in the cassette: the replay's tools
//! write it again, and it must be what the record holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agora_llm::ReplayLlm;
use agora_network::RunRecord;
use agora_network::demo::demo_routine_engine;
use agora_network::run::{RunOptions, run_screenplay};
use agora_network::spec::{NetworkSpec, embedded_screenplay};

fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/network")
}

async fn replay(mode: &str) {
    let dir = demo_dir();
    let record_path = dir.join(format!("runs/{mode}.json"));
    let Ok(text) = std::fs::read_to_string(&record_path) else {
        panic!("no committed run record {}", record_path.display());
    };
    let recorded: RunRecord = serde_json::from_str(&text).unwrap();
    let cassette = dir.join(format!("cassettes/{mode}.jsonl.gz"));
    let llm = Arc::new(ReplayLlm::open(&cassette).unwrap());
    let work = tempfile::tempdir().unwrap();
    let spec = Arc::new(NetworkSpec::embedded().unwrap());
    // The demo's own routine runtime: the routines' wall clock is the screenplay's day.
    let engine = demo_routine_engine(
        &work.path().join("network"),
        Duration::from_secs(120),
        &spec.today,
    )
    .unwrap();
    let entries = embedded_screenplay().unwrap();
    let entries = match recorded.sample {
        Some(sample) => sample.draw(&entries),
        None => entries,
    };
    let replayed = run_screenplay(
        spec,
        &entries,
        llm,
        Some(engine),
        RunOptions {
            queries: recorded.queries.len(),
            sample: recorded.sample,
            mode: recorded.mode,
            dir: work.path().join("network"),
            seed: 42,
            query_timeout: Duration::from_secs(120),
            llm_description: "replay".into(),
            progress: false,
            native_tools: false,
            setup: recorded.setup.clone().unwrap_or_default(),
            halt: None,
            checkpoint: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(replayed.queries.len(), recorded.queries.len());
    for (got, want) in replayed.queries.iter().zip(&recorded.queries) {
        let query = format!(
            "query {} ({} -> {} {})",
            want.index, want.user, want.server, want.task
        );
        assert_eq!(got.success, want.success, "{query}: {:?}", got.error);
        assert_eq!(got.output, want.output, "{query}");
        assert_eq!(got.writes, want.writes, "{query}");
        assert_eq!(got.verdict, want.verdict, "{query}");
        assert_eq!(got.answered_by, want.answered_by, "{query}");
        assert_eq!(got.path, want.path, "{query}");
        assert_eq!(got.llm.calls, want.llm.calls, "{query}");
        assert_eq!(got.llm.prompt_tokens, want.llm.prompt_tokens, "{query}");
        assert_eq!(
            got.llm.completion_tokens, want.llm.completion_tokens,
            "{query}"
        );
        assert!(
            (got.llm.cost_usd - want.llm.cost_usd).abs() < 1e-9,
            "{query}"
        );
    }
    assert_eq!(replayed.totals.calls, recorded.totals.calls);
    assert_eq!(replayed.totals.prompt_tokens, recorded.totals.prompt_tokens);
    assert_eq!(
        replayed.totals.completion_tokens,
        recorded.totals.completion_tokens
    );
    assert!((replayed.totals.cost_usd - recorded.totals.cost_usd).abs() < 1e-6);
    assert_eq!(replayed.network, recorded.network);
}

/// The baseline in agora mode: the paper's screenplay with the product's defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries and runs every program and routine candidate (a minute): scripts/test.sh runs it in the slow phase"]
async fn the_committed_agora_baseline_replays_to_its_numbers() {
    replay("agora").await;
}

/// The NL-only stratified sample (`--mode nl-only --sample-per-pair 20 --sample-seed 1`), as far
/// as it is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_nl_only_sample_replays_to_its_numbers() {
    replay("nl-only-sample").await;
}

/// The committed report was built from the committed run records; its totals are the records'.
/// Together with the replay above, this ties the report to the cassette.
#[test]
fn the_committed_report_carries_the_committed_runs_totals() {
    let dir = demo_dir();
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reports/baseline/summary.json")).unwrap(),
    )
    .unwrap();
    report_carries_totals(&dir, &summary, &[("agora", "agora")]);
}

/// Every committed run record reads and writes back the same bytes (`write_run`'s pretty JSON),
/// so a field added to the record leaves the committed records as they are.
#[test]
fn the_committed_run_records_read_and_write_the_same_bytes() {
    let runs = demo_dir().join("runs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&runs).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let record: RunRecord = serde_json::from_str(&text).unwrap();
        let written = serde_json::to_string_pretty(&record).unwrap() + "\n";
        assert!(
            written == text,
            "{} changes when written back",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 1, "no record under {}", runs.display());
}

fn report_carries_totals(dir: &Path, summary: &serde_json::Value, runs: &[(&str, &str)]) {
    for &(mode, key) in runs {
        let run: RunRecord = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("runs/{mode}.json"))).unwrap(),
        )
        .unwrap();
        let reported = &summary[key];
        assert_eq!(reported["queries"], run.queries.len(), "{mode}");
        assert_eq!(reported["schema_valid"], run.successes(), "{mode}");
        // The committed verdicts are the judge's, from the record alone.
        let mut judged = run.clone();
        judged.judge(&NetworkSpec::embedded().unwrap());
        assert_eq!(
            judged.queries, run.queries,
            "{mode}: the committed verdicts are stale"
        );
        assert_eq!(reported["correct"], run.correct(), "{mode}");
        let count = |word: &str| {
            run.queries
                .iter()
                .filter(|q| q.verdict_word() == word)
                .count()
        };
        for word in ["wrong", "failed", "unjudged"] {
            assert_eq!(reported[word], count(word), "{mode}: {word}");
        }
        // Unjudged stays under 5 % of the queries.
        assert!(count("unjudged") * 20 < run.queries.len(), "{mode}");
        let totals = &reported["llm_totals"];
        assert_eq!(totals["calls"], run.totals.calls, "{mode}");
        assert_eq!(totals["prompt_tokens"], run.totals.prompt_tokens, "{mode}");
        assert_eq!(
            totals["completion_tokens"], run.totals.completion_tokens,
            "{mode}"
        );
        let cost = totals["cost_usd"].as_f64().unwrap();
        assert!((cost - run.totals.cost_usd).abs() < 1e-9, "{mode}: {cost}");
        assert_eq!(
            serde_json::to_value(&run.network).unwrap(),
            reported["network"],
            "{mode}"
        );
    }
}
