#![allow(clippy::unwrap_used)] // tests fail loudly by design

//! A scaled-down network replay, deterministic: three servers (a weather service, a ski resort
//! whose `getTemperature` tool goes through its helper to the weather service, a cinema with
//! its SQL database), three users on three protocol databases peered in a line, a scripted LLM
//! playing every role and a scripted routine engine.
//!
//! The scripted roles are consistent so that routines pass their examinations:
//! - senders write `Please do the task T. Data: {data}` in natural language and the data itself
//!   as the body under a protocol; they read a reply's `answer` member (or, in natural language,
//!   a minimal instance of the output schema, which is what `answer` holds);
//! - the senders' LLMs negotiate, and negotiated protocols carry a
//!   `REPLY-ANSWER: {minimal output}` line (and `TASK-NAME:`, which
//!   the scripted protocol fit check looks for) and name the task's fields (which the node's
//!   structural fit check looks for);
//! - servers call the tool that fits the data best (once), then answer a string in natural
//!   language or `{"answer": REPLY-ANSWER, "toolResult": result}` under a protocol;
//! - the receiver programmer registers a routine doing the same with the node's tools; the sender
//!   programmer answers the one codec routine (encode: the data; decode: the reply's `answer`).
//!
//! The run is recorded to a cassette and replayed: same per-query numbers, no scripted call.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use agora_llm::{ChatRequest, Llm, OutputFormat, RecordingLlm, ReplayLlm, Role};
use agora_network::run::{RunOptions, run_screenplay};
use agora_network::spec::{Entry, NETWORK_JSON, NetworkSpec, parse_screenplay};
use agora_network::{CallTotals, Mode, RunRecord, ServerSetup};
use agora_node::{ResponderConfig, RoutineEngine, RoutineError, ToolHost};
use agora_testkit::{
    ScriptedLlm, ScriptedRoutineEngine, last_user_message, schema_name, system_prompt,
};
use serde_json::{Value, json};

/// The network: the embedded network's tasks, databases and menus, our own agents.
fn network() -> NetworkSpec {
    let embedded: Value = serde_json::from_str(NETWORK_JSON).unwrap();
    let weather_tool = embedded["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "weatherServer")
        .unwrap()["tools"]
        .clone();
    let spec = json!({
        "today": embedded["today"],
        "menus": embedded["menus"],
        "tasks": embedded["tasks"],
        "databases": embedded["databases"],
        "servers": [
            {"id": "weatherServer", "model": "gpt-4o", "description": "A weather service.",
             "database": null, "tools": weather_tool, "tasks": ["queryWeather"],
             "protocolDb": "protocolDb2"},
            {"id": "skiResort1", "model": "llama3-405b",
             "description": "A ski resort that rents skis when the temperature allows.",
             "database": "skiResort",
             "tools": [{"name": "getTemperature", "external": "weatherServer",
                        "task": "getTemperature"}],
             "tasks": ["rentSki"], "protocolDb": "protocolDb1"},
            {"id": "cinema1", "model": "gemini-1.5-pro", "description": "A cinema.",
             "database": "cinema", "tools": [], "tasks": ["availableMovies"],
             "protocolDb": "protocolDb3"}
        ],
        "users": [
            {"id": "alice", "model": "gpt-4o", "protocolDb": "protocolDb1"},
            {"id": "bob", "model": "gpt-4o-mini", "protocolDb": "protocolDb2"},
            {"id": "carol", "model": "gemini-1.5-pro", "protocolDb": "protocolDb3"}
        ],
        "protocolDbs": [
            {"id": "protocolDb1", "peers": ["protocolDb2"]},
            {"id": "protocolDb2", "peers": ["protocolDb1", "protocolDb3"]},
            {"id": "protocolDb3", "peers": ["protocolDb2"]}
        ]
    });
    NetworkSpec::parse(&spec.to_string()).unwrap()
}

const SKI_TYPES: [&str; 3] = ["racing", "carving", "backcountry"];

/// Alice rents skis 8 times (the ladder climbs to routines on every side), with a cinema query
/// and syncs in between; then Bob (another protocol database) rents skis 4 times and Carol asks
/// the cinema twice more.
fn screenplay() -> Vec<Value> {
    let ski = |user: &str, day: usize| {
        json!([user, ["skiResort1", "rentSki"],
            {"date": format!("2024-01-{:02}", day + 1), "type": SKI_TYPES[day % 3]}])
    };
    let cinema = |day: usize| json!(["carol", ["cinema1", "availableMovies"], {"date": format!("2024-02-{:02}", day + 1)}]);
    let sync = |db: &str| json!([db, [null, "synchronization"], null]);
    let mut entries = Vec::new();
    for day in 0..5 {
        entries.push(ski("alice", day));
    }
    entries.push(cinema(0));
    entries.push(sync("protocolDb1"));
    for day in 5..8 {
        entries.push(ski("alice", day));
    }
    entries.push(sync("protocolDb2"));
    for day in 0..4 {
        entries.push(ski("bob", 10 + day));
    }
    entries.push(cinema(1));
    entries.push(cinema(2));
    entries
}

/// A minimal instance of a JSON Schema: required properties only, first enum values, zeros.
fn minimal(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("object") => {
            let mut object = serde_json::Map::new();
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap();
                object.insert(name.to_string(), minimal(&schema["properties"][name]));
            }
            Value::Object(object)
        }
        Some("array") => json!([]),
        Some("string") => json!(""),
        Some("number") | Some("integer") => json!(0),
        Some("boolean") => json!(false),
        _ => Value::Null,
    }
}

