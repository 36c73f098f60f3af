//! `agora demo weather`, the paper's weather demo, on loopback (beside the network demo: both
//! judge every answer with the same verdict words): Alice sends weather queries to Bob until their
//! traffic runs on a negotiated protocol and routines on both sides, with no LLM at all.
//!
//! One process hosts Bob (a weather node: the seeded weather tool, its programmer writing a
//! routine at the first protocol request, as in the paper's demo), Alice (a sender with a
//! "forecast for a date and a location" task, climbing the ladder: natural language, exploring,
//! negotiating at the fifth use), and a protocol database Alice publishes the negotiated protocol
//! to. All three talk real HTTP on 127.0.0.1 and share one LLM (the local model by default).
//!
//! After each query the demo waits for the background programmers, then reads both ledgers:
//! the report has, per query, the path on each side and the LLM calls, tokens and cost by
//! category; then the phases, the costs next to the paper's figures, the break-even point and
//! the final protocol document. It is printed and written as JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use agora_fetch::{Fetcher, TargetClient, TargetPolicy};
use agora_llm::{Llm, PriceTable};
use agora_node::tools::WeatherForecastTool;
use agora_node::{Node, NodeConfig, NodeParts, SystemClock, Task, ToolRegistry};
use agora_store::LlmCallRecord;
use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use agora_judge::Verdict;
use agora_server::protocol_db::ProtocolDbServerConfig;
use agora_server::protocol_db::{build_protocol_db, serve_protocol_db};
use agora_server::runtime::{build_llm, build_routine_engine, fetch_policy, open_store};
use agora_server::{AppState, FetchSettings, LlmSettings, RoutineRuntimeSettings, serve_state};

/// The paper's figures (GPT-4o prices): negotiating and implementing once, and one
/// natural-language exchange.
pub const PAPER_ONCE_USD: f64 = 0.043;
/// See [`PAPER_ONCE_USD`].
pub const PAPER_NL_EXCHANGE_USD: f64 = 0.020;

const PLACES: &[&str] = &[
    "London, UK",
    "Paris, France",
    "Tokyo, Japan",
    "Lima, Peru",
    "Oslo, Norway",
    "Nairobi, Kenya",
    "Quito, Ecuador",
    "Perth, Australia",
    "Cairo, Egypt",
    "Berlin, Germany",
];

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct WeatherDemo {
    /// Queries Alice sends.
    pub queries: usize,
    /// The LLM both agents use.
    pub llm: LlmSettings,
    /// Where the stores and artifacts go (emptied first).
    pub dir: PathBuf,
    /// The JSON report's path.
    pub report: PathBuf,
}

/// A finished demo whose agents still serve: their dashboards show the end state until this is
/// dropped.
pub struct WeatherRun {
    /// The report.
    pub report: WeatherReport,
    /// Bob's dashboard URL.
    pub bob_dashboard: String,
    /// Alice's dashboard URL.
    pub alice_dashboard: String,
    /// The admin token of both dashboards (new every run).
    pub admin_token: String,
    _stop: tokio_util::sync::DropGuard,
    _local_server: Option<agora_llm::LocalServer>,
}

/// LLM use of one kind.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Usage {
    /// Calls.
    pub calls: i64,
    /// Prompt plus completion tokens.
    pub tokens: i64,
    /// Cost at the price table's rates.
    pub cost_usd: f64,
}

impl Usage {
    fn add(&mut self, call: &LlmCallRecord) {
        self.calls += 1;
        self.tokens += call.prompt_tokens + call.completion_tokens;
        self.cost_usd += call.cost_usd;
    }

    fn plus(&self, other: &Usage) -> Usage {
        Usage {
            calls: self.calls + other.calls,
            tokens: self.tokens + other.tokens,
            cost_usd: self.cost_usd + other.cost_usd,
        }
    }
}

