//! Compiling a routine from what the LLM did, with no LLM call.
//!
//! The small model answers a protocol's requests well step by step (its tool loop) and writes
//! them down as code badly. Its answers are kept as examples: the request, the tool calls with
//! their arguments and results, the reply. This module writes the routine those answers are
//! instances of:
//! 1. each example becomes a trace ([`trace`]): every argument and reply value with the
//!    expressions that explain it (a request field, an earlier result, a template, a date some
//!    days on, a constant);
//! 2. the traces merge into one program ([`tree`]): the same calls in the same order are one
//!    step, with the expression all examples allow; where examples go different ways after a
//!    result (it failed, it was empty, a short value or an id's shape differed), a branch on it;
//!    the majority decides what the protocol document does not name (an extra reply member,
//!    another statement) and the left-out examples are reported; a disagreement on what it
//!    names with nothing to tell the examples apart is a contradiction: no program;
//! 3. the program is written as JavaScript with a comment per step naming its examples
//!    ([`emit`]). After every call it checks that the result is like the examples' (guards);
//!    a request its examples do not cover fails (`uncovered: ...`), and the node answers it with
//!    the LLM, which teaches the next compile.
//!
//! Pure code: examples and the document's text in, a program or the reason for none out. The
//! programmer examines the program like any candidate (`node::programming`).

mod emit;
mod expr;
mod trace;
mod tree;

use crate::programmer::exam::RecordedCall;

/// One example as the compiler reads it.
pub(crate) struct Example<'a> {
    pub(crate) body: &'a str,
    pub(crate) calls: Vec<RecordedCall>,
    pub(crate) reply: &'a str,
}

/// A compiled program.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Compiled {
    pub(crate) source: String,
    /// The examples (indexes into those given) it reproduces: its examination's.
    pub(crate) examined: Vec<usize>,
    /// The examples the majority left out, with why.
    pub(crate) left_out: Vec<(usize, String)>,
    /// The tools it calls.
    pub(crate) tools: Vec<String>,
    /// Whether it replies one constant to every example and reads neither the request nor a
    /// result to decide anything: the examples do not show what its reply depends on.
    pub(crate) constant: bool,
}

impl Compiled {
    /// One paragraph for the attempt's report.
    pub(crate) fn summary(&self) -> String {
        let mut text = format!(
            "compiled from {} with no LLM",
            tree::numbers(&self.examined)
        );
        if !self.left_out.is_empty() {
            let reasons: Vec<String> = self.left_out.iter().map(|(_, why)| why.clone()).fold(
                Vec::new(),
                |mut distinct, why| {
                    if !distinct.contains(&why) {
                        distinct.push(why);
                    }
                    distinct
                },
            );
            text.push_str(&format!(
                "; the majority left out {} ({})",
                tree::numbers(&self.left_out.iter().map(|(e, _)| *e).collect::<Vec<_>>()),
                reasons.join("; ")
            ));
        }
        text
    }
}

/// Why nothing was compiled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NotCompiled {
    NoExamples,
    /// Some requests are JSON and some are text.
    MixedRequests,
    /// Examples disagree, in the same situation, on what the protocol document names.
    Contradiction {
        member: String,
        groups: Vec<Vec<usize>>,
    },
}

impl std::fmt::Display for NotCompiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotCompiled::NoExamples => write!(f, "no examples to compile from"),
            NotCompiled::MixedRequests => {
                write!(
                    f,
                    "the examples' requests are JSON in some and text in others"
                )
            }
            NotCompiled::Contradiction { member, groups } => {
                let groups: Vec<String> = groups.iter().map(|g| tree::numbers(g)).collect();
                write!(
                    f,
                    "the examples contradict each other on {member}, which the protocol document \
                     names, with nothing in their tool results to tell them apart: {}",
                    groups.join(" against ")
                )
            }
        }
    }
}

/// The program `examples` are instances of, for the protocol `document`.
pub(crate) fn compile(examples: &[Example<'_>], document: &str) -> Result<Compiled, NotCompiled> {
    if examples.is_empty() {
        return Err(NotCompiled::NoExamples);
    }
    let traces: Vec<trace::Trace> = examples
        .iter()
        .map(|example| trace::Trace::of(example.body, &example.calls, example.reply))
        .collect();
    let json_request = traces[0].json_request;
    if traces
        .iter()
        .any(|trace| trace.json_request != json_request)
    {
        return Err(NotCompiled::MixedRequests);
    }
    let mut builder = tree::Builder::new(&traces, document);
    let mut program = builder
        .build((0..traces.len()).collect(), 0)
        .map_err(|contradiction| NotCompiled::Contradiction {
            member: contradiction.member,
            groups: contradiction.groups,
        })?;
    tree::guard(&mut program, &traces);
    let left_out: Vec<(usize, String)> = builder.left_out.into_iter().collect();
    let examined: Vec<usize> = (0..traces.len())
        .filter(|e| !left_out.iter().any(|(left, _)| left == e))
        .collect();
    let mut tools = Vec::new();
    collect_tools(&program, &mut tools);
    Ok(Compiled {
        source: emit::javascript(&program, json_request, examples.len()),
        constant: constant(&program),
        examined,
        left_out,
        tools,
    })
}

fn collect_tools(node: &tree::Node, out: &mut Vec<String>) {
    match node {
        tree::Node::Call {
            tool, failed, next, ..
        } => {
            if !out.contains(tool) {
                out.push(tool.clone());
            }
            if let Some(failed) = failed {
                collect_tools(failed, out);
            }
            collect_tools(next, out);
        }
        tree::Node::Skip { next, .. } => collect_tools(next, out),
        tree::Node::Split { arms, .. } => arms.iter().for_each(|arm| collect_tools(&arm.node, out)),
        tree::Node::Return { .. } => {}
    }
}

/// No branch, a constant reply, and no call that reads the request.
fn constant(node: &tree::Node) -> bool {
    match node {
        tree::Node::Call {
            arguments,
            failed,
            next,
            ..
        } => {
            let mut reads = Vec::new();
            arguments.reads(&mut reads);
            failed.is_none()
                && !reads
                    .iter()
                    .any(|path| matches!(path.root, expr::Root::Request | expr::Root::Body))
                && constant(next)
        }
        tree::Node::Skip { next, .. } => constant(next),
        tree::Node::Split { .. } => false,
        tree::Node::Return { reply, .. } => reply.is_constant(),
    }
}

#[cfg(test)]
mod tests;
