//! The JSON-RPC binding: one request object in, a response object (or a stream's events) out.
//!
//! [`A2aFront::parse`] reads the bytes into a [`Call`] or a JSON-RPC error response, before
//! anything is budgeted; the server then applies its limits and calls [`A2aFront::answer`].
//! Errors follow JSON-RPC and A2A: `-32700` a body that is not JSON, `-32600` not a request
//! object, `-32601` an unknown method, `-32602` params that do not fit (and parts over
//! [`Limits`]), `-32001` an unknown or expired task, `-32002` a task that cannot be canceled,
//! `-32003`/`-32004`/`-32007` spec methods this node does not offer, `-32005` file parts.
//! Messages are sentences a client can act on: no internal URLs, no OS errors (the node's
//! failure replies already keep those for its log).

use a2a::{
    A2AError, Artifact, CancelTaskRequest, GetTaskRequest, Message, Part, PartContent, Role,
    SendMessageRequest, SendMessageResponse, StreamResponse, Task, TaskArtifactUpdateEvent,
    TaskState, TaskStatus, TaskStatusUpdateEvent, error_code, methods,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agora_node::{Client, FollowUpError, Node, RequestHooks, Speaker, Transcript};
use agora_protocol::{Body, ErrorCode, FollowUp, ProtocolRef, Reply, Request, Status};
use agora_store::ConversationKind;
use agora_telemetry::conventions as conv;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::tasks::{EVENT_BUFFER, Progress, RunningTasks};

/// The channel A2A requests are recorded under in the request ledger.
pub const CHANNEL: &str = "a2a";

/// Bounds on one message, inside the server's body limit.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most bytes of text and data in one message's parts.
    pub max_message_bytes: usize,
    /// Most parts in one message.
    pub max_parts: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_message_bytes: 64 * 1024,
            max_parts: 16,
        }
    }
}

/// The node's A2A front: one per node, cheap to clone.
#[derive(Clone)]
pub struct A2aFront {
    node: Node,
    limits: Limits,
    tasks: RunningTasks,
}

/// A parsed JSON-RPC call.
#[derive(Debug, Clone)]
pub struct Call {
    id: Value,
    method: Method,
}

#[derive(Debug, Clone)]
enum Method {
    Send {
        inbound: Inbound,
        streaming: bool,
        /// `returnImmediately`: the task at once, its answer by `GetTask`.
        return_immediately: bool,
        history_length: Option<usize>,
    },
    Get {
        task_id: String,
        history_length: Option<usize>,
    },
    Cancel {
        task_id: String,
    },
}

/// What a message asks of the engine.
#[derive(Debug, Clone)]
enum Inbound {
    /// A new request (natural language, or the Agora extension's envelope).
    Request {
        request: Request,
        context_id: Option<String>,
        text: String,
    },
    /// The next message of an existing task.
    FollowUp { task_id: String, body: Body },
}

/// A call started as a task (see [`A2aFront::start`]).
pub enum Started {
    /// It could not start: the JSON-RPC error response to send.
    Answered(Value),
    /// It runs.
    Running {
        /// The response to send at once for `returnImmediately`: the task, working.
        first: Value,
        /// The JSON-RPC id the stream's responses carry.
        response_id: Value,
        /// Whether the client asked for a stream.
        streaming: bool,
        /// Whether the client asked for the task at once (`returnImmediately`): the stream, if
        /// any, then carries only the task, and the client reads the rest with `GetTask`.
        return_immediately: bool,
        /// The task's events (the task, its steps, its answer), for a stream.
        events: mpsc::Receiver<StreamResponse>,
        /// The work, for the caller to run; it ends the task.
        work: Pin<Box<dyn Future<Output = ()> + Send>>,
    },
}

/// One stream event as the JSON-RPC response object the client reads.
pub fn stream_event(response_id: &Value, event: &StreamResponse) -> Value {
    success(response_id, event)
}

/// What the server sends back.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// One JSON-RPC response object.
    Json(Value),
    /// JSON-RPC response objects, one per server-sent event.
    Events(Vec<Value>),
}

impl Call {
    /// The request's id, for an error the server answers in its place.
    pub fn id(&self) -> &Value {
        &self.id
    }

