//! The node writing its own receiver routines: learning from LLM-answered requests, what the
//! programmer's job (`node::programming`) does for a protocol, and retiring LLM-written routines
//! that fail at run time.
//!
//! After each single-shot protocol request the LLM answered (directly, or as a routine's
//! fallback) the request, its tool calls and the reply are kept as an example. When the
//! protocol has no active routine and `thresholds.implementation` examples arrived since its
//! last programmer run, a job is queued. The job examines a candidate on every kept example with
//! recorded tool results (see `crate::programmer::exam`). A candidate that answers a valid
//! example with an error reply from a check in its code (`if (!r.value) return { error: ... }`,
//! which rejects a 0) gets that check taken out by the node (`programmer::guard`) and is
//! examined again; the edit is kept only where more examples pass. A pass is stored as a routine
//! of the registry and activated, or, under the `review` activation policy, kept `pending` until
//! the operator approves it; a rejection's reason goes into the protocol's next prompt.
//!
//! An LLM-written routine that has failed `max_routine_failures` times is disabled and the
//! programmer runs again, now with the failing requests among the examples (the fallback
//! answered them). Human-written routines are never touched: their failures are counted on the
//! routine and reported, nothing more; and a candidate finished while a human routine is active
//! for the protocol is stored disabled.

use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{Example, JobReason, ReviewDecision, RoutineOrigin, RoutineStatus};

use super::programming::{
    Compilation, Examination, JobSubject, Kept, Passed, Prepared, examples_to_work_on,
};
use super::programming::{FailedRoutine, Lesson, Programmer};
use crate::config::{Activation, ProgrammerConfig};
use crate::programmer::{
    Job, ProgrammerQueue, Unbuilt, build, compile, depends, exam, guard, load_program, prompt,
};
use crate::responder::Subject;
use crate::routine_registry::{ProtocolInput, RoutineSpec};
use crate::routines::{RoutineEngine, RoutineLimits, RoutineSource};

impl Programmer {
    /// Waits until the programmer has no job waiting or running (tests, orderly shutdown).
    pub(crate) async fn programmer_idle(&self) {
        self.state.queue.idle().await;
    }

    /// Keeps the request's example and decides whether the programmer should run.
    pub(super) async fn learn(&self, query_id: &str, hash: ProtocolHash, lesson: Lesson) {
        let config = &self.core.config.programmer;
        if !config.enabled || self.core.routines.engine().is_none() {
            return;
        }
        if let Some(example) = lesson.example {
            let example = Example {
                id: 0,
                protocol_hash: hash,
                query_id: query_id.to_string(),
                body: example.body,
                tool_calls: example.tool_calls,
                reply: example.reply,
                created_at_ms: self.core.clock.now_ms(),
            };
            let keep = config.max_examples.max(1) as i64;
            if let Err(error) = self
                .core
                .store
                .programming()
                .add_example(&example, keep)
                .await
            {
                tracing::error!(%error, "could not keep an example for the programmer");
                return;
            }
        }
        match lesson.failed_routine {
            // The compiled routine's examples did not cover the request: compile again, now
            // with the LLM's answer among them (free: no LLM call).
            Some(FailedRoutine {
                origin: RoutineOrigin::Compiled,
                ..
            }) => self.enqueue(Job {
                subject: hash,
                reason: JobReason::Uncovered,
            }),
            Some(failed) => self.count_routine_failure(failed.id, hash).await,
            None => {
                let threshold = self.core.config.thresholds.implementation;
                self.consider_programming(hash, threshold).await;
            }
        }
    }

    /// Whether a routine of the protocol waits for the operator's review.
    async fn pending_routine(&self, hash: &ProtocolHash) -> bool {
        match self.core.store.routines().await {
            Ok(routines) => routines
                .iter()
                .any(|r| r.protocol_hash == *hash && r.status == RoutineStatus::Pending),
            Err(error) => {
                tracing::error!(%error, "could not read the routines; no programmer job");
                true
            }
        }
    }

    /// The operator's reason and the rejected source, when the protocol's latest review was a
    /// rejection: the next prompt reads them.
    async fn last_rejection(&self, hash: &ProtocolHash) -> Option<(String, Option<String>)> {
        let reviews = self.core.store.programming().reviews(Some(hash)).await;
        let reviews = reviews
            .inspect_err(|error| tracing::error!(%error, "could not read the reviews"))
            .ok()?;
        let last = reviews.last()?;
        if last.decision != ReviewDecision::Rejected {
            return None;
        }
        let code = self.core.store.routine_code(last.routine_id).await;
        let source = code.ok().flatten().and_then(|code| code.source);
        Some((last.reason.clone(), source))
    }

