//! `agora demo network-worker`: one worker process of a multi-process network run.
//!
//! The coordinator (see `hosting`) starts it and speaks to it over stdin and stdout, one JSON
//! line per [`Command`] and per [`Reply`]: first [`Command::Setup`] (the worker binds its
//! servers' ports and answers with their URLs), then [`Command::Start`] (every server's URL; the
//! worker builds its agents), then the runner's commands, one at a time. Nothing else may write
//! to stdout. The worker stops on [`Command::Stop`] or when its stdin closes (the coordinator
//! died).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Stdout};

use crate::demo::{LlmChoice, OpenedLlm, demo_routine_engine, open_llm};
use crate::hosting::{Command, Reply, WorkerSetup};
use crate::network::{Agents, NetworkOptions, ServerPorts};
use crate::spec::NetworkSpec;

/// Serves the coordinator on stdin and stdout until it says stop or goes away.
pub async fn serve_worker() -> anyhow::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();

    let Some(first) = lines.next_line().await? else {
        return Ok(());
    };
    let setup = match serde_json::from_str::<Command>(&first) {
        Ok(Command::Setup(setup)) => setup,
        Ok(other) => bail!("a worker must be set up first, not sent {other:?}"),
        Err(error) => bail!("a worker's first line must be its setup: {error}"),
    };
    let spec = Arc::new(NetworkSpec::embedded()?);
    let ports = match ServerPorts::bind(&spec, setup.shard).await {
        Ok(ports) => ports,
        Err(error) => return failed(&mut out, error).await,
    };
    send(
        &mut out,
        &Reply::Servers {
            servers: ports.urls(),
        },
    )
    .await?;

    let Some(second) = lines.next_line().await? else {
        return Ok(());
    };
    let servers = match serde_json::from_str::<Command>(&second) {
        Ok(Command::Start { servers }) => servers,
        Ok(other) => bail!("a worker must be started second, not sent {other:?}"),
        Err(error) => bail!("a worker's second line must start it: {error}"),
    };
    let (agents, opened) = match start(spec, &setup, ports, servers).await {
        Ok(started) => started,
        Err(error) => return failed(&mut out, error).await,
    };
    send(&mut out, &Reply::Done).await?;

    let timeout = Duration::from_secs(setup.run.query_timeout_secs.max(1));
    while let Some(line) = lines.next_line().await? {
        let command = match serde_json::from_str::<Command>(&line) {
            Ok(command) => command,
            Err(error) => {
                send(
                    &mut out,
                    &Reply::Failed {
                        error: format!("not a command: {error}"),
                    },
                )
                .await?;
                continue;
            }
        };
        let reply = match command {
            Command::Stop => {
                agents.stop().await;
                send(&mut out, &Reply::Done).await?;
                return Ok(());
            }
            command => answer(&agents, &opened, command, timeout).await,
        };
        send(&mut out, &reply).await?;
    }
    agents.stop().await;
    Ok(())
}

async fn start(
    spec: Arc<NetworkSpec>,
    setup: &WorkerSetup,
    ports: ServerPorts,
    servers: std::collections::BTreeMap<String, String>,
) -> anyhow::Result<(Agents, OpenedLlm)> {
    let run = &setup.run;
    let timeout = Duration::from_secs(run.query_timeout_secs.max(1));
    let choice = LlmChoice::parse(&setup.llm)?;
    if matches!(choice, LlmChoice::Local { url: None }) {
        bail!("a worker needs the local model's URL: the coordinator starts the model");
    }
    let opened = open_llm(&choice, None, timeout).await?;
    let routine_engine = demo_routine_engine(&run.dir, timeout, &spec.today)?;
    let options = NetworkOptions {
        dir: run.dir.clone(),
        mode: run.mode,
        llm: opened.llm.clone(),
        routine_engine: Some(routine_engine),
        seed: run.seed,
        sender_timeout_secs: run.query_timeout_secs.max(1),
        native_tools: run.native_tools,
        setup: run.setup.clone(),
    };
    let agents = Agents::start(spec, &options, setup.shard, ports, servers, &setup.db_urls)
        .await
        .context("starting the worker's agents")?;
    Ok((agents, opened))
}

async fn answer(agents: &Agents, opened: &OpenedLlm, command: Command, timeout: Duration) -> Reply {
    let result: anyhow::Result<Reply> = async {
        Ok(match command {
            Command::HoldJobs => {
                agents.hold_jobs().await;
                Reply::Done
            }
            Command::ReleaseJobs => {
                agents.release_jobs().await;
                Reply::Done
            }
            Command::RunTask(query) => Reply::Task(agents.run_task(&query, timeout).await?),
            Command::Idle => {
                agents.idle(timeout).await;
                Reply::Done
            }
            Command::ReadLedgers => Reply::Usage {
                usage: agents.read_ledgers().await?,
                missed: opened.halt.as_ref().and_then(|halt| halt()),
            },
            Command::Counts => Reply::Counts(agents.counts().await?),
            Command::Setup(_) | Command::Start { .. } => bail!("this worker is already running"),
            Command::Stop => Reply::Done,
        })
    }
    .await;
    result.unwrap_or_else(|error| Reply::Failed {
        error: format!("{error:#}"),
    })
}

async fn send(out: &mut Stdout, reply: &Reply) -> anyhow::Result<()> {
    let mut line = serde_json::to_string(reply)?;
    line.push('\n');
    out.write_all(line.as_bytes()).await?;
    out.flush().await?;
    Ok(())
}

async fn failed(out: &mut Stdout, error: anyhow::Error) -> anyhow::Result<()> {
    send(
        out,
        &Reply::Failed {
            error: format!("{error:#}"),
        },
    )
    .await?;
    Err(error)
}
