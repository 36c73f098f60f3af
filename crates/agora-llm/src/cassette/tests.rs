//! Cassette tests: keys, FIFO replay, resumable recording and torn lines.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;

use super::*;
use crate::{Message, Usage};

/// An inner model that answers "answer N" for its N-th call and counts calls.
#[derive(Default)]
struct CountingLlm {
    calls: AtomicU32,
}

#[async_trait::async_trait]
impl Llm for CountingLlm {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(ChatResponse {
            content: format!("answer {n}"),
            usage: Usage {
                prompt_tokens: 10 * n,
                completion_tokens: u32::try_from(request.messages.len()).unwrap_or(0),
                cached_prompt_tokens: 0,
            },
            model: "counting".into(),
            latency_ms: u64::from(n),
            tool_calls: Vec::new(),
        })
    }

    fn model(&self) -> String {
        "counting".into()
    }
}

/// An inner model that must never be called.
struct UnreachableLlm;

#[async_trait::async_trait]
impl Llm for UnreachableLlm {
    async fn chat(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Unavailable("the inner model was called".into()))
    }

    fn model(&self) -> String {
        "unreachable".into()
    }
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::system("be brief"), Message::user(text)])
}

/// The cassette line of `text` asked and answered with itself.
fn echoed(text: &str) -> String {
    line(&ask(text), &response(text))
}

/// The content of `llm`'s answer to `text`.
async fn content(llm: &impl Llm, text: &str) -> String {
    llm.chat(&ask(text)).await.expect("ok").content
}

fn response(content: &str) -> ChatResponse {
    ChatResponse {
        content: content.into(),
        usage: Usage {
            prompt_tokens: 7,
            completion_tokens: 3,
            cached_prompt_tokens: 2,
        },
        model: "recorded-model".into(),
        latency_ms: 1234,
        tool_calls: Vec::new(),
    }
}

fn line(request: &ChatRequest, response: &ChatResponse) -> String {
    let key = request_key(request);
    let mut line = serde_json::to_string(&EntryRef {
        key: &key,
        request,
        response: Some(response),
        error: None,
    })
    .expect("entries serialize");
    line.push('\n');
    line
}

/// A temporary folder and the path of a cassette `name` in it (not created).
fn cassette(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    (dir, path)
}

fn write_cassette(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("calls.jsonl");
    std::fs::write(&path, text).expect("temp dir is writable");
    path
}

#[test]
fn key_is_stable_and_hex_sha256() {
    let key = request_key(&ask("hello"));
    assert_eq!(key, request_key(&ask("hello")));
    assert_eq!(key.len(), 64);
    assert!(
        key.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_ne!(key, request_key(&ask("hello!")));
}

#[test]
fn key_depends_on_seed_format_and_limits() {
    let base = ask("q");
    let key = request_key(&base);
    assert_ne!(key, request_key(&base.clone().seed(Some(43))));
    assert_ne!(key, request_key(&base.clone().seed(None)));
    assert_ne!(key, request_key(&base.clone().max_tokens(3)));
    assert_ne!(key, request_key(&base.clone().temperature(0.7)));
    assert_ne!(
        key,
        request_key(&base.clone().json_schema("a", json!({"type": "string"})))
    );
}

#[test]
fn key_ignores_schema_key_order() {
    let one = ask("q").json_schema("a", json!({"type": "object", "required": ["x"]}));
    let mut schema = serde_json::Map::new();
    schema.insert("required".into(), json!(["x"]));
    schema.insert("type".into(), json!("object"));
    let other = ask("q").json_schema("a", serde_json::Value::Object(schema));
    assert_eq!(request_key(&one), request_key(&other));
}

#[tokio::test]
async fn replay_serves_duplicates_in_recorded_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = [
        line(&ask("same"), &response("first")),
        echoed("other"),
        line(&ask("same"), &response("second")),
    ]
    .concat();
    let replay = ReplayLlm::open(write_cassette(&dir, &text)).expect("valid cassette");
    assert_eq!(replay.remaining(), 3);
    assert_eq!(replay.model(), "recorded-model");

    let first = replay.chat(&ask("same")).await.expect("recorded");
    assert_eq!(first, response("first"));
    assert_eq!(content(&replay, "same").await, "second");
    assert_eq!(content(&replay, "other").await, "other");
    assert_eq!(replay.remaining(), 0);

    let exhausted = replay.chat(&ask("same")).await.expect_err("used up");
    assert!(
        matches!(&exhausted, LlmError::NotRecorded { key } if *key == request_key(&ask("same"))),
        "{exhausted:?}"
    );
}

#[tokio::test]
async fn replay_refuses_unknown_requests() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_cassette(&dir, &line(&ask("known"), &response("yes")));
    let replay = ReplayLlm::open(path).expect("valid cassette");
    let error = replay
        .chat(&ask("known").seed(Some(7)))
        .await
        .expect_err("different seed is a different request");
    assert!(matches!(error, LlmError::NotRecorded { .. }), "{error:?}");
}

