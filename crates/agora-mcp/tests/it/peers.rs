//! Where the installed MCP peers are, and the reference "everything" server over HTTP.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

pub use agora_testkit::installed_peer as installed;

/// The preload that keeps a Node.js server on 127.0.0.1.
pub fn loopback_preload() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mcp/loopback.cjs")
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The "everything" server over streamable HTTP on 127.0.0.1; killed on drop.
pub struct EverythingOverHttp {
    child: tokio::process::Child,
    /// Its MCP endpoint.
    pub url: String,
}

impl EverythingOverHttp {
    pub async fn start() -> Self {
        let port = free_port();
        let child = tokio::process::Command::new(installed("AGORA_MCP_NODE"))
            .arg("--require")
            .arg(loopback_preload())
            .arg(installed("AGORA_MCP_EVERYTHING"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let address = format!("127.0.0.1:{port}");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            child,
            url: format!("http://{address}/mcp"),
        }
    }
}

impl Drop for EverythingOverHttp {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