    /// The A2A method the call named.
    pub fn method_name(&self) -> &'static str {
        match &self.method {
            Method::Send {
                streaming: true, ..
            } => "SendStreamingMessage",
            Method::Send { .. } => "SendMessage",
            Method::Get { .. } => "GetTask",
            Method::Cancel { .. } => "CancelTask",
        }
    }

    /// The span the call is answered in, named by its method; the task and its state are
    /// recorded when the call ends (see [`record_outcome`]).
    fn span(&self) -> tracing::Span {
        let method = self.method_name();
        tracing::info_span!(
            "agora.a2a.call",
            { conv::OTEL_NAME } = method,
            { conv::A2A_METHOD_NAME } = method,
            { conv::JSONRPC_REQUEST_ID } = %self.id,
            { conv::A2A_TASK_ID } = tracing::field::Empty,
            { conv::A2A_TASK_STATE } = tracing::field::Empty,
            { conv::CONVERSATION_ID } = tracing::field::Empty,
            { conv::ERROR_TYPE } = tracing::field::Empty,
            { conv::OTEL_STATUS } = tracing::field::Empty,
        )
    }

    /// Whether answering may take the node's LLM (a message not served by a routine).
    pub fn may_use_llm(&self, node: &Node) -> bool {
        match &self.method {
            Method::Send {
                inbound: Inbound::Request { request, .. },
                ..
            } => !node.serves_with_routine(request),
            Method::Send { .. } => true,
            Method::Get { .. } | Method::Cancel { .. } => false,
        }
    }

    /// Whether the call is a message answered as a task that runs while the client waits on
    /// its stream or polls (see [`crate::tasks`]): a natural-language message or a task's next
    /// message, sent as a stream or with `returnImmediately`. An Agora request under a protocol
    /// is answered at once as before (a routine answers it in milliseconds, and A2A answers it
    /// with a message, not a task).
    pub fn runs_as_task(&self) -> bool {
        match &self.method {
            Method::Send {
                inbound,
                streaming,
                return_immediately,
                ..
            } => {
                (*streaming || *return_immediately)
                    && match inbound {
                        Inbound::Request { request, .. } => {
                            request.protocol == ProtocolRef::NaturalLanguage
                        }
                        Inbound::FollowUp { .. } => true,
                    }
            }
            _ => false,
        }
    }

    /// Whether the answer is a stream of events.
    pub fn is_streaming(&self) -> bool {
        matches!(
            self.method,
            Method::Send {
                streaming: true,
                ..
            }
        )
    }
}

/// Records on an A2A span what the call's responses (one, or a stream's events in order) say:
/// the task and context they name, the task's last state, or the JSON-RPC error's code.
fn record_outcome(span: &tracing::Span, responses: &[Value]) {
    let (mut task, mut state, mut context) = (None, None, None);
    for response in responses {
        if let Some(code) = response.pointer("/error/code") {
            agora_telemetry::record_error(span, &code.to_string());
            return;
        }
        let Some(result) = response.get("result") else {
            continue;
        };
        let object = ["task", "statusUpdate", "artifactUpdate", "message"]
            .iter()
            .find_map(|key| result.get(*key))
            .unwrap_or(result);
        let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_string);
        task = text("taskId").or_else(|| text("id")).or(task);
        context = text("contextId").or(context);
        state = object
            .pointer("/status/state")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or(state);
    }
    if let Some(task) = task {
        span.record(conv::A2A_TASK_ID, task);
    }
    if let Some(state) = state {
        span.record(conv::A2A_TASK_STATE, state);
    }
    if let Some(context) = context {
        span.record(conv::CONVERSATION_ID, context);
    }
}

/// A JSON-RPC error response.
pub fn error_response(id: &Value, code: i32, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    })
}

fn success(id: &Value, result: impl serde::Serialize) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": serde_json::to_value(result).unwrap_or(Value::Null),
    })
}

fn failure(id: &Value, error: A2AError) -> Value {
    error_response(id, error.code, &error.message)
}

