//! The node as a sender: running a task against another agent.
//!
//! This is the first rungs of the sender's ladder: natural language, or a protocol the caller
//! names. The querier (see `crate::sender`) writes the body with the LLM and reads the reply into
//! the task's output schema; every call goes to the ledger (`conversation` category) under one
//! query id per task run. A natural-language message that left out some of the data gets the
//! data appended (`sender::with_all_data`). Choosing a protocol by itself, negotiating and sender-side routines
//! are the ladder's later rungs.

use agora_llm::ChatRequest;
use agora_protocol::VerifiedDocument;
use serde_json::Value;
use tracing::Instrument;

use super::ladder::Sender;
use crate::accounting::{Category, QueryContext};
use crate::sender::{self, Answer, SendError, SendOutcome};
use crate::task::Task;

impl Sender {
    /// Runs `task` with `data` against the agent at `target` (its Agora endpoint URL): in
    /// natural language, or under `protocol` (with the `sources` peers can fetch it from).
    pub(crate) async fn send(
        &self,
        target: &str,
        task: &Task,
        data: &Value,
        protocol: Option<(&VerifiedDocument, &[String])>,
    ) -> Result<SendOutcome, SendError> {
        crate::task::validate(&task.input_schema, data).map_err(SendError::InvalidInput)?;
        let context = QueryContext::new(
            format!("send-{}", uuid::Uuid::new_v4().simple()),
            protocol.map(|(document, _)| document.hash()),
        );
        let span = tracing::info_span!(
            "agora.node.send",
            task = %task.name,
            target,
            query_id = %context.query_id,
            protocol_hash = protocol.map(|(d, _)| d.hash().to_hex()).unwrap_or_default(),
        );
        self.send_in(&context, target, task, data, protocol)
            .instrument(span)
            .await
    }

    async fn send_in(
        &self,
        context: &QueryContext,
        target: &str,
        task: &Task,
        data: &Value,
        protocol: Option<(&VerifiedDocument, &[String])>,
    ) -> Result<SendOutcome, SendError> {
        let config = &self.core.config.sender;
        let compose = match protocol {
            Some((document, _)) => sender::compose_for_protocol(task, data, document),
            None => sender::compose_natural(task, data),
        };
        let written = self
            .core
            .chat(
                Category::Conversation,
                context,
                &ChatRequest::new(compose).max_tokens(config.max_tokens),
            )
            .await?;
        let body = sender::unfence(&written.content);
        let body = match protocol {
            Some(_) => body,
            None => sender::with_all_data(&body, data),
        };
        let envelope = match protocol {
            Some((document, sources)) => sender::envelope(Some(document), sources, &body),
            None => sender::envelope(None, &[], &body),
        };
        let answer = match protocol {
            None => self.post_natural(target, &envelope, &body).await?,
            Some(_) => self.post_agora(target, &envelope).await?,
        };
        let (reply, negotiation_requested) = match answer {
            Answer::Success(reply, requested) => (reply, requested),
            Answer::Rejected(message) => return Err(SendError::Rejected(message)),
            Answer::Failure(message) => return Err(SendError::Failed(message)),
        };
        let read = ChatRequest::new(sender::read_reply(task, data, &reply))
            .json_schema("task_output", task.output_schema.clone())
            .max_tokens(config.max_tokens);
        let response = self
            .core
            .chat(Category::Conversation, context, &read)
            .await?;
        let output: Value = serde_json::from_str(response.content.trim())
            .map_err(|e| SendError::InvalidOutput(format!("not JSON: {e}")))?;
        crate::task::validate(&task.output_schema, &output).map_err(SendError::InvalidOutput)?;
        let tally = context.tally();
        tracing::info!(llm_calls = tally.calls, "task answered");
        let outcome = SendOutcome {
            output,
            reply_body: reply,
            llm_calls: tally.calls,
            llm_tokens: tally.prompt_tokens + tally.completion_tokens,
            llm_cost_usd: tally.cost_usd,
            negotiation_requested,
        };
        if let Some((document, _)) = protocol {
            let key = agora_store::SenderKey {
                target: target.to_string(),
                task: task.name.clone(),
                protocol_hash: document.hash(),
            };
            self.programmer
                .keep_sender_example(key, task, data, &body, &outcome)
                .await;
        }
        Ok(outcome)
    }
}