/// One query of the demo.
#[derive(Debug, Clone, Serialize)]
pub struct QueryRow {
    /// 1-based.
    pub index: usize,
    /// The task data.
    pub data: Value,
    /// `natural`, `negotiation`, `protocol` or `routines`.
    pub phase: String,
    /// Alice's rung and steps.
    pub alice: String,
    /// How Bob answered (`llm`, `routine`, ...).
    pub bob: String,
    /// The validated output, or the error.
    pub output: Value,
    /// The verdict, in the network demo's words: `correct` when the output carries Bob's
    /// weather tool's data for the query (numbers compared as numbers; natural language may lose
    /// or reword it, the protocol should not), `wrong` with the difference, `failed` without an
    /// output.
    pub verdict: Verdict,
    /// LLM use by "side/category" (both sides, background programmers included).
    pub llm: BTreeMap<String, Usage>,
    /// All of it.
    pub total: Usage,
}

/// The demo's result.
#[derive(Debug, Clone, Serialize)]
pub struct WeatherReport {
    /// The LLM used.
    pub llm: String,
    /// One row per query.
    pub queries: Vec<QueryRow>,
    /// Totals by category, both sides.
    pub by_category: BTreeMap<String, Usage>,
    /// Mean cost of a natural-language query.
    pub nl_query_usd: f64,
    /// Negotiation plus routine writing, both sides.
    pub once_usd: f64,
    /// Mean cost of a query once routines answer.
    pub routine_query_usd: f64,
    /// Queries after which the protocol has paid for itself (none if it never does).
    pub break_even_queries: Option<f64>,
    /// The paper's figures.
    pub paper: Value,
    /// The negotiated protocol document and its hash.
    pub protocol: Option<Value>,
    /// Queries with a valid output (not `failed`).
    pub answered: usize,
    /// Queries judged `correct`: the output equals the weather tool's data.
    pub correct: usize,
    /// Queries at the end that made no LLM call on either side.
    pub llm_free_tail: usize,
}

fn weather_task() -> Task {
    Task {
        name: "weather_forecast".into(),
        description: "Get the weather forecast (temperature in °C, precipitation in mm, sky \
                      condition) for a location on a date."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {"location": {"type": "string"}, "date": {"type": "string"}},
            "required": ["location", "date"]
        }),
        output_schema: json!({
            "type": "object",
            "properties": {
                "temperature": {"type": "number"},
                "precipitation": {"type": "number"},
                "weatherCondition": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]}
            },
            "required": ["temperature", "precipitation", "weatherCondition"]
        }),
    }
}

struct Agent {
    node: Node,
    url: String,
}

async fn start_agent(
    config: NodeConfig,
    llm: Arc<dyn Llm>,
    prices: &PriceTable,
    dir: &std::path::Path,
    shutdown: &CancellationToken,
    admin_token: &str,
) -> anyhow::Result<Agent> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut config = config;
    config.public_url = url.clone();
    let store_url = format!("sqlite://{}/{}.db", dir.display(), config.name);
    let store = open_store(&store_url).await?;
    let fetch = FetchSettings {
        allow_networks: vec!["127.0.0.0/8".into()],
        ..FetchSettings::default()
    };
    let routine_engine = build_routine_engine(&RoutineRuntimeSettings::default(), &store_url)?;
    let targets = TargetClient::new(TargetPolicy::default())?;
    let tools = ToolRegistry::from_config(&config.tools, &targets).context("building the tools")?;
    let node = Node::new(NodeParts {
        config,
        store,
        llm,
        fetcher: Fetcher::new(fetch_policy(&fetch)?)?,
        targets,
        tools,
        prices: prices.clone(),
        clock: Arc::new(SystemClock),
        routine_engine: Some(routine_engine),
    });
    node.sync_routines().await?;
    let state = AppState::new(node.clone(), Some(admin_token.into()), 1024 * 1024, 16);
    let token = shutdown.clone();
    tokio::spawn(async move {
        if let Err(error) = serve_state(listener, state, token).await {
            tracing::error!(%error, "a demo agent stopped serving");
        }
    });
    Ok(Agent {
        node,
        url: format!("{url}/"),
    })
}

