//! `agora send`: run one task against another agent and print its validated output.
//!
//! Without `--protocol` the sender's ladder picks the way (natural language, an existing
//! protocol, a negotiated one) from its memory of this target and task.
//! The task comes from the node configuration (`[[node.tasks]]`) or a JSON file; the node is
//! built from the configuration (store, LLM, ledger) without serving HTTP. With `--protocol`, the
//! request goes under that protocol document, which the receiver fetches from `--source` URLs or,
//! when none is given, from a `data:` URI carrying the document itself.

use std::path::{Path, PathBuf};

use agora_node::{Node, Task};
use agora_protocol::{ProtocolHash, VerifiedDocument, data_uri};
use agora_server::Config;
use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

/// Which task to run: a name from the configuration, or a JSON file.
#[derive(Args)]
pub struct TaskArgs {
    /// A task name from the configuration's [[node.tasks]].
    #[arg(long, conflicts_with = "task_file")]
    task: Option<String>,
    /// A task as a JSON file ({name, description, inputSchema, outputSchema}).
    #[arg(long)]
    task_file: Option<PathBuf>,
}

impl TaskArgs {
    /// The task, checked.
    pub fn resolve(&self, node: &Node) -> anyhow::Result<Task> {
        let task: Task = match (&self.task, &self.task_file) {
            (Some(name), None) => node.task(name)?.clone(),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", path.display()))?
            }
            _ => bail!("give --task NAME or --task-file FILE"),
        };
        task.check()?;
        Ok(task)
    }
}

#[derive(Args)]
pub struct SendArgs {
    /// The receiver's Agora endpoint, e.g. http://127.0.0.1:8080/.
    #[arg(long)]
    to: String,
    #[command(flatten)]
    task: TaskArgs,
    /// The task's input data, as JSON.
    #[arg(long)]
    data: String,
    /// Send under this protocol: a PD file, or the hash of a PD in the store.
    #[arg(long)]
    protocol: Option<String>,
    /// Where the receiver can fetch the protocol (repeatable); default: a data: URI.
    #[arg(long = "source")]
    sources: Vec<String>,
}

pub async fn run(config_path: Option<&Path>, args: SendArgs) -> anyhow::Result<()> {
    let config = Config::load(config_path).context("loading the configuration")?;
    let data: Value = serde_json::from_str(&args.data).context("--data is not JSON")?;
    let running = agora_server::runtime::build_node(config).await?;
    let node = running.node.clone();
    let task = args.task.resolve(&node)?;
    let document = match &args.protocol {
        None => None,
        Some(reference) if Path::new(reference).is_file() => {
            let text = std::fs::read_to_string(reference)
                .with_context(|| format!("reading {reference}"))?;
            Some(VerifiedDocument::from_text(&text))
        }
        Some(reference) => {
            let hash: ProtocolHash = reference
                .parse()
                .with_context(|| format!("{reference} is neither a file nor a protocol hash"))?;
            let stored = node
                .store()
                .document(&hash)
                .await?
                .with_context(|| format!("no protocol document {hash} in the store"))?;
            Some(stored.document)
        }
    };
    let sources = match (&document, args.sources.is_empty()) {
        (Some(document), true) => vec![data_uri::encode(document.text())],
        _ => args.sources.clone(),
    };
    let outcome = match &document {
        Some(document) => {
            node.send(&args.to, &task, &data, Some((document, sources.as_slice())))
                .await?
        }
        None => {
            let run = node.run_task(&args.to, &task, &data).await?;
            eprintln!(
                "(ladder: {}{})",
                run.protocol
                    .map(|h| format!("protocol {h}"))
                    .unwrap_or_else(|| "natural language".into()),
                if run.steps.is_empty() {
                    String::new()
                } else {
                    format!("; steps: {}", run.steps.join(", "))
                }
            );
            run.outcome
        }
    };
    println!("{}", serde_json::to_string_pretty(&outcome.output)?);
    eprintln!(
        "({} LLM call(s), {} tokens on this side)",
        outcome.llm_calls, outcome.llm_tokens
    );
    running.shutdown().await;
    Ok(())
}