/// The JSON after `marker` up to the end of its line.
fn json_after(text: &str, marker: &str) -> Option<Value> {
    let start = text.find(marker)? + marker.len();
    let line = text[start..].lines().next()?;
    serde_json::from_str(line.trim()).ok()
}

/// The protocol document inside a prompt.
fn document_in(text: &str) -> Option<&str> {
    let start = text.find("Protocol document:\n<<<\n")?;
    let rest = &text[start..];
    Some(&rest[..rest.find("\n>>>").unwrap_or(rest.len())])
}

/// The tool a server calls for `data`: the one with the most required arguments the data gives
/// (at least one; never SQL), with the data's values and minimal values for the rest.
fn choose_tool(tools: &[(String, Value)], data: &Value) -> Option<(String, Value)> {
    let mut best: Option<(usize, &String, &Value)> = None;
    for (name, parameters) in tools {
        if name == "run_sql_query" {
            continue;
        }
        let given = parameters["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| data.get(r.as_str().unwrap()).is_some())
            .count();
        if given > 0 && best.is_none_or(|(score, _, _)| given > score) {
            best = Some((given, name, parameters));
        }
    }
    let (_, name, parameters) = best?;
    let required: Vec<&str> = parameters["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut arguments = serde_json::Map::new();
    for (key, property) in parameters["properties"].as_object().into_iter().flatten() {
        if let Some(value) = data.get(key) {
            arguments.insert(key.clone(), value.clone());
        } else if required.contains(&key.as_str()) {
            arguments.insert(key.clone(), minimal(property));
        }
    }
    Some((name.clone(), Value::Object(arguments)))
}

/// The tools listed in a programmer prompt's catalogue (`- name: description` then
/// `  arguments: {schema}`).
fn catalogue_tools(text: &str) -> Vec<(String, Value)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut tools = Vec::new();
    for pair in lines.windows(2) {
        if let (Some(head), Some(arguments)) = (
            pair[0].strip_prefix("- "),
            pair[1].strip_prefix("  arguments: "),
        ) {
            let name = head.split(": ").next().unwrap().to_string();
            tools.push((name, serde_json::from_str(arguments).unwrap()));
        }
    }
    tools
}

/// The server's answer under a protocol: the document's answer, with each member that the tool
/// result also has taken from the tool (a grounded answer: the node learns only from those).
fn protocol_reply(answer: &Value, tool_result: Option<Value>) -> Value {
    let mut answer = answer.clone();
    if let (Some(members), Some(Value::Object(result))) = (answer.as_object_mut(), &tool_result) {
        for (key, value) in members.iter_mut() {
            if let Some(found) = result.get(key) {
                *value = found.clone();
            }
        }
    }
    json!({"answer": answer, "toolResult": tool_result})
}

/// The sender routine every sender programmer writes.
const SENDER_CODEC: &str = "sender-codec";

fn sender_codec(input: String) -> Result<String, RoutineError> {
    let input: Value = serde_json::from_str(&input).unwrap();
    if input["op"] == "encode" {
        return Ok(input["data"].to_string());
    }
    let reply: Value = serde_json::from_str(input["reply"].as_str().unwrap())
        .map_err(|e| RoutineError::Failed(e.to_string()))?;
    Ok(reply["answer"].to_string())
}

/// Registers the receiver routine for a protocol answering `answer` with `tools`; returns its
/// key (the "source" the programmer answers with).
fn register_server_routine(
    engine: &ScriptedRoutineEngine,
    answer: Value,
    tools: Vec<(String, Value)>,
) -> String {
    let mut hasher = DefaultHasher::new();
    answer.to_string().hash(&mut hasher);
    serde_json::to_string(&tools).unwrap().hash(&mut hasher);
    let key = format!("server-{:016x}", hasher.finish());
    let answer = Arc::new(answer);
    let tools = Arc::new(tools);
    let _ = engine
        .clone()
        .routine(&key, move |body, host: Arc<dyn ToolHost>| {
            let (answer, tools) = (answer.clone(), tools.clone());
            async move {
                let data: Value = serde_json::from_str(&body)
                    .map_err(|e| RoutineError::Failed(format!("not JSON: {e}")))?;
                let result = match choose_tool(&tools, &data) {
                    Some((name, arguments)) => {
                        let text = host
                            .call_tool(&name, &arguments.to_string())
                            .await
                            .map_err(RoutineError::Failed)?;
                        Some(serde_json::from_str(&text).unwrap())
                    }
                    None => None,
                };
                Ok(protocol_reply(&answer, result).to_string())
            }
        });
    key
}

/// The one scripted LLM: every role of every agent.
fn scripted_llm(engine: ScriptedRoutineEngine) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(move |request: &ChatRequest| {
        let system = system_prompt(request);
        let user = last_user_message(request);
        let first_user = request
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or("");
        Ok(match schema_name(request) {
            // The sender programmer.
            None if system.contains("handle(input)") => {
                format!("```javascript\n{SENDER_CODEC}\n```")
            }
            // The receiver programmer.
            None if system.contains("handle(body)") => {
                let document = document_in(user).unwrap();
                let answer = json_after(document, "REPLY-ANSWER: ").unwrap();
                let key = register_server_routine(&engine, answer, catalogue_tools(user));
                format!("```javascript\n{key}\n```")
            }
            // A natural-language request.
            None if system.contains("You write messages") => {
                let task = user.lines().next().unwrap().trim_start_matches("Task: ");
                let task = task.split(':').next().unwrap();
                let data = json_after(user, "Data: ").unwrap();
                format!("Please do the task {task}. Data: {data}")
            }
            // A body under a protocol: the data.
            None if system.contains("You write request bodies") => {
                json_after(user, "Data: ").unwrap().to_string()
            }
            None => panic!("unexpected free-text request: {system}"),
            Some("task_output") => {
                let reply = user.split("\nReply: ").nth(1).unwrap_or("");
                match serde_json::from_str::<Value>(reply) {
                    Ok(reply) if reply.get("answer").is_some() => reply["answer"].to_string(),
                    _ => {
                        let OutputFormat::JsonSchema { schema, .. } = &request.format else {
                            unreachable!()
                        };
                        minimal(schema).to_string()
                    }
                }
            }
            Some("task_fit") => {
                let task = user.lines().next().unwrap().trim_start_matches("Task: ");
                let task = task.split(':').next().unwrap();
                let fits = document_in(user)
                    .unwrap()
                    .contains(&format!("TASK-NAME: {task}\n"));
                json!({"suitable": if fits { "yes" } else { "no" }, "reason": "by task name"})
                    .to_string()
            }
            Some("negotiation_turn") if user.contains("The receiver answered") => {
                let task = first_user
                    .lines()
                    .next()
                    .unwrap()
                    .trim_start_matches("Task: ");
                let task = task.split(':').next().unwrap().to_string();
                let output = &first_user[first_user.find("Output (JSON Schema):\n").unwrap()
                    + "Output (JSON Schema):\n".len()..];
                let output: Value =
                    serde_json::from_str(output.split("\n\n").next().unwrap()).unwrap();
                let answer = minimal(&output);
                let input = &first_user[first_user.find("Input (JSON Schema):\n").unwrap()
                    + "Input (JSON Schema):\n".len()..];
                let input: Value =
                    serde_json::from_str(input.split("\nOutput (JSON Schema):").next().unwrap())
                        .unwrap();
                let fields = |schema: &Value| {
                    schema["properties"]
                        .as_object()
                        .map(|p| p.keys().cloned().collect::<Vec<_>>().join(", "))
                        .unwrap_or_default()
                };
                let (inputs, outputs) = (fields(&input), fields(&output));
                let document = format!(
                    "TASK-NAME: {task}\nREPLY-ANSWER: {answer}\n\nRequest: the task's data as a \
                     JSON object ({inputs}).\nReply: {{\"answer\": REPLY-ANSWER ({outputs}), \
                     \"toolResult\": the result of the receiver's tool, or null}}.\n"
                );
                json!({"message": "Final.", "final_protocol": {
                    "name": format!("{task}Protocol"),
                    "description": format!("The {task} task."),
                    "document": document,
                }})
                .to_string()
            }
            Some("negotiation_turn") => {
                json!({"message": "I propose: the data as JSON; the reply gives the answer.",
                       "final_protocol": null})
                .to_string()
            }
            Some("negotiation_reply") => {
                json!({"verdict": "agree", "message": "Agreed."}).to_string()
            }
            Some("suitability") => json!({"suitable": "yes", "reason": "ok"}).to_string(),
            Some("step") => {
                let OutputFormat::JsonSchema { schema, .. } = &request.format else {
                    unreachable!()
                };
                let tools: Vec<(String, Value)> = schema["anyOf"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|variant| {
                        let name = variant["properties"]["tool"]["enum"][0].as_str()?;
                        (name != "final_answer")
                            .then(|| (name.to_string(), variant["properties"]["arguments"].clone()))
                    })
                    .collect();
                let document = document_in(system);
                let data = match document {
                    Some(_) => {
                        serde_json::from_str(first_user.strip_prefix("Request body:\n").unwrap())
                            .unwrap()
                    }
                    None => json_after(first_user, "Data: ").unwrap_or(Value::Null),
                };
                let results: Vec<&str> = request
                    .messages
                    .iter()
                    .filter(|m| m.role == Role::User)
                    .filter_map(|m| m.content.split_once("Result of ").map(|(_, r)| r))
                    .collect();
                let called = request.messages.iter().any(|m| m.role == Role::Assistant);
                if !called && let Some((tool, arguments)) = choose_tool(&tools, &data) {
                    return Ok(json!({"tool": tool, "arguments": arguments}).to_string());
                }
                let result: Option<Value> = results
                    .last()
                    .and_then(|r| r.split_once(": "))
                    .and_then(|(_, json)| serde_json::from_str(json).ok());
                let answer = match document {
                    Some(document) => {
                        protocol_reply(&json_after(document, "REPLY-ANSWER: ").unwrap(), result)
                    }
                    None => json!(format!("Done. Result: {}", result.unwrap_or(Value::Null))),
                };
                json!({"tool": "final_answer", "answer": answer}).to_string()
            }
            other => panic!("unexpected LLM request {other:?}"),
        })
    })
}

