//! A stateful protocol with the real local model at the node boundary: the network demo's
//! restaurant3 (its description, its mock tools and the demo's SQLite `run_sql_query` over an
//! empty restaurant database, the node's default responder: code as action first) answers table
//! bookings with its LLM, each inserting a row; after the implementation threshold its
//! programmer compiles a routine from those answers with no LLM call, and the next booking is
//! answered by that routine with zero LLM calls and inserts the row the LLM would have: the same
//! columns, filled from the request the way the LLM filled them.
//!
//! The bookings are for days the restaurant opens. What the model did on the way to this test
//! (demo/network/RESULTS.md, "A booking compiled from the LLM's answers"): with restaurant3's
//! description but only the SQL tool, its programs looked the table up and replied `success`
//! with nothing inserted (code as action now sends such a program back, as the tool loop
//! does); for one booking on a Saturday its program inserted another hour than the request's,
//! which this test's row check catches.
//!
//! Ignored by plain `cargo test`: `scripts/test.sh` runs it with `AGORA_TEST_LLM_URL` (a
//! llama-server at temperature 0, fixed seed, one slot) and `AGORA_JS_ENGINE` set.

use std::sync::Arc;

use agora_network::judge::spec::{NETWORK_JSON, NetworkSpec, ToolSpecEntry};
use agora_network::service_db::{ServiceDatabase, ServiceTable};
use agora_network::tools::{MockKind, MockTool, SqlTool};
use agora_node::{Activation, Node, Tool, ToolSpec};
use agora_protocol::{ProtocolHash, Request, data_uri};
use agora_server::{RoutineRuntimeSettings, build_routine_engine};
use agora_store::{RequestPath, RoutineOrigin, RoutineStatus};
use agora_testkit::{NodeBuilder, temp_dir};
use serde_json::{Map, Value, json};

const BOOK_PD: &str = "---\nname: bookTable\ndescription: Book a table at the restaurant.\n\
                       multiround: false\n---\n\nThe request is a JSON object {\"fullName\": \
                       string, \"numPeople\": integer, \"date\": \"YYYY-MM-DD\", \"hour\": \
                       integer}. The reply is a JSON object {\"status\": \"success\" or \
                       \"failure\", \"error\": string (empty on success)}.\n";

/// restaurant3 of the network demo: its description and tools, its database in `dir`.
async fn restaurant3(dir: &std::path::Path) -> (String, Vec<Arc<dyn Tool>>, ServiceDatabase) {
    let spec: Arc<NetworkSpec> = Arc::new(serde_json::from_str(NETWORK_JSON).unwrap());
    let server = spec.servers.iter().find(|s| s.id == "restaurant3").unwrap();
    let schema = &spec.databases[server.database.as_deref().unwrap()];
    let tables: Vec<ServiceTable> = schema
        .tables
        .iter()
        .map(|(name, table)| ServiceTable {
            name: name.clone(),
            columns: table
                .columns
                .iter()
                .map(|(c, t)| (c.clone(), t.as_str().unwrap().to_string()))
                .collect(),
            constraints: table.constraints.clone(),
            rows: table.rows.clone(),
        })
        .collect();
    let database = ServiceDatabase::create(&dir.join("restaurant3.db"), &tables)
        .await
        .unwrap();
    let mut tools: Vec<Arc<dyn Tool>> = vec![Arc::new(SqlTool::new(database.clone(), schema))];
    for tool in &server.tools {
        let ToolSpecEntry::Mock {
            name,
            mock,
            description,
            input,
            output,
        } = tool
        else {
            panic!("restaurant3's tools are mocks");
        };
        let tool_spec = ToolSpec {
            name: name.clone(),
            description: description.clone(),
            parameters: input.clone(),
            returns: Some(output.clone()),
        };
        let kind = MockKind::parse(mock).unwrap();
        tools.push(Arc::new(MockTool::new(tool_spec, kind, 42, spec.clone())));
    }
    (server.description.clone(), tools, database)
}

fn request(booking: &Value) -> Request {
    Request::from_json(&json!({
        "protocolHash": ProtocolHash::of(BOOK_PD.as_bytes()).to_hex(),
        "protocolSources": [data_uri::encode(BOOK_PD)],
        "body": booking.to_string(),
    }))
    .unwrap()
}

async fn bookings(database: &ServiceDatabase) -> Vec<Map<String, Value>> {
    database
        .run(
            "SELECT Surname, NumPeople, Date, Hour FROM Bookings ORDER BY rowid",
            &[],
        )
        .await
        .unwrap()
}

/// How a row's `Surname` was written from the request's `fullName`: whole or its last word.
fn surname_rule(full_name: &str, surname: &str) -> &'static str {
    if surname == full_name {
        "the full name"
    } else if Some(surname) == full_name.split_whitespace().last() {
        "the last word"
    } else {
        "something else"
    }
}

