//! The weather demo with the real local model, as `agora demo weather` runs it, with a small
//! query count: natural language, a negotiated protocol published to the protocol database,
//! routines on both sides, and the last queries answered with no LLM call at all.
//!
//! Ignored by plain `cargo test`: `scripts/test.sh` runs it with `AGORA_TEST_LLM_URL` (a
//! llama-server at temperature 0, fixed seed, one slot) and `AGORA_JS_ENGINE` set.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use agora_network::judge::Verdict;
use agora_network::weather::{self as demo, WeatherDemo};
use agora_server::LlmSettings;
use agora_testkit::temp_dir;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_weather_demo_ends_with_queries_that_use_no_llm() {
    let url = std::env::var("AGORA_TEST_LLM_URL").expect("AGORA_TEST_LLM_URL (scripts/test.sh)");
    let dir = temp_dir();
    let mut llm = LlmSettings::default();
    llm.local.url = Some(url);
    let run = demo::run(WeatherDemo {
        queries: 7,
        llm,
        dir: dir.path().join("agents"),
        report: dir.path().join("report.json"),
    })
    .await
    .unwrap();
    let report = &run.report;
    demo::print_summary(report);
    assert_eq!(
        report.answered, 7,
        "every query answered with a valid output"
    );
    let protocol = report.protocol.as_ref().expect("a negotiated protocol");
    assert!(
        protocol["sources"][0]
            .as_str()
            .unwrap()
            .contains("/protocols/")
    );
    for category in ["conversation", "negotiation", "implementing"] {
        assert!(report.by_category.contains_key(category), "{category}");
    }
    assert!(report.llm_free_tail >= 1, "the last queries use no LLM");
    let last = report.queries.last().unwrap();
    assert_eq!((last.bob.as_str(), last.total.calls), ("routine", 0));
    assert!(last.alice.starts_with("routine"), "{}", last.alice);
    assert_eq!(
        last.verdict,
        Verdict::Correct,
        "routines carry the tool's data: {}",
        last.output
    );
    assert!(report.break_even_queries.is_some());
    assert!(std::path::Path::new(&dir.path().join("report.json")).is_file());

    // The agents still serve: Bob's dashboard shows the negotiated protocol with the routine his
    // programmer compiled from his LLM's tool calls, and routine-answered requests; without the
    // token it shows nothing.
    let client = reqwest::Client::new();
    let page = |path: &str, token: Option<&str>| {
        let mut request = client.get(format!("{}{path}", run.bob_dashboard));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let hash = protocol["hash"].as_str().unwrap();
    let (status, protocols) = page("/protocols", Some(&run.admin_token)).await;
    assert_eq!(status, 200);
    assert!(protocols.contains(hash), "{protocols}");
    let (_, routines) = page("/routines", Some(&run.admin_token)).await;
    assert!(
        routines.contains("data-status=\"active\"") && routines.contains("<td>compiled</td>"),
        "an active compiled routine: {routines}"
    );
    let (_, overview) = page("", Some(&run.admin_token)).await;
    assert!(!overview.contains("· 0 routine ·"), "{overview}");
    let (status, refused) = page("/protocols", None).await;
    assert_eq!(status, 401);
    assert!(!refused.contains(hash));
}
