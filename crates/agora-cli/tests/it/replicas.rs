//! Replicas: three `agora node run` processes with one identity on one PostgreSQL schema, behind
//! HAProxy (Debian's package), behave as one node. A conversation and a negotiation hop across
//! replicas, the receiver's negotiation cue counts across them, a routine added with the CLI is
//! served by all of them, and under round-robin load one replica is killed with SIGKILL: every
//! request a client saw acknowledged is in the store afterwards, and the restarted replica opens
//! the store and serves again.

use std::time::{Duration, Instant};

use agora_protocol::ProtocolHash;
use serde_json::{Value, json};

use crate::cluster::{
    FakeLlm, Haproxy, Load, NodeSetup, Process, answered_by_routine, block_on, follow_up,
    free_port, natural_request, postgres_schema, send, weather_request,
};

#[test]
#[ignore = "needs AGORA_TEST_POSTGRES_URL, haproxy and AGORA_JS_ENGINE (scripts/test.sh's slow phase)"]
fn three_replicas_behind_haproxy_behave_as_one_node() {
    let llm = FakeLlm::start();
    let setup = NodeSetup::new(postgres_schema("agora_test_replicas"), &llm, "");
    let mut replicas: Vec<Process> = (0..3)
        .map(|i| Process::start(&setup, free_port(), &format!("replica-{i}")))
        .collect();
    let balancer = Haproxy::start(setup.dir.path(), &replicas.iter().collect::<Vec<_>>());

    // A conversation opened on one replica goes on on the others, with its whole history.
    let opened = send(
        &replicas[0].url,
        "POST",
        "/",
        &[],
        &natural_request("turn one", true),
    )
    .unwrap();
    assert_eq!(opened.status, 200, "{}", opened.body);
    let conversation = opened.json()["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(opened.json().get("negotiationRequested").is_none());
    for (replica, (turn, seen)) in [(1, ("turn two", 2)), (2, ("turn three", 3))] {
        let path = format!("/conversations/{conversation}");
        let reply = send(&replicas[replica].url, "POST", &path, &[], &follow_up(turn)).unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            reply.json()["body"],
            format!("scripted reply to [{turn}] after {seen} user turns"),
            "replica {replica} did not continue the conversation with its history"
        );
    }

    // The cue to negotiate counts natural-language conversations on every replica together
    // (threshold 3: the conversation above was the first).
    let second = send(
        &replicas[1].url,
        "POST",
        "/",
        &[],
        &natural_request("second", false),
    )
    .unwrap();
    assert!(
        second.json().get("negotiationRequested").is_none(),
        "{}",
        second.body
    );
    let third = send(
        &replicas[2].url,
        "POST",
        "/",
        &[],
        &natural_request("third", false),
    )
    .unwrap();
    assert_eq!(third.json()["negotiationRequested"], true, "{}", third.body);

    // A negotiation opened on one replica goes on and closes on the others; the protocol it
    // registers is served by the first, and the cue starts counting again.
    let opening = json!({"protocolHash": "negotiation", "protocolSources": [], "multiround": true,
        "body": "Let us agree on a protocol for weather forecasts."});
    let opened = send(
        &replicas[0].url,
        "POST",
        "/",
        &[],
        opening.to_string().as_bytes(),
    )
    .unwrap();
    assert_eq!(opened.status, 200, "{}", opened.body);
    let negotiation = opened.json()["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/conversations/{negotiation}");
    let turn = send(
        &replicas[1].url,
        "POST",
        &path,
        &[],
        &follow_up("Location and date in, forecast out."),
    )
    .unwrap();
    // The receiver prefixes its verdict ("I agree.") to its LLM's message.
    assert!(
        turn.json()["body"].as_str().is_some_and(|b| b.ends_with(
            "scripted reply to [Location and date in, forecast out.] after 2 user turns"
        )),
        "replica 1 did not continue the negotiation with its history: {}",
        turn.body
    );
    let document = "---\nname: negotiated-forecast\ndescription: A forecast for a place and a day.\n\
                    multiround: false\n---\n\nSend {\"place\": string, \"day\": \"YYYY-MM-DD\"}.\n";
    let hash = ProtocolHash::of(document.as_bytes()).to_hex();
    let closing = json!({"finalProtocol": document, "protocolHash": hash}).to_string();
    let closed = send(&replicas[2].url, "POST", &path, &[], &follow_up(&closing)).unwrap();
    assert_eq!(closed.status, 200, "{}", closed.body);
    let registered: Value = serde_json::from_str(closed.json()["body"].as_str().unwrap()).unwrap();
    assert_eq!(registered["registeredProtocol"], hash.as_str());
    let under_it = json!({"protocolHash": hash, "protocolSources": [], "body": {"place": "Oslo", "day": "2024-03-01"}});
    let served = send(
        &replicas[0].url,
        "POST",
        "/",
        &[],
        under_it.to_string().as_bytes(),
    )
    .unwrap();
    assert_eq!(served.json()["status"], "success", "{}", served.body);
    let after = send(
        &replicas[0].url,
        "POST",
        "/",
        &[],
        &natural_request("after", false),
    )
    .unwrap();
    assert!(
        after.json().get("negotiationRequested").is_none(),
        "{}",
        after.body
    );

    // A routine added with the CLI is served by every replica within a few sync intervals
    // (200 ms each, plus a compile the replicas share through the artifact cache).
    for replica in &replicas {
        let reply = send(&replica.url, "POST", "/", &[], &weather_request("Paris")).unwrap();
        assert!(!answered_by_routine(&reply), "{}", reply.body);
    }
    setup.agora_ok(&["routine", "add", "routines/weather-forecast"]);
    let added = Instant::now();
    for (i, replica) in replicas.iter().enumerate() {
        loop {
            let reply = send(&replica.url, "POST", "/", &[], &weather_request("Paris")).unwrap();
            if answered_by_routine(&reply) {
                break;
            }
            assert!(
                added.elapsed() < Duration::from_secs(60),
                "replica {i} still answers without the routine: {}",
                reply.body
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    eprintln!(
        "every replica served the new routine {:?} after it was added",
        added.elapsed()
    );

    // Round-robin load through HAProxy; one replica is killed mid-load, then restarted.
    let calls_before = llm.calls();
    let load = Load::start(&balancer.url, 4);
    std::thread::sleep(Duration::from_secs(2));
    let at_kill = load.snapshot();
    replicas[1].kill();
    let killed_at = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let acknowledged = load.stop();
    replicas[1].restart(&setup);
    let reply = send(&replicas[1].url, "POST", "/", &[], &weather_request("Rome")).unwrap();
    assert!(
        answered_by_routine(&reply),
        "the restarted replica: {}",
        reply.body
    );
    assert!(
        at_kill.routine.len() > 20 && at_kill.llm > 20,
        "too little load before the kill to mean anything: {} routine, {} LLM",
        at_kill.routine.len(),
        at_kill.llm
    );
    let figures = block_on(async {
        let store = setup.store().await;
        acknowledged
            .verify(&store, &[killed_at], calls_before, Some(llm.calls()))
            .await
    });
    eprintln!("replicas, one killed mid-load: {figures}");
    block_on(async {
        let store = setup.store().await;
        assert_eq!(store.routines().await.unwrap().len(), 1);
    });
    for replica in &mut replicas {
        replica.stop();
    }
}
