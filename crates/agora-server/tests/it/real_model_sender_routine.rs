//! A sender-side routine written by the real local model, end to end over loopback HTTP: Bob
//! serves the weather protocol with the shipped JavaScript routine (no LLM on his side); Alice
//! sends two weather tasks under the protocol with her LLM, which become her examples; the model
//! then writes a sender routine (encode the data into the body, decode the reply into the task's
//! output), built by the real WebAssembly runtime and examined on those runs; then Alice's next
//! runs go through that routine with no LLM call.
//!
//! Ignored by plain `cargo test`: `scripts/test.sh` starts llama-server (temperature 0, fixed
//! seed, one slot) and runs it with `AGORA_TEST_LLM_URL` and `AGORA_JS_ENGINE` set.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Instant;

use crate::fixtures::{
    expected_forecast, forecast_output, js_runtime, print_attempts, weather_task,
};
use crate::support::Spawn;
use agora_node::Task;
use agora_protocol::data_uri;
use agora_store::SenderMemory;
use agora_testkit::{NodeBuilder, ScriptedLlm, human_routine, temp_dir, weather_tool};
use serde_json::json;

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");
const WEATHER_JS: &str = include_str!("../../../../routines/weather-forecast/routine.js");

fn task() -> Task {
    weather_task(forecast_output())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_writes_a_weather_sender_routine_that_passes_its_examination() {
    let (a, b) = (temp_dir(), temp_dir());
    let runtime = Arc::new(js_runtime());
    let bob = NodeBuilder::new(ScriptedLlm::unreachable(), b.path())
        .config(|c| c.tools = vec![weather_tool()])
        .routine_engine(runtime.clone())
        .spawn()
        .await;
    bob.node
        .add_routine(human_routine(
            "weather-forecast",
            WEATHER_PD,
            WEATHER_JS,
            &["weather_forecast"],
        ))
        .await
        .unwrap();

    let alice = NodeBuilder::new(agora_testkit::local_llm(), a.path())
        .config(|c| c.sender.sender_routine_threshold = 2)
        .routine_engine(runtime)
        .build()
        .await;
    let document = alice.add_document(WEATHER_PD, &[]).await.unwrap();
    let sources = vec![data_uri::encode(WEATHER_PD)];
    for (location, date) in [("London, UK", "2025-01-03"), ("Tokyo, Japan", "2025-02-08")] {
        let data = json!({"location": location, "date": date});
        let outcome = alice
            .send(&bob.url, &task(), &data, Some((&document, &sources)))
            .await
            .unwrap();
        eprintln!("LLM run for {location}: {}", outcome.output);
    }
    let started = Instant::now();
    alice.sender_routines_idle().await;
    let attempts = alice.store().sender().sender_attempts().await.unwrap();
    print_attempts("sender programmer", &attempts, started);
    assert!(
        attempts.iter().any(|a| a.outcome.as_str() == "passed"),
        "a candidate passed its examination"
    );

    // The protocol is in use for (Bob, weather): the ladder sends with the routine alone.
    alice
        .store()
        .sender()
        .put_sender_memory(&SenderMemory {
            target: bob.url.clone(),
            task: "weather".into(),
            uses: 2,
            protocol_hash: Some(document.hash()),
            protocol_sources: sources.clone(),
            explored: true,
            next_negotiation_at: 100,
            ..SenderMemory::default()
        })
        .await
        .unwrap();
    let calls_before = agora_testkit::llm_calls(&alice).await.len();
    for (location, date) in [
        ("Berlin, Germany", "2025-03-10"),
        ("Lima, Peru", "2025-07-04"),
    ] {
        let data = json!({"location": location, "date": date});
        let run = alice.run_task(&bob.url, &task(), &data).await.unwrap();
        assert_eq!(run.outcome.llm_calls, 0);
        // As numbers: the routine may give 0 where the tool said 0.0.
        let (got, want) = (&run.outcome.output, expected_forecast(location, date));
        for field in ["temperature", "precipitation"] {
            assert_eq!(got[field].as_f64(), want[field].as_f64(), "{got} vs {want}");
        }
        assert_eq!(got["weatherCondition"], want["weatherCondition"]);
    }
    assert_eq!(
        agora_testkit::llm_calls(&alice).await.len(),
        calls_before,
        "no LLM call once the sender routine serves"
    );
    let runs = agora_testkit::sender_runs(&alice, &bob.url, "weather", 2).await;
    assert!(runs.iter().all(|r| r.rung == "routine"), "{runs:?}");
}
