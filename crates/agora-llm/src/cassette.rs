//! Record/replay cassettes: JSONL files of LLM calls.
//!
//! Demos and CI must be reproducible without a model, and a long recording
//! run that crashes must not start over. A cassette is one JSON line per
//! call, `{"key", "request", "response"}`, where the key is the SHA-256 of
//! the request's canonical JSON ([`request_key`]).
//!
//! The same request may be sent several times in a run (two peers asking the
//! same question); each key therefore holds a FIFO queue of answers, served
//! in recorded order.
//!
//! - [`ReplayLlm`] answers only from the file and fails loudly with
//!   [`LlmError::NotRecorded`] for anything else, so a replayed run can never
//!   silently reach a model.
//! - [`RecordingLlm`] is resumable: it serves what the file already holds,
//!   sends the rest to the inner model, and appends each new call durably
//!   (fsync) before returning it.
//!
//! Replayed responses keep their recorded usage and latency, so the ledger
//! of a replayed run equals the recorded one.
//!
//! A call the endpoint refused for good (an API error that is not transient,
//! such as a prompt over the context size, or an undecodable answer) is
//! recorded as `{"key", "request", "error"}` and replayed as the same error,
//! because the run went on without that answer. Transient failures (endpoint
//! down, timeout, 5xx, 429) are not recorded: a resumed recording asks again.
//!
//! Crash safety: a write is one line ending in `\n`, so a crash can only
//! tear the last line. Loading ignores a torn last line with a warning;
//! recording truncates it away before appending.
//!
//! A cassette whose name ends in `.gz` is gzip-compressed JSONL: the form a
//! long recording is committed in (the calls repeat prompts, so it shrinks
//! about fifteenfold). [`ReplayLlm`] reads it; [`RecordingLlm`] refuses it,
//! since appending needs the plain file (`gunzip -k` it to resume).

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::{ChatRequest, ChatResponse, Llm, LlmError};

/// The cassette key of a request: the lowercase hex SHA-256 of its canonical
/// JSON (the serde form of [`ChatRequest`] with every object's keys sorted,
/// so a schema built in a different key order gets the same key).
pub fn request_key(request: &ChatRequest) -> String {
    let mut value = serde_json::to_value(request)
        .expect("ChatRequest is plain data with string keys and always serializes");
    value.sort_all_objects();
    let digest = Sha256::digest(value.to_string().as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// One line of a cassette, as read: a response or a recorded refusal.
#[derive(Deserialize)]
struct Entry {
    key: String,
    request: ChatRequest,
    #[serde(default)]
    response: Option<ChatResponse>,
    #[serde(default)]
    error: Option<RecordedError>,
}

/// One line of a cassette, as written (borrows, to avoid clones).
#[derive(Serialize)]
struct EntryRef<'a> {
    key: &'a str,
    request: &'a ChatRequest,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a ChatResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RecordedError>,
}

/// A refusal worth recording: one the same request would meet again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum RecordedError {
    Api {
        status: Option<u16>,
        message: String,
    },
    BadResponse {
        message: String,
    },
}

impl RecordedError {
    /// The error to record, if `error` is one (see the module docs).
    fn of(error: &LlmError) -> Option<RecordedError> {
        if error.is_transient() {
            return None;
        }
        match error {
            LlmError::Api { status, message } => Some(RecordedError::Api {
                status: *status,
                message: message.clone(),
            }),
            LlmError::BadResponse(message) => Some(RecordedError::BadResponse {
                message: message.clone(),
            }),
            _ => None,
        }
    }

    fn to_error(&self) -> LlmError {
        match self {
            RecordedError::Api { status, message } => LlmError::Api {
                status: *status,
                message: message.clone(),
            },
            RecordedError::BadResponse { message } => LlmError::BadResponse(message.clone()),
        }
    }
}

/// A recorded outcome.
type Answer = Result<ChatResponse, RecordedError>;

/// The recorded answers of a cassette, consumed in order per key.
#[derive(Debug, Default)]
struct Answers {
    queues: Mutex<HashMap<String, VecDeque<Answer>>>,
}

impl Answers {
    fn push(&self, key: String, answer: Answer) {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.entry(key).or_default().push_back(answer);
    }

    /// The next recorded outcome for `key`, as the call's result.
    fn take(&self, key: &str) -> Option<Result<ChatResponse, LlmError>> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues
            .get_mut(key)
            .and_then(VecDeque::pop_front)
            .map(|answer| answer.map_err(|error| error.to_error()))
    }

    fn remaining(&self) -> usize {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.values().map(VecDeque::len).sum()
    }
}

