//! Routine folders: `manifest.toml` beside the routine's source, as shipped in `routines/<name>/`.
//!
//! ```toml
//! protocol = "../../protocols/weather-forecast.md"   # the PD, relative to the folder
//! language = "javascript"                            # or "wasm"; others are built outside agora
//! source = "routine.js"                              # default: routine.js for JavaScript
//! tools = ["weather_forecast"]                       # the tools the routine may call
//! timeout_ms = 1000                                  # default 1000
//! memory_mb = 64                                     # default 64
//! ```
//!
//! A routine in another language (C, Rust, ...) names its `source` and a `build` script; its
//! built module is added as a `.wasm` (`agora routine add --protocol <pd> <module.wasm>`).
//!
//! The manifest's parsing, [`RoutineManifest`], lives in `agora-routine-contract` (free of I/O,
//! and fuzzed there); this module reads the folder it describes.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use agora_node::RoutineManifest;
use agora_node::{ProtocolInput, RoutineLimits, RoutineSource, RoutineSpec};
use agora_store::RoutineOrigin;
use anyhow::{Context, bail};

/// A routine folder, read.
#[derive(Debug, Clone)]
pub struct RoutineFolder {
    /// The folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: RoutineManifest,
}

impl RoutineFolder {
    /// Reads `dir/manifest.toml`.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("manifest.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let manifest = RoutineManifest::from_toml(&text)
            .with_context(|| format!("parsing {}", path.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The routine's name: the manifest's, or the folder's.
    pub fn name(&self) -> String {
        self.manifest.name.clone().unwrap_or_else(|| {
            self.dir
                .canonicalize()
                .unwrap_or_else(|_| self.dir.clone())
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "routine".into())
        })
    }

    /// The protocol document's path.
    pub fn protocol_path(&self) -> PathBuf {
        self.dir.join(&self.manifest.protocol)
    }

    /// The protocol document's text.
    pub fn protocol_text(&self) -> anyhow::Result<String> {
        let path = self.protocol_path();
        std::fs::read_to_string(&path)
            .with_context(|| format!("reading the protocol document {}", path.display()))
    }

    /// The limits the manifest asks for (1 s and 64 MiB unless given).
    pub fn limits(&self) -> RoutineLimits {
        let defaults = RoutineLimits::default();
        RoutineLimits {
            timeout: self
                .manifest
                .timeout_ms
                .map_or(defaults.timeout, Duration::from_millis),
            memory_bytes: self
                .manifest
                .memory_mb
                .map_or(defaults.memory_bytes, |mb| mb.saturating_mul(1024 * 1024)),
        }
    }

    /// The routine's source, for languages agora builds itself (JavaScript, WebAssembly).
    pub fn source(&self) -> anyhow::Result<RoutineSource> {
        let language = self.manifest.language.as_str();
        let default_file = match language {
            "javascript" => "routine.js",
            "wasm" => "routine.wasm",
            other => bail!(
                "{}: routines in {other:?} are built outside agora ({}); add the built module \
                 with `agora routine add --protocol <pd> <module.wasm>`",
                self.dir.display(),
                self.manifest
                    .build
                    .as_ref()
                    .map_or("see the folder".to_string(), |b| format!(
                        "run {}",
                        b.display()
                    ))
            ),
        };
        let path = self.dir.join(
            self.manifest
                .source
                .as_deref()
                .unwrap_or(Path::new(default_file)),
        );
        if language == "javascript" {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(RoutineSource::JavaScript(text))
        } else {
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            Ok(RoutineSource::Component(bytes))
        }
    }

    /// What to add to a registry for this folder, with `source` (from [`Self::source`] or built
    /// outside agora). The routine starts active; the protocol document is stored with it.
    pub fn spec(&self, source: RoutineSource) -> anyhow::Result<RoutineSpec> {
        Ok(RoutineSpec {
            name: self.name(),
            protocol: ProtocolInput::Text(self.protocol_text()?),
            source,
            tools: self.manifest.tools.clone(),
            limits: self.limits(),
            origin: RoutineOrigin::Human,
            activate: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_manifests_parse() {
        let routines = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../routines");
        let mut seen = 0;
        for entry in std::fs::read_dir(&routines).expect("routines/ exists") {
            let dir = entry.expect("a folder entry").path();
            if !dir.join("manifest.toml").is_file() {
                continue;
            }
            let folder = RoutineFolder::read(&dir).expect("the manifest parses");
            folder
                .protocol_text()
                .expect("the protocol document exists");
            assert!(!folder.name().is_empty());
            seen += 1;
        }
        assert!(seen > 0, "no routine folders under {}", routines.display());
    }

    #[test]
    fn limits_default_to_one_second_and_64_mib() {
        let folder = RoutineFolder {
            dir: PathBuf::from("x"),
            manifest: toml::from_str("protocol = \"p.md\"\nlanguage = \"javascript\"\n")
                .expect("a minimal manifest parses"),
        };
        assert_eq!(folder.limits(), RoutineLimits::default());
        assert_eq!(folder.name(), "x");
        let unknown: Result<RoutineManifest, _> =
            toml::from_str("protocol = \"p.md\"\nlanguage = \"javascript\"\ntols = []\n");
        assert!(unknown.is_err());
    }
}