    /// Retires an LLM-written routine that failed too often, and asks for a new one.
    async fn count_routine_failure(&self, routine_id: i64, hash: ProtocolHash) {
        let max = self.core.config.programmer.max_routine_failures.max(1);
        let routine = match self.core.store.routine(routine_id).await {
            Ok(Some(routine)) => routine,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(%error, "could not read a failing routine");
                return;
            }
        };
        if routine.origin != RoutineOrigin::Llm
            || routine.status != RoutineStatus::Active
            || routine.failures < max
        {
            return;
        }
        tracing::warn!(
            routine = %routine.name,
            failures = routine.failures,
            "deactivating an LLM-written routine that failed too often; rewriting it"
        );
        let now = self.core.clock.now_ms();
        if let Err(error) = self
            .core
            .store
            .set_routine_status(routine.id, RoutineStatus::Disabled, now)
            .await
        {
            tracing::error!(%error, "could not deactivate a failing routine");
            return;
        }
        self.core.sync_after_change().await;
        self.enqueue(Job {
            subject: hash,
            reason: JobReason::Failures,
        });
    }
}

/// What a receiver routine job examines with.
pub(super) struct ReceiverBench {
    examples: Vec<Example>,
    reply_schema: Option<std::sync::Arc<jsonschema::Validator>>,
    /// The tools a routine is granted: those the responder is offered for the protocol.
    granted: Vec<String>,
    /// The protocol document's text (a value it names is no tool's to hard-code).
    document: String,
    /// The protocol is a question ([`crate::routine_table::answers_a_question`]): its routine
    /// may only read.
    question: bool,
}

/// A receiver routine is written for a protocol.
impl JobSubject for ProtocolHash {
    type Key = ProtocolHash;
    type Bench = ReceiverBench;
    type Pass = Vec<u8>;

    const QUERY_PREFIX: &'static str = "programmer";
    const WHAT: &'static str = "routine";

    fn key(&self) -> &ProtocolHash {
        self
    }

    fn protocol_hash(&self) -> ProtocolHash {
        *self
    }

    fn queue(node: &Programmer) -> &ProgrammerQueue<ProtocolHash, Job<ProtocolHash>> {
        &node.state.queue
    }

    fn span(&self, reason: JobReason) -> tracing::Span {
        tracing::info_span!("agora.node.program", protocol_hash = %self, reason = %reason)
    }

    /// An active routine, or one waiting for the operator's review.
    async fn has_routine(&self, node: &Programmer) -> bool {
        node.core.routines.active(self).is_some() || node.pending_routine(self).await
    }

    async fn compiled(
        &self,
        node: &Programmer,
        bench: &ReceiverBench,
    ) -> Option<Compilation<ReceiverBench>> {
        if bench.question
            && let Some(acting) = acting_call(node.core.routines.tools(), &bench.examples)
        {
            return Some(Compilation::Refused {
                report: format!(
                    "refused: the protocol is a question (read-only), and {acting}: a routine \
                     written from these examples would act"
                ),
            });
        }
        let inputs: Vec<compile::Example<'_>> = bench
            .examples
            .iter()
            .map(|example| compile::Example {
                body: &example.body,
                calls: exam::recorded_calls(&example.tool_calls),
                reply: &example.reply,
            })
            .collect();
        let compiled = match compile::compile(&inputs, &bench.document) {
            Ok(compiled) => compiled,
            Err(not) => {
                return Some(Compilation::Nothing {
                    contradicted: matches!(not, compile::NotCompiled::Contradiction { .. }),
                    report: format!("nothing compiled: {not}"),
                });
            }
        };
        let examples: Vec<Example> = compiled
            .examined
            .iter()
            .map(|&index| bench.examples[index].clone())
            .collect();
        let threshold = node.core.config.thresholds.implementation.max(1) as usize;
        let active_source = match node.core.routines.active(self) {
            Some(active) if active.routine.origin == RoutineOrigin::Compiled => node
                .core
                .store
                .routine_code(active.routine.id)
                .await
                .ok()
                .flatten()
                .and_then(|code| code.source),
            _ => None,
        };
        let refused = if compiled.constant {
            Some(
                "it replies the same constant to every example and reads neither the request \
                 nor a tool result: the examples do not show what the reply depends on"
                    .to_string(),
            )
        } else if distinct_bodies(&examples) < threshold {
            Some(format!(
                "it reproduces {} distinct requests, fewer than the {threshold} a routine is \
                 written from",
                distinct_bodies(&examples)
            ))
        } else if active_source.as_deref() == Some(compiled.source.as_str()) {
            Some("it is the active routine's program".to_string())
        } else {
            None
        };
        Some(Compilation::Program {
            summary: compiled.summary(),
            source: compiled.source,
            refused,
            bench: ReceiverBench {
                examples,
                reply_schema: bench.reply_schema.clone(),
                granted: bench.granted.clone(),
                document: bench.document.clone(),
                question: bench.question,
            },
        })
    }

