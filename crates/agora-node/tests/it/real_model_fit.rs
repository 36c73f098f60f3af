//! The whole protocol fit decision (the structural check, then the LLM) with the real local
//! model, on ten (protocol, task) pairs from the network demo: the tasks are the demo's
//! (`demo/network/network.json`), the protocols the ones negotiated in its committed run
//! (`tests/data/protocol-fit/`). Five pairs fit; five do not, among them the two mistakes of
//! that run (an `isOpen` protocol accepted for `getTemperature`, a `suggestRestaurant` one used
//! for `availableMovies`) and one that only the LLM can refuse (a taxi protocol names the
//! `address` and `status` a delivery request needs).
//!
//! Ignored by plain `cargo test`: `scripts/test.sh` starts llama-server (temperature 0, fixed
//! seed, one slot) and runs it with `AGORA_TEST_LLM_URL` set.

use agora_judge::spec::NetworkSpec;
use agora_node::{ProtocolFit, Task};
use agora_protocol::VerifiedDocument;
use agora_testkit::{NodeBuilder, local_llm, temp_dir};

const IS_OPEN: &str = include_str!("../data/protocol-fit/is-open.md");
const SUGGEST_RESTAURANT: &str = include_str!("../data/protocol-fit/suggest-restaurant.md");
const BOOK_ROOM: &str = include_str!("../data/protocol-fit/book-room.md");
const AVAILABLE_MOVIES: &str = include_str!("../data/protocol-fit/available-movies.md");
const TEMPERATURE_FORECAST: &str = include_str!("../data/protocol-fit/temperature-forecast.md");
const CALL_TAXI: &str = include_str!("../data/protocol-fit/call-taxi.md");

/// (protocol file, task, whether it fits).
const PAIRS: [(&str, &str, bool); 10] = [
    ("is-open", "isOpen", true),
    ("suggest-restaurant", "suggestRestaurant", true),
    ("book-room", "bookRoom", true),
    ("available-movies", "availableMovies", true),
    ("temperature-forecast", "getTemperature", true),
    ("is-open", "getTemperature", false),
    ("suggest-restaurant", "availableMovies", false),
    ("is-open", "bookTable", false),
    ("book-room", "rentSki", false),
    ("call-taxi", "requestDeliveryDriver", false),
];

/// The protocol in `tests/data/protocol-fit/<file>.md`.
fn protocol(file: &str) -> &'static str {
    match file {
        "is-open" => IS_OPEN,
        "suggest-restaurant" => SUGGEST_RESTAURANT,
        "book-room" => BOOK_ROOM,
        "available-movies" => AVAILABLE_MOVIES,
        "temperature-forecast" => TEMPERATURE_FORECAST,
        "call-taxi" => CALL_TAXI,
        other => panic!("no protocol file {other}"),
    }
}

fn task(spec: &NetworkSpec, name: &str) -> Task {
    let task = spec.task_spec(name).unwrap();
    Task {
        name: name.to_string(),
        description: task.description.clone(),
        input_schema: task.input.clone(),
        output_schema: task.output.clone(),
    }
}

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_decides_which_network_protocols_fit_which_tasks() {
    let dir = temp_dir();
    let node = NodeBuilder::new(local_llm(), dir.path()).build().await;
    let spec = NetworkSpec::embedded().unwrap();
    let mut wrong = Vec::new();
    let mut asked = 0;
    for (file, name, expected) in PAIRS {
        let fit = node
            .protocol_fit(
                &task(&spec, name),
                &VerifiedDocument::from_text(protocol(file)),
            )
            .await
            .unwrap();
        asked += usize::from(!matches!(fit, ProtocolFit::MissingFields(_)));
        let right = fit.fits() == expected;
        eprintln!(
            "{file} for {name}: {fit:?} ({})",
            if right { "right" } else { "WRONG" }
        );
        if !right {
            wrong.push(format!("{file} for {name}: {fit:?}"));
        }
    }
    assert!(wrong.is_empty(), "wrong decisions: {wrong:#?}");
    // The LLM was asked only about the pairs whose protocol names every field of the task.
    let calls = agora_testkit::llm_calls(&node).await;
    assert_eq!(calls.len(), asked);
    assert!(calls.iter().all(|call| call.category == "checking"));
}
