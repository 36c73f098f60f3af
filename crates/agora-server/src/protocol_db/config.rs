//! Protocol database configuration: a TOML file, overridden by `AGORA_PROTOCOL_DB_*`
//! environment variables, overridden by command-line flags.
//!
//! Every value has a default, so `agora protocol-db run` starts with no file at all: on
//! 127.0.0.1:8090, with a SQLite store under `.agora/`, no peers, and writes closed. Nested keys
//! map to variables with `__` (`AGORA_PROTOCOL_DB_FETCH__ALLOW_NETWORKS='["127.0.0.0/8"]'`);
//! the write token may also come from `AGORA_PROTOCOL_DB_TOKEN`, which keeps it out of files.
//!
//! Writes (`POST /protocols`, and `POST /sync?wait=true`) need the bearer token when one is
//! configured. Without a token they are refused (403) unless `open_writes = true`: a database
//! reachable by others should not take documents from anyone by accident, and a loopback demo
//! can still say so explicitly. Reads and plain `POST /sync` notifications are always open.

use std::net::SocketAddr;
use std::path::Path;

use axum::http::Uri;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, FetchSettings};

/// Top-level keys read from the environment (after the `AGORA_PROTOCOL_DB_` prefix).
const KEYS: [&str; 10] = [
    "listen",
    "store",
    "public_url",
    "write_token",
    "open_writes",
    "max_document_bytes",
    "peers",
    "sync_interval_secs",
    "sync_every_additions",
    "fetch",
];

/// The whole configuration of one protocol database process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolDbServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Store URL: `sqlite://path` (created if missing) or `postgres://...`.
    pub store: String,
    /// The base URL others reach this database at (default `http://<listen>`); document URLs
    /// in answers are built from it.
    pub public_url: Option<String>,
    /// Bearer token for writes (also `AGORA_PROTOCOL_DB_TOKEN`).
    pub write_token: Option<String>,
    /// Without a token, accept writes from anyone. Ignored when a token is set.
    pub open_writes: bool,
    /// Largest document accepted, posted or pulled from a peer, in bytes.
    pub max_document_bytes: usize,
    /// Peer databases' base URLs, pulled from.
    pub peers: Vec<String>,
    /// Seconds between pulls from the peers, the first at start; 0 pulls only when a peer
    /// notifies or an operator asks (`POST /sync?wait=true`).
    pub sync_interval_secs: u64,
    /// Notify the peers (`POST <peer>/sync`) after this many new documents; 0 never does.
    pub sync_every_additions: u64,
    /// How peers are fetched from: allowed networks (peers on loopback or a private network
    /// need theirs listed, e.g. `["127.0.0.0/8"]`), timeout, and `max_bytes` for one page.
    pub fetch: FetchSettings,
}

impl Default for ProtocolDbServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8090)),
            store: "sqlite://.agora/protocol-db.db".into(),
            public_url: None,
            write_token: None,
            open_writes: false,
            max_document_bytes: 64 * 1024,
            peers: Vec::new(),
            sync_interval_secs: 30,
            sync_every_additions: 1,
            fetch: FetchSettings {
                // A page of up to 20 documents of 64 KiB, JSON-escaped.
                max_bytes: 8 * 1024 * 1024,
                ..FetchSettings::default()
            },
        }
    }
}

