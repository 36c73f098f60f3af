//! The on-disk cache of compiled routines (`.cwasm` files).
//!
//! Cranelift compiles a whole QuickJS engine with every JavaScript routine, so a node compiles
//! each routine once and keeps the machine code. An artifact is named by what determines it:
//! the sha256 of the WebAssembly it was compiled from and a fingerprint of the engine (wasmtime's
//! own compatibility hash of the configuration, and the wasmtime version). A configuration
//! change therefore misses the cache instead of loading incompatible code.
//!
//! Loading machine code is `unsafe` in wasmtime: the bytes are trusted to be wasmtime's own
//! output. Two things make that true here: files are written atomically (a temporary file, then
//! a rename), and each `.cwasm` has a `.sha256` sidecar written after it, which is checked before
//! the code is mapped. A truncated, corrupt or half-written artifact is therefore removed and
//! rebuilt, never executed. (The sidecar guards against accidents, not against someone who can
//! write to the cache directory; that person already controls the node.)

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::Engine;

/// Bumped when the layout of the cache changes.
const ARTIFACT_FORMAT: u32 = 1;
/// The wasmtime line pinned in the workspace.
const WASMTIME_VERSION: &str = "48.0.8";

/// Counters of the artifact cache, for operators and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArtifactStats {
    /// Loads served from a cached `.cwasm`.
    pub hits: u64,
    /// Loads that had to compile (nothing cached, or no cache directory).
    pub misses: u64,
    /// Cached files that failed their checks and were removed (then recompiled).
    pub rejected: u64,
}

/// A directory of artifacts for one engine configuration.
pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
    fingerprint: String,
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
}

impl ArtifactCache {
    /// A cache in `dir` (none: every load compiles) for artifacts of `engine`.
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        WASMTIME_VERSION.hash(&mut hasher);
        ARTIFACT_FORMAT.hash(&mut hasher);
        Self {
            dir,
            fingerprint: hex(&hasher.0.finalize()[..8]),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> ArtifactStats {
        ArtifactStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    /// Loads the artifact compiled from `wasm`, or compiles it and stores the result.
    ///
    /// `deserialize` maps a checked file; `compile` returns the loaded value and its serialized
    /// form. Cache I/O failures are logged and only cost a compile; compile errors are returned.
    ///
    /// A value just compiled and stored is mapped again from its file and the compiled one
    /// dropped: the compiled code sits in anonymous memory, all of it resident for as long as it
    /// is kept, while a mapped file's pages are read in as they are run.
    pub(crate) fn load_or_compile<T, E>(
        &self,
        kind: &str,
        wasm: &[u8],
        deserialize: impl Fn(&Path) -> wasmtime::Result<T>,
        compile: impl FnOnce() -> Result<(T, Vec<u8>), E>,
    ) -> Result<T, E> {
        let Some(dir) = &self.dir else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return compile().map(|(value, _)| value);
        };
        let name = format!("{kind}-{}-{}", hex(&Sha256::digest(wasm)), self.fingerprint);
        let path = dir.join(format!("{name}.cwasm"));
        let sidecar = dir.join(format!("{name}.sha256"));

        if path.exists() {
            match self.load_checked(&path, &sidecar, &deserialize) {
                Ok(value) => {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(value);
                }
                Err(reason) => {
                    tracing::warn!(path = %path.display(), %reason, "discarding a cached artifact");
                    self.rejected.fetch_add(1, Ordering::Relaxed);
                    let _ = std::fs::remove_file(&sidecar);
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let (value, serialized) = compile()?;
        if let Err(error) = store(dir, &path, &sidecar, &serialized) {
            tracing::warn!(path = %path.display(), %error, "cannot store a compiled artifact");
            return Ok(value);
        }
        match deserialize(&path) {
            Ok(mapped) => Ok(mapped),
            Err(error) => {
                tracing::warn!(path = %path.display(), error = %format!("{error:#}"), "cannot map a stored artifact; keeping the compiled code");
                Ok(value)
            }
        }
    }

    fn load_checked<T>(
        &self,
        path: &Path,
        sidecar: &Path,
        deserialize: &impl Fn(&Path) -> wasmtime::Result<T>,
    ) -> Result<T, String> {
        let expected = std::fs::read_to_string(sidecar).map_err(|e| format!("no checksum: {e}"))?;
        let bytes = std::fs::read(path).map_err(|e| format!("unreadable: {e}"))?;
        if hex(&Sha256::digest(&bytes)) != expected.trim() {
            return Err("checksum mismatch (truncated or corrupt)".into());
        }
        deserialize(path).map_err(|e| format!("{e:#}"))
    }
}

/// Feeds `Hash` data into sha256, so the fingerprint is stable across Rust releases (std's
/// `DefaultHasher` is not).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        // Only `write` is used: the digest is read from the inner hasher.
        0
    }
}

/// Writes the artifact, then its checksum, each atomically.
fn store(dir: &Path, path: &Path, sidecar: &Path, serialized: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    write_atomic(path, serialized)?;
    write_atomic(sidecar, hex(&Sha256::digest(serialized)).as_bytes())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}.{n}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
