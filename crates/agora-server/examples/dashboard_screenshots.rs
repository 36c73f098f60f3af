//! Screenshots of a running node's dashboard, one PNG per page: how `docs/dashboard/` was made
//! from the weather demo's end state (`docs/dashboard.md`).
//!
//! ```sh
//! source ~/.cache/agora/env.sh
//! target/debug/agora demo weather --keep-running   # prints the dashboards and the token
//! cargo run -p agora-server --example dashboard_screenshots -- \
//!     http://127.0.0.1:PORT/dashboard TOKEN docs/dashboard bob
//! ```
//!
//! Logs in through the form, visits every page (and the first routine's), waits for the
//! overview's charts, and fails if the browser's console shows an error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a tool that fails loudly

#[path = "../tests/it/browser.rs"]
mod browser;

use std::path::PathBuf;

use fantoccini::Locator;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dashboard, token, out, prefix] = args.as_slice() else {
        eprintln!("usage: dashboard_screenshots DASHBOARD_URL ADMIN_TOKEN OUT_DIR PREFIX");
        std::process::exit(2);
    };
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).unwrap();
    let browser = browser::Browser::start().await;
    let c = &browser.client;
    browser::log_in(c, &format!("{dashboard}/login"), token).await;
    c.wait()
        .at_most(browser::WAIT)
        .for_element(Locator::Css("#chart-requests .uplot"))
        .await
        .unwrap();
    let mut pages = vec![
        ("overview", String::new()),
        ("protocols", "/protocols".into()),
        ("routines", "/routines".into()),
        ("ledger", "/ledger".into()),
        ("sender", "/sender".into()),
        ("conversations", "/conversations".into()),
    ];
    c.goto(&format!("{dashboard}/routines")).await.unwrap();
    if let Ok(link) = c.find(Locator::Css("#routines-table td a")).await {
        let href = link.attr("href").await.unwrap().unwrap_or_default();
        if let Some(path) = href.strip_prefix("/dashboard") {
            pages.push(("routine", path.to_string()));
        }
    }
    for (name, path) in pages {
        c.goto(&format!("{dashboard}{path}")).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(800)).await;
        let file = out.join(format!("{prefix}-{name}.png"));
        browser::screenshot(c, &file).await;
        println!("{}", file.display());
    }
    let errors = browser::console_errors(c).await;
    browser.client.clone().close().await.unwrap();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