fn engine() -> ScriptedRoutineEngine {
    ScriptedRoutineEngine::new()
        .routine(SENDER_CODEC, |input, _| async move { sender_codec(input) })
}

async fn run(
    llm: Arc<dyn Llm>,
    engine: &ScriptedRoutineEngine,
    dir: &std::path::Path,
    description: &str,
) -> RunRecord {
    let entries = parse_screenplay(&Value::from(screenplay()).to_string()).unwrap();
    let routine_engine: Arc<dyn RoutineEngine> = Arc::new(engine.clone());
    let checkpoints: Arc<std::sync::Mutex<Vec<RunRecord>>> = Arc::default();
    let kept = checkpoints.clone();
    let run = run_screenplay(
        Arc::new(network()),
        &entries,
        llm,
        Some(routine_engine),
        RunOptions {
            queries: usize::MAX,
            sample: None,
            mode: Mode::Agora,
            dir: dir.join("network"),
            seed: 7,
            query_timeout: Duration::from_secs(60),
            llm_description: description.into(),
            progress: false,
            native_tools: false,
            // The scripted LLM plays the tool loop, not code as action.
            setup: ServerSetup {
                responder: ResponderConfig {
                    code_as_action: false,
                    ..ResponderConfig::default()
                },
                ..ServerSetup::default()
            },
            halt: None,
            checkpoint: Some(Arc::new(move |so_far: &RunRecord| {
                kept.lock().unwrap().push(so_far.clone());
                Ok(())
            })),
        },
    )
    .await
    .unwrap();
    // A checkpoint at every sync, each the record of the queries done by then.
    let checkpoints = checkpoints.lock().unwrap();
    let syncs = entries
        .iter()
        .filter(|entry| matches!(entry, Entry::Sync(_)))
        .count();
    assert_eq!(checkpoints.len(), syncs);
    for checkpoint in checkpoints.iter() {
        let done = checkpoint.queries.len();
        assert!(done > 0 && done <= run.queries.len());
        assert_eq!(
            serde_json::to_value(&checkpoint.queries).unwrap(),
            serde_json::to_value(&run.queries[..done]).unwrap()
        );
        assert_eq!(
            checkpoint.totals.calls,
            sum(run.queries[..done].iter().map(|q| &q.llm)).calls
        );
    }
    run
}

