//! `agora demo weather`: the paper's weather demo on loopback (see `agora_server::demo`).

use std::path::PathBuf;

use agora_server::LlmSettings;
use agora_server::demo::{self, WeatherDemo};
use anyhow::bail;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum DemoCommand {
    /// Alice asks Bob for forecasts until they negotiate a protocol and both sides answer with
    /// routines; prints a phase-by-phase table of LLM calls, tokens and costs.
    Weather {
        /// Queries Alice sends.
        #[arg(long, default_value_t = 10)]
        queries: usize,
        /// The LLM: `local` (start the installed local model) or the base URL of an
        /// OpenAI-compatible server, e.g. http://127.0.0.1:8011/v1.
        #[arg(long, default_value = "local")]
        llm: String,
        /// Record every LLM call to this cassette (JSONL).
        #[arg(long)]
        record: Option<PathBuf>,
        /// Where the agents' stores go (emptied first).
        #[arg(long, default_value = ".agora/demo-weather")]
        dir: PathBuf,
        /// The JSON report.
        #[arg(long, default_value = ".agora/demo-weather-report.json")]
        report: PathBuf,
    },
}

pub async fn run(command: DemoCommand) -> anyhow::Result<()> {
    match command {
        DemoCommand::Weather {
            queries,
            llm,
            record,
            dir,
            report,
        } => {
            if queries == 0 {
                bail!("--queries must be at least 1");
            }
            let mut settings = LlmSettings::default();
            match llm.as_str() {
                "local" => {}
                url if url.starts_with("http://") || url.starts_with("https://") => {
                    settings.local.url = Some(url.to_string());
                }
                other => bail!("--llm must be `local` or an http(s) URL, not {other:?}"),
            }
            settings.record = record;
            if let Some(parent) = report.parent() {
                std::fs::create_dir_all(parent)?;
            }
            println!("The weather demo: {queries} queries from Alice to Bob (LLM: {llm}).\n");
            let result = demo::run(WeatherDemo {
                queries,
                llm: settings,
                dir,
                report: report.clone(),
            })
            .await?;
            demo::print_summary(&result);
            println!("\nReport: {}", report.display());
            Ok(())
        }
    }
}
