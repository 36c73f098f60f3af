//! `agora pd …`: protocol documents in a node's store.
//!
//! These commands open the node's store directly (SQLite in WAL mode allows
//! this while the node runs), so they work whether or not the node is up.

use std::path::{Path, PathBuf};

use agora_protocol::{ProtocolHash, VerifiedDocument, data_uri};
use agora_server::Config;
use agora_store::{Decision, DecisionOrigin, Store};
use anyhow::{Context, bail};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum PdCommand {
    /// Print a document's hash (hex and base64).
    Hash {
        /// The document file.
        file: PathBuf,
    },
    /// Print a document as a data: URI source.
    Uri {
        /// The document file.
        file: PathBuf,
        /// Use the base64 form instead of percent-encoding.
        #[arg(long)]
        base64: bool,
    },
    /// Store a document in the node's store.
    Add {
        /// The document file.
        file: PathBuf,
        /// A URL the document can also be fetched from (repeatable).
        #[arg(long = "source")]
        sources: Vec<String>,
        /// Also allow it (operator decision).
        #[arg(long)]
        allow: bool,
    },
    /// List stored documents with their decisions.
    List,
    /// Print a stored document.
    Get {
        /// Hex or base64 hash.
        hash: String,
    },
    /// Allow a protocol (overrides the LLM checker).
    Allow {
        /// Hex or base64 hash.
        hash: String,
        /// Why.
        #[arg(long, default_value = "allowed by the operator")]
        reason: String,
    },
    /// Deny a protocol (overrides the LLM checker).
    Deny {
        /// Hex or base64 hash.
        hash: String,
        /// Why.
        #[arg(long, default_value = "denied by the operator")]
        reason: String,
    },
    /// Forget the decision on a protocol, so the checker decides again.
    Forget {
        /// Hex or base64 hash.
        hash: String,
    },
}

pub async fn run(config: Option<&Path>, command: PdCommand) -> anyhow::Result<()> {
    match command {
        PdCommand::Hash { file } => {
            let text = read(&file)?;
            let hash = ProtocolHash::of(text.as_bytes());
            println!("{}  {}", hash.to_hex(), hash.to_base64());
            Ok(())
        }
        PdCommand::Uri { file, base64 } => {
            let text = read(&file)?;
            println!(
                "{}",
                if base64 {
                    data_uri::encode_base64(&text)
                } else {
                    data_uri::encode(&text)
                }
            );
            Ok(())
        }
        PdCommand::Add {
            file,
            sources,
            allow,
        } => {
            let store = open(config).await?;
            let text = read(&file)?;
            let document = VerifiedDocument::from_text(&text);
            store.put_document(&document, &sources, now_ms()).await?;
            if allow {
                decide(&store, &document.hash(), true, "allowed by the operator").await?;
            }
            println!("{}  {}", document.hash().to_hex(), document.display_name());
            Ok(())
        }
        PdCommand::List => {
            let store = open(config).await?;
            for stored in store.documents().await? {
                let hash = stored.document.hash();
                let decision = match store.suitability(&hash).await? {
                    Some(d) => format!(
                        "{} ({:?}: {})",
                        if d.allowed { "allowed" } else { "denied" },
                        d.origin,
                        d.reason
                    ),
                    None => "undecided".into(),
                };
                println!(
                    "{}  {:<32}  {}",
                    hash.to_hex(),
                    stored.document.display_name(),
                    decision
                );
            }
            Ok(())
        }
        PdCommand::Get { hash } => {
            let store = open(config).await?;
            let hash = ProtocolHash::parse(&hash)?;
            match store.document(&hash).await? {
                Some(stored) => {
                    print!("{}", stored.document.text());
                    Ok(())
                }
                None => bail!("no document {hash} in the store"),
            }
        }
        PdCommand::Allow { hash, reason } => {
            let store = open(config).await?;
            decide(&store, &ProtocolHash::parse(&hash)?, true, &reason).await
        }
        PdCommand::Deny { hash, reason } => {
            let store = open(config).await?;
            decide(&store, &ProtocolHash::parse(&hash)?, false, &reason).await
        }
        PdCommand::Forget { hash } => {
            let store = open(config).await?;
            let cleared = store
                .clear_suitability(&ProtocolHash::parse(&hash)?)
                .await?;
            println!(
                "{}",
                if cleared {
                    "decision forgotten"
                } else {
                    "there was no decision"
                }
            );
            Ok(())
        }
    }
}

async fn decide(
    store: &Store,
    hash: &ProtocolHash,
    allowed: bool,
    reason: &str,
) -> anyhow::Result<()> {
    let decision = Decision {
        allowed,
        origin: DecisionOrigin::Operator,
        reason: reason.to_string(),
        decided_at_ms: now_ms(),
    };
    store.set_suitability(hash, &decision).await?;
    println!("{} {hash}", if allowed { "allowed" } else { "denied" });
    Ok(())
}

pub async fn open(config: Option<&Path>) -> anyhow::Result<Store> {
    let config = Config::load(config).context("loading the configuration")?;
    agora_server::runtime::open_store(&config.store).await
}

fn read(file: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