async fn ledger(node: &Node) -> anyhow::Result<Vec<LlmCallRecord>> {
    Ok(node.store().ledger().llm_calls(None).await?)
}

/// Runs the demo and writes its report; the agents serve until the returned run is dropped.
pub async fn run(demo: WeatherDemo) -> anyhow::Result<WeatherRun> {
    if demo.dir.exists() {
        std::fs::remove_dir_all(&demo.dir)
            .with_context(|| format!("emptying {}", demo.dir.display()))?;
    }
    std::fs::create_dir_all(&demo.dir)?;
    let (llm, llm_description, local_server) = build_llm(&demo.llm).await?;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone().drop_guard();

    // The protocol database Alice publishes to.
    let db_listener = TcpListener::bind("127.0.0.1:0").await?;
    let db_url = format!("http://{}", db_listener.local_addr()?);
    let db_config = ProtocolDbServerConfig {
        listen: db_listener.local_addr()?,
        store: format!("sqlite://{}/protocol-db.db", demo.dir.display()),
        public_url: Some(db_url.clone()),
        write_token: Some("demo".into()),
        sync_interval_secs: 0,
        ..ProtocolDbServerConfig::default()
    };
    let db = build_protocol_db(db_config).await?;
    let db_shutdown = shutdown.clone();
    tokio::spawn(async move { serve_protocol_db(db_listener, &db, db_shutdown).await });

    let prices = demo.llm.prices.clone();
    let mut bob_config = NodeConfig {
        name: "bob".into(),
        description: "Bob is a weather service. It gives weather forecasts (temperature, \
                      precipitation, sky condition) for a location and a date."
            .into(),
        tools: vec![serde_json::from_value(json!({
            "name": "weather_forecast", "kind": "builtin", "builtin": "weather_forecast", "seed": 7
        }))?],
        ..NodeConfig::default()
    };
    bob_config.thresholds.implementation = 1;
    // One admin token for both agents' dashboards, new every run; the agents listen on loopback.
    let admin_token = uuid::Uuid::new_v4().simple().to_string();
    let bob = start_agent(
        bob_config,
        llm.clone(),
        &prices,
        &demo.dir,
        &shutdown,
        &admin_token,
    )
    .await?;
    let mut alice_config = NodeConfig {
        name: "alice".into(),
        description: "Alice is a personal assistant.".into(),
        tasks: vec![weather_task()],
        ..NodeConfig::default()
    };
    alice_config.sender.protocol_db = Some(db_url);
    alice_config.sender.protocol_db_token = Some("demo".into());
    let alice = start_agent(
        alice_config,
        llm,
        &prices,
        &demo.dir,
        &shutdown,
        &admin_token,
    )
    .await?;
    let dashboards = |base: &str| format!("{}dashboard", base);
    println!(
        "Dashboards: Bob {}, Alice {} (admin token {admin_token})\n",
        dashboards(&bob.url),
        dashboards(&alice.url)
    );
    let task = weather_task();

    let mut rows = Vec::new();
    let (mut alice_seen, mut bob_seen) = (0, 0);
    for index in 1..=demo.queries {
        let data = json!({
            "location": PLACES[(index - 1) % PLACES.len()],
            "date": format!("2025-{:02}-{:02}", 1 + (index - 1) % 12, 1 + (7 * index) % 28),
        });
        let result = alice.node.run_task(&bob.url, &task, &data).await;
        bob.node.programmer_idle().await;
        alice.node.programmer_idle().await;
        alice.node.sender_routines_idle().await;
        let rung = alice
            .node
            .store()
            .sender()
            .sender_runs(&bob.url, &task.name, 1)
            .await?
            .pop()
            .map(|run| run.rung)
            .unwrap_or_default();
        let (alice_path, output) = match &result {
            Ok(run) => (
                format!(
                    "{rung}{}",
                    if run.steps.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", run.steps.join(", "))
                    }
                ),
                run.outcome.output.clone(),
            ),
            Err(error) => ("error".into(), json!({"error": error.to_string()})),
        };
        let bob_path = bob
            .node
            .store()
            .requests()
            .recent_requests(20)
            .await?
            .into_iter()
            .find(|r| r.channel == "natural" || r.channel == "protocol")
            .map(|r| r.path.as_str().to_string())
            .unwrap_or_default();
        let mut llm_use: BTreeMap<String, Usage> = BTreeMap::new();
        let alice_calls = ledger(&alice.node).await?;
        let bob_calls = ledger(&bob.node).await?;
        for call in &alice_calls[alice_seen..] {
            llm_use
                .entry(format!("alice/{}", call.category))
                .or_default()
                .add(call);
        }
        for call in &bob_calls[bob_seen..] {
            llm_use
                .entry(format!("bob/{}", call.category))
                .or_default()
                .add(call);
        }
        (alice_seen, bob_seen) = (alice_calls.len(), bob_calls.len());
        let total = llm_use
            .values()
            .fold(Usage::default(), |sum, u| sum.plus(u));
        let negotiated = llm_use.keys().any(|k| k.ends_with("/negotiation"));
        let phase = if negotiated {
            "negotiation"
        } else if total.calls == 0 {
            "routines"
        } else if alice_path.starts_with("protocol") {
            "protocol"
        } else {
            "natural"
        };
        let forecast = WeatherForecastTool::new(7).forecast(
            data["location"].as_str().unwrap_or_default(),
            data["date"].as_str().unwrap_or_default(),
        );
        let verdict = judge_forecast(&output, &forecast);
        let row = QueryRow {
            index,
            data,
            verdict,
            phase: phase.into(),
            alice: alice_path,
            bob: bob_path,
            output,
            llm: llm_use,
            total,
        };
        print_row(&row);
        rows.push(row);
    }

    let report = summarize(rows, llm_description, &alice.node).await?;
    std::fs::write(&demo.report, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", demo.report.display()))?;
    Ok(WeatherRun {
        report,
        bob_dashboard: dashboards(&bob.url),
        alice_dashboard: dashboards(&alice.url),
        admin_token,
        _stop: stop,
        _local_server: local_server,
    })
}