impl ProtocolDbServerConfig {
    /// Loads defaults, then the file (if given), then `AGORA_PROTOCOL_DB_*` variables, and
    /// checks the peer URLs.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Self::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        let env = Env::prefixed("AGORA_PROTOCOL_DB_")
            .filter_map(|key| {
                let key = key.as_str().to_ascii_lowercase();
                let key = if key == "token" {
                    "write_token".to_string()
                } else {
                    key
                };
                let top = key.split("__").next().unwrap_or("");
                KEYS.contains(&top).then(|| key.into())
            })
            .split("__");
        let config: Self = figment
            .merge(env)
            .extract()
            .map_err(|error| ConfigError(error.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The public base URL, without a trailing slash.
    pub fn public_url(&self) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
            .trim_end_matches('/')
            .to_string()
    }

    /// The write token, if a non-empty one is configured.
    pub fn token(&self) -> Option<&str> {
        self.write_token
            .as_deref()
            .filter(|token| !token.is_empty())
    }

    /// Checks what serde cannot: peers are http(s) base URLs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for peer in &self.peers {
            let uri: Uri = peer
                .parse()
                .map_err(|error| ConfigError(format!("peers: {peer:?} is not a URL: {error}")))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                return Err(ConfigError(format!(
                    "peers: {peer:?} is not an http(s) base URL"
                )));
            }
            if uri.query().is_some() {
                return Err(ConfigError(format!(
                    "peers: {peer:?} must not have a query"
                )));
            }
        }
        if self.max_document_bytes == 0 {
            return Err(ConfigError("max_document_bytes must be positive".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Loads run inside figment `Jail`s, which are serialized, so environment variables set by
    // one test never leak into another.
    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn defaults_are_safe_and_need_no_file() {
        figment::Jail::expect_with(|_| {
            let config = ProtocolDbServerConfig::load(None).map_err(|e| e.0)?;
            assert_eq!(config.listen.port(), 8090);
            assert_eq!(config.public_url(), "http://127.0.0.1:8090");
            assert_eq!(config.token(), None);
            assert!(!config.open_writes);
            assert_eq!(config.max_document_bytes, 65536);
            assert_eq!(config.sync_interval_secs, 30);
            assert!(config.fetch.allow_networks.is_empty());
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn file_then_environment() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "pdb.toml",
                r#"
listen = "127.0.0.1:9200"
public_url = "https://pd.example/"
write_token = "from-file"
peers = ["http://127.0.0.1:9201"]
sync_interval_secs = 5
[fetch]
allow_networks = ["127.0.0.0/8"]
"#,
            )?;
            jail.set_env("AGORA_PROTOCOL_DB_TOKEN", "from-env");
            jail.set_env("AGORA_PROTOCOL_DB_MAX_DOCUMENT_BYTES", "1000");
            jail.set_env("AGORA_PROTOCOL_DB_FETCH__TIMEOUT_SECS", "3");
            jail.set_env("AGORA_STORE", "sqlite://the-node-store.db");
            let config =
                ProtocolDbServerConfig::load(Some(Path::new("pdb.toml"))).map_err(|e| e.0)?;
            assert_eq!(config.listen.port(), 9200);
            assert_eq!(config.public_url(), "https://pd.example");
            assert_eq!(config.token(), Some("from-env"));
            assert_eq!(config.max_document_bytes, 1000);
            assert_eq!(config.peers, ["http://127.0.0.1:9201"]);
            assert_eq!(config.fetch.allow_networks, ["127.0.0.0/8"]);
            assert_eq!(config.fetch.timeout_secs, 3);
            assert_eq!(
                config.store, "sqlite://.agora/protocol-db.db",
                "the node's variables are not the protocol database's"
            );
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn the_shipped_example_loads_with_the_defaults() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protocol-db.example.toml");
        figment::Jail::expect_with(|_| {
            let config = ProtocolDbServerConfig::load(Some(&example)).map_err(|e| e.0)?;
            let defaults = ProtocolDbServerConfig::default();
            assert_eq!(
                toml::to_string(&config).map_err(|e| e.to_string())?,
                toml::to_string(&defaults).map_err(|e| e.to_string())?
            );
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn bad_peers_and_unknown_keys_are_errors() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("a.toml", "peers = [\"ftp://x\"]\n")?;
            jail.create_file("b.toml", "peers = [\"not a url\"]\n")?;
            jail.create_file("c.toml", "sync_every = 3\n")?;
            for file in ["a.toml", "b.toml", "c.toml"] {
                assert!(
                    ProtocolDbServerConfig::load(Some(Path::new(file))).is_err(),
                    "{file}"
                );
            }
            Ok(())
        });
    }
}