/// The row a booking should insert, its `Surname` written by `rule`.
fn row_for(booking: &Value, rule: &str) -> Value {
    let full_name = booking["fullName"].as_str().unwrap();
    let surname = match rule {
        "the full name" => full_name,
        _ => full_name.split_whitespace().last().unwrap(),
    };
    json!({
        "Surname": surname,
        "NumPeople": booking["numPeople"],
        "Date": booking["date"],
        "Hour": booking["hour"],
    })
}

async fn node(dir: &std::path::Path, description: String, tools: Vec<Arc<dyn Tool>>) -> Node {
    let engine = build_routine_engine(
        &RoutineRuntimeSettings {
            artifact_dir: Some(dir.join("artifacts")),
            ..RoutineRuntimeSettings::default()
        },
        "sqlite://:memory:",
    )
    .unwrap();
    NodeBuilder::new(agora_testkit::local_llm(), dir)
        .config(|c| {
            c.name = "restaurant3".into();
            c.description = description;
            // The product's responder, as the network demo's servers have it (the testkit
            // turns code as action off for its scripted LLMs).
            c.responder = agora_node::ResponderConfig::default();
            c.thresholds.implementation = 3;
            c.programmer.activation = Activation::Auto;
        })
        .connected_tools(tools)
        .routine_engine(engine)
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_booking_is_compiled_into_a_routine_that_writes_the_llms_row() {
    let dir = temp_dir();
    let (description, tools, database) = restaurant3(dir.path()).await;
    let node = node(dir.path(), description, tools).await;
    let hash = ProtocolHash::of(BOOK_PD.as_bytes());

    let by_llm = [
        json!({"fullName": "Nina Jones", "numPeople": 3, "date": "2024-10-02", "hour": 19}),
        json!({"fullName": "Omar Haddad", "numPeople": 2, "date": "2024-10-05", "hour": 20}),
        json!({"fullName": "Lena Fischer", "numPeople": 5, "date": "2024-10-19", "hour": 19}),
    ];
    for booking in &by_llm {
        let reply = node.handle(request(booking)).await;
        let body = reply.body.as_ref().map(|b| b.to_text());
        eprintln!("LLM reply to {booking}: {body:?} {:?}", reply.error);
        let body: Value = serde_json::from_str(&body.expect("a reply body")).unwrap();
        assert_eq!(body["status"], "success", "{body}");
    }
    let requests = agora_testkit::recent_requests(&node, 3).await;
    assert!(
        requests.iter().all(|r| r.llm_calls > 0),
        "the LLM answered the first three: {requests:?}"
    );
    for example in node
        .store()
        .programming()
        .examples(&hash, 10)
        .await
        .unwrap()
    {
        eprintln!(
            "example: {} -> {}\n  tool calls: {}",
            example.body, example.reply, example.tool_calls
        );
    }
    let rows = bookings(&database).await;
    eprintln!("rows the LLM wrote: {rows:?}");
    assert_eq!(rows.len(), 3, "one row per booking: {rows:?}");
    let rule = surname_rule(
        by_llm[0]["fullName"].as_str().unwrap(),
        rows[0]["Surname"].as_str().unwrap(),
    );
    for (booking, row) in by_llm.iter().zip(&rows) {
        assert_eq!(
            Value::Object(row.clone()),
            row_for(booking, rule),
            "the LLM wrote each booking's row ({rule} as the surname)"
        );
    }

    node.programmer_idle().await;
    let attempts = agora_testkit::attempts(&node, &hash).await;
    for attempt in &attempts {
        eprintln!(
            "attempt {}: {} {}\n{}",
            attempt.attempt,
            attempt.outcome.as_str(),
            attempt.report,
            attempt.source.as_deref().unwrap_or("")
        );
    }
    let routine = node
        .store()
        .routines()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.protocol_hash == hash && r.status == RoutineStatus::Active)
        .expect("an active routine");
    assert_eq!(
        (routine.origin, routine.status),
        (RoutineOrigin::Compiled, RoutineStatus::Active)
    );
    let categories = agora_testkit::llm_categories(&node).await;
    assert!(
        !categories.iter().any(|c| c == "implementing"),
        "compiled with no programmer call: {categories:?}"
    );

    let calls_before = agora_testkit::llm_calls(&node).await.len();
    let next = json!({"fullName": "Ada Romano", "numPeople": 4, "date": "2024-12-01", "hour": 21});
    let reply = node.handle(request(&next)).await;
    let body: Value =
        serde_json::from_str(&reply.body.as_ref().expect("a reply body").to_text()).unwrap();
    assert_eq!(body["status"], "success", "{body}");
    assert_eq!(
        agora_testkit::llm_calls(&node).await.len(),
        calls_before,
        "no LLM call once the routine serves"
    );
    let served = agora_testkit::recent_requests(&node, 1).await;
    assert_eq!(
        (served[0].path, served[0].llm_calls),
        (RequestPath::Routine, 0)
    );
    let rows = bookings(&database).await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_eq!(
        Value::Object(rows[3].clone()),
        row_for(&next, rule),
        "the routine wrote the row as the LLM wrote its rows"
    );
}