#[test]
fn replay_of_a_missing_file_is_a_cassette_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let error = ReplayLlm::open(dir.path().join("nope.jsonl")).expect_err("missing");
    assert!(matches!(error, LlmError::Cassette(_)), "{error:?}");
}

#[tokio::test]
async fn replay_reads_a_gzip_cassette_of_several_members() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let member = |text: String| {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(text.as_bytes()).expect("compress");
        encoder.finish().expect("compress")
    };
    let path = dir.path().join("run.jsonl.gz");
    let bytes = [
        member(line(&ask("same"), &response("first"))),
        member([echoed("other"), line(&ask("same"), &response("second"))].concat()),
    ]
    .concat();
    std::fs::write(&path, bytes).expect("write");
    let replay = ReplayLlm::open(&path).expect("valid gzip cassette");
    assert_eq!(replay.remaining(), 3);
    assert_eq!(content(&replay, "same").await, "first");
    assert_eq!(content(&replay, "other").await, "other");
    assert_eq!(content(&replay, "same").await, "second");
}

#[test]
fn a_corrupt_gzip_cassette_is_an_error_and_recording_refuses_gzip() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("run.jsonl.gz");
    std::fs::write(&path, echoed("plain, not gzip")).expect("write");
    let error = ReplayLlm::open(&path).expect_err("not gzip");
    assert!(
        matches!(&error, LlmError::Cassette(message) if message.contains("decompressing")),
        "{error:?}"
    );
    let error = RecordingLlm::open(&path, Arc::new(UnreachableLlm)).expect_err("gzip");
    assert!(
        matches!(&error, LlmError::Cassette(message) if message.contains("replay only")),
        "{error:?}"
    );
}

#[test]
fn a_corrupt_middle_line_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = [
        echoed("a"),
        "{\"key\": \"broken\"}\n".to_owned(),
        echoed("b"),
    ]
    .concat();
    let error = ReplayLlm::open(write_cassette(&dir, &text)).expect_err("corrupt");
    assert!(
        matches!(&error, LlmError::Cassette(message) if message.contains("line 2")),
        "{error:?}"
    );
}

#[tokio::test]
async fn replay_tolerates_a_torn_last_line_and_blank_lines() {
    let dir = tempfile::tempdir().expect("temp dir");
    let full = echoed("b");
    let text = [
        echoed("a"),
        "\n".to_owned(),
        full[..full.len() / 2].to_owned(),
    ]
    .concat();
    let replay = ReplayLlm::open(write_cassette(&dir, &text)).expect("torn tail is tolerated");
    assert_eq!(replay.remaining(), 1);
    assert_eq!(content(&replay, "a").await, "a");
}

#[tokio::test]
async fn recording_resumes_replays_then_appends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nested").join("run.jsonl");

    let inner = Arc::new(CountingLlm::default());
    let recording = RecordingLlm::open(&path, inner.clone()).expect("creates the file");
    assert_eq!(recording.model(), "counting");
    let first = recording.chat(&ask("one")).await.expect("inner answers");
    let second = recording.chat(&ask("two")).await.expect("inner answers");
    assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
    drop(recording);
    assert_eq!(
        std::fs::read_to_string(&path)
            .expect("written")
            .lines()
            .count(),
        2
    );

    let inner = Arc::new(CountingLlm::default());
    let resumed = RecordingLlm::open(&path, inner.clone()).expect("reopens");
    assert_eq!(resumed.remaining(), 2);
    assert_eq!(resumed.chat(&ask("one")).await.expect("replayed"), first);
    assert_eq!(resumed.chat(&ask("two")).await.expect("replayed"), second);
    assert_eq!(inner.calls.load(Ordering::SeqCst), 0, "replayed, not sent");

    let third = resumed.chat(&ask("three")).await.expect("inner answers");
    assert_eq!(third.content, "answer 1");
    assert_eq!(inner.calls.load(Ordering::SeqCst), 1);
    drop(resumed);

    let replay = ReplayLlm::open(&path).expect("valid cassette");
    assert_eq!(replay.remaining(), 3);
    assert_eq!(replay.chat(&ask("one")).await.expect("recorded"), first);
    assert_eq!(replay.chat(&ask("two")).await.expect("recorded"), second);
    assert_eq!(replay.chat(&ask("three")).await.expect("recorded"), third);
}

#[tokio::test]
async fn recording_records_duplicates_once_each() {
    let (_dir, path) = cassette("dups.jsonl");
    let recording =
        RecordingLlm::open(&path, Arc::new(CountingLlm::default())).expect("creates the file");
    assert_eq!(content(&recording, "q").await, "answer 1");
    assert_eq!(content(&recording, "q").await, "answer 2");
    drop(recording);

    let resumed = RecordingLlm::open(&path, Arc::new(UnreachableLlm)).expect("reopens");
    assert_eq!(content(&resumed, "q").await, "answer 1");
    assert_eq!(content(&resumed, "q").await, "answer 2");
    let error = resumed
        .chat(&ask("q"))
        .await
        .expect_err("third goes inside");
    assert!(matches!(error, LlmError::Unavailable(_)), "{error:?}");
}

