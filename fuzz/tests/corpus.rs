//! Replays the committed corpus without instrumentation: every file of `corpus/<target>/`
//! through every target (a seed for one parser is also odd input for the others). Fails when a
//! target panics, naming the target and the file.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use agora_fuzz::TARGETS;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Every file under `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_seeds() {
    for (name, _) in TARGETS {
        let dir = corpus_dir().join(name);
        assert!(
            !files(&dir).is_empty(),
            "no seeds in {} for target {name}",
            dir.display()
        );
    }
}

#[test]
fn every_corpus_file_passes_every_target() {
    let mut inputs = Vec::new();
    for (name, _) in TARGETS {
        for path in files(&corpus_dir().join(name)) {
            let bytes = std::fs::read(&path).expect("a corpus file reads");
            inputs.push((path, bytes));
        }
    }
    // A panic's message is printed by the default hook; the failure names every culprit.
    let mut failures = Vec::new();
    for (path, bytes) in &inputs {
        for (name, target) in TARGETS {
            if catch_unwind(AssertUnwindSafe(|| target(bytes))).is_err() {
                failures.push(format!("{name} panicked on {}", path.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs panicked:\n{}",
        failures.len(),
        inputs.len() * TARGETS.len(),
        failures.join("\n")
    );
}