/// The verdict on one answer: the tool's temperature, precipitation and condition, exactly.
fn judge_forecast(output: &Value, forecast: &Value) -> Verdict {
    if output.get("error").is_some() || !output.is_object() {
        return Verdict::Failed;
    }
    let mut differences = Vec::new();
    for (ours, tools) in [
        ("temperature", "temperature_c"),
        ("precipitation", "precipitation_mm"),
    ] {
        let got = output[ours].as_f64();
        if got.is_none() || got != forecast[tools].as_f64() {
            differences.push(format!(
                "{ours} {} (tool: {})",
                output[ours], forecast[tools]
            ));
        }
    }
    if output["weatherCondition"] != forecast["condition"] {
        differences.push(format!(
            "weatherCondition {} (tool: {})",
            output["weatherCondition"], forecast["condition"]
        ));
    }
    if differences.is_empty() {
        Verdict::Correct
    } else {
        Verdict::Wrong(differences.join(", "))
    }
}

fn print_row(row: &QueryRow) {
    let categories: Vec<String> = row
        .llm
        .iter()
        .map(|(k, u)| format!("{k} {}×/{}t", u.calls, u.tokens))
        .collect();
    println!(
        "{:>3}  {:<11} {:<8} alice: {:<40} bob: {:<9} {:>3} calls {:>6} tok ${:.4}  {}",
        row.index,
        row.phase,
        row.verdict.word(),
        truncate(&row.alice, 40),
        row.bob,
        row.total.calls,
        row.total.tokens,
        row.total.cost_usd,
        categories.join(", ")
    );
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

async fn summarize(
    rows: Vec<QueryRow>,
    llm: String,
    alice: &Node,
) -> anyhow::Result<WeatherReport> {
    let mut by_category: BTreeMap<String, Usage> = BTreeMap::new();
    for row in &rows {
        for (key, usage) in &row.llm {
            let category = key.split('/').nth(1).unwrap_or(key).to_string();
            let entry = by_category.entry(category).or_default();
            *entry = entry.plus(usage);
        }
    }
    let mean = |phase: &str| -> Option<f64> {
        let costs: Vec<f64> = rows
            .iter()
            .filter(|r| r.phase == phase)
            .map(|r| r.total.cost_usd)
            .collect();
        (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64)
    };
    let nl_query_usd = mean("natural").unwrap_or(0.0);
    let routine_query_usd = mean("routines").unwrap_or(0.0);
    let once_usd = ["negotiation", "implementing"]
        .iter()
        .filter_map(|c| by_category.get(*c))
        .map(|u| u.cost_usd)
        .sum::<f64>();
    let break_even_queries = (nl_query_usd > routine_query_usd && once_usd > 0.0)
        .then(|| once_usd / (nl_query_usd - routine_query_usd));
    let protocol = alice
        .store()
        .sender()
        .sender_protocols_for_task("weather_forecast")
        .await?
        .into_iter()
        .next()
        .and_then(|memory| {
            memory
                .protocol_hash
                .map(|hash| (hash, memory.protocol_sources))
        });
    let protocol = match protocol {
        Some((hash, sources)) => {
            let document = alice.store().document(&hash).await?;
            document.map(|stored| {
                json!({
                    "hash": hash.to_hex(),
                    "hashBase64": hash.to_base64(),
                    "sources": sources,
                    "text": stored.document.text(),
                })
            })
        }
        None => None,
    };
    let answered = rows.iter().filter(|r| r.verdict != Verdict::Failed).count();
    let correct = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Correct)
        .count();
    let llm_free_tail = rows
        .iter()
        .rev()
        .take_while(|r| r.total.calls == 0 && r.output.get("error").is_none())
        .count();
    Ok(WeatherReport {
        llm,
        queries: rows,
        by_category,
        nl_query_usd,
        once_usd,
        routine_query_usd,
        break_even_queries,
        paper: json!({
            "negotiationAndImplementationUsd": PAPER_ONCE_USD,
            "naturalLanguageExchangeUsd": PAPER_NL_EXCHANGE_USD,
            "breakEvenQueries": PAPER_ONCE_USD / PAPER_NL_EXCHANGE_USD,
        }),
        protocol,
        answered,
        correct,
        llm_free_tail,
    })
}