#[tokio::test]
async fn recording_cuts_a_torn_last_line_before_appending() {
    let dir = tempfile::tempdir().expect("temp dir");
    let torn = echoed("lost");
    let text = [echoed("kept"), torn[..torn.len() - 10].to_owned()].concat();
    let path = write_cassette(&dir, &text);

    let inner = Arc::new(CountingLlm::default());
    let recording = RecordingLlm::open(&path, inner.clone()).expect("torn tail is tolerated");
    assert_eq!(recording.remaining(), 1);
    assert_eq!(content(&recording, "kept").await, "kept");
    assert_eq!(content(&recording, "lost").await, "answer 1");
    drop(recording);

    let contents = std::fs::read_to_string(&path).expect("readable");
    assert_eq!(contents.lines().count(), 2);
    assert!(contents.ends_with('\n'));
    let replay = ReplayLlm::open(&path).expect("clean again");
    assert_eq!(replay.remaining(), 2);
    assert_eq!(content(&replay, "lost").await, "answer 1");
}

#[tokio::test]
async fn recording_adds_a_missing_final_newline() {
    let dir = tempfile::tempdir().expect("temp dir");
    let complete = echoed("a");
    let path = write_cassette(&dir, complete.trim_end());
    let recording =
        RecordingLlm::open(&path, Arc::new(CountingLlm::default())).expect("valid cassette");
    recording.chat(&ask("b")).await.expect("inner answers");
    drop(recording);
    let replay = ReplayLlm::open(&path).expect("both lines parse");
    assert_eq!(replay.remaining(), 2);
}

#[tokio::test]
async fn inner_errors_are_returned_and_not_recorded() {
    let (_dir, path) = cassette("errors.jsonl");
    let recording = RecordingLlm::open(&path, Arc::new(UnreachableLlm)).expect("creates");
    let error = recording.chat(&ask("q")).await.expect_err("inner fails");
    assert!(matches!(error, LlmError::Unavailable(_)), "{error:?}");
    assert_eq!(std::fs::read_to_string(&path).expect("exists"), "");
}

#[tokio::test]
async fn concurrent_recording_writes_whole_lines() {
    let (_dir, path) = cassette("concurrent.jsonl");
    let recording =
        Arc::new(RecordingLlm::open(&path, Arc::new(CountingLlm::default())).expect("creates"));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let recording = recording.clone();
        tasks.spawn(async move { recording.chat(&ask(&format!("q{i}"))).await });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("task ran").expect("inner answers");
    }
    let replay = ReplayLlm::open(&path).expect("every line parses");
    assert_eq!(replay.remaining(), 16);
}

/// An inner model that refuses every call with an HTTP 400 (a prompt over the context size).
struct RefusingLlm;

#[async_trait::async_trait]
impl Llm for RefusingLlm {
    async fn chat(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Api {
            status: Some(400),
            message: "request exceeds the available context size".into(),
        })
    }

    fn model(&self) -> String {
        "refusing".into()
    }
}

#[tokio::test]
async fn a_lasting_refusal_is_recorded_and_replayed_as_the_same_error() {
    let (_dir, path) = cassette("refusals.jsonl");
    let recording = RecordingLlm::open(&path, Arc::new(RefusingLlm)).expect("creates");
    let live = recording.chat(&ask("too long")).await.expect_err("refused");
    let text = std::fs::read_to_string(&path).expect("exists");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains(r#""error":{"kind":"api","status":400"#),
        "{text}"
    );

    let replay = ReplayLlm::open(&path).expect("loads");
    let replayed = replay.chat(&ask("too long")).await.expect_err("replayed");
    assert_eq!(replayed.to_string(), live.to_string());
    assert!(matches!(
        replay.chat(&ask("too long")).await,
        Err(LlmError::NotRecorded { .. })
    ));
    // A resumed recording replays the refusal instead of asking again.
    let resumed = RecordingLlm::open(&path, Arc::new(UnreachableLlm)).expect("opens");
    let again = resumed.chat(&ask("too long")).await.expect_err("replayed");
    assert_eq!(again.to_string(), live.to_string());
}

#[test]
fn a_line_with_neither_response_nor_error_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let request = ask("q");
    let key = request_key(&request);
    let text = format!(
        "{}\n",
        json!({"key": key, "request": serde_json::to_value(&request).unwrap()})
    );
    let path = write_cassette(&dir, &text);
    let error = ReplayLlm::open(&path).expect_err("refused");
    assert!(
        error.to_string().contains("a response or an error"),
        "{error}"
    );
}