impl A2aFront {
    /// The front of `node`, taking messages within `limits`.
    pub fn new(node: Node, limits: Limits) -> Self {
        Self {
            node,
            limits,
            tasks: RunningTasks::default(),
        }
    }

    /// The agent card (see [`crate::card`]).
    pub async fn card(&self) -> Result<Value, agora_node::NodeError> {
        crate::card::agent_card(&self.node).await
    }

    /// Reads one JSON-RPC request, or the error response to send instead.
    pub fn parse(&self, bytes: &[u8]) -> Result<Call, Value> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            error_response(
                &Value::Null,
                error_code::PARSE_ERROR,
                &format!("the body is not JSON: {e}"),
            )
        })?;
        let invalid =
            |id: &Value, message: &str| error_response(id, error_code::INVALID_REQUEST, message);
        let Value::Object(object) = value else {
            return Err(invalid(
                &Value::Null,
                "expected one JSON-RPC request object (batches are not supported)",
            ));
        };
        let id = match object.get("id") {
            Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
            Some(Value::Null) | None => {
                return Err(invalid(
                    &Value::Null,
                    "the request has no id (notifications are not supported)",
                ));
            }
            Some(_) => return Err(invalid(&Value::Null, "the id must be a string or a number")),
        };
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(invalid(&id, "\"jsonrpc\" must be \"2.0\""));
        }
        let Some(method) = object.get("method").and_then(Value::as_str) else {
            return Err(invalid(&id, "\"method\" must be a string"));
        };
        let params = object.get("params").cloned().unwrap_or(Value::Null);
        let method = self.method(method, params).map_err(|e| failure(&id, e))?;
        Ok(Call { id, method })
    }

    fn method(&self, method: &str, params: Value) -> Result<Method, A2AError> {
        fn params_of<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, A2AError> {
            serde_json::from_value(params)
                .map_err(|e| A2AError::invalid_params(format!("invalid params: {e}")))
        }
        let history = |n: Option<i32>| -> Result<Option<usize>, A2AError> {
            n.map(|n| {
                usize::try_from(n)
                    .map_err(|_| A2AError::invalid_params("historyLength must not be negative"))
            })
            .transpose()
        };
        match method {
            methods::SEND_MESSAGE | methods::SEND_STREAMING_MESSAGE => {
                let request: SendMessageRequest = params_of(params)?;
                let history_length = history(
                    request
                        .configuration
                        .as_ref()
                        .and_then(|c| c.history_length),
                )?;
                if request
                    .configuration
                    .as_ref()
                    .is_some_and(|c| c.task_push_notification_config.is_some())
                {
                    return Err(A2AError::push_notification_not_supported());
                }
                let return_immediately = request
                    .configuration
                    .as_ref()
                    .and_then(|c| c.return_immediately)
                    .unwrap_or(false);
                Ok(Method::Send {
                    inbound: self.inbound(request.message)?,
                    streaming: method == methods::SEND_STREAMING_MESSAGE,
                    return_immediately,
                    history_length,
                })
            }
            methods::GET_TASK => {
                let request: GetTaskRequest = params_of(params)?;
                Ok(Method::Get {
                    history_length: history(request.history_length)?,
                    task_id: request.id,
                })
            }
            methods::CANCEL_TASK => {
                let request: CancelTaskRequest = params_of(params)?;
                Ok(Method::Cancel {
                    task_id: request.id,
                })
            }
            methods::CREATE_PUSH_CONFIG
            | methods::GET_PUSH_CONFIG
            | methods::LIST_PUSH_CONFIGS
            | methods::DELETE_PUSH_CONFIG => Err(A2AError::push_notification_not_supported()),
            methods::GET_EXTENDED_AGENT_CARD => Err(A2AError::extended_card_not_configured()),
            methods::LIST_TASKS | methods::SUBSCRIBE_TO_TASK => Err(
                A2AError::unsupported_operation(format!("{method} is not offered by this agent")),
            ),
            other => Err(A2AError::method_not_found(other)),
        }
    }

    /// A message's parts as an Agora request or follow-up.
    fn inbound(&self, message: Message) -> Result<Inbound, A2AError> {
        if message.parts.is_empty() {
            return Err(A2AError::invalid_params("the message has no parts"));
        }
        if message.parts.len() > self.limits.max_parts {
            return Err(A2AError::invalid_params(format!(
                "the message has {} parts; this agent takes at most {}",
                message.parts.len(),
                self.limits.max_parts
            )));
        }
        let mut size = 0;
        for part in &message.parts {
            size += match &part.content {
                PartContent::Text(text) => text.len(),
                PartContent::Data(data) => data.to_string().len(),
                PartContent::Raw(_) | PartContent::Url(_) => {
                    return Err(A2AError::new(
                        error_code::CONTENT_TYPE_NOT_SUPPORTED,
                        "file parts (raw, url) are not supported; send text or data parts",
                    ));
                }
            };
        }
        if size > self.limits.max_message_bytes {
            return Err(A2AError::invalid_params(format!(
                "the message's parts hold {size} bytes; this agent takes at most {} bytes \
                 in one message",
                self.limits.max_message_bytes
            )));
        }
        let envelope = message.parts.iter().find_map(|part| match &part.content {
            PartContent::Data(data) if data.get("protocolHash").is_some() => Some(data),
            _ => None,
        });
        let task_id = message.task_id.clone().filter(|id| !id.is_empty());
        if let Some(envelope) = envelope {
            if message.parts.len() != 1 {
                return Err(A2AError::invalid_params(
                    "a data part holding an Agora request must be the message's only part",
                ));
            }
            if task_id.is_some() {
                return Err(A2AError::invalid_params(
                    "an Agora request starts a task; continue a task with text or data parts",
                ));
            }
            let request = Request::from_json(envelope).map_err(|e| {
                A2AError::invalid_params(format!("the data part is not an Agora request: {e}"))
            })?;
            if request.protocol == ProtocolRef::Negotiation {
                return Err(A2AError::invalid_params(
                    "negotiations are not offered over A2A; use the node's Agora endpoint",
                ));
            }
            let text = request.body.to_text();
            return Ok(Inbound::Request {
                request,
                context_id: message.context_id,
                text,
            });
        }
        let body = match message.parts.as_slice() {
            [
                Part {
                    content: PartContent::Data(data),
                    ..
                },
            ] => Body::Json(data.clone()),
            // Raw and URL parts were refused above.
            _ => Body::Text(text_of(&message)),
        };
        if body.to_text().trim().is_empty() {
            return Err(A2AError::invalid_params("the message is empty"));
        }
        if let Some(task_id) = task_id {
            // Checked when the follow-up is answered: an unknown task is `-32001`.
            return Ok(Inbound::FollowUp { task_id, body });
        }
        // A context id alone continues a task only if it names a live one (a client may name a
        // context of its own); that is checked when the message is answered.
        Ok(Inbound::Request {
            text: body.to_text(),
            request: natural(body),
            context_id: message.context_id.filter(|id| !id.is_empty()),
        })
    }

    /// Answers a call; never fails (every outcome is a JSON-RPC response).
    pub async fn answer(&self, call: Call, client: Option<&Client>) -> Answer {
        let span = call.span();
        let answer = self
            .answer_call(call, client)
            .instrument(span.clone())
            .await;
        match &answer {
            Answer::Json(response) => record_outcome(&span, std::slice::from_ref(response)),
            Answer::Events(events) => record_outcome(&span, events),
        }
        answer
    }

    async fn answer_call(&self, call: Call, client: Option<&Client>) -> Answer {
        let id = call.id.clone();
        match call.method {
            Method::Send {
                inbound,
                streaming,
                history_length,
                ..
            } => match match self.refuse_while_working(&inbound) {
                Ok(()) => {
                    let hooks = RequestHooks::through(CHANNEL);
                    self.send(inbound, client, history_length, hooks).await
                }
                Err(error) => Err(error),
            } {
                Ok(response) if streaming => {
                    Answer::Events(events(response).iter().map(|e| success(&id, e)).collect())
                }
                Ok(response) => Answer::Json(success(&id, response)),
                Err(error) if streaming => Answer::Events(vec![failure(&id, error)]),
                Err(error) => Answer::Json(failure(&id, error)),
            },
            Method::Get {
                task_id,
                history_length,
            } => Answer::Json(match self.task(&task_id).await {
                Ok(task) => success(&id, trimmed(task, history_length)),
                Err(error) => failure(&id, error),
            }),
            Method::Cancel { task_id } => Answer::Json(match self.cancel(&task_id).await {
                Ok(task) => success(&id, task),
                Err(error) => failure(&id, error),
            }),
        }
    }

    /// Starts a call that [`Call::runs_as_task`]: the task's first state to return at once
    /// (`returnImmediately`), its events for a stream, and the work, which the caller runs (on
    /// a task of its own, within its limits) and which ends the task. A second call while the
    /// task works on its previous message, or more running tasks than [`crate::tasks::MAX_TASKS`],
    /// is answered with an error at once (the [`Started::Answered`] response).
    pub async fn start(&self, call: Call, client: Option<Client>) -> Started {
        let span = call.span();
        let started = self
            .start_call(call, client, span.clone())
            .instrument(span.clone())
            .await;
        if let Started::Answered(response) = &started {
            record_outcome(&span, std::slice::from_ref(response));
        }
        started
    }

    async fn start_call(&self, call: Call, client: Option<Client>, span: tracing::Span) -> Started {
        let id = call.id.clone();
        let Method::Send {
            inbound,
            streaming,
            return_immediately,
            history_length,
        } = call.method
        else {
            let error = A2AError::invalid_request("only a message runs as a task");
            return Started::Answered(failure(&id, error));
        };
        if let Err(error) = self.refuse_while_working(&inbound) {
            return Started::Answered(failure(&id, error));
        }
        // The task's id is known before the engine answers: a live context's, or a new one that
        // the conversation then opens under.
        let (inbound, task_id, text, new) = match inbound {
            Inbound::Request {
                request,
                context_id,
                text,
            } => {
                let live = match &context_id {
                    Some(context) => match self.live_task(context).await {
                        Ok(live) => live,
                        Err(error) => return Started::Answered(failure(&id, error)),
                    },
                    None => false,
                };
                match context_id {
                    Some(context) if live => {
                        let body = request.body;
                        let inbound = Inbound::FollowUp {
                            task_id: context.clone(),
                            body,
                        };
                        (inbound, context, text, false)
                    }
                    _ => {
                        let inbound = Inbound::Request {
                            request,
                            context_id: None,
                            text: text.clone(),
                        };
                        (inbound, uuid::Uuid::new_v4().to_string(), text, true)
                    }
                }
            }
            Inbound::FollowUp { task_id, body } => {
                let text = body.to_text();
                (
                    Inbound::FollowUp {
                        task_id: task_id.clone(),
                        body,
                    },
                    task_id,
                    text,
                    false,
                )
            }
        };
        let submitted = unstored_task(&task_id, &text, TaskState::Submitted, None);
        if !self.tasks.start(submitted.clone()) {
            let error = A2AError::internal("this agent is running too many tasks; retry later");
            return Started::Answered(failure(&id, error));
        }
        let (events, receiver) = mpsc::channel(EVENT_BUFFER);
        let progress = Arc::new(Progress {
            task_id: task_id.clone(),
            tasks: self.tasks.clone(),
            events: events.clone(),
        });
        let mut working = submitted.clone();
        working.status.state = TaskState::Working;
        let first = success(&id, SendMessageResponse::Task(working));
        let front = self.clone();
        let work_span = span.clone();
        let work = async move {
            let _ = events
                .send(StreamResponse::Task(trimmed(submitted, history_length)))
                .await;
            progress.working("The agent is working on your message.");
            let observer: Arc<dyn agora_node::Observer> = progress;
            let hooks = RequestHooks {
                observer: Some(observer),
                conversation_id: new.then(|| task_id.clone()),
                channel: Some(CHANNEL),
            };
            let answered = front
                .send(inbound, client.as_ref(), history_length, hooks)
                .await;
            let task = match answered {
                Ok(SendMessageResponse::Task(task)) => task,
                Ok(SendMessageResponse::Message(message)) => {
                    let reply = Reply::success(Body::Text(text_of(&message)));
                    unstored_task(&task_id, &text, TaskState::Completed, Some(&reply))
                }
                Err(error) => {
                    let reply = Reply::failure(ErrorCode::HandlerFailed, error.message.clone());
                    unstored_task(&task_id, &text, TaskState::Failed, Some(&reply))
                }
            };
            front.tasks.finish(task.clone());
            if let Ok(task) = serde_json::to_value(&task) {
                record_outcome(&span, &[json!({ "result": task })]);
            }
            for event in events_after_snapshot(task) {
                let _ = events.send(event).await;
            }
        }
        .instrument(work_span);
        Started::Running {
            first,
            events: receiver,
            response_id: id,
            streaming,
            return_immediately,
            work: Box::pin(work),
        }
    }

    /// Ends a started task that did not finish (its work was stopped at the node's deadline).
    pub fn abandon(&self, task_id_of_first: &Value, reason: &str) {
        let Some(task_id) = task_id_of_first
            .pointer("/result/task/id")
            .and_then(Value::as_str)
        else {
            return;
        };
        if self.tasks.is_running(task_id) {
            let reply = Reply::failure(ErrorCode::HandlerFailed, reason.to_string());
            let mut task = self
                .tasks
                .get(task_id)
                .unwrap_or_else(|| unstored_task(task_id, "", TaskState::Failed, Some(&reply)));
            task.status = TaskStatus {
                state: TaskState::Failed,
                message: Some(agent_message(
                    vec![Part::text(reason.to_string())],
                    Some(task_id),
                )),
                timestamp: None,
            };
            self.tasks.finish(task);
        }
    }

    /// An error when `inbound` continues a task that is still working on its last message.
    fn refuse_while_working(&self, inbound: &Inbound) -> Result<(), A2AError> {
        let task_id = match inbound {
            Inbound::Request {
                context_id: Some(id),
                ..
            }
            | Inbound::FollowUp { task_id: id, .. } => id,
            Inbound::Request { .. } => return Ok(()),
        };
        if self.tasks.is_running(task_id) {
            return Err(A2AError::invalid_request(format!(
                "task {task_id} is still working on its last message; send the next one when \
                 it asks for input"
            )));
        }
        Ok(())
    }

    /// A task by id: one running (or just finished) here, else the stored conversation.
    async fn task(&self, id: &str) -> Result<Task, A2AError> {
        if self.tasks.is_running(id)
            && let Some(task) = self.tasks.get(id)
        {
            return Ok(task);
        }
        match self.transcript(id).await {
            Ok(transcript) => Ok(task_of(&transcript, TaskState::InputRequired, None)),
            Err(error) => self.tasks.get(id).ok_or(error),
        }
    }

    async fn send(
        &self,
        inbound: Inbound,
        client: Option<&Client>,
        history_length: Option<usize>,
        hooks: RequestHooks,
    ) -> Result<SendMessageResponse, A2AError> {
        let (reply, text, continued) = match inbound {
            Inbound::Request {
                request,
                context_id: Some(context_id),
                text,
            } if self.live_task(&context_id).await? => {
                let follow_up = FollowUp { body: request.body };
                (
                    self.follow_up(&context_id, follow_up, client, hooks)
                        .await?,
                    text,
                    Some(context_id),
                )
            }
            Inbound::Request {
                mut request, text, ..
            } => {
                if request.protocol == ProtocolRef::NaturalLanguage {
                    request.multiround = true;
                }
                let reply = self.node.handle_hooked(request, client, hooks).await;
                (reply, text, None)
            }
            Inbound::FollowUp { task_id, body } => {
                let text = body.to_text();
                let reply = self
                    .follow_up(&task_id, FollowUp { body }, client, hooks)
                    .await?;
                (reply, text, Some(task_id))
            }
        };
        let task_id = continued.or_else(|| reply.conversation_id.clone());
        let Some(task_id) = task_id else {
            // A single-shot answer: a message, or a task that failed and is not stored.
            return Ok(match reply.status {
                Status::Success => SendMessageResponse::Message(agent_message(
                    reply.body.as_ref().map(parts_of).unwrap_or_default(),
                    None,
                )),
                _ => {
                    let task_id = uuid::Uuid::new_v4().to_string();
                    let mut task = unstored_task(&task_id, &text, state_of(&reply), Some(&reply));
                    task = trimmed(task, history_length);
                    SendMessageResponse::Task(task)
                }
            });
        };
        let transcript = self.transcript(&task_id).await?;
        let task = match reply.status {
            Status::Success => task_of(&transcript, TaskState::InputRequired, None),
            _ => task_of(&transcript, state_of(&reply), Some(refusal(&reply))),
        };
        Ok(SendMessageResponse::Task(trimmed(task, history_length)))
    }

    async fn follow_up(
        &self,
        task_id: &str,
        follow_up: FollowUp,
        client: Option<&Client>,
        hooks: RequestHooks,
    ) -> Result<Reply, A2AError> {
        match self
            .node
            .follow_up_hooked(task_id, follow_up, client, hooks)
            .await
        {
            Ok(reply) => Ok(reply),
            Err(FollowUpError::NotFound) => Err(A2AError::task_not_found(task_id)),
        }
    }

    /// Whether `id` names a task that can take a message.
    async fn live_task(&self, id: &str) -> Result<bool, A2AError> {
        match self.node.transcript(id).await {
            Ok(found) => Ok(found.is_some_and(|t| t.kind != ConversationKind::Negotiation)),
            Err(error) => Err(store_failed(error)),
        }
    }

    /// The live conversation behind task `id`.
    async fn transcript(&self, id: &str) -> Result<Transcript, A2AError> {
        match self.node.transcript(id).await {
            Ok(Some(transcript)) if transcript.kind != ConversationKind::Negotiation => {
                Ok(transcript)
            }
            Ok(_) => Err(A2AError::task_not_found(id)),
            Err(error) => Err(store_failed(error)),
        }
    }

    async fn cancel(&self, id: &str) -> Result<Task, A2AError> {
        let transcript = match self.node.transcript(id).await {
            Ok(Some(transcript)) => transcript,
            Ok(None) => return Err(A2AError::task_not_found(id)),
            Err(error) => return Err(store_failed(error)),
        };
        if transcript.kind == ConversationKind::Negotiation {
            return Err(A2AError::new(
                error_code::TASK_NOT_CANCELABLE,
                format!(
                    "{id} is a protocol negotiation with another agent, which A2A clients \
                     cannot cancel"
                ),
            ));
        }
        self.node
            .close_conversation(id)
            .await
            .map_err(store_failed)?;
        Ok(task_of(&transcript, TaskState::Canceled, None))
    }
}

