#![allow(clippy::unwrap_used)] // tests fail loudly by design

//! The recorded runs committed under `demo/network/` replay offline to their committed numbers.
//!
//! Each run record (`runs/<mode>.json`) was written by `agora demo network --record
//! cassettes/<mode>.jsonl` on the local model. Replaying the cassette on a fresh network, with the
//! real routine runtime, must give every query the same outcome, path, LLM calls, tokens and
//! cost, and the same totals: the report is built from those records, so this is what ties the
//! committed report to the committed cassette. Any LLM call the cassette does not hold fails the
//! replay (`ReplayLlm`), so a change to a prompt shows up here.
//!
//! Needs `AGORA_JS_ENGINE` (the routines the model wrote are JavaScript), like every test that
//! runs real routines: `scripts/test.sh` sets it, and runs these in its slow phase (they take
//! minutes: every routine candidate the model wrote is built again and examined).
//!
//! What each query wrote to its server's database is not in the cassette: the replay's tools
//! write it again, and it must be what the record holds. With `AGORA_UPDATE_RECORDS=1` a replay
//! first takes the writes it observed into the committed record and judges it again (everything
//! else in the record is left as recorded), for records made before the runner observed writes
//! or a judge rule changed; the comparison then runs against the updated record.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agora_llm::ReplayLlm;
use agora_network::RunRecord;
use agora_network::demo::{demo_routine_engine, write_run};
use agora_network::judge::generator::{GeneratorConfig, generate, to_text};
use agora_network::run::{RunOptions, run_screenplay};
use agora_network::spec::{Entry, NetworkSpec, embedded_screenplay, parse_screenplay};

/// The screenplay a committed run played.
#[derive(Clone, Copy)]
enum Screenplay {
    /// The paper's 1000 queries (embedded in the binary).
    Paper,
    /// One the paper's generator writes (`agora demo network generate --seed S --queries Q`).
    Generated { seed: u64, queries: usize },
}

impl Screenplay {
    fn entries(self, spec: &NetworkSpec) -> Vec<Entry> {
        match self {
            Self::Paper => embedded_screenplay().unwrap(),
            Self::Generated { seed, queries } => {
                let entries = generate(spec, &GeneratorConfig::paper(queries), seed).unwrap();
                parse_screenplay(&to_text(&entries)).unwrap()
            }
        }
    }
}

fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/network")
}

async fn replay(mode: &str, screenplay: Screenplay) {
    let dir = demo_dir();
    let record_path = dir.join(format!("runs/{mode}.json"));
    let Ok(text) = std::fs::read_to_string(&record_path) else {
        panic!("no committed run record {}", record_path.display());
    };
    let mut recorded: RunRecord = serde_json::from_str(&text).unwrap();
    let cassette = dir.join(format!("cassettes/{mode}.jsonl"));
    let llm = Arc::new(ReplayLlm::open(&cassette).unwrap());
    let work = tempfile::tempdir().unwrap();
    let spec = Arc::new(NetworkSpec::embedded().unwrap());
    // The demo's own routine runtime: the routines' wall clock is the screenplay's day.
    let engine = demo_routine_engine(
        &work.path().join("network"),
        Duration::from_secs(120),
        &spec.today,
        recorded.switches.strict_arguments,
    )
    .unwrap();
    let entries = screenplay.entries(&spec);
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
            propose_from_schema: false,
            code_as_action: true,
            switches: recorded.switches,
            halt: None,
            checkpoint: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(replayed.queries.len(), recorded.queries.len());
    if std::env::var_os("AGORA_UPDATE_RECORDS").is_some() {
        for (query, replayed) in recorded.queries.iter_mut().zip(&replayed.queries) {
            query.writes = replayed.writes.clone();
        }
        recorded.judge(&NetworkSpec::embedded().unwrap());
        write_run(&record_path, &recorded).unwrap();
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_agora_run_replays_to_its_numbers() {
    replay("agora", Screenplay::Paper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries: scripts/test.sh runs it in the slow phase"]
async fn the_committed_nl_only_run_replays_to_its_numbers() {
    replay("nl-only", Screenplay::Paper).await;
}

/// The agora mode on the whole 1000-query screenplay (recorded in sittings: `--record` resumes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays 1000 recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_whole_screenplay_agora_run_replays_to_its_numbers() {
    replay("agora-screenplay", Screenplay::Paper).await;
}

/// The agora mode on the paper's first 100 queries with a success that only read sent back
/// (`responder.require_effects`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_effects_agora_run_replays_to_its_numbers() {
    replay("agora-effects", Screenplay::Paper).await;
}

/// The same with `run_sql_query`'s mistakes explained from the schema and the examples' drafts
/// examined first (`--explain-sql-errors --examine-drafts`; the record carries both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_explained_errors_agora_run_replays_to_its_numbers() {
    replay("agora-explained-errors", Screenplay::Paper).await;
}

/// The agora mode on the paper's first 200 queries with the servers' programs grounded
/// (`responder.ground_programs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_grounded_agora_prefix_replays_to_its_numbers() {
    replay("agora-grounded", Screenplay::Paper).await;
}

/// The NL-only mode on a stratified sample of the whole screenplay (20 queries per pair, seed 1):
/// the record's `sample` selects the same 355 queries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries: scripts/test.sh runs it in the slow phase"]
async fn the_committed_nl_only_sample_replays_to_its_numbers() {
    replay("nl-only-sample", Screenplay::Paper).await;
}