    fn answering_program(&self, node: &Programmer) -> Option<String> {
        node.take_answering_program(self)
    }

    async fn bench(
        &self,
        node: &Programmer,
        document: &VerifiedDocument,
        config: &ProgrammerConfig,
    ) -> Option<Prepared<ReceiverBench>> {
        let limit = config.max_examples.max(1) as i64;
        let (examples, shown) = examples_to_work_on(
            node.core.store.programming().examples(self, limit).await,
            config,
        )?;
        // No routine from fewer distinct requests than the threshold asks for.
        let threshold = node.core.config.thresholds.implementation.max(1) as usize;
        if distinct_bodies(&examples) < threshold {
            tracing::info!(
                distinct = distinct_bodies(&examples),
                threshold,
                "too few distinct examples to write a routine from"
            );
            return None;
        }
        // The tools the responder was offered for this protocol, so the routine is written
        // (and granted) for what the examples could have called.
        let tools = node.core.focus(Subject::Protocol(document)).tools;
        let mut messages = prompt::first_messages(document, &tools, &examples[shown..]);
        if let Some((reason, source)) = node.last_rejection(self).await {
            messages =
                prompt::after_rejection(messages, &reason, source.as_deref(), "handle(body)");
        }
        Some(Prepared {
            examples_upto: examples.last().map(|e| e.id).unwrap_or_default(),
            messages,
            bench: ReceiverBench {
                reply_schema: exam::reply_schema(document.text())
                    .and_then(|schema| jsonschema::validator_for(&schema).ok())
                    .map(std::sync::Arc::new),
                granted: tools.iter().map(|t| t.name.clone()).collect(),
                document: document.text().to_string(),
                question: crate::routine_table::answers_a_question(
                    node.core.routines.read_only(),
                    self,
                    Some(document),
                ),
                examples,
            },
        })
    }

    async fn examine(
        bench: &ReceiverBench,
        engine: &dyn RoutineEngine,
        source: &str,
        limits: RoutineLimits,
    ) -> Examination<Vec<u8>> {
        let examined = examine_candidate(engine, source, bench, limits).await;
        let (source, exam, checks_removed) = match examined {
            Ok(examined) => examined,
            Err(unbuilt) => return Examination::Unbuilt(unbuilt),
        };
        let mut report = exam.summary();
        for condition in &checks_removed {
            report.push_str(&format!(
                "; the node took out the check `if ({condition})`, which rejected a valid example"
            ));
        }
        let mut feedback = exam.feedback();
        let mut passed = exam.passed();
        // Passing every example is not enough for a candidate that hard-codes a tool's value,
        // nor for one whose reply depends on nothing.
        if passed && let Some(problem) = exam::hard_coded(&source, &bench.examples, &bench.document)
        {
            report.push_str(&format!("; rejected: {problem}"));
            feedback = problem;
            passed = false;
        }
        if passed
            && let Some(problem) = ignores_everything(engine, &source, bench, &exam, limits).await
        {
            report.push_str(&format!("; rejected: {problem}"));
            feedback = format!(
                "{problem}. Compute the reply from the request and the tool results, as the \
                 protocol document says."
            );
            passed = false;
        }
        // Only a candidate that passed is kept, so only it is built into a component.
        let pass = if passed {
            match build(engine, &source).await {
                Ok(component) => Some(component),
                Err(unbuilt) => return Examination::Unbuilt(unbuilt),
            }
        } else {
            None
        };
        Examination::Examined {
            source,
            report,
            feedback,
            pass,
        }
    }

