//! The cases every backend must pass, each taking a fresh [`Fixture`].
//!
//! Data builders live here too, so the cases read as what they check.

mod conversations;
mod documents;
mod published;
mod requests;
mod routines;
mod sender_memory;
mod sender_routines;

pub use conversations::*;
pub use documents::*;
pub use published::{
    catalogue_and_cursors_survive_a_restart, concurrent_publishes_get_distinct_seqs,
    pages_follow_seq_order, peer_errors_are_counted_until_a_success,
    peer_pages_store_documents_and_move_the_cursor_forward,
    publishing_is_idempotent_and_numbers_entries, search_narrows_by_lowercased_words,
    tampered_text_is_reported_corrupt_and_repaired_by_publishing,
};
pub use requests::*;
pub use routines::*;
pub use sender_memory::{
    a_fresh_memory_round_trips_with_no_protocol,
    a_full_memory_round_trips_with_sources_and_rejections, memory_and_log_survive_a_restart,
    protocols_for_a_task_are_those_in_use_across_targets, putting_again_replaces_the_whole_row,
    runs_are_logged_totalled_and_listed_oldest_first,
};
pub use sender_routines::{
    a_pending_sender_routine_is_activated_only_by_its_approval,
    examples_are_bounded_per_key_and_counted_since_the_last_attempt,
    one_routine_per_key_is_active_and_counts_its_runs,
};

use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{
    Backend, Conversation, ConversationKind, LlmCallRecord, RequestPath, RequestRecord, Store,
    StoredDocument,
};

use crate::Fixture;

/// A protocol document with front matter, distinct for every `n`.
pub fn document(n: u32) -> VerifiedDocument {
    VerifiedDocument::from_text(&format!(
        "---\nname: Test protocol {n}\ndescription: Used by the store tests\nmultiround: true\n---\n\
         Send {{\"n\": {n}}} and expect it back.\n"
    ))
}

/// The stored document `doc`, which must be there.
pub async fn stored_document(store: &Store, doc: &VerifiedDocument) -> StoredDocument {
    let stored = store.document(&doc.hash()).await.expect("get");
    stored.expect("stored")
}

/// A hash with no document behind it.
pub fn hash(n: u8) -> ProtocolHash {
    ProtocolHash::from_digest([n; 20])
}

/// A request under `protocol_hash`, answered along `path`, with tokens and cost that depend on
/// `n` (costs are binary fractions so sums compare exactly).
pub fn request(
    n: i64,
    protocol_hash: Option<ProtocolHash>,
    path: RequestPath,
    created_at_ms: i64,
) -> RequestRecord {
    RequestRecord {
        query_id: format!("q{n}"),
        node: "alice".to_string(),
        protocol_hash,
        channel: "protocol".to_string(),
        path,
        status: if path == RequestPath::Rejected {
            "rejected".to_string()
        } else {
            "success".to_string()
        },
        llm_calls: n % 3,
        prompt_tokens: 100 * n,
        completion_tokens: 10 * n,
        cost_usd: 0.25 * n as f64,
        latency_ms: 7 * n,
        created_at_ms,
        routine_id: None,
        routine_error: None,
        client: None,
        error_detail: None,
    }
}

/// A conversation with a small JSON history.
pub fn conversation(id: &str, protocol_hash: Option<ProtocolHash>, now_ms: i64) -> Conversation {
    Conversation {
        id: id.to_string(),
        kind: if protocol_hash.is_some() {
            ConversationKind::Protocol
        } else {
            ConversationKind::Natural
        },
        protocol_hash,
        messages: serde_json::json!([
            {"role": "user", "content": "Bonjour — ça va? ✓"},
            {"role": "assistant", "content": {"nested": [1, 2.5, null, true]}},
        ]),
        created_at_ms: now_ms,
        last_active_ms: now_ms,
        expires_at_ms: now_ms + 60_000,
    }
}

/// One LLM call.
pub fn llm_call(
    node: &str,
    category: &str,
    model: &str,
    query_id: Option<&str>,
    created_at_ms: i64,
) -> LlmCallRecord {
    LlmCallRecord {
        node: node.to_string(),
        category: category.to_string(),
        model: model.to_string(),
        prompt_tokens: 1000,
        cached_prompt_tokens: 600,
        completion_tokens: 50,
        latency_ms: 300,
        cost_usd: 0.125,
        query_id: query_id.map(str::to_string),
        protocol_hash: Some(hash(9)),
        created_at_ms,
    }
}

/// SQL that makes every insert into `conversations` fail, in the fixture's dialect.
pub fn failing_conversation_trigger(fixture: &Fixture) -> &'static str {
    match fixture.backend() {
        Backend::Sqlite => {
            "CREATE TRIGGER refuse_conversations BEFORE INSERT ON conversations \
             BEGIN SELECT RAISE(ABORT, 'conversations refused by test trigger'); END;"
        }
        Backend::Postgres => {
            "CREATE FUNCTION refuse_conversation() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'conversations refused by test trigger'; END $$; \
             CREATE TRIGGER refuse_conversations BEFORE INSERT ON conversations \
             FOR EACH ROW EXECUTE FUNCTION refuse_conversation();"
        }
    }
}

/// SQL that makes inserting the conversation `id` fail, in the fixture's dialect; other
/// conversations are stored as usual.
pub fn refusing_conversation_trigger(fixture: &Fixture, id: &str) -> String {
    match fixture.backend() {
        Backend::Sqlite => format!(
            "CREATE TRIGGER refuse_conversation BEFORE INSERT ON conversations \
             WHEN NEW.id = '{id}' \
             BEGIN SELECT RAISE(ABORT, 'conversation refused by test trigger'); END;"
        ),
        Backend::Postgres => format!(
            "CREATE FUNCTION refuse_conversation() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF NEW.id = '{id}' THEN \
             RAISE EXCEPTION 'conversation refused by test trigger'; END IF; \
             RETURN NEW; END $$; \
             CREATE TRIGGER refuse_conversation BEFORE INSERT ON conversations \
             FOR EACH ROW EXECUTE FUNCTION refuse_conversation();"
        ),
    }
}

/// The newest `limit` requests in `store`'s request log, newest first.
pub async fn recent(store: &Store, limit: i64) -> Vec<RequestRecord> {
    let requests = store.requests().recent_requests(limit).await;
    requests.expect("the request log can be read")
}

/// Records `request` in `store`'s request log, with no LLM calls.
pub async fn record(store: &Store, request: &RequestRecord) {
    let recorded = store.requests().record_request(request, None).await;
    recorded.expect("a request can be recorded");
}
