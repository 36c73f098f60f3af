//! The node as an MCP client: real MCP servers' tools in a node's tool registry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_fetch::{TargetClient, TargetPolicy};
use agora_mcp::McpServers;
use agora_node::{McpServerConfig, ToolConfig, ToolError, ToolKind, ToolRegistry};
use serde_json::json;

use crate::peers::{EverythingOverHttp, installed};

fn mcp(name: &str, config: McpServerConfig) -> ToolConfig {
    ToolConfig {
        name: name.into(),
        description: None,
        parameters: None,
        returns: None,
        kind: ToolKind::Mcp(config),
    }
}

fn time_server() -> ToolConfig {
    mcp(
        "time",
        McpServerConfig {
            command: vec![
                installed("AGORA_MCP_TIME_SERVER"),
                "--local-timezone".into(),
                "UTC".into(),
            ],
            ..McpServerConfig::default()
        },
    )
}

fn everything_stdio(config: McpServerConfig) -> ToolConfig {
    mcp(
        "everything",
        McpServerConfig {
            command: vec![
                installed("AGORA_MCP_NODE"),
                installed("AGORA_MCP_EVERYTHING"),
                "stdio".into(),
            ],
            ..config
        },
    )
}

fn names(tools: &ToolRegistry) -> Vec<String> {
    tools.specs().into_iter().map(|s| s.name).collect()
}

async fn registry(configs: &[ToolConfig]) -> (ToolRegistry, McpServers) {
    let (tools, servers) = agora_mcp::connect(configs).await.unwrap();
    let targets = TargetClient::new(TargetPolicy::default()).unwrap();
    let registry = ToolRegistry::from_config_with(configs, &targets, tools).unwrap();
    (registry, servers)
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_time_server_tools_are_node_tools() {
    let (tools, servers) = registry(&[time_server()]).await;
    let names = names(&tools);
    assert_eq!(names, ["convert_time", "get_current_time"]);

    let now = tools
        .call("get_current_time", json!({"timezone": "Europe/London"}))
        .await
        .unwrap();
    assert_eq!(now["timezone"], "Europe/London", "{now}");
    assert!(now["datetime"].as_str().unwrap().len() >= 19, "{now}");

    // The server's own error, in its words.
    let error = tools
        .call("get_current_time", json!({"timezone": "Mars/Olympus_Mons"}))
        .await
        .unwrap_err();
    match error {
        ToolError::Failed { tool, reason } => {
            assert_eq!(tool, "get_current_time");
            assert!(reason.contains("Mars/Olympus_Mons"), "{reason}");
        }
        other => panic!("expected a tool failure, got {other:?}"),
    }
    // Arguments are checked against the server's schema before the server sees them.
    let error = tools.call("get_current_time", json!({})).await.unwrap_err();
    assert!(
        matches!(error, ToolError::InvalidArguments { .. }),
        "{error:?}"
    );
    servers.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_everything_over_stdio_bounds_time_and_environment() {
    // The node's own environment (here, cargo's) is not the child's.
    let secret = "CARGO_MANIFEST_DIR";
    assert!(
        std::env::var(secret).is_ok(),
        "cargo sets {secret} for tests"
    );
    let (tools, servers) = registry(&[everything_stdio(McpServerConfig {
        env: [("GREETING".to_string(), "hello".to_string())].into(),
        call_timeout_secs: Some(2),
        ..McpServerConfig::default()
    })])
    .await;
    let names = names(&tools);
    for expected in ["echo", "get-sum", "get-env", "get-tiny-image"] {
        assert!(names.contains(&expected.to_string()), "{names:?}");
    }

    let sum = tools
        .call("get-sum", json!({"a": 2, "b": 40}))
        .await
        .unwrap();
    assert!(sum.as_str().unwrap().contains("42"), "{sum}");

    // The child sees its configured variables and PATH, not the node's own.
    let env = tools.call("get-env", json!({})).await.unwrap();
    let env_text = env.to_string();
    assert!(env_text.contains("GREETING"), "{env_text}");
    assert!(env_text.contains("PATH"), "{env_text}");
    assert!(!env_text.contains(secret), "{env_text}");

    // An image is described, not passed on as base64.
    let image = tools.call("get-tiny-image", json!({})).await.unwrap();
    let image_text = image.to_string();
    assert!(image_text.contains("image/png"), "{image_text}");
    assert!(image_text.len() < 1000, "{image_text}");

    // A call slower than the deadline fails, and the server keeps serving.
    let started = Instant::now();
    let error = tools
        .call(
            "trigger-long-running-operation",
            json!({"duration": 10, "steps": 2}),
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no answer within 2 s"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let echo = tools
        .call("echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert!(echo.as_str().unwrap().contains("still here"), "{echo}");
    servers.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_everything_over_streamable_http() {
    let everything = EverythingOverHttp::start().await;
    let config = mcp(
        "everything",
        McpServerConfig {
            url: Some(everything.url.clone()),
            tools: Some(vec!["get-sum".into(), "echo".into()]),
            ..McpServerConfig::default()
        },
    );
    let (tools, servers) = registry(&[config]).await;
    let names = names(&tools);
    assert_eq!(names, ["echo", "get-sum"]);
    let sum = tools
        .call("get-sum", json!({"a": 1.5, "b": 2}))
        .await
        .unwrap();
    assert!(sum.as_str().unwrap().contains("3.5"), "{sum}");
    servers.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_clashing_names_are_prefixed_and_a_missing_tool_is_a_config_error() {
    // Both servers are the same program, so every name clashes.
    let configs = [
        everything_stdio(McpServerConfig {
            tools: Some(vec!["echo".into()]),
            ..McpServerConfig::default()
        }),
        ToolConfig {
            name: "other".into(),
            ..everything_stdio(McpServerConfig {
                tools: Some(vec!["echo".into()]),
                ..McpServerConfig::default()
            })
        },
    ];
    let (tools, servers) = registry(&configs).await;
    let names = names(&tools);
    assert_eq!(names, ["everything_echo", "other_echo"]);
    servers.shutdown().await;

    let missing = everything_stdio(McpServerConfig {
        tools: Some(vec!["no-such-tool".into()]),
        ..McpServerConfig::default()
    });
    let Err(error) = agora_mcp::connect(&[missing]).await else {
        panic!("a missing tool must be a configuration error");
    };
    assert!(error.to_string().contains("no-such-tool"), "{error}");
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_a_killed_server_fails_calls_then_is_restarted() {
    let (tools, servers) = registry(&[time_server()]).await;
    let tools = Arc::new(tools);
    let first = servers.child_pid("time").unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(status.success());

    // Calls fail (never hang) while it is down, and succeed again once it is back.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failures = 0;
    loop {
        let started = Instant::now();
        match tools
            .call("get_current_time", json!({"timezone": "UTC"}))
            .await
        {
            Ok(value) if failures > 0 => {
                assert_eq!(value["timezone"], "UTC");
                break;
            }
            Ok(_) => {} // the kill has not been noticed yet
            Err(error) => {
                failures += 1;
                assert!(started.elapsed() < Duration::from_secs(5), "{error}");
            }
        }
        assert!(Instant::now() < deadline, "not restarted within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let second = servers.child_pid("time").unwrap();
    assert_ne!(first, second);
    servers.shutdown().await;
    // Shutdown stops the child.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let alive = std::process::Command::new("kill")
        .args(["-0", &second.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "the child {second} is still running after shutdown");
}
