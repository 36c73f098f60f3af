//! A routine folder's `manifest.toml`, parsed: what routine folders (`routines/<name>/`) declare
//! about the routine beside it: its protocol document, language, source, tools and limits.
//! Reading the folder (the files it names) is `agora-server`'s (its `manifest` module, which
//! shows an example); the parsing lives here, free of I/O, so that it can be fuzzed without the
//! server (see `fuzz/`).

use std::path::PathBuf;

use serde::Deserialize;

/// A routine folder's `manifest.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutineManifest {
    /// The protocol document, relative to the folder.
    pub protocol: PathBuf,
    /// `javascript`, `wasm`, or a language built outside agora (`c`, ...).
    pub language: String,
    /// The source file, relative to the folder.
    #[serde(default)]
    pub source: Option<PathBuf>,
    /// The script that builds a compiled routine (informational).
    #[serde(default)]
    pub build: Option<PathBuf>,
    /// The tools the routine may call.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The deadline for one request, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The memory cap for one request, in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// The routine's name (default: the folder's name).
    #[serde(default)]
    pub name: Option<String>,
}

impl RoutineManifest {
    /// Parses the text of a `manifest.toml`. Unknown keys are refused.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_manifest_parses_and_unknown_keys_are_refused() {
        let manifest =
            RoutineManifest::from_toml("protocol = \"p.md\"\nlanguage = \"javascript\"\n")
                .expect("a minimal manifest parses");
        assert_eq!(manifest.protocol, PathBuf::from("p.md"));
        assert_eq!(manifest.tools, Vec::<String>::new());
        assert!(
            RoutineManifest::from_toml(
                "protocol = \"p.md\"\nlanguage = \"javascript\"\ntols = []\n"
            )
            .is_err()
        );
    }
}
