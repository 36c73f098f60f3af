//! `agora routine …`: the routines in a node's store.
//!
//! Like `agora pd`, these commands open the node's store directly, so they work whether or not
//! the node runs; a running node picks the changes up within seconds (its routine sync). `add`
//! and `test` also start the routine runtime, to build and run routines as the node will.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agora_fetch::{TargetClient, TargetPolicy};
use agora_node::{
    ProtocolInput, RegistryError, Review, RoutineLimits, RoutineRegistry, RoutineSource,
    RoutineSpec, SenderReviewer, SystemClock,
};
use agora_protocol::ProtocolHash;
use agora_server::Config;
use agora_server::manifest::RoutineFolder;
use agora_store::{Routine, RoutineOrigin};
use anyhow::{Context, bail};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum RoutineCommand {
    /// Build a routine and make it answer its protocol (disabling the protocol's other one).
    ///
    /// FILE is a JavaScript routine (`.js`), a WebAssembly component or core module (`.wasm`),
    /// or a routine folder with a `manifest.toml` (then `--protocol`, `--tools` and the limits
    /// default to the manifest's).
    Add {
        /// The protocol document's file, or the hash of a document already in the store.
        #[arg(long)]
        protocol: Option<String>,
        /// The routine: a `.js` file, a `.wasm` file, or a folder with a manifest.
        file: PathBuf,
        /// The tools the routine may call, comma-separated.
        #[arg(long, value_delimiter = ',')]
        tools: Option<Vec<String>>,
        /// A unique name (default: from the file or folder name).
        #[arg(long)]
        name: Option<String>,
        /// The deadline for one request, in milliseconds (default 1000).
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// The memory cap for one request, in MiB (default 64).
        #[arg(long)]
        memory_mb: Option<u64>,
        /// Store it disabled.
        #[arg(long)]
        disabled: bool,
    },
    /// List routines with their status and failure counts.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// List the node's sender routines instead (by id, with their target and task).
        #[arg(long)]
        sender: bool,
    },
    /// Show one routine and its source, or the programmer's attempts for a protocol.
    Show {
        /// A routine's name or id, or a protocol hash: the LLM's attempts for it.
        routine: String,
    },
    /// Run a routine once on a request body, with its tools and limits; nothing is recorded.
    Test {
        /// Name or id.
        routine: String,
        /// The request body, as a peer would send it.
        #[arg(long)]
        body: String,
    },
    /// Make a routine answer its protocol (disabling the protocol's other one).
    Enable {
        /// Name or id.
        routine: String,
    },
    /// Stop a routine answering; its protocol goes back to the LLM.
    Disable {
        /// Name or id.
        routine: String,
    },
    /// Approve a routine the programmer wrote under review: it answers from then on.
    Approve {
        /// Name or id (with `--sender`, a sender routine's id).
        routine: String,
        /// ROUTINE is a sender routine (`GET /admin/sender-routines` lists them): it sends
        /// from then on.
        #[arg(long)]
        sender: bool,
        /// Who approves (kept with the decision; default: $USER).
        #[arg(long)]
        reviewer: Option<String>,
    },
    /// Reject a routine the programmer wrote under review; the programmer reads the reason
    /// before its next attempt at the protocol.
    Reject {
        /// Name or id (with `--sender`, a sender routine's id).
        routine: String,
        /// ROUTINE is a sender routine.
        #[arg(long)]
        sender: bool,
        /// Why.
        #[arg(long)]
        reason: String,
        /// Who rejects (kept with the decision; default: $USER).
        #[arg(long)]
        reviewer: Option<String>,
    },
    /// Replace a routine waiting for review with an edited JavaScript file: it is examined on
    /// the protocol's kept examples and, if it passes, kept as a new routine waiting for review.
    Edit {
        /// Name or id (with `--sender`, a sender routine's id, examined on its task's kept
        /// examples).
        routine: String,
        /// ROUTINE is a sender routine.
        #[arg(long)]
        sender: bool,
        /// The edited routine, a `.js` file.
        #[arg(long)]
        source: PathBuf,
        /// Who edits (kept with the decision; default: $USER).
        #[arg(long)]
        reviewer: Option<String>,
    },
    /// Remove a routine.
    Rm {
        /// Name or id.
        routine: String,
    },
}

pub async fn run(config: Option<&Path>, command: RoutineCommand) -> anyhow::Result<()> {
    let config = Config::load(config).context("loading the configuration")?;
    let needs_engine = matches!(
        command,
        RoutineCommand::Add { .. } | RoutineCommand::Test { .. } | RoutineCommand::Edit { .. }
    );
    let (registry, mcp_servers) = registry(&config, needs_engine).await?;
    let result = match sender_review(&command) {
        Ok(Some((id, review))) => review_sender(&config, &registry, id, &review).await,
        Ok(None) => execute(&registry, command).await,
        Err(error) => Err(error),
    };
    mcp_servers.shutdown().await;
    result
}

