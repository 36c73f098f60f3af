//! The node as an A2A agent (A2A v1.0, JSON-RPC binding), and the only crate that names the
//! `a2a` crates.
//!
//! - [`card`]: the agent card served at `/.well-known/agent-card.json`, built from the node's
//!   description, its tasks and the protocols it supports (one skill each);
//! - [`front`]: the JSON-RPC methods `SendMessage`, `SendStreamingMessage`, `GetTask` and
//!   `CancelTask`, answered by the node's engine. The HTTP around them (the route, the edge's
//!   budgets, body limit and deadline, the SSE framing) is the server crate's: this crate takes
//!   bytes and gives JSON values, so no framework type leaves it;
//! - [`tasks`]: messages answered as tasks that run while the client waits on a stream (status
//!   updates from the engine's steps) or polls with `GetTask` (`returnImmediately`);
//! - [`sender`]: the node as an A2A client. Its natural-language messages to an A2A agent (one
//!   whose card does not declare the Agora extension) are `SendMessage` calls.
//!
//! # SDK
//!
//! The types are the official Rust SDK's, `a2a-lf` 0.4 (A2A 1.0: `ROLE_USER`,
//! `TASK_STATE_COMPLETED`, parts as `{"text"}`/`{"data"}`, results wrapped as `{"task"}` or
//! `{"message"}`), so the wire shapes are the SDK's and not a second reading of the spec. Its
//! server framework, `a2a-server-lf` 0.5, is not used: it has no feature to leave out its gRPC
//! binding, so it brings tonic, prost, pbjson and the generated `a2a-pb` crate, and a second
//! `tower-http` (0.7 beside the workspace's 0.6); and its executor and task store would keep
//! tasks apart from the node's conversations, which are what replicas share. The JSON-RPC
//! binding here is small: one request object in, one response object (or a few SSE events)
//! out.
//!
//! # Mapping
//!
//! - A message of text parts is a natural-language Agora request (`protocolHash: null`) that
//!   opens a multiround conversation: the conversation is the A2A task (task id = context id =
//!   conversation id). It is stored by the node, so it survives a restart, is shared by
//!   replicas and expires with the conversation (`conversations.idle_timeout_secs`). While it
//!   lives the task is `TASK_STATE_INPUT_REQUIRED`: the node has answered and takes the next
//!   message. A message with its `taskId` (or only its `contextId`) continues it.
//! - A message whose one data part is an Agora request envelope (`protocolHash`,
//!   `protocolSources`, `body`, optionally `multiround`) is a request under that protocol
//!   document; this is the Agora extension, declared in the card by [`EXTENSION_URI`]. A
//!   single-shot one (the default) may be answered by the protocol's routine without an LLM,
//!   and is answered with a `Message` (A2A's shape for an answer that is not a task); a
//!   multiround one opens a task as above.
//! - `CancelTask` ends the conversation: the answer is the task `TASK_STATE_CANCELED`, and the
//!   id is unknown from then on.
//! - A failed or refused answer is a task in `TASK_STATE_FAILED` or `TASK_STATE_REJECTED`
//!   whose status message says why (the node's sentence, never an internal error); a new
//!   task that fails is not stored.
//! - Every message the engine answers is in the request ledger with channel `a2a`.
//!
//! # Left out of the spec
//!
//! Sending: only natural language (the sender's first rung and `send_message`), one
//! `SendMessage` call per message, without streaming or polling. Serving: push notifications
//! (`-32003`), `ListTasks`, `SubscribeToTask`, the extended card (`-32004`/`-32007`), file parts
//! (`raw`, `url`: `-32005`), the gRPC and HTTP+JSON bindings, card signatures and security schemes
//! (the node's edge authentication, when configured, applies as to `POST /`).

pub mod card;
pub mod front;
pub mod sender;
pub mod tasks;

pub use card::agent_card;
pub use front::{A2aFront, Answer, Call, Limits, Started, error_response, stream_event};
pub use sender::A2aSender;

/// The URI of the Agora extension in the agent card: a data part holding an Agora request
/// envelope is a request under that protocol document.
pub const EXTENSION_URI: &str = "https://agora-protocol.org/extensions/a2a/v1";

/// Where the JSON-RPC interface is served, under the node's public URL.
pub const JSONRPC_PATH: &str = "/a2a";

/// Where the agent card is served.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
