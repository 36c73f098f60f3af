//! `agora negotiate`: negotiate a protocol for a task with another agent.
//!
//! The node is built from the configuration (store, LLM, ledger) without serving HTTP; its LLM
//! negotiates with the receiver's over the `negotiation` channel. The agreed protocol document
//! is stored in the node's store and printed on stdout; its hash and the rounds it took go to
//! stderr, so `agora negotiate ... > protocol.md` keeps the document alone.

use std::path::Path;

use agora_server::Config;
use anyhow::Context;
use clap::Args;

use crate::send_cmd::TaskArgs;

#[derive(Args)]
pub struct NegotiateArgs {
    /// The receiver's Agora endpoint, e.g. http://127.0.0.1:8080/.
    #[arg(long)]
    to: String,
    #[command(flatten)]
    task: TaskArgs,
}

pub async fn run(config_path: Option<&Path>, args: NegotiateArgs) -> anyhow::Result<()> {
    let config = Config::load(config_path).context("loading the configuration")?;
    let running = agora_server::runtime::build_node(config).await?;
    let node = running.node.clone();
    let task = args.task.resolve(&node)?;
    let negotiated = node.negotiate(&args.to, &task).await.with_context(|| {
        format!(
            "negotiating a protocol for {:?} with {}",
            task.name, args.to
        )
    })?;
    let hash = negotiated.document.hash();
    println!("{}", negotiated.document.text());
    eprintln!(
        "protocol hash: {} (base64 {})",
        hash.to_hex(),
        hash.to_base64()
    );
    eprintln!(
        "agreed in {} round(s); {}",
        negotiated.rounds,
        if negotiated.registered_by_receiver {
            "the receiver registered the same document"
        } else {
            "the receiver did not confirm it (it will see the document on first use)"
        }
    );
    running.shutdown().await;
    Ok(())
}
