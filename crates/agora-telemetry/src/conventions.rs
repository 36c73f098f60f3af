//! The names this node's spans carry: OpenTelemetry's GenAI semantic conventions as of
//! semantic-conventions v1.41.0 (`docs/gen-ai/`, the last release before those conventions moved
//! to their own repository; status "Development"), and agora's own `agora.*` attributes.
//!
//! Every span and attribute name used on the request path is a constant here, so a test or a
//! dashboard query names them in one way. `tracing` macros take a constant field name in braces:
//! `info_span!("agora.llm.chat", { OPERATION_NAME } = CHAT)`.

/// The special `tracing-opentelemetry` field that sets the exported span's name.
pub const OTEL_NAME: &str = "otel.name";
/// The special field that sets the span kind (`client`, `server`, `internal`).
pub const OTEL_KIND: &str = "otel.kind";
/// The special field that sets the span status (`ok`, `error`).
pub const OTEL_STATUS: &str = "otel.status_code";

/// `gen_ai.operation.name`: what the span does (the values below).
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// The operation of a node answering a request.
pub const INVOKE_AGENT: &str = "invoke_agent";
/// The operation of one LLM call.
pub const CHAT: &str = "chat";
/// The operation of one tool call.
pub const EXECUTE_TOOL: &str = "execute_tool";

/// `gen_ai.provider.name`: who serves the model (`openai` for an OpenAI-compatible endpoint).
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`: the model asked for.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.model`: the model that answered.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.request.temperature`.
pub const REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
/// `gen_ai.request.seed`.
pub const REQUEST_SEED: &str = "gen_ai.request.seed";
/// `gen_ai.request.max_tokens`.
pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// `gen_ai.usage.input_tokens`: prompt tokens, the cached ones included.
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`: completion tokens.
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.usage.cache_read.input_tokens`: prompt tokens read from the model's cache.
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// `gen_ai.response.finish_reasons`: why the model stopped (`stop`, `length`, `tool_calls`).
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.input.messages`: the prompt, only when content capture is on.
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// `gen_ai.output.messages`: the completion, only when content capture is on.
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";

/// `gen_ai.agent.name`: the node's name.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.conversation.id`: a multiround conversation's id.
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.tool.name`.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.type`: `function` for the node's tools.
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// `server.address`: the peer a client span calls (an agent's URL).
pub const SERVER_ADDRESS: &str = "server.address";
/// `error.type`: the class of a failure.
pub const ERROR_TYPE: &str = "error.type";

/// `jsonrpc.request.id`: the id of a JSON-RPC request (A2A, MCP).
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";

/// `a2a.method.name`: the A2A JSON-RPC method (`SendMessage`, `GetTask`, ...); also the A2A
/// span's name. The A2A names follow the draft in open-telemetry/semantic-conventions-genai
/// pull request 195 (not merged when written), with `gen_ai.conversation.id` for the context.
pub const A2A_METHOD_NAME: &str = "a2a.method.name";
/// `a2a.task.id`: the task a call created, continued or read.
pub const A2A_TASK_ID: &str = "a2a.task.id";
/// `a2a.task.state`: the task's state when the call ended, as the wire writes it.
pub const A2A_TASK_STATE: &str = "a2a.task.state";

/// `mcp.method.name`: the MCP method (`tools/call`); the MCP span is named
/// `{mcp.method.name} {gen_ai.tool.name}` (semantic-conventions v1.41.0, `docs/gen-ai/mcp.md`).
pub const MCP_METHOD_NAME: &str = "mcp.method.name";

/// `agora.protocol.hash`: the SHA-1 of the request's protocol document.
pub const PROTOCOL_HASH: &str = "agora.protocol.hash";
/// `agora.query.id`: the node's id of this request in its ledgers.
pub const QUERY_ID: &str = "agora.query.id";
/// `agora.path`: how the node answered (`routine`, `llm`, `code`, `natural`, ...).
pub const PATH: &str = "agora.path";
/// `agora.routine.name`: the routine that answered or ran.
pub const ROUTINE: &str = "agora.routine.name";
/// `agora.routine.id`: the routine's id in the node's store.
pub const ROUTINE_ID: &str = "agora.routine.id";
/// `agora.routine.origin`: who wrote the routine (a person, the LLM programmer, the compiler).
pub const ROUTINE_ORIGIN: &str = "agora.routine.origin";
/// `agora.llm.category`: the ledger category of an LLM call (`conversation`, `negotiation`, ...).
pub const LLM_CATEGORY: &str = "agora.llm.category";
/// `agora.llm.cost_usd`: the call's cost as the ledger priced it.
pub const LLM_COST_USD: &str = "agora.llm.cost_usd";
/// `agora.tool.caller`: who called a tool (`llm`, `routine`).
pub const TOOL_CALLER: &str = "agora.tool.caller";

/// The name an `invoke_agent` span is exported under.
pub fn invoke_agent_name(agent: &str) -> String {
    format!("{INVOKE_AGENT} {agent}")
}

/// The name a `chat` span is exported under.
pub fn chat_name(model: &str) -> String {
    format!("{CHAT} {model}")
}

/// The name an `execute_tool` span is exported under.
pub fn execute_tool_name(tool: &str) -> String {
    format!("{EXECUTE_TOOL} {tool}")
}