async fn execute(registry: &RoutineRegistry, command: RoutineCommand) -> anyhow::Result<()> {
    match command {
        RoutineCommand::Add {
            protocol,
            file,
            tools,
            name,
            timeout_ms,
            memory_mb,
            disabled,
        } => {
            let mut spec = if file.is_dir() {
                let folder = RoutineFolder::read(&file)?;
                folder.spec(folder.source()?)?
            } else {
                file_spec(&file)?
            };
            if let Some(protocol) = protocol {
                spec.protocol = protocol_input(&protocol)?;
            } else if !file.is_dir() {
                bail!("--protocol is required: a protocol document's file, or a stored hash");
            }
            if let Some(tools) = tools {
                spec.tools = tools.into_iter().filter(|t| !t.is_empty()).collect();
            }
            if let Some(name) = name {
                spec.name = name;
            }
            if let Some(ms) = timeout_ms {
                spec.limits.timeout = Duration::from_millis(ms);
            }
            if let Some(mb) = memory_mb {
                spec.limits.memory_bytes = mb.saturating_mul(1024 * 1024);
            }
            spec.activate = !disabled;
            let routine = match registry.add(spec).await {
                Err(error @ RegistryError::UnknownTool { .. }) => bail!(
                    "{error} (a node's tools come from its configuration: pass --config, e.g. \
                     --config node.example.toml)"
                ),
                other => other?,
            };
            println!(
                "added routine {} (id {}) for {}, {}",
                routine.name,
                routine.id,
                routine.protocol_hash.to_hex(),
                routine.status
            );
            Ok(())
        }
        RoutineCommand::List { json, sender: true } => {
            let routines = registry.store().sender().sender_routines().await?;
            if json {
                let listed: Vec<_> = routines
                    .iter()
                    .map(agora_server::admin::sender_routines::routine_json)
                    .collect();
                println!("{}", serde_json::to_string_pretty(&listed)?);
                return Ok(());
            }
            println!(
                "{:>4}  {:<9} {:>6} {:>8}  {:<12} task to target",
                "id", "status", "runs", "failures", "protocol"
            );
            for r in &routines {
                let key = &r.key;
                println!(
                    "{:>4}  {:<9} {:>6} {:>8}  {:<12} {} to {}",
                    r.id,
                    r.status.as_str(),
                    r.runs,
                    r.failures,
                    &key.protocol_hash.to_hex()[..12],
                    key.task,
                    key.target
                );
            }
            Ok(())
        }
        RoutineCommand::List { json, .. } => {
            let routines = registry.list().await?;
            if json {
                let listed: Vec<_> = routines
                    .iter()
                    .map(agora_server::admin::routines::routine_json)
                    .collect();
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                print_table(&routines);
                print_contradicted(registry).await?;
            }
            Ok(())
        }
        RoutineCommand::Show { routine } => {
            if let Ok(hash) = routine.parse::<ProtocolHash>()
                && registry.find(&routine).await.is_err()
            {
                return show_attempts(registry, &hash, None).await;
            }
            let routine = registry.find(&routine).await?;
            let code = registry.code(&routine).await?;
            let shown = agora_server::admin::routines::routine_json(&routine);
            println!("{}", serde_json::to_string_pretty(&shown)?);
            println!("component: {} bytes", code.component.len());
            if let Some(source) = code.source {
                println!("source:\n{source}");
            }
            if routine.origin.by_node() {
                show_attempts(registry, &routine.protocol_hash, Some(routine.id)).await?;
            }
            Ok(())
        }
        RoutineCommand::Test { routine, body } => match registry.test(&routine, &body).await? {
            Ok(reply) => {
                println!("{reply}");
                Ok(())
            }
            Err(error) => bail!("the routine failed: {error}"),
        },
        RoutineCommand::Enable { routine } => {
            let routine = registry.enable(&routine).await?;
            println!("enabled {} for {}", routine.name, routine.protocol_hash);
            Ok(())
        }
        RoutineCommand::Disable { routine } => {
            let routine = registry.disable(&routine).await?;
            println!("disabled {}", routine.name);
            Ok(())
        }
        RoutineCommand::Approve {
            routine, reviewer, ..
        } => {
            let reviewer = reviewer_or_user(reviewer)?;
            let routine = registry.approve(&routine, &reviewer).await?;
            println!("approved {} for {}", routine.name, routine.protocol_hash);
            Ok(())
        }
        RoutineCommand::Reject {
            routine,
            reason,
            reviewer,
            ..
        } => {
            let reviewer = reviewer_or_user(reviewer)?;
            let routine = registry.reject(&routine, &reviewer, &reason).await?;
            println!("rejected {}", routine.name);
            Ok(())
        }
        RoutineCommand::Edit {
            routine,
            source,
            reviewer,
            ..
        } => {
            let reviewer = reviewer_or_user(reviewer)?;
            let text = read_source(&source)?;
            let edited = registry.edit(&routine, &reviewer, &text).await?;
            println!(
                "kept the edit as {}, waiting for review (approve it with `agora routine approve {}`)",
                edited.name, edited.name
            );
            Ok(())
        }
        RoutineCommand::Rm { routine } => {
            let routine = registry.remove(&routine).await?;
            println!("removed {}", routine.name);
            Ok(())
        }
    }
}