/// Prints the report's summary: phases, costs next to the paper's, break-even, the protocol.
pub fn print_summary(report: &WeatherReport) {
    println!("\nLLM use by category (both agents, {}):", report.llm);
    for (category, usage) in &report.by_category {
        println!(
            "  {:<14} {:>4} calls {:>8} tokens  ${:.4}",
            category, usage.calls, usage.tokens, usage.cost_usd
        );
    }
    println!("\nCost at the price table's rates, next to the paper's (GPT-4o) figures:");
    println!(
        "  one natural-language query      ${:.4}   paper ${:.3}",
        report.nl_query_usd, PAPER_NL_EXCHANGE_USD
    );
    println!(
        "  negotiation + implementation    ${:.4}   paper ${:.3}",
        report.once_usd, PAPER_ONCE_USD
    );
    println!(
        "  one query on routines           ${:.4}   paper $0",
        report.routine_query_usd
    );
    match report.break_even_queries {
        Some(n) => println!(
            "  break-even after {n:.1} queries         paper {:.1}",
            PAPER_ONCE_USD / PAPER_NL_EXCHANGE_USD
        ),
        None => println!("  no break-even in this run"),
    }
    println!(
        "\n{}/{} queries correct (exactly the weather tool's data), {} answered; the last {} \
         used no LLM on either side.",
        report.correct,
        report.queries.len(),
        report.answered,
        report.llm_free_tail
    );
    if let Some(protocol) = &report.protocol {
        println!(
            "\nThe negotiated protocol {} (base64 {}), from {}:\n{}",
            protocol["hash"].as_str().unwrap_or_default(),
            protocol["hashBase64"].as_str().unwrap_or_default(),
            protocol["sources"],
            protocol["text"].as_str().unwrap_or_default()
        );
    }
}
