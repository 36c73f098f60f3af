//! Headless Chromium over WebDriver, for the dashboard's browser test and the
//! `dashboard_screenshots` example (which includes this file by path): Debian's chromedriver on a
//! free loopback port, a fresh profile, the flags this closed machine needs, and the browser
//! console's errors read through chromedriver's log endpoint.

use std::path::Path;
use std::time::Duration;

use agora_testkit::installed_peer;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// How long a page or an element may take.
pub const WAIT: Duration = Duration::from_secs(15);

/// A running chromedriver and a session in headless Chromium; both end with the test.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    _driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a session.
    pub async fn start() -> Browser {
        let chromium = installed_peer("AGORA_CHROMIUM");
        let chromedriver = installed_peer("AGORA_CHROMEDRIVER");
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let driver = tokio::process::Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let status = format!("{url}/status");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if reqwest::get(&status)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                // As root, without a sandbox; without the background-networking flags Chromium
                // keeps calling Google's hosts, which this machine refuses.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile.path().display())],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = ClientBuilder::rustls()
            .unwrap()
            .capabilities(capabilities)
            .connect(&url)
            .await
            .expect("a Chromium session starts");
        Browser {
            client,
            _driver: driver,
            _profile: profile,
        }
    }
}

/// chromedriver's log endpoint: the browser console's entries since the last read.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (reqwest::Method, Option<String>) {
        (reqwest::Method::POST, Some(r#"{"type": "browser"}"#.into()))
    }
}

/// The console's errors (level SEVERE) since the last call.
pub async fn console_errors(client: &Client) -> Vec<String> {
    let entries = client.issue_cmd(BrowserLog).await.expect("the browser log");
    entries
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Writes a PNG of the window to `path`.
pub async fn screenshot(client: &Client, path: &Path) {
    let png = client.screenshot().await.expect("a screenshot");
    std::fs::write(path, png).expect("the screenshot is written");
}

/// Clicks the first element matching `css`.
pub async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
}

/// Opens `dashboard`'s login form and logs in with `token`.
pub async fn log_in(client: &Client, dashboard_login: &str, token: &str) {
    client.goto(dashboard_login).await.expect("the login page");
    client
        .find(Locator::Css("#token"))
        .await
        .expect("the token field")
        .send_keys(token)
        .await
        .expect("typing the token");
    click(client, "#login-submit").await;
    // The click returns before the form's POST has come back with the session cookie: a `goto`
    // now would cancel it. Wait for a page only a logged-in operator sees (it has the live
    // footer; the login page does not).
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#live-status"))
        .await
        .unwrap_or_else(|e| {
            panic!("the login at {dashboard_login} reached no dashboard page: {e}")
        });
}
