//! The sender's protocol fit decision at the node boundary, with a scripted LLM that says yes
//! to everything: a protocol that does not name the task's fields is refused before the LLM is
//! asked; one that names them is the LLM's to decide.

use agora_llm::ChatRequest;
use agora_node::{ProtocolFit, Task};
use agora_protocol::VerifiedDocument;
use agora_testkit::{NodeBuilder, ScriptedLlm, schema_name, temp_dir};
use serde_json::json;

const IS_OPEN: &str = include_str!("../data/protocol-fit/is-open.md");
const TEMPERATURE_FORECAST: &str = include_str!("../data/protocol-fit/temperature-forecast.md");

fn get_temperature() -> Task {
    serde_json::from_value(json!({
        "name": "getTemperature",
        "description": "A tool to get the temperature forecast for a given day",
        "inputSchema": {"type": "object", "required": ["date", "location"],
            "properties": {"location": {"type": "string"}, "date": {"type": "string"}}},
        "outputSchema": {"type": "object", "required": ["temperature"],
            "properties": {"temperature": {"type": "number"}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_protocol_of_another_task_is_refused_without_asking_the_llm() {
    let llm = ScriptedLlm::new(|request: &ChatRequest| match schema_name(request) {
        Some("task_fit") => Ok(json!({"protocol_job": "forecasts", "task_job": "forecasts",
            "suitable": "yes"})
        .to_string()),
        other => panic!("unexpected LLM request {other:?}"),
    });
    let dir = temp_dir();
    let node = NodeBuilder::new(llm.clone(), dir.path()).build().await;

    // The fit of the protocol `text` for the temperature task.
    let fit = async |text: &str| {
        let document = VerifiedDocument::from_text(text);
        node.protocol_fit(&get_temperature(), &document)
            .await
            .unwrap()
    };
    assert_eq!(
        fit(IS_OPEN).await,
        ProtocolFit::MissingFields(vec!["location".into(), "temperature".into()])
    );
    assert_eq!(llm.call_count(), 0);

    assert_eq!(
        fit(TEMPERATURE_FORECAST).await,
        ProtocolFit::Fits {
            reason: "protocol: forecasts; task: forecasts".into()
        }
    );
    let calls = agora_testkit::llm_calls(&node).await;
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].category, "checking");
}