fn store_failed(error: agora_node::NodeError) -> A2AError {
    tracing::error!(%error, "the A2A front could not read a conversation");
    A2AError::internal("this agent's store failed; retry later")
}

/// A natural-language request with `body`.
fn natural(body: Body) -> Request {
    Request {
        protocol: ProtocolRef::NaturalLanguage,
        hash_dialect: Default::default(),
        sources: Vec::new(),
        body,
        multiround: true,
    }
}

/// The A2A parts of an Agora body: text, or data.
fn parts_of(body: &Body) -> Vec<Part> {
    match body {
        Body::Text(text) => vec![Part::text(text.clone())],
        Body::Json(value) => vec![Part::data(value.clone())],
    }
}

fn agent_message(parts: Vec<Part>, task_id: Option<&str>) -> Message {
    let mut message = Message::new(Role::Agent, parts);
    message.task_id = task_id.map(str::to_string);
    message.context_id = task_id.map(str::to_string);
    message
}

/// The sentence of a failure or refusal reply.
fn refusal(reply: &Reply) -> String {
    reply
        .error
        .clone()
        .unwrap_or_else(|| "the agent could not answer".into())
}

fn state_of(reply: &Reply) -> TaskState {
    match (reply.status, reply.code) {
        (Status::Success, _) => TaskState::Completed,
        (Status::Rejected, _) | (_, Some(ErrorCode::ProtocolRejected)) => TaskState::Rejected,
        _ => TaskState::Failed,
    }
}

