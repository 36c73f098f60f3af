//! Node-boundary tests of the `review` activation policy, with the programmer tests' scripted
//! weather agent and engine: a routine written under review waits, pending, and the LLM keeps
//! answering until the operator approves it; a rejection's reason reaches the next programmer
//! prompt; an edit is examined, and one that fails is never stored; every decision is kept with
//! its reviewer.

use agora_node::{Activation, Node, RegistryError, Review};
use agora_store::{RequestPath, ReviewDecision, Routine, RoutineOrigin, RoutineStatus};
use agora_testkit::{last_user_message, temp_dir};
use tempfile::TempDir;

use crate::programmer::{
    Programmer, ask, attempts_of, engine, hash, is_programmer_call, llm, node_with, outcomes, paths,
};

/// A node under `activation` whose programmer (threshold 2) ran on a Paris and a Lima request,
/// with the scripted LLM's calls at hand.
async fn programmed(
    activation: Activation,
    per_protocol: Option<Activation>,
    candidates: &[&'static str],
) -> (TempDir, Node, std::sync::Arc<agora_testkit::ScriptedLlm>) {
    let dir = temp_dir();
    let llm = llm(&Programmer::with(candidates));
    let node = node_with(llm.clone(), engine(), dir.path(), |c| {
        c.thresholds.implementation = 2;
        c.programmer.activation = activation;
        if let Some(policy) = per_protocol {
            c.programmer.activation_per_protocol.insert(hash(), policy);
        }
    })
    .await;
    ask(&node, "Paris", 1).await;
    ask(&node, "Lima", 2).await;
    node.programmer_idle().await;
    (dir, node, llm)
}

async fn routines(node: &Node) -> Vec<Routine> {
    node.routines().list().await.unwrap()
}

async fn the_routine(node: &Node) -> Routine {
    let routines = routines(node).await;
    assert_eq!(routines.len(), 1, "{routines:?}");
    routines.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routine_under_review_answers_only_once_approved() {
    let (_dir, node, llm) = programmed(Activation::Review, None, &["good"]).await;
    assert_eq!(outcomes(&attempts_of(&node).await), ["passed"]);
    let routine = the_routine(&node).await;
    assert_eq!(routine.status, RoutineStatus::Pending);
    assert!(
        attempts_of(&node).await[0].report.contains("review"),
        "the attempt says it waits"
    );

    // Pending: the LLM answers, and no second job starts while it waits.
    let calls = llm.call_count();
    ask(&node, "Oslo", 3).await;
    ask(&node, "Rome", 4).await;
    node.programmer_idle().await;
    assert!(llm.call_count() > calls, "the LLM answered");
    assert_eq!(attempts_of(&node).await.len(), 1, "no job while one waits");
    assert_eq!(paths(&node).await.last(), Some(&RequestPath::Llm));

    // What a reviewer sees: the routine's answers to the kept examples, graded.
    let examined = node.routines().examine(&routine.name).await.unwrap();
    assert_eq!(examined.len(), 4, "Paris, Lima, Oslo and Rome");
    assert!(examined.iter().all(|e| e.failure.is_none()), "{examined:?}");

    // Enabling would bypass the review.
    let refused = node.enable_routine(&routine.name).await;
    assert!(
        matches!(refused, Err(RegistryError::Invalid(_))),
        "{refused:?}"
    );

    let approved = node
        .review_routine(&routine.name, "ada", &Review::Approve)
        .await
        .unwrap();
    assert_eq!(approved.status, RoutineStatus::Active);
    let calls = llm.call_count();
    ask(&node, "Quito", 5).await;
    assert_eq!(
        llm.call_count(),
        calls,
        "the routine answered with no LLM call"
    );
    assert_eq!(paths(&node).await.last(), Some(&RequestPath::Routine));

    let reviews = node.store().programming().reviews(Some(&hash())).await;
    let reviews = reviews.unwrap();
    assert_eq!(reviews.len(), 1);
    let review = &reviews[0];
    assert_eq!(
        (review.routine_id, review.decision, review.reviewer.as_str()),
        (routine.id, ReviewDecision::Approved, "ada")
    );
    // A decision is made once.
    let again = node
        .review_routine(&routine.name, "ada", &Review::Approve)
        .await;
    assert!(matches!(again, Err(RegistryError::Invalid(_))), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_per_protocol_overrides_the_nodes() {
    let (_dir, node, _llm) =
        programmed(Activation::Review, Some(Activation::Auto), &["good"]).await;
    assert_eq!(the_routine(&node).await.status, RoutineStatus::Active);
    let (_dir, node, _llm) =
        programmed(Activation::Auto, Some(Activation::Review), &["good"]).await;
    assert_eq!(the_routine(&node).await.status, RoutineStatus::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejections_reason_reaches_the_next_programmer_prompt() {
    let (_dir, node, llm) = programmed(Activation::Review, None, &["good", "good"]).await;
    let routine = the_routine(&node).await;
    let reason = "Round the temperature to whole degrees.";
    let empty = node
        .review_routine(&routine.name, "ada", &Review::Reject { reason: " ".into() })
        .await;
    assert!(matches!(empty, Err(RegistryError::Invalid(_))), "{empty:?}");
    let rejected = node
        .review_routine(
            &routine.name,
            "ada",
            &Review::Reject {
                reason: reason.into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(rejected.status, RoutineStatus::Rejected);
    let first_prompt = programmer_prompts(&llm);
    assert!(!first_prompt[0].contains(reason));

    ask(&node, "Oslo", 3).await;
    ask(&node, "Rome", 4).await;
    node.programmer_idle().await;
    let prompts = programmer_prompts(&llm);
    assert_eq!(prompts.len(), 2, "a second job ran after the rejection");
    assert!(
        prompts[1].contains(reason) && prompts[1].contains("```javascript\ngood\n```"),
        "{}",
        prompts[1]
    );
    let statuses: Vec<RoutineStatus> = routines(&node).await.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [RoutineStatus::Rejected, RoutineStatus::Pending]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_is_examined_and_only_a_pass_can_be_approved() {
    let (_dir, node, _llm) = programmed(Activation::Review, None, &["good"]).await;
    let routine = the_routine(&node).await;

    // "wrong" drops two fields of the reply: it fails the examination and is not stored.
    let failed = node
        .review_routine(
            &routine.name,
            "ada",
            &Review::Edit {
                source: "wrong".into(),
            },
        )
        .await;
    let Err(RegistryError::Rejected(report)) = failed else {
        panic!("{failed:?}")
    };
    assert!(report.contains("examination"), "{report}");
    let unbuilt = node
        .review_routine(
            &routine.name,
            "ada",
            &Review::Edit {
                source: "nonsense".into(),
            },
        )
        .await;
    assert!(
        matches!(unbuilt, Err(RegistryError::Rejected(_))),
        "{unbuilt:?}"
    );
    assert_eq!(the_routine(&node).await.status, RoutineStatus::Pending);

    // "flaky" passes the examples: it becomes a new pending routine, the reviewed one is
    // rejected as replaced, and only the edit can be approved.
    let edited = node
        .review_routine(
            &routine.name,
            "ada",
            &Review::Edit {
                source: "flaky".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(edited.name, format!("{}-edit", routine.name));
    assert_eq!(
        (edited.status, edited.origin),
        (RoutineStatus::Pending, RoutineOrigin::Human)
    );
    let old = node.routines().find(&routine.name).await.unwrap();
    assert_eq!(old.status, RoutineStatus::Rejected);
    let stale = node
        .review_routine(&routine.name, "ada", &Review::Approve)
        .await;
    assert!(matches!(stale, Err(RegistryError::Invalid(_))), "{stale:?}");
    node.review_routine(&edited.name, "grace", &Review::Approve)
        .await
        .unwrap();
    let source = node.routines().code(&edited).await.unwrap().source;
    assert_eq!(source.as_deref(), Some("flaky"));

    let reviews = node.store().programming().reviews(None).await.unwrap();
    let decided: Vec<(i64, ReviewDecision, &str)> = reviews
        .iter()
        .map(|r| (r.routine_id, r.decision, r.reviewer.as_str()))
        .collect();
    assert_eq!(
        decided,
        [
            (routine.id, ReviewDecision::Edited, "ada"),
            (edited.id, ReviewDecision::Approved, "grace")
        ]
    );
}

/// The last user message of each programmer call, in order.
fn programmer_prompts(llm: &agora_testkit::ScriptedLlm) -> Vec<String> {
    let calls = llm.calls();
    let programmer = calls.iter().filter(|call| is_programmer_call(call));
    programmer
        .map(|call| last_user_message(call).to_string())
        .collect()
}
