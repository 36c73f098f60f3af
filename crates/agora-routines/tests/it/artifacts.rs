//! The `.cwasm` cache: a second runtime loads compiled code instead of compiling, and a damaged
//! cache file is discarded and rebuilt.

use crate::common;

use std::path::{Path, PathBuf};

use agora_routine_contract::RoutineEngine;
use agora_routines::{ArtifactStats, RuntimeConfig, WasmRuntime, componentize_core_module};
use common::{limits, tools, weather_c_core};

fn runtime_in(dir: &Path) -> WasmRuntime {
    WasmRuntime::new(RuntimeConfig {
        artifact_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts")
}

fn artifacts_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("cache directory")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .collect();
    files.sort();
    files
}

async fn load_and_run(runtime: &WasmRuntime, component: &[u8]) {
    let routine = runtime.load(component).await.expect("loads");
    let reply = routine
        .run(
            r#"{"location":"Oslo","date":"2024-02-01"}"#,
            tools(),
            limits(200, 16),
        )
        .await
        .expect("answers");
    common::assert_weather(&reply, "Oslo", "2024-02-01");
}

#[tokio::test]
async fn a_second_runtime_loads_from_the_cache() {
    let dir = tempfile::tempdir().expect("temp dir");
    let component = componentize_core_module(&weather_c_core()).expect("componentizes");

    let first = runtime_in(dir.path());
    load_and_run(&first, &component).await;
    assert_eq!(
        first.artifact_stats(),
        ArtifactStats {
            hits: 0,
            misses: 1,
            rejected: 0
        }
    );
    assert_eq!(artifacts_in(dir.path()).len(), 1);

    let second = runtime_in(dir.path());
    load_and_run(&second, &component).await;
    assert_eq!(
        second.artifact_stats(),
        ArtifactStats {
            hits: 1,
            misses: 0,
            rejected: 0
        }
    );
}

#[tokio::test]
async fn a_damaged_artifact_is_discarded_and_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let component = componentize_core_module(&weather_c_core()).expect("componentizes");
    load_and_run(&runtime_in(dir.path()), &component).await;
    let [artifact] = artifacts_in(dir.path()).try_into().expect("one artifact");
    let good = std::fs::read(&artifact).expect("artifact");

    // Truncated, then the same length with flipped bytes in the middle (machine code).
    let truncated = good[..good.len() / 2].to_vec();
    let mut flipped = good.clone();
    for byte in &mut flipped[good.len() / 3..good.len() / 3 + 64] {
        *byte ^= 0xff;
    }
    for damaged in [truncated, flipped, Vec::new()] {
        std::fs::write(&artifact, &damaged).expect("damage the artifact");
        let runtime = runtime_in(dir.path());
        load_and_run(&runtime, &component).await;
        assert_eq!(
            runtime.artifact_stats(),
            ArtifactStats {
                hits: 0,
                misses: 1,
                rejected: 1
            }
        );
        assert_eq!(
            std::fs::read(&artifact).expect("rebuilt artifact").len(),
            good.len()
        );
    }

    let runtime = runtime_in(dir.path());
    load_and_run(&runtime, &component).await;
    assert_eq!(
        runtime.artifact_stats(),
        ArtifactStats {
            hits: 1,
            misses: 0,
            rejected: 0
        }
    );
}