/// The task of a live conversation, in `state`; its status message is `note` if given, else the
/// node's last turn, which is also the task's artifact.
fn task_of(transcript: &Transcript, state: TaskState, note: Option<String>) -> Task {
    let id = &transcript.id;
    let history: Vec<Message> = transcript
        .turns
        .iter()
        .enumerate()
        .map(|(index, (speaker, text))| {
            let mut message = Message::new(
                match speaker {
                    Speaker::Peer => Role::User,
                    Speaker::Node => Role::Agent,
                },
                vec![Part::text(text.clone())],
            );
            message.message_id = format!("{id}-{index}");
            message.task_id = Some(id.clone());
            message.context_id = Some(id.clone());
            message
        })
        .collect();
    let last_answer = history
        .iter()
        .rev()
        .find(|m| m.role == Role::Agent)
        .cloned();
    let status_message = match note {
        Some(note) => Some(agent_message(vec![Part::text(note)], Some(id))),
        None => last_answer.clone(),
    };
    Task {
        id: id.clone(),
        context_id: id.clone(),
        status: TaskStatus {
            state,
            message: status_message,
            timestamp: None,
        },
        artifacts: last_answer.map(|answer| {
            vec![Artifact {
                artifact_id: format!("{id}-answer"),
                name: Some("answer".into()),
                description: None,
                parts: answer.parts,
                metadata: None,
                extensions: None,
            }]
        }),
        history: Some(history),
        metadata: None,
    }
}