/// What loading a cassette file found.
struct Loaded {
    answers: Answers,
    /// The model of the first recorded response.
    first_model: Option<String>,
    /// Bytes of the file that hold complete lines; a torn tail starts here.
    valid_len: u64,
    /// The last complete line lacks its `\n` (it must be added before
    /// appending).
    needs_newline: bool,
}

/// Parses cassette bytes. Only the last non-blank line may be broken (a torn
/// write); a broken line before it means a corrupt file.
fn parse(path: &Path, bytes: &[u8]) -> Result<Loaded, LlmError> {
    let answers = Answers::default();
    let mut first_model = None;
    let mut valid_len = 0;
    let mut needs_newline = false;
    let mut mismatched_keys = 0usize;
    let mut offset = 0;
    let mut line_number = 0;
    while offset < bytes.len() {
        line_number += 1;
        let (line, next) = match bytes[offset..].iter().position(|&byte| byte == b'\n') {
            Some(end) => (&bytes[offset..offset + end], offset + end + 1),
            None => (&bytes[offset..], bytes.len()),
        };
        let has_newline = next > offset + line.len();
        offset = next;
        if line.iter().all(u8::is_ascii_whitespace) {
            if has_newline {
                valid_len = offset as u64;
            }
            continue;
        }
        match serde_json::from_slice::<Entry>(line) {
            Ok(entry) => {
                let key = request_key(&entry.request);
                if key != entry.key {
                    mismatched_keys += 1;
                }
                let answer = match (entry.response, entry.error) {
                    (Some(response), None) => Ok(response),
                    (None, Some(error)) => Err(error),
                    _ => {
                        return Err(LlmError::Cassette(format!(
                            "{}: line {line_number} must hold a response or an error",
                            path.display()
                        )));
                    }
                };
                if let Ok(response) = &answer {
                    first_model.get_or_insert_with(|| response.model.clone());
                }
                answers.push(key, answer);
                valid_len = offset as u64;
                needs_newline = !has_newline;
            }
            Err(error) if bytes[offset..].iter().all(u8::is_ascii_whitespace) => {
                tracing::warn!(
                    cassette = %path.display(),
                    line = line_number,
                    %error,
                    "ignoring a torn last line (interrupted write)"
                );
                break;
            }
            Err(error) => {
                return Err(LlmError::Cassette(format!(
                    "{}: line {line_number} is not a cassette entry: {error}",
                    path.display()
                )));
            }
        }
    }
    if mismatched_keys > 0 {
        tracing::warn!(
            cassette = %path.display(),
            entries = mismatched_keys,
            "stored keys differ from the recomputed request keys; using the recomputed ones"
        );
    }
    Ok(Loaded {
        answers,
        first_model,
        valid_len,
        needs_newline,
    })
}

/// Whether `path` names a gzip-compressed cassette (`….gz`).
fn is_gzip(path: &Path) -> bool {
    path.extension().is_some_and(|extension| extension == "gz")
}

/// Decompresses a gzip cassette (every member, as `cat a.gz b.gz` makes).
fn gunzip(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, LlmError> {
    let mut plain = Vec::with_capacity(bytes.len().saturating_mul(16));
    std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(bytes), &mut plain)
        .map_err(|error| io_error(path, "decompressing", error))?;
    Ok(plain)
}

fn io_error(path: &Path, action: &str, error: std::io::Error) -> LlmError {
    LlmError::Cassette(format!("{action} {}: {error}", path.display()))
}

/// An [`Llm`] that answers only from a cassette.
#[derive(Debug)]
pub struct ReplayLlm {
    path: PathBuf,
    answers: Answers,
    model: String,
}

impl ReplayLlm {
    /// Loads the cassette at `path` (gzip-compressed if it ends in `.gz`); a
    /// missing or corrupt file is an [`LlmError::Cassette`].
    pub fn open(path: impl AsRef<Path>) -> Result<ReplayLlm, LlmError> {
        let path = path.as_ref().to_path_buf();
        let bytes = std::fs::read(&path).map_err(|error| io_error(&path, "reading", error))?;
        let bytes = if is_gzip(&path) {
            gunzip(&path, &bytes)?
        } else {
            bytes
        };
        let loaded = parse(&path, &bytes)?;
        Ok(ReplayLlm {
            model: loaded.first_model.unwrap_or_else(|| "replay".to_owned()),
            answers: loaded.answers,
            path,
        })
    }

    /// The cassette file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many recorded answers have not been served yet.
    pub fn remaining(&self) -> usize {
        self.answers.remaining()
    }
}

