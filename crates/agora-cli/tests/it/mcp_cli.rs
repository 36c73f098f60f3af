//! `agora mcp serve` over stdio, driven by the official Python SDK's client (PyPI `mcp`,
//! installed by `scripts/install.sh`): the tools are listed, and bad calls get clear errors
//! without a node LLM (its backend is an empty cassette, so any LLM call would fail).

use std::process::Command;

use serde_json::{Value, json};

#[test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
fn mcp_interop_agora_mcp_serve_speaks_mcp_over_stdio() {
    let python = std::env::var("AGORA_MCP_PYTHON")
        .expect("AGORA_MCP_PYTHON is not set: run scripts/install.sh and source its env.sh");
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("empty.jsonl");
    std::fs::write(&cassette, "").unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "store = \"sqlite://{}/node.db\"\n[llm]\nbackend = \"replay\"\nreplay = \"{}\"\n",
            dir.path().display(),
            cassette.display()
        ),
    )
    .unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/python/mcp_client.py"
    );
    let calls = json!([
        {"list": true},
        {"tool": "nope", "arguments": {}},
        {"tool": "send_message", "arguments": {"target": "http://127.0.0.1:9/", "message": "hi"}},
        {"tool": "run_task", "arguments": {
            "task": "weather", "target": "https://example.invalid/", "input": {}}},
    ]);
    let output = Command::new(python)
        .arg(script)
        .arg("--stdio")
        .arg(env!("CARGO_BIN_EXE_agora"))
        .args(["mcp", "serve", "--config"])
        .arg(&config)
        .arg("--")
        .arg(calls.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0]["tools"].as_array().unwrap().len(), 4);
    assert_eq!(results[1]["rpcError"]["code"], -32602);
    // The default fetch policy refuses loopback targets.
    assert_eq!(results[2]["isError"], true);
    assert!(
        results[2]["text"]
            .as_str()
            .unwrap()
            .contains("loopback address"),
        "{}",
        results[2]
    );
    // This node has no tasks: the schema's enum is empty, so the call is refused by the schema.
    assert_eq!(results[3]["isError"], true, "{}", results[3]);
}