/// A task with no stored conversation (yet): the message `text` asked, in `state`, with the
/// reply's sentence (its answer, or why it failed) as the status message if there is one.
fn unstored_task(id: &str, text: &str, state: TaskState, reply: Option<&Reply>) -> Task {
    let mut asked = Message::new(Role::User, vec![Part::text(text.to_string())]);
    asked.task_id = Some(id.to_string());
    asked.context_id = Some(id.to_string());
    let said = reply.map(|reply| match reply.status {
        Status::Success => reply.body.as_ref().map(Body::to_text).unwrap_or_default(),
        _ => refusal(reply),
    });
    Task {
        id: id.to_string(),
        context_id: id.to_string(),
        status: TaskStatus {
            state,
            message: said.map(|said| agent_message(vec![Part::text(said)], Some(id))),
            timestamp: None,
        },
        artifacts: None,
        history: Some(vec![asked]),
        metadata: None,
    }
}

/// The task with only its newest `length` history messages (all when `None`).
fn trimmed(mut task: Task, length: Option<usize>) -> Task {
    if let (Some(length), Some(history)) = (length, task.history.as_mut()) {
        let excess = history.len().saturating_sub(length);
        history.drain(..excess);
    }
    task
}

/// The text of a message's parts.
fn text_of(message: &Message) -> String {
    message
        .parts
        .iter()
        .map(|part| match &part.content {
            PartContent::Text(text) => text.clone(),
            PartContent::Data(data) => data.to_string(),
            PartContent::Raw(_) | PartContent::Url(_) => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A finished task's events after its first snapshot: its answer as an artifact, and its final
/// status.
fn events_after_snapshot(task: Task) -> Vec<StreamResponse> {
    events(SendMessageResponse::Task(task))
        .into_iter()
        .skip(1)
        .collect()
}

/// A send's answer as stream events: a message alone; a task as its snapshot while working,
/// its answer as an artifact, and its final status.
fn events(response: SendMessageResponse) -> Vec<StreamResponse> {
    let task = match response {
        SendMessageResponse::Message(message) => return vec![StreamResponse::Message(message)],
        SendMessageResponse::Task(task) => task,
    };
    let mut working = task.clone();
    working.status = TaskStatus {
        state: TaskState::Working,
        message: None,
        timestamp: None,
    };
    working.artifacts = None;
    if let Some(history) = working.history.as_mut()
        && history.last().is_some_and(|m| m.role == Role::Agent)
    {
        history.pop();
    }
    let mut events = vec![StreamResponse::Task(working)];
    for artifact in task.artifacts.clone().unwrap_or_default() {
        events.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            artifact,
            append: Some(false),
            last_chunk: Some(true),
            metadata: None,
        }));
    }
    events.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id,
        context_id: task.context_id,
        status: task.status,
        metadata: None,
    }));
    events
}