/// The sender routine's id and the decision of a review with `--sender`; `None` for any other
/// command.
fn sender_review(command: &RoutineCommand) -> anyhow::Result<Option<(i64, SenderDecision)>> {
    let (routine, reviewer, review) = match command {
        RoutineCommand::Approve {
            routine,
            sender: true,
            reviewer,
        } => (routine, reviewer, Review::Approve),
        RoutineCommand::Reject {
            routine,
            sender: true,
            reason,
            reviewer,
        } => (
            routine,
            reviewer,
            Review::Reject {
                reason: reason.clone(),
            },
        ),
        RoutineCommand::Edit {
            routine,
            sender: true,
            source,
            reviewer,
        } => (
            routine,
            reviewer,
            Review::Edit {
                source: read_source(source)?,
            },
        ),
        _ => return Ok(None),
    };
    let id = routine
        .parse()
        .with_context(|| format!("a sender routine is named by its id, not {routine:?}"))?;
    let reviewer = reviewer_or_user(reviewer.clone())?;
    Ok(Some((id, SenderDecision { reviewer, review })))
}

/// Who decides on a sender routine, and what.
struct SenderDecision {
    reviewer: String,
    review: Review,
}

/// Carries out a review of the sender routine `id` on the node's store.
async fn review_sender(
    config: &Config,
    registry: &RoutineRegistry,
    id: i64,
    decision: &SenderDecision,
) -> anyhow::Result<()> {
    let sender_reviewer = SenderReviewer {
        store: registry.store(),
        clock: &SystemClock,
        engine: registry.routine_engine().map(|engine| engine.as_ref()),
        tasks: &config.node.tasks,
        config: &config.node.programmer,
    };
    let routine = (sender_reviewer.review(id, &decision.reviewer, &decision.review)).await?;
    let key = &routine.key;
    match decision.review {
        Review::Edit { .. } => println!(
            "kept the edit as sender routine {}, waiting for review (approve it with `agora \
             routine approve --sender {}`)",
            routine.id, routine.id
        ),
        _ => println!(
            "sender routine {} ({} to {}) is {}",
            routine.id, key.task, key.target, routine.status
        ),
    }
    Ok(())
}

fn read_source(source: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))
}

/// `--reviewer`, or the login running the command.
fn reviewer_or_user(reviewer: Option<String>) -> anyhow::Result<String> {
    reviewer
        .or_else(|| std::env::var("USER").ok())
        .filter(|name| !name.trim().is_empty())
        .context("say who reviews: pass --reviewer (USER is not set)")
}

/// The programmer's attempts for a protocol (only the job that wrote `routine`, when given).
async fn show_attempts(
    registry: &RoutineRegistry,
    hash: &ProtocolHash,
    routine: Option<i64>,
) -> anyhow::Result<()> {
    let mut attempts = registry.attempts(hash).await?;
    if let Some(id) = routine
        && let Some(job) = attempts
            .iter()
            .find(|a| a.routine_id == Some(id))
            .map(|a| a.job.clone())
    {
        attempts.retain(|a| a.job == job);
    }
    if attempts.is_empty() {
        println!("no routine attempts for {hash}");
        return Ok(());
    }
    for a in &attempts {
        println!(
            "\n-- attempt {} of job {} ({}): {}: {}\n   tokens {} + {}, ${:.4}{}",
            a.attempt,
            a.job,
            a.reason,
            a.outcome,
            a.report,
            a.prompt_tokens,
            a.completion_tokens,
            a.cost_usd,
            a.routine_id
                .map(|id| format!(", became routine {id}"))
                .unwrap_or_default()
        );
        if let Some(source) = &a.source {
            println!("{source}");
        }
    }
    Ok(())
}

