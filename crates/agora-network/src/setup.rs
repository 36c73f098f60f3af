//! How the demo's servers answer and program: the node's own responder and programmer settings,
//! carried whole from the command line to every worker process and into the run record.
//!
//! By default they are a node's defaults, so the demo measures what `agora node run` does. A
//! measurement of another setting changes it here, from a TOML file (`agora demo network
//! --servers FILE`), never through a flag of its own: the product's defaults stay one place.

use std::path::Path;

use agora_node::{NodeConfig, ProgrammerConfig, ResponderConfig, RoutineConfig};
use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The servers' answering, programming and routine settings (a node's `[node.responder]`,
/// `[node.programmer]` and `[node.routines]` tables).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSetup {
    /// How the servers answer with their LLM.
    pub responder: ResponderConfig,
    /// How the servers write their own routines.
    pub programmer: ProgrammerConfig,
    /// How the servers run routines and check them (left out of a record when the node's
    /// defaults, so older records read the same).
    #[serde(skip_serializing_if = "is_default_routines")]
    pub routines: RoutineConfig,
}

fn is_default_routines(routines: &RoutineConfig) -> bool {
    *routines == RoutineConfig::default()
}

impl ServerSetup {
    /// The setup in the TOML file at `path` (`[responder]`, `[programmer]` and `[routines]`
    /// tables; a key left out keeps the node's default).
    pub fn from_file(path: &Path) -> anyhow::Result<ServerSetup> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Sets a node's answering and programming settings to this setup.
    pub fn apply(&self, config: &mut NodeConfig) {
        config.responder = self.responder.clone();
        config.programmer = self.programmer.clone();
        config.routines = self.routines.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changes_only_the_keys_it_names() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("servers.toml");
        std::fs::write(&path, "[responder]\nrequire_effects = false\n").expect("write");
        let setup = ServerSetup::from_file(&path).expect("reads");
        assert!(!setup.responder.require_effects);
        let defaults = ServerSetup::default();
        assert!(defaults.responder.require_effects);
        assert_eq!(
            setup.responder.code_as_action,
            defaults.responder.code_as_action
        );
        std::fs::write(&path, "[routines.shadow]\nshare = 1.0\n").expect("write");
        let setup = ServerSetup::from_file(&path).expect("reads");
        assert_eq!(setup.routines.shadow.share, 1.0);
        assert!(setup.routines.fallback_to_llm);
        let recorded = serde_json::to_value(ServerSetup::default()).expect("json");
        assert!(
            recorded.get("routines").is_none(),
            "defaults leave no trace"
        );
        std::fs::write(&path, "[responder]\nno_such_key = 1\n").expect("write");
        let refused = format!("{:#}", ServerSetup::from_file(&path).unwrap_err());
        assert!(refused.contains("no_such_key"), "{refused}");
    }
}