/// The agora mode on a screenplay the paper's generator wrote with seed 2 (300 queries): the
/// goals hold on another screenplay too, or the report says where they do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays 300 recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_generated_screenplay_agora_run_replays_to_its_numbers() {
    replay("agora-seed2", SEED2).await;
}

/// The same generated screenplay with the servers' programs grounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays 300 recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_generated_screenplay_grounded_agora_run_replays_to_its_numbers() {
    replay("agora-seed2-grounded", SEED2).await;
}

/// The same, grounded, with `run_sql_query` taking `params` and first routines examined on at
/// least 3 examples (`--sql-params --min-examples 3`; the record carries both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays 300 recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_generated_screenplay_strict_agora_run_replays_to_its_numbers() {
    replay("agora-seed2-strict", SEED2).await;
}

/// The first 181 queries of the same, strict as above, with the examination lenient about the
/// model's own inconsistencies and a repeated candidate asked for again, sampled
/// (`--lenient-grading --resample-temperature 0.7`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays 181 recorded queries and builds every routine candidate (minutes): scripts/test.sh runs it in the slow phase"]
async fn the_committed_generated_screenplay_lenient_agora_run_replays_to_its_numbers() {
    replay("agora-seed2-lenient", SEED2).await;
}

/// The first 90 queries of the same, lenient as above, with the servers answering a
/// natural-language message with a program written for it (`--natural-programs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays 90 recorded queries and builds every program (a minute or two): scripts/test.sh runs it in the slow phase"]
async fn the_committed_generated_screenplay_natural_programs_agora_run_replays_to_its_numbers() {
    replay("agora-seed2-natural", SEED2).await;
}

/// The same 90 queries with tool arguments held to their types (`--strict-arguments`): a
/// program's `undefined` array element and an object or array among the SQL `params` are
/// refused. The replay's routine runtime refuses them because the record says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays 90 recorded queries and builds every program (a minute or two): scripts/test.sh runs it in the slow phase"]
async fn the_committed_generated_screenplay_strict_arguments_agora_run_replays_to_its_numbers() {
    replay("agora-seed2-strict-arguments", SEED2).await;
}

/// NL-only on a stratified sample of the same generated screenplay (20 per pair, seed 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays the recorded queries: scripts/test.sh runs it in the slow phase"]
async fn the_committed_generated_screenplay_nl_only_sample_replays_to_its_numbers() {
    replay("nl-only-seed2-sample", SEED2).await;
}

/// `agora demo network generate --seed 2 --queries 300`.
const SEED2: Screenplay = Screenplay::Generated {
    seed: 2,
    queries: 300,
};

/// The committed reports were built from the committed run records: `reports/local/` from the
/// first 100 queries of both modes, `reports/screenplay/` from the whole screenplay in agora mode
/// and the NL-only stratified sample, `reports/seed2/` from both modes on the generated
/// screenplay (NL-only sampled), `reports/seed2-grounded/` from the same with the servers'
/// programs grounded (`responder.ground_programs`), `reports/seed2-strict/` from its first 181
/// queries grounded and strict (`--sql-params --min-examples 3`), `reports/seed2-lenient/` from
/// the same with a lenient examination and resampling, `reports/seed2-natural/` from the first 90
/// of those with programs for natural-language messages, `reports/seed2-strict-arguments/` from the
/// same 90 with strict tool arguments, `reports/effects/` from the paper's first 100 queries
/// with a success that only read sent back, `reports/explained-errors/` from the same with SQL
/// mistakes explained and drafts examined. Their totals are the records'. Together
/// with the replays above, this ties the reports to the cassettes.
#[test]
fn the_committed_reports_carry_the_committed_runs_totals() {
    let dir = demo_dir();
    let reports: [(&str, &[(&str, &str)]); 10] = [
        ("local", &[("agora", "agora"), ("nl-only", "nl_only")]),
        (
            "effects",
            &[("agora-effects", "agora"), ("nl-only", "nl_only")],
        ),
        (
            "explained-errors",
            &[("agora-explained-errors", "agora"), ("nl-only", "nl_only")],
        ),
        (
            "screenplay",
            &[("agora-screenplay", "agora"), ("nl-only-sample", "nl_only")],
        ),
        (
            "seed2",
            &[
                ("agora-seed2", "agora"),
                ("nl-only-seed2-sample", "nl_only"),
            ],
        ),
        (
            "seed2-grounded",
            &[
                ("agora-seed2-grounded", "agora"),
                ("nl-only-seed2-sample", "nl_only"),
            ],
        ),
        (
            "seed2-strict",
            &[
                ("agora-seed2-strict", "agora"),
                ("nl-only-seed2-sample", "nl_only"),
            ],
        ),
        (
            "seed2-lenient",
            &[
                ("agora-seed2-lenient", "agora"),
                ("nl-only-seed2-sample", "nl_only"),
            ],
        ),
        (
            "seed2-natural",
            &[
                ("agora-seed2-natural", "agora"),
                ("nl-only-seed2-sample", "nl_only"),
            ],
        ),
        (
            "seed2-strict-arguments",
            &[
                ("agora-seed2-strict-arguments", "agora"),
                ("nl-only-seed2-sample", "nl_only"),
            ],
        ),
    ];
    for (report, runs) in reports {
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("reports/{report}/summary.json"))).unwrap(),
        )
        .unwrap();
        report_carries_totals(&dir, &summary, runs);
    }
}

/// Every committed run record reads and writes back the same bytes (`write_run`'s pretty JSON),
/// so a field added to the record, or the servers' switches flattened into it, leaves the
/// committed records as they are.
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
    assert!(
        checked >= 9,
        "only {checked} records under {}",
        runs.display()
    );
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
