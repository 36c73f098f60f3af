//! Answering with a routine, and falling back to the LLM when it fails.
//!
//! An active routine means the operator (or, later, the node's own programmer) decided to serve
//! the protocol with it, so this path makes no LLM call at all: no suitability check, no
//! responder. The routine gets the request body as text and its ok value becomes the reply body,
//! shaped like the request's body as the LLM path shapes its answers.
//!
//! When the routine fails (an error value, a trap, its deadline, its memory cap, or a busy
//! runtime) the failure is recorded on the routine with the request, and the LLM answers instead
//! (`fallback` in the request ledger), unless the node is configured not to fall back: then the
//! peer gets a `failure` reply carrying the routine's error (`routine` in the ledger).
//!
//! A share of the requests a routine answered is checked again by the LLM later (see `shadow`).

use agora_protocol::{ErrorCode, ProtocolHash, Reply, Request};
use agora_store::RequestPath;
use serde_json::Value;

use std::sync::Arc;

use super::programming::FailedRoutine;
use super::receiver::{Outcome, Receiver, reply_body};
use crate::accounting::QueryContext;
use crate::routine_table::ActiveRoutine;
use crate::shadow::ShadowJob;

impl Receiver {
    pub(super) async fn answer_with_routine(
        &self,
        context: &QueryContext,
        request: &Request,
        hash: ProtocolHash,
        active: &Arc<ActiveRoutine>,
    ) -> Outcome {
        let routine = &active.routine;
        tracing::Span::current().record("routine", routine.name.as_str());
        // A sampled request's state is copied before the routine changes it.
        let scratch = self.shadow_scratch(&hash, active).await;
        let error = match active
            .run(&request.body.to_text(), context.observer())
            .await
        {
            Ok(text) => {
                let body = reply_body(&request.body, Value::String(text));
                if let Some(scratch) = scratch {
                    self.queue_shadow_check(ShadowJob {
                        query_id: context.query_id.clone(),
                        routine: active.clone(),
                        request: request.clone(),
                        routine_reply: body.to_text(),
                        scratch,
                    });
                }
                return Outcome {
                    routine_id: Some(routine.id),
                    ..Outcome::new(Reply::success(body), RequestPath::Routine)
                };
            }
            Err(error) => error,
        };
        tracing::warn!(routine = %routine.name, origin = routine.origin.as_str(), %error, "routine failed");
        // An LLM-written routine's failures count toward its retirement, and a compiled one's
        // (most often a request its examples did not cover) compile it again with the LLM's
        // answer (see `receiver_routines`); a human-written routine's are only counted and
        // reported.
        let failed_routine = routine.origin.by_node().then_some(FailedRoutine {
            id: routine.id,
            origin: routine.origin,
        });
        let routine_error = Some(error.to_string());
        if !self.core.config.routines.fallback_to_llm {
            // A routine's error can quote its tools' errors: the peer gets a sentence.
            let failed = Outcome::failed_privately(
                context,
                ErrorCode::HandlerFailed,
                "this node's routine for the protocol failed",
                format!("routine {} failed: {error}", routine.name),
            );
            return Outcome {
                routine_id: Some(routine.id),
                routine_error,
                failed_routine,
                path: RequestPath::Routine,
                ..failed
            };
        }
        // The routine implies the protocol is allowed: no suitability check on the way back.
        let outcome = match self.resolve(request, hash).await {
            Ok(resolved) => self.answer(context, request, Some(&resolved)).await,
            Err(outcome) => outcome,
        };
        Outcome {
            path: RequestPath::Fallback,
            routine_id: Some(routine.id),
            routine_error,
            failed_routine,
            ..outcome
        }
    }
}