fn sum<'a>(items: impl Iterator<Item = &'a CallTotals>) -> CallTotals {
    let mut total = CallTotals::default();
    for item in items {
        total.add(item);
    }
    total
}

/// Equal counts, and costs equal up to the rounding of summing in another order.
fn assert_same(a: &CallTotals, b: &CallTotals, what: &str) {
    assert_eq!(
        (a.calls, a.prompt_tokens, a.completion_tokens, a.latency_ms),
        (b.calls, b.prompt_tokens, b.completion_tokens, b.latency_ms),
        "{what}"
    );
    assert!(
        (a.cost_usd - b.cost_usd).abs() < 1e-9,
        "{what}: {a:?} vs {b:?}"
    );
}

fn describe(record: &RunRecord) -> String {
    record
        .queries
        .iter()
        .map(|q| {
            format!(
                "#{} {}→{} {} {} calls={} {:?} {}\n",
                q.index,
                q.user,
                q.server,
                q.task,
                q.path,
                q.llm.calls,
                q.by_category.keys().collect::<Vec<_>>(),
                q.error.as_deref().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaled_network_climbs_the_ladder_adds_up_and_replays_from_a_cassette() {
    let cassettes = tempfile::tempdir().unwrap();
    let cassette = cassettes.path().join("scaled.jsonl");
    let engine = engine();
    let scripted = scripted_llm(engine.clone());

    // Recorded run.
    let recording: Arc<dyn Llm> =
        Arc::new(RecordingLlm::open(&cassette, scripted.clone()).unwrap());
    let first_dir = tempfile::tempdir().unwrap();
    let recorded = run(recording, &engine, first_dir.path(), "scripted, recorded").await;
    let table = describe(&recorded);

    // Every query succeeded.
    assert_eq!(recorded.queries.len(), 15, "{table}");
    assert_eq!(recorded.successes(), 15, "{table}");

    // (a) The ladder: Alice's rentSki runs go natural → protocol → routine.
    let alice: Vec<_> = recorded
        .queries
        .iter()
        .filter(|q| q.user == "alice")
        .collect();
    let paths: Vec<&str> = alice.iter().map(|q| q.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "natural", "natural", "natural", "natural", "protocol", "routine", "routine", "routine"
        ],
        "{table}"
    );
    for query in &alice[5..] {
        assert!(query.routine_only(), "{table}");
    }
    // The negotiating query negotiated (on both the user's and the helper's side).
    assert!(alice[4].by_category.contains_key("negotiation"), "{table}");
    assert!(alice[4].by_category.contains_key("implementing"), "{table}");
    let network = &recorded.network;
    assert_eq!(
        network.negotiations, 2,
        "alice and the ski resort's helper: {network:?}"
    );
    assert_eq!(
        network.server_routines, 2,
        "ski resort and weather: {network:?}"
    );
    assert!(
        network.sender_routines >= 3,
        "alice, helper, bob: {network:?}"
    );
    // Bob found Alice's protocol (through his protocol database or the resort's listing) and
    // ends on routines too, with no negotiation of his own.
    let bob: Vec<_> = recorded
        .queries
        .iter()
        .filter(|q| q.user == "bob")
        .collect();
    assert_eq!(bob[0].path, "natural", "{table}");
    assert_eq!(bob.last().unwrap().path, "routine", "{table}");
    assert!(bob.last().unwrap().routine_only(), "{table}");
    assert!(
        bob.iter()
            .all(|q| !q.by_category.contains_key("negotiation")),
        "{table}"
    );
    // The two negotiated protocols were published to protocolDb1 and synced down the line.
    let per_db = &network.protocols_per_db;
    assert_eq!(per_db["protocolDb1"], 2, "{per_db:?}");
    assert_eq!(per_db["protocolDb2"], 2, "{per_db:?}");
    assert_eq!(per_db["protocolDb3"], 2, "{per_db:?}");

    // (b) The numbers add up.
    let from_queries = sum(recorded.queries.iter().map(|q| &q.llm));
    assert_same(&recorded.totals, &from_queries, "totals");
    assert_same(
        &sum(recorded.by_category.values()),
        &recorded.totals,
        "categories",
    );
    for query in &recorded.queries {
        assert_same(
            &sum(query.by_category.values()),
            &query.llm,
            &format!("#{}", query.index),
        );
    }
    assert_eq!(recorded.totals.calls as usize, scripted.call_count());
    let lines = std::fs::read_to_string(&cassette).unwrap().lines().count();
    assert_eq!(lines, scripted.call_count());
    assert!(recorded.totals.cost_usd > 0.0);

    // (c) Replay from the cassette, on a fresh network: the same numbers, no scripted call.
    let calls_before = scripted.call_count();
    let replay = Arc::new(ReplayLlm::open(&cassette).unwrap());
    let second_dir = tempfile::tempdir().unwrap();
    let replayed = run(replay.clone(), &engine, second_dir.path(), "replayed").await;
    assert_eq!(scripted.call_count(), calls_before);
    assert_eq!(replay.remaining(), 0, "every recorded answer was used");
    let strip = |record: &RunRecord| -> Vec<_> {
        record
            .queries
            .iter()
            .map(|q| {
                (
                    q.index,
                    q.success,
                    q.path.clone(),
                    q.llm.clone(),
                    q.by_category.clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        strip(&replayed),
        strip(&recorded),
        "{}",
        describe(&replayed)
    );
    assert_eq!(replayed.totals, recorded.totals);
    assert_eq!(replayed.by_category, recorded.by_category);
    assert_eq!(replayed.network, recorded.network);
}