#[async_trait::async_trait]
impl Llm for ReplayLlm {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let key = request_key(request);
        self.answers
            .take(&key)
            .unwrap_or(Err(LlmError::NotRecorded { key }))
    }

    /// The model of the first recorded call ("replay" for an empty cassette),
    /// so a replayed ledger names the model that was recorded.
    fn model(&self) -> String {
        self.model.clone()
    }
}

/// The append side of a recording cassette.
struct Appender {
    file: tokio::fs::File,
    /// Length of the file up to the last complete line.
    len: u64,
}

/// An [`Llm`] that replays what a cassette holds and records the rest.
pub struct RecordingLlm {
    path: PathBuf,
    answers: Answers,
    inner: Arc<dyn Llm>,
    appender: tokio::sync::Mutex<Appender>,
}

impl std::fmt::Debug for RecordingLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingLlm")
            .field("path", &self.path)
            .field("inner_model", &self.inner.model())
            .field("remaining", &self.answers.remaining())
            .finish_non_exhaustive()
    }
}

impl RecordingLlm {
    /// Opens (or creates, with its parent folders) the cassette at `path`.
    /// Calls already in the file are served first; a torn last line is cut
    /// off so new lines append cleanly. A `.gz` path is refused.
    pub fn open(path: impl AsRef<Path>, inner: Arc<dyn Llm>) -> Result<RecordingLlm, LlmError> {
        let path = path.as_ref().to_path_buf();
        if is_gzip(&path) {
            return Err(LlmError::Cassette(format!(
                "{}: a gzip cassette is for replay only; record to the plain file \
                 (`gunzip -k` it to resume) and compress it when the run is done",
                path.display()
            )));
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(io_error(&path, "reading", error)),
        };
        let loaded = parse(&path, &bytes)?;
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent)
                .map_err(|error| io_error(parent, "creating folder", error))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|error| io_error(&path, "opening", error))?;
        let mut len = loaded.valid_len;
        if len < bytes.len() as u64 {
            file.set_len(len)
                .map_err(|error| io_error(&path, "truncating the torn line of", error))?;
        }
        if loaded.needs_newline {
            std::io::Write::write_all(&mut file, b"\n")
                .map_err(|error| io_error(&path, "writing", error))?;
            len += 1;
        }
        file.sync_data()
            .map_err(|error| io_error(&path, "syncing", error))?;
        Ok(RecordingLlm {
            path,
            answers: loaded.answers,
            inner,
            appender: tokio::sync::Mutex::new(Appender {
                file: tokio::fs::File::from_std(file),
                len,
            }),
        })
    }

    /// The cassette file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many recorded answers have not been replayed yet.
    pub fn remaining(&self) -> usize {
        self.answers.remaining()
    }

    /// Appends one call and syncs it to disk. The file is first cut back to
    /// its last complete line, which undoes the partial write of an append
    /// that was cancelled (its caller dropped the future mid-write).
    async fn append(
        &self,
        key: &str,
        request: &ChatRequest,
        answer: Result<&ChatResponse, &RecordedError>,
    ) -> Result<(), LlmError> {
        let mut line = serde_json::to_string(&EntryRef {
            key,
            request,
            response: answer.ok(),
            error: answer.err(),
        })
        .map_err(|error| LlmError::Cassette(format!("encoding an entry: {error}")))?;
        line.push('\n');
        let path = &self.path;
        let mut appender = self.appender.lock().await;
        let len = appender.len;
        appender
            .file
            .set_len(len)
            .await
            .map_err(|error| io_error(path, "truncating", error))?;
        appender
            .file
            .write_all(line.as_bytes())
            .await
            .map_err(|error| io_error(path, "appending to", error))?;
        appender
            .file
            .flush()
            .await
            .map_err(|error| io_error(path, "appending to", error))?;
        appender
            .file
            .sync_data()
            .await
            .map_err(|error| io_error(path, "syncing", error))?;
        appender.len = len + line.len() as u64;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Llm for RecordingLlm {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let key = request_key(request);
        if let Some(answer) = self.answers.take(&key) {
            return answer;
        }
        match self.inner.chat(request).await {
            Ok(response) => {
                self.append(&key, request, Ok(&response)).await?;
                Ok(response)
            }
            Err(error) => {
                if let Some(recorded) = RecordedError::of(&error) {
                    self.append(&key, request, Err(&recorded)).await?;
                }
                Err(error)
            }
        }
    }

    fn model(&self) -> String {
        self.inner.model()
    }
}

#[cfg(test)]
mod tests;