/// The routine registry over the configured store and tools (MCP servers included, so that
/// grants and `routine test` see them); stop the returned servers when done.
async fn registry(
    config: &Config,
    with_engine: bool,
) -> anyhow::Result<(RoutineRegistry, agora_mcp::McpServers)> {
    let store = agora_server::runtime::open_store(&config.store).await?;
    let targets = TargetClient::new(TargetPolicy::default())
        .context("building the client for configured targets")?;
    let (tools, mcp_servers) =
        agora_server::runtime::build_tools(&config.node.tools, &targets).await?;
    let engine = if with_engine {
        Some(agora_server::build_routine_engine(
            &config.routine_runtime,
            &config.store,
        )?)
    } else {
        None
    };
    let registry = RoutineRegistry::new(store, engine, tools, Arc::new(SystemClock));
    Ok((registry, mcp_servers))
}

/// A routine from one file; the protocol comes from `--protocol`.
fn file_spec(file: &Path) -> anyhow::Result<RoutineSpec> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let is_wasm = file.extension().is_some_and(|e| e == "wasm") || bytes.starts_with(b"\0asm");
    let source =
        if is_wasm {
            RoutineSource::Component(bytes)
        } else {
            RoutineSource::JavaScript(String::from_utf8(bytes).with_context(|| {
                format!("{} is neither UTF-8 JavaScript nor wasm", file.display())
            })?)
        };
    Ok(RoutineSpec {
        name: default_name(file),
        // Replaced by the caller.
        protocol: ProtocolInput::Text(String::new()),
        source,
        tools: Vec::new(),
        limits: RoutineLimits::default(),
        origin: RoutineOrigin::Human,
        activate: true,
    })
}

/// `--protocol`: a file to read, or a hash already stored.
fn protocol_input(protocol: &str) -> anyhow::Result<ProtocolInput> {
    let path = Path::new(protocol);
    if path.is_file() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the protocol document {}", path.display()))?;
        return Ok(ProtocolInput::Text(text));
    }
    match ProtocolHash::parse(protocol) {
        Ok(hash) => Ok(ProtocolInput::Hash(hash)),
        Err(_) => bail!("--protocol {protocol:?} is neither a file nor a protocol hash"),
    }
}

/// The file's stem, or its folder's name for generic stems like `routine.js`.
fn default_name(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let generic = ["routine", "component", "main", "index", "module"];
    let base = if generic.contains(&stem.split('.').next().unwrap_or("")) {
        file.canonicalize()
            .ok()
            .and_then(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or(stem)
    } else {
        stem
    };
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn print_table(routines: &[Routine]) {
    let now = crate::pd_cmd::now_ms();
    println!(
        "{:>4}  {:<24} {:<12} {:<9} {:<8} {:<10} {:>6} {:>8}  last error",
        "id", "name", "protocol", "status", "origin", "language", "runs", "failures"
    );
    for r in routines {
        let hash = r.protocol_hash.to_hex();
        let last_error = match (&r.last_error, r.last_failure_at_ms) {
            (Some(error), Some(at)) => format!("{error} ({} ago)", ago(now - at)),
            (Some(error), None) => error.clone(),
            _ => "-".into(),
        };
        println!(
            "{:>4}  {:<24} {:<12} {:<9} {:<8} {:<10} {:>6} {:>8}  {}",
            r.id,
            r.name,
            &hash[..12],
            r.status.as_str(),
            r.origin.as_str(),
            r.language.as_str(),
            r.runs,
            r.failures,
            last_error
        );
    }
}

/// The protocols the programmer stopped on because their examples contradict each other on
/// what the document names: each one's latest job ended so, and no LLM is asked until the
/// examples change.
async fn print_contradicted(registry: &RoutineRegistry) -> anyhow::Result<()> {
    let attempts = registry
        .store()
        .programming()
        .attempts::<ProtocolHash>(None)
        .await
        .context("reading the programmer's attempts")?;
    let mut latest: Vec<&agora_store::Attempt<ProtocolHash>> = Vec::new();
    for attempt in &attempts {
        match latest.iter_mut().find(|a| a.key == attempt.key) {
            Some(slot) if slot.id < attempt.id => *slot = attempt,
            Some(_) => {}
            None => latest.push(attempt),
        }
    }
    for attempt in latest
        .into_iter()
        .filter(|a| a.outcome == agora_store::AttemptOutcome::Contradicted)
    {
        println!(
            "protocol {}: not programmed, its examples contradict each other ({})",
            &attempt.key.to_hex()[..12],
            attempt.report
        );
    }
    Ok(())
}

/// A duration in milliseconds, roughly, in words.
fn ago(ms: i64) -> String {
    let seconds = ms.max(0) / 1000;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}
