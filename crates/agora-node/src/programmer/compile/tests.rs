//! The compiler on examples recorded from the network demo's baseline (`tests/data/compiler/`,
//! each case's `examples.json` and `document.md`), and on small made-up ones. Each recorded
//! case's program is kept in the case's `compiled.js`; `UPDATE_EXPECT=1` writes it anew.

use serde_json::{Value, json};

use super::*;
use crate::programmer::exam::recorded_calls;

struct Case {
    document: String,
    examples: Vec<(String, Value, String)>,
}

fn data(case: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/compiler")
        .join(case)
}

fn case(name: &str) -> Case {
    let dir = data(name);
    let document =
        std::fs::read_to_string(dir.join("document.md")).expect("the case has a document");
    let examples: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("examples.json")).expect("the case has examples"),
    )
    .expect("examples.json is JSON");
    Case {
        document,
        examples: examples
            .into_iter()
            .map(|e| {
                (
                    e["body"].as_str().unwrap_or_default().to_string(),
                    e["tool_calls"].clone(),
                    e["reply"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
    }
}

fn run(document: &str, examples: &[(String, Value, String)]) -> Result<Compiled, NotCompiled> {
    let inputs: Vec<Example<'_>> = examples
        .iter()
        .map(|(body, calls, reply)| Example {
            body,
            calls: recorded_calls(calls),
            reply,
        })
        .collect();
    compile(&inputs, document)
}

/// The case's program, checked against (or, with `UPDATE_EXPECT=1`, written to) `compiled.js`.
fn expect(name: &str, compiled: &Compiled) {
    let path = data(name).join("compiled.js");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &compiled.source).expect("compiled.js can be written");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        compiled.source, expected,
        "{name}: the program changed (UPDATE_EXPECT=1 writes it)"
    );
}

#[test]
fn recorded_cases_compile_to_their_programs() {
    for name in ["rent-ski", "call-taxi", "order-everything", "send-driver"] {
        let case = case(name);
        let compiled =
            run(&case.document, &case.examples).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("== {name}: {}\n{}", compiled.summary(), compiled.source);
        expect(name, &compiled);
    }
}

fn example(body: Value, calls: Value, reply: Value) -> (String, Value, String) {
    (body.to_string(), calls, reply.to_string())
}

const BOOKING: &str =
    "request: {date: string, name: string}; reply: {status: 'success' or 'failure'}";

#[test]
fn straight_line_examples_merge_into_one_program() {
    let examples = [
        example(
            json!({"date": "2024-03-01", "name": "Ada"}),
            json!([
                {"tool": "sql", "arguments": {"query": "SELECT id FROM Rooms WHERE free = 1 LIMIT 1"}, "result": [{"id": 4}]},
                {"tool": "sql", "arguments": {"query": "INSERT INTO Bookings VALUES (4, '2024-03-01', 'Ada')"}, "result": [{"changes": 1}]}
            ]),
            json!({"status": "success", "room": 4}),
        ),
        example(
            json!({"date": "2024-05-09", "name": "Bob"}),
            json!([
                {"tool": "sql", "arguments": {"query": "SELECT id FROM Rooms WHERE free = 1 LIMIT 1"}, "result": [{"id": 7}]},
                {"tool": "sql", "arguments": {"query": "INSERT INTO Bookings VALUES (7, '2024-05-09', 'Bob')"}, "result": [{"changes": 1}]}
            ]),
            json!({"status": "success", "room": 7}),
        ),
    ];
    let compiled = run(BOOKING, &examples).unwrap();
    assert_eq!(compiled.examined, [0, 1], "{}", compiled.summary());
    assert!(compiled.left_out.is_empty());
    assert!(!compiled.constant);
    let source = &compiled.source;
    assert!(
        source.contains(
            "const r2 = need(\"sql\", { query: `INSERT INTO Bookings VALUES (${r1[0].id}, '${request.date}', '${request.name}')` });"
        ),
        "{source}"
    );
    assert!(
        source.contains("return { status: \"success\", room: r1[0].id };"),
        "{source}"
    );
    assert!(
        source.contains("// Step 2: sql, as in examples 1, 2."),
        "{source}"
    );
    // The room found must be found again: an empty result is not covered.
    assert!(source.contains("if (isEmpty(r1)) uncovered("), "{source}");
}

#[test]
fn calls_that_differ_after_an_empty_result_become_a_branch() {
    let lookup = |date: &str, rows: Value| json!({"tool": "sql", "arguments": {"query": format!("SELECT id FROM Rooms WHERE id NOT IN (SELECT room FROM Bookings WHERE date = '{date}') LIMIT 1")}, "result": rows});
    let examples = [
        example(
            json!({"date": "2024-03-01", "name": "Ada"}),
            json!([
                lookup("2024-03-01", json!([{"id": 4}])),
                {"tool": "sql", "arguments": {"query": "INSERT INTO Bookings VALUES (4, '2024-03-01')"}, "result": [{"changes": 1}]}
            ]),
            json!({"status": "success"}),
        ),
        example(
            json!({"date": "2024-03-02", "name": "Bob"}),
            json!([lookup("2024-03-02", json!([]))]),
            json!({"status": "failure"}),
        ),
        example(
            json!({"date": "2024-03-03", "name": "Cy"}),
            json!([
                lookup("2024-03-03", json!([{"id": 2}])),
                {"tool": "sql", "arguments": {"query": "INSERT INTO Bookings VALUES (2, '2024-03-03')"}, "result": [{"changes": 1}]}
            ]),
            json!({"status": "success"}),
        ),
    ];
    let compiled = run(BOOKING, &examples).unwrap();
    assert_eq!(compiled.examined, [0, 1, 2], "{}", compiled.summary());
    let source = &compiled.source;
    assert!(source.contains("if (!isEmpty(r1)) {"), "{source}");
    assert!(
        source.contains("// Examples 1, 3: step 1 found something."),
        "{source}"
    );
    assert!(
        source.contains("} else {\n    // Example 2: step 1 found nothing."),
        "{source}"
    );
    assert!(
        source.contains("return { status: \"failure\" };"),
        "{source}"
    );
}

/// A member every example replied with the same empty value stays in the reply: restaurant3's
/// `bookTable` answers `{"status": "success", "error": ""}`, and its routine does too.
#[test]
fn a_member_empty_in_every_example_stays_in_the_reply() {
    let insert = |name: &str| json!({"tool": "sql", "arguments": {"query": format!("INSERT INTO Bookings VALUES ('{name}')")}, "result": [{"changes": 1}]});
    let examples: Vec<(String, Value, String)> = ["Ada", "Bob", "Cy"]
        .iter()
        .map(|name| {
            example(
                json!({"name": name}),
                json!([insert(name)]),
                json!({"status": "success", "error": ""}),
            )
        })
        .collect();
    let compiled = run(BOOKING, &examples).unwrap();
    assert!(
        compiled
            .source
            .contains("return { status: \"success\", error: \"\" };"),
        "{}",
        compiled.source
    );
    // One example without it: the member is not every example's, and is left out as before.
    let mut fewer = examples.clone();
    fewer[1].2 = json!({"status": "success"}).to_string();
    let compiled = run(BOOKING, &fewer).unwrap();
    assert!(
        compiled.source.contains("return { status: \"success\" };"),
        "{}",
        compiled.source
    );
}

#[test]
fn the_majority_decides_what_the_document_does_not_name_and_is_reported() {
    let case = case("rent-ski");
    let compiled = run(&case.document, &case.examples).unwrap();
    // The INSERTs that also wrote an EndDate (a column the document does not name) are left
    // out, each group with its reason.
    assert!(!compiled.left_out.is_empty());
    let summary = compiled.summary();
    assert!(summary.contains("with other arguments than"), "{summary}");
    assert!(compiled.examined.len() >= 8, "{summary}");
    assert!(
        compiled.source.contains(
            "INSERT INTO SkiRentals (SkiId, StartDate) VALUES ('${r1[0].SkiId}', '${request.date}')"
        ),
        "{}",
        compiled.source
    );
}

#[test]
fn examples_that_disagree_on_a_named_member_give_no_program() {
    let call = json!([{"tool": "sql", "arguments": {"query": "SELECT id FROM Rooms LIMIT 1"}, "result": [{"id": 4}]}]);
    let examples = [
        example(
            json!({"date": "2024-03-01", "name": "Ada"}),
            call.clone(),
            json!({"status": "success"}),
        ),
        example(
            json!({"date": "2024-03-02", "name": "Bob"}),
            call.clone(),
            json!({"status": "failure"}),
        ),
        example(
            json!({"date": "2024-03-03", "name": "Cy"}),
            call,
            json!({"status": "success"}),
        ),
    ];
    let error = run(BOOKING, &examples).unwrap_err();
    let NotCompiled::Contradiction { member, groups } = &error else {
        panic!("{error:?}")
    };
    assert!(member.starts_with("status"), "{member}");
    assert_eq!(groups, &vec![vec![0, 2], vec![1]]);
    assert!(
        error
            .to_string()
            .contains("examples 1, 3 against example 2"),
        "{error}"
    );
    // A member the document does not name is the majority's to decide.
    let unnamed = [
        example(
            json!({"date": "2024-03-01"}),
            json!([]),
            json!({"status": "success", "note": "a"}),
        ),
        example(
            json!({"date": "2024-03-02"}),
            json!([]),
            json!({"status": "success", "note": "b"}),
        ),
        example(
            json!({"date": "2024-03-03"}),
            json!([]),
            json!({"status": "success", "note": "a"}),
        ),
    ];
    let compiled = run(BOOKING, &unnamed).unwrap();
    assert_eq!(compiled.examined, [0, 2]);
    assert_eq!(compiled.left_out.len(), 1);
}

#[test]
fn a_constant_reply_that_reads_nothing_is_marked() {
    let case = case("is-open");
    let compiled = run(&case.document, &case.examples).unwrap();
    assert!(compiled.constant, "{}", compiled.source);
    assert!(
        compiled.source.contains("return { isOpen: \"no\" };"),
        "{}",
        compiled.source
    );
    // A reply that reads a result is not constant.
    let calls = json!([{"tool": "day", "arguments": {}, "result": {"open": "no"}}]);
    let reading = [example(
        json!({"date": "2024-01-01"}),
        calls,
        json!({"isOpen": "no"}),
    )];
    assert!(!run(&case.document, &reading).unwrap().constant);
}

#[test]
fn a_result_value_that_echoes_an_argument_is_not_guarded() {
    let forecast = |location: &str, date: &str, temperature: f64| {
        example(
            json!({"location": location, "date": date}),
            json!([{"tool": "weather_forecast", "arguments": {"location": location, "date": date},
                "result": {"location": location, "date": date, "temperature_c": temperature, "condition": "sunny", "model": "gfs"}}]),
            json!({"temperature": temperature, "weatherCondition": "sunny"}),
        )
    };
    let examples = [
        forecast("Paris", "2024-09-01", 21.5),
        forecast("Lima", "2024-09-02", 17.0),
    ];
    let compiled = run("A forecast: temperature and weatherCondition.", &examples).unwrap();
    let source = &compiled.source;
    // The location follows the request: a guard on it would cover Paris and Lima only.
    assert!(!source.contains("r1?.location ==="), "{source}");
    // What the examples' results had on their own, and the program does not read, is still
    // checked.
    assert!(source.contains("r1?.model === \"gfs\""), "{source}");
}
