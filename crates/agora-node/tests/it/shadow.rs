//! Node-boundary tests of shadow checks, with a scripted LLM and a scripted routine engine: a
//! disagreement is recorded with both answers and, under `flag`, changes nothing else; under
//! `suspend` the LLM-written routine stops answering, the LLM answers again and the programmer
//! has the disagreeing request as an example; a check writes only to scratch copies, and
//! compares the effects on them; a routine granted a tool with effects it cannot copy is not
//! checked.

use std::sync::{Arc, Mutex};

use agora_node::tools::{Scratch, ScratchCopy};
use agora_node::{Node, OnDisagreement, RoutineError, Tool, ToolError, ToolSpec};
use agora_protocol::{Body, HashDialect, ProtocolHash, ProtocolRef, Request, Status};
use agora_store::{RequestPath, RoutineStatus, ShadowCheck};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, ScriptedRoutineEngine, human_routine, last_user_message, schema_name,
    temp_dir,
};
use serde_json::{Value, json};

use crate::programmer::{Programmer, ask, engine, good, hash, llm, node_with, paths, wrong};

async fn checks(node: &Node, routine_id: i64) -> Vec<ShadowCheck> {
    let programming = node.store().programming();
    programming
        .shadow_checks(routine_id, false, 100)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disagreement_is_recorded_with_both_answers() {
    let dir = temp_dir();
    let llm = llm(&Programmer::with(&[]));
    let node = node_with(llm.clone(), engine(), dir.path(), |c| {
        c.routines.shadow.share = 0.5;
    })
    .await;
    let weather = std::fs::read_to_string("../../protocols/weather-forecast.md").unwrap();
    let routine = node
        .add_routine(human_routine("h", &weather, "wrong", &["weather_forecast"]))
        .await
        .unwrap();
    for day in 1..=4 {
        ask(&node, "Oslo", day).await;
    }
    node.programmer_idle().await;

    // Every second request was checked; the replies were the routine's.
    let checks = checks(&node, routine.id).await;
    assert_eq!(checks.len(), 2, "{checks:?}");
    let check = &checks[0];
    assert!(!check.agreed);
    assert!(
        check.difference.starts_with("replies differ"),
        "{}",
        check.difference
    );
    let routine_reply: Value = serde_json::from_str(&check.routine_reply).unwrap();
    let llm_reply: Value = serde_json::from_str(&check.llm_reply).unwrap();
    assert_eq!(
        routine_reply.as_object().unwrap().len(),
        1,
        "the routine's own reply"
    );
    assert_eq!(llm_reply.as_object().unwrap().len(), 3, "the LLM's reply");
    assert!(check.body.contains("Oslo"));
    assert!(check.cost_usd >= 0.0);
    assert_eq!(paths(&node).await, vec![RequestPath::Routine; 4]);

    // The checks' calls are in the ledger under their own category; the tally says so.
    let calls = agora_testkit::llm_calls(&node).await;
    assert!(calls.iter().any(|c| c.category == "shadow"), "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|c| c.category == "shadow" || c.category == "checking")
    );
    let tallies = node.store().programming().shadow_tallies().await.unwrap();
    assert_eq!(
        (
            tallies[0].routine_id,
            tallies[0].checks,
            tallies[0].disagreements
        ),
        (routine.id, 2, 2)
    );

    // Flagged only: a human routine is never suspended either way.
    let listed = node.routines().list().await.unwrap();
    assert_eq!(listed[0].status, RoutineStatus::Active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_suspend_a_disagreeing_routine_stops_and_the_llm_answers_again() {
    let dir = temp_dir();
    let llm = llm(&Programmer::with(&["paris and lima only"]));
    let engine = engine().routine("paris and lima only", |body, tools| async move {
        if body.contains("Paris") || body.contains("Lima") {
            good(body, tools).await
        } else {
            wrong(body, tools).await
        }
    });
    let node = node_with(llm.clone(), engine, dir.path(), |c| {
        c.thresholds.implementation = 2;
        c.routines.shadow.share = 1.0;
        c.routines.shadow.on_disagreement = OnDisagreement::Suspend;
    })
    .await;
    ask(&node, "Paris", 1).await;
    ask(&node, "Lima", 2).await;
    node.programmer_idle().await;
    let routine = node.routines().list().await.unwrap().remove(0);
    assert_eq!(
        routine.status,
        RoutineStatus::Active,
        "it passed on Paris and Lima"
    );

    // Paris agrees; Oslo does not, and the routine is suspended.
    ask(&node, "Paris", 3).await;
    node.programmer_idle().await;
    assert!(checks(&node, routine.id).await[0].agreed);
    assert_eq!(
        node.routines().list().await.unwrap()[0].status,
        RoutineStatus::Active
    );
    ask(&node, "Oslo", 4).await;
    node.programmer_idle().await;
    let checks = checks(&node, routine.id).await;
    assert_eq!(checks.len(), 2);
    assert!(!checks[0].agreed, "{checks:?}");
    let now = node.routines().list().await.unwrap();
    let suspended = now.iter().find(|r| r.id == routine.id).unwrap();
    assert_eq!(suspended.status, RoutineStatus::Disabled);

    // The LLM answers again, and the programmer has Oslo, as the LLM answered it.
    let examples = node
        .store()
        .programming()
        .examples(&hash(), 10)
        .await
        .unwrap();
    let oslo = examples
        .iter()
        .find(|e| e.body.contains("Oslo"))
        .expect("Oslo kept");
    assert_eq!(oslo.reply, checks[0].llm_reply);
    let calls = llm.call_count();
    ask(&node, "Rome", 5).await;
    assert!(llm.call_count() > calls);
    assert_eq!(paths(&node).await.last(), Some(&RequestPath::Llm));
}

/// A booking tool over a list of bookings, whose scratch copy is a copy of the list.
struct Bookings {
    spec: ToolSpec,
    booked: Arc<Mutex<Vec<Value>>>,
    copyable: bool,
}

impl Bookings {
    fn new(copyable: bool) -> Arc<Bookings> {
        Arc::new(Bookings {
            spec: ToolSpec {
                name: "book".into(),
                description: "Books a room for a guest.".into(),
                parameters: json!({"type": "object", "properties": {"guest": {"type": "string"}}}),
                returns: None,
            },
            booked: Arc::default(),
            copyable,
        })
    }

    fn booked(&self) -> Vec<Value> {
        self.booked.lock().unwrap().clone()
    }

    fn copy(&self) -> Box<dyn ScratchCopy> {
        Box::new(BookingsCopy(Arc::new(Bookings {
            spec: self.spec.clone(),
            booked: Arc::new(Mutex::new(self.booked())),
            copyable: true,
        })))
    }
}

#[async_trait::async_trait]
impl Tool for Bookings {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.booked.lock().unwrap().push(arguments);
        Ok(json!({"booked": true}))
    }

    async fn scratch(&self) -> Result<Scratch, ToolError> {
        if !self.copyable {
            return Ok(Scratch::Unsupported);
        }
        Ok(Scratch::Copy(self.copy()))
    }
}

struct BookingsCopy(Arc<Bookings>);

#[async_trait::async_trait]
impl ScratchCopy for BookingsCopy {
    fn tool(&self) -> Arc<dyn Tool> {
        self.0.clone()
    }

    async fn fork(&self) -> Result<Box<dyn ScratchCopy>, ToolError> {
        Ok(self.0.copy())
    }

    async fn state(&self) -> Result<Value, ToolError> {
        Ok(Value::Array(self.0.booked()))
    }
}

const BOOKING_PD: &str = "# Room booking\n\nRequest: {\"guest\": string}. Reply: \
                          {\"booked\": boolean}. Books a room for the guest.\n";

/// A node serving the booking protocol with `bookings` and a routine that books once, or twice
/// for a guest named "Twice"; the LLM books once.
async fn booking_node(dir: &std::path::Path, bookings: Arc<Bookings>) -> (Node, i64) {
    let llm = ScriptedLlm::new(|request| match schema_name(request) {
        Some("suitability") => Ok(r#"{"suitable": "yes", "reason": "a booking tool"}"#.into()),
        Some("step") => {
            let last = last_user_message(request);
            if let Some(body) = last.strip_prefix("Request body:\n") {
                let body: Value = serde_json::from_str(body).unwrap();
                Ok(json!({"tool": "book", "arguments": {"guest": body["guest"]}}).to_string())
            } else {
                Ok(json!({"tool": "final_answer", "answer": {"booked": true}}).to_string())
            }
        }
        other => panic!("unexpected LLM request {other:?}"),
    });
    let engine = ScriptedRoutineEngine::new().routine("book", |body, tools| async move {
        let body: Value = serde_json::from_str(&body).unwrap();
        let times = if body["guest"] == "Twice" { 2 } else { 1 };
        for _ in 0..times {
            let arguments = json!({"guest": body["guest"]}).to_string();
            tools
                .call_tool("book", &arguments)
                .await
                .map_err(RoutineError::Failed)?;
        }
        Ok(json!({"booked": true}).to_string())
    });
    let node = NodeBuilder::new(llm, dir)
        .connected_tools(vec![bookings as Arc<dyn Tool>])
        .config(|c| c.routines.shadow.share = 1.0)
        .routine_engine(Arc::new(engine))
        .build()
        .await;
    let routine = node
        .add_routine(human_routine("booker", BOOKING_PD, "book", &["book"]))
        .await
        .unwrap();
    (node, routine.id)
}

async fn book(node: &Node, guest: &str) {
    let reply = node
        .handle(Request {
            protocol: ProtocolRef::Protocol(ProtocolHash::of(BOOKING_PD.as_bytes())),
            hash_dialect: HashDialect::Hex,
            sources: vec![],
            body: Body::Json(json!({"guest": guest})),
            multiround: false,
        })
        .await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_writes_only_to_scratch_copies_and_compares_the_effects() {
    let dir = temp_dir();
    let bookings = Bookings::new(true);
    let (node, routine_id) = booking_node(dir.path(), bookings.clone()).await;
    book(&node, "Ada").await;
    node.programmer_idle().await;
    book(&node, "Twice").await;
    node.programmer_idle().await;

    // The real bookings are the routine's alone: Ada once, Twice twice.
    let guests: Vec<Value> = bookings
        .booked()
        .iter()
        .map(|b| b["guest"].clone())
        .collect();
    assert_eq!(guests, [json!("Ada"), json!("Twice"), json!("Twice")]);

    // Ada's answers and effects agree; for Twice the replies agree and the effects do not.
    let checks = checks(&node, routine_id).await;
    assert_eq!(checks.len(), 2, "{checks:?}");
    let (twice, ada) = (&checks[0], &checks[1]);
    assert!(ada.agreed, "{}", ada.difference);
    assert!(!twice.agreed);
    assert!(
        twice.difference.starts_with("effects differ"),
        "{}",
        twice.difference
    );
    assert!(twice.difference.contains("book"), "{}", twice.difference);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routine_with_a_tool_that_cannot_be_copied_is_not_checked() {
    let dir = temp_dir();
    let bookings = Bookings::new(false);
    let (node, routine_id) = booking_node(dir.path(), bookings.clone()).await;
    book(&node, "Ada").await;
    node.programmer_idle().await;
    assert_eq!(bookings.booked().len(), 1);
    assert!(checks(&node, routine_id).await.is_empty());
    let reason = node.shadow_unchecked(routine_id).expect("a reason");
    assert!(reason.contains("book"), "{reason}");
    assert!(agora_testkit::llm_calls(&node).await.is_empty());
}
