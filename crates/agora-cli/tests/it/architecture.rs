//! `ARCHITECTURE.md`'s crate graph is true: the `crate-graph` block names every workspace crate,
//! with exactly the workspace crates it depends on (normal dependencies), as `cargo metadata`
//! reports them; and each framework crate is named by one workspace crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

type Graph = BTreeMap<String, BTreeSet<String>>;

fn documented() -> Graph {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("ARCHITECTURE.md is readable");
    let block = text
        .split("```crate-graph\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md has a crate-graph block");
    block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, deps) = line.split_once(':').expect("a line is `crate: deps`");
            let deps = deps
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(String::from)
                .collect();
            (name.trim().to_string(), deps)
        })
        .collect()
}

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("metadata is JSON")
}

fn actual() -> Graph {
    let metadata = metadata();
    let members: BTreeSet<String> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("a name").to_string())
        .collect();
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|name| members.contains(*name))
                .map(String::from)
                .collect();
            (package["name"].as_str().expect("a name").to_string(), deps)
        })
        .collect()
}

#[test]
fn the_documented_crate_graph_is_the_real_one() {
    assert_eq!(documented(), actual());
}

/// Frameworks stay at the edges: each is named (as any kind of dependency) by its owners only.
/// sqlx has two: the node's store and the network demo's service databases (business data that
/// is no part of a node).
#[test]
fn each_framework_is_named_by_its_owners_only() {
    let metadata = metadata();
    for (framework, owners) in [
        ("rmcp", &["agora-mcp"][..]),
        ("a2a-lf", &["agora-a2a"]),
        ("wasmtime", &["agora-routines"]),
        ("async-openai", &["agora-llm"]),
        ("sqlx", &["agora-network", "agora-store"]),
        ("opentelemetry", &["agora-telemetry"]),
        ("opentelemetry_sdk", &["agora-telemetry"]),
        ("opentelemetry-otlp", &["agora-telemetry"]),
        ("tracing-opentelemetry", &["agora-telemetry"]),
    ] {
        let mut named_by: Vec<&str> = metadata["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .filter(|p| {
                p["dependencies"]
                    .as_array()
                    .is_some_and(|deps| deps.iter().any(|d| d["name"] == framework))
            })
            .filter_map(|p| p["name"].as_str())
            .collect();
        named_by.sort_unstable();
        assert_eq!(named_by, owners, "{framework}");
    }
}
