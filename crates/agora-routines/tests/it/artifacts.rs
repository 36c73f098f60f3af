//! The `.cwasm` cache: a second runtime loads compiled code instead of compiling, a routine just
//! compiled runs from its stored file, code loaded once leaves nothing in it, and a damaged cache
//! file is discarded and rebuilt.

use crate::common;

use std::path::{Path, PathBuf};

use agora_routine_contract::{LoadedRoutine, RoutineEngine, RoutineSource};
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
    answers_the_weather(runtime.load(component).await.expect("loads").as_ref()).await;
}

async fn answers_the_weather(routine: &dyn LoadedRoutine) {
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

/// The artifact cache's counts: `hits`, `misses`, `rejected`.
fn stats(hits: u64, misses: u64, rejected: u64) -> ArtifactStats {
    ArtifactStats {
        hits,
        misses,
        rejected,
    }
}

/// The artifact cache's counts of a fresh runtime over `dir` after one load and run of `component`.
async fn stats_of_a_run(dir: &Path, component: &[u8]) -> ArtifactStats {
    let runtime = runtime_in(dir);
    load_and_run(&runtime, component).await;
    runtime.artifact_stats()
}

#[tokio::test]
async fn a_second_runtime_loads_from_the_cache() {
    let dir = tempfile::tempdir().expect("temp dir");
    let component = componentize_core_module(&weather_c_core()).expect("componentizes");

    assert_eq!(stats_of_a_run(dir.path(), &component).await, stats(0, 1, 0));
    assert_eq!(artifacts_in(dir.path()).len(), 1);

    assert_eq!(stats_of_a_run(dir.path(), &component).await, stats(1, 0, 0));
}

/// A routine just compiled is mapped from the file it was stored in, not kept as compiled code in
/// the process's own memory (where all of it would stay resident).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_routine_just_compiled_runs_from_its_stored_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let component = componentize_core_module(&weather_c_core()).expect("componentizes");
    let runtime = runtime_in(dir.path());
    let routine = runtime.load(&component).await.expect("loads");
    assert_eq!(runtime.artifact_stats(), stats(0, 1, 0));
    let [artifact] = artifacts_in(dir.path()).try_into().expect("one artifact");

    let maps = std::fs::read_to_string("/proc/self/maps").expect("the process's mappings");
    let artifact = artifact.to_str().expect("a UTF-8 path");
    assert!(
        maps.lines().any(|line| line.ends_with(artifact)),
        "{artifact} is not mapped"
    );
    answers_the_weather(routine.as_ref()).await;
}

#[tokio::test]
async fn code_loaded_once_leaves_no_artifact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let component = componentize_core_module(&weather_c_core()).expect("componentizes");
    let runtime = runtime_in(dir.path());
    let routine = (runtime
        .load_program(&RoutineSource::Component(component.clone()))
        .await)
        .expect("loads");
    answers_the_weather(routine.as_ref()).await;

    assert_eq!(artifacts_in(dir.path()), Vec::<PathBuf>::new());
    assert_eq!(runtime.artifact_stats(), stats(0, 0, 0));
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
        assert_eq!(stats_of_a_run(dir.path(), &component).await, stats(0, 1, 1));
        assert_eq!(
            std::fs::read(&artifact).expect("rebuilt artifact").len(),
            good.len()
        );
    }

    assert_eq!(stats_of_a_run(dir.path(), &component).await, stats(1, 0, 0));
}