    async fn keep_routine(
        &self,
        node: &Programmer,
        bench: &ReceiverBench,
        passed: Passed<Vec<u8>>,
    ) -> Result<Kept, String> {
        let hash = *self;
        let spec = RoutineSpec {
            name: format!(
                "{}-{}-{}",
                passed.origin.as_str(),
                &hash.to_hex()[..8],
                &passed.job_id[..8]
            ),
            protocol: ProtocolInput::Hash(hash),
            source: RoutineSource::JavaScript(passed.source),
            tools: bench.granted.clone(),
            limits: passed.limits,
            origin: passed.origin,
            activate: !node.core.human_routine_active(&hash).await,
        };
        let activate = spec.activate;
        // A routine for the protocol: code as action gets a fresh start if it is retired.
        let failures = super::receiver::acting_failures_of(&hash);
        if let Err(error) = node.core.store.reset_counter(&failures).await {
            tracing::warn!(%error, "could not reset the code-as-action failures");
        }
        let review = node.core.config.programmer.activation_for(&hash) == Activation::Review;
        let routine = node
            .core
            .routines()
            .add_built(spec, passed.pass, review)
            .await
            .map_err(|error| error.to_string())?;
        tracing::info!(routine = %routine.name, attempt = passed.attempt, status = %routine.status, "the programmer wrote a routine");
        let note = if review {
            Some("; waiting for the operator's review")
        } else {
            (!activate).then_some("; stored disabled: a human-written routine serves this protocol")
        };
        Ok(Kept {
            routine_id: routine.id,
            note,
        })
    }

    async fn passed(node: &Programmer) {
        node.core.sync_after_change().await;
    }
}

/// How many different request bodies `examples` hold.
fn distinct_bodies(examples: &[Example]) -> usize {
    let mut bodies: Vec<&str> = examples.iter().map(|e| e.body.trim()).collect();
    bodies.sort_unstable();
    bodies.dedup();
    bodies.len()
}

/// Checks the programmer takes out of one candidate at most (see [`guard`]).
const MAX_CHECKS_REMOVED: usize = 3;

/// A candidate as examined: its source (maybe edited), report and the conditions of the checks
/// taken out.
type Examined = (String, exam::ExamReport, Vec<String>);

/// Loads and examines `source`. While the candidate answers a valid example with an
/// error reply that a check in its code returns, the check is taken out and the result examined
/// again; an edit is kept only when more examples pass.
async fn examine_candidate(
    engine: &dyn RoutineEngine,
    source: &str,
    bench: &ReceiverBench,
    limits: RoutineLimits,
) -> Result<Examined, Unbuilt> {
    let report = load_and_examine(engine, source, bench, limits).await?;
    let mut best = (source.to_string(), report);
    let mut checks_removed = Vec::new();
    'edits: while checks_removed.len() < MAX_CHECKS_REMOVED {
        let Some(message) = best
            .1
            .rejected_valid_request()
            .as_ref()
            .and_then(guard::error_text)
        else {
            break;
        };
        // Several checks may return the same text: try each until one helps.
        for (edited, condition) in guard::without_rejecting_checks(&best.0, &message) {
            if let Ok(report) = load_and_examine(engine, &edited, bench, limits).await
                && report.passed_count() > best.1.passed_count()
            {
                best = (edited, report);
                checks_removed.push(condition);
                continue 'edits;
            }
        }
        break;
    }
    let (source, report) = best;
    Ok((source, report, checks_removed))
}

/// [`depends::ignores_everything`] for a candidate that passed its examples.
async fn ignores_everything(
    engine: &dyn RoutineEngine,
    source: &str,
    bench: &ReceiverBench,
    exam: &exam::ExamReport,
    limits: RoutineLimits,
) -> Option<String> {
    let replies: Vec<serde_json::Value> = exam
        .results
        .iter()
        .filter_map(|result| result.got.as_ref().ok())
        .map(|text| serde_json::from_str(text).unwrap_or(serde_json::Value::String(text.clone())))
        .collect();
    let loaded = load_program(engine, source).await.ok()?;
    depends::ignores_everything(loaded.as_ref(), &bench.examples, &replies, limits).await
}

async fn load_and_examine(
    engine: &dyn RoutineEngine,
    source: &str,
    bench: &ReceiverBench,
    limits: RoutineLimits,
) -> Result<exam::ExamReport, Unbuilt> {
    let loaded = load_program(engine, source).await?;
    let report = exam::examine(
        loaded.as_ref(),
        &bench.examples,
        bench.reply_schema.as_deref(),
        limits,
    )
    .await;
    Ok(report)
}

/// The first tool call of `examples` not known only to read, described for a report.
fn acting_call(tools: &crate::tools::ToolRegistry, examples: &[Example]) -> Option<String> {
    examples.iter().enumerate().find_map(|(index, example)| {
        exam::recorded_calls(&example.tool_calls)
            .into_iter()
            .find(|call| tools.changes_state(&call.tool, &call.arguments) != Some(false))
            .map(|call| {
                format!(
                    "example {} called {} with {}, which may change something",
                    index + 1,
                    call.tool,
                    crate::text::clip_to(&call.arguments.to_string(), 160)
                )
            })
    })
}
