//! The merged program written as JavaScript for people to review: a comment per step saying
//! which examples it came from, and small named helpers for what the steps share.

use serde_json::Value;

use super::expr::Path;
use super::tree::{Feature, Guard, Node, numbers};

/// The helpers a program may use, by name, in the order they are written.
const HELPERS: &[(&str, &str)] = &[
    (
        "uncovered",
        "// No example covers this request: the node answers it with its LLM instead.\n\
function uncovered(what) {\n  throw new Error(\"uncovered: \" + what);\n}\n",
    ),
    (
        "need",
        "// A call that succeeded in every example; a failure is not covered.\n\
function need(tool, args) {\n  try {\n    return callTool(tool, args);\n  } catch (error) {\n    \
uncovered(tool + \" failed, which it did in no example: \" + (error && error.message));\n  }\n}\n",
    ),
    (
        "attempt",
        "// A call that failed in some examples: its result, or that it failed.\n\
function attempt(tool, args) {\n  try {\n    return { failed: false, result: callTool(tool, args) };\n  } \
catch (error) {\n    return { failed: true, error: String(error && error.message) };\n  }\n}\n",
    ),
    (
        "isEmpty",
        "function isEmpty(value) {\n  return value === null || value === undefined || value === \"\" ||\n    \
(Array.isArray(value) ? value.length === 0 : typeof value === \"object\" && Object.keys(value).length === 0);\n}\n",
    ),
    (
        "shape",
        "// An id's shape: L for a letter, D for a digit.\n\
function shape(value) {\n  return String(value).replace(/\\p{L}/gu, \"L\").replace(/[0-9]/g, \"D\");\n}\n",
    ),
    (
        "addDays",
        "function addDays(date, days) {\n  const day = new Date(String(date) + \"T00:00:00Z\");\n  \
day.setUTCDate(day.getUTCDate() + days);\n  return day.toISOString().slice(0, 10);\n}\n",
    ),
    (
        "part",
        "function part(text, separator, index) {\n  return String(text).split(separator)[index];\n}\n",
    ),
    (
        "round",
        "// Arithmetic without binary noise (30 * 1.44 is 43.2, not 43.199999999999996).\n\
function round(value) {\n  return Number(value.toPrecision(12));\n}\n",
    ),
];

/// The program's source.
pub(crate) fn javascript(tree: &Node, json_request: bool, examples: usize) -> String {
    let mut body = String::new();
    let mut used = vec!["uncovered"];
    if json_request {
        body.push_str("  const request = JSON.parse(body);\n");
    }
    write_node(tree, 1, &mut body, &mut used);
    let mut source = format!(
        "// Compiled by the node, with no LLM, from {examples} examples of its LLM's answers to \
this protocol\n// (numbered as in the examination report): each step says which examples \
it came from. A\n// request unlike all of them is left to the LLM, and becomes an example \
too.\n\n"
    );
    for (name, text) in HELPERS {
        if used.contains(name) {
            source.push_str(text);
            source.push('\n');
        }
    }
    source.push_str("function handle(body) {\n");
    source.push_str(&body);
    source.push_str("}\n");
    source
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

fn line(out: &mut String, depth: usize, text: &str) {
    out.push_str(&indent(depth));
    out.push_str(text);
    out.push('\n');
}

fn write_node(node: &Node, depth: usize, out: &mut String, used: &mut Vec<&'static str>) {
    match node {
        Node::Call {
            at,
            tool,
            arguments,
            examples,
            failed,
            guards,
            next,
        } => {
            let mut helpers = Vec::new();
            arguments.helpers(&mut helpers);
            used.extend(helpers);
            let name = Path::root(super::expr::Root::Step(*at)).js();
            line(
                out,
                depth,
                &format!("// Step {}: {tool}, as in {}.", at + 1, numbers(examples)),
            );
            let call = format!("{}, {}", Value::String(tool.clone()), arguments.js());
            match failed {
                None => {
                    used.push("need");
                    line(out, depth, &format!("const {name} = need({call});"));
                }
                Some(failed) => {
                    used.push("attempt");
                    let attempt = format!("a{}", at + 1);
                    line(out, depth, &format!("const {attempt} = attempt({call});"));
                    line(out, depth, &format!("if ({attempt}.failed) {{"));
                    write_node(failed, depth + 1, out, used);
                    line(out, depth, "}");
                    line(out, depth, &format!("const {name} = {attempt}.result;"));
                }
            }
            for guard in guards {
                write_guard(guard, tool, *at, depth, out, used);
            }
            write_node(next, depth, out, used);
        }
        Node::Skip {
            tool,
            examples,
            next,
        } => {
            line(
                out,
                depth,
                &format!(
                    "// Left out: a call to {tool} that failed in {} (so it changed nothing).",
                    numbers(examples)
                ),
            );
            write_node(next, depth, out, used);
        }
        Node::Split { feature, arms } => {
            let booleans = arms.len() == 2
                && arms
                    .iter()
                    .all(|arm| arm.values.len() == 1 && arm.values[0].is_boolean());
            for (index, arm) in arms.iter().enumerate() {
                let condition = if booleans && index == 1 {
                    None
                } else {
                    Some(test(feature, &arm.values, used))
                };
                let opening = match (index, condition) {
                    (0, Some(condition)) => format!("if ({condition}) {{"),
                    (_, Some(condition)) => format!("}} else if ({condition}) {{"),
                    (_, None) => "} else {".to_string(),
                };
                line(out, depth, &opening);
                line(
                    out,
                    depth + 1,
                    &format!(
                        "// {}: {}.",
                        capitalised(&numbers(&arm.examples)),
                        describe(feature, &arm.values)
                    ),
                );
                write_node(&arm.node, depth + 1, out, used);
            }
            if !booleans {
                line(out, depth, "} else {");
                line(
                    out,
                    depth + 1,
                    &format!(
                        "uncovered({});",
                        Value::String(format!("{} is a value no example had", subject(feature)))
                    ),
                );
            }
            line(out, depth, "}");
        }
        Node::Return { reply, examples } => {
            let mut helpers = Vec::new();
            reply.helpers(&mut helpers);
            used.extend(helpers);
            line(
                out,
                depth,
                &format!("// The reply, as in {}.", numbers(examples)),
            );
            line(out, depth, &format!("return {};", reply.js()));
        }
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn write_guard(
    guard: &Guard,
    tool: &str,
    at: usize,
    depth: usize,
    out: &mut String,
    used: &mut Vec<&'static str>,
) {
    // `if (isEmpty(r1))` reads better than `if (!(!isEmpty(r1)))`.
    let refused = match (&guard.feature, guard.allowed.as_slice()) {
        (Feature::Empty(_), [Value::Bool(allowed)]) => {
            test(&guard.feature, &[Value::Bool(!allowed)], used)
        }
        _ => format!("!({})", test(&guard.feature, &guard.allowed, used)),
    };
    let what = match (&guard.feature, guard.allowed.as_slice()) {
        (Feature::Empty(_), [Value::Bool(true)]) => "found something".to_string(),
        (Feature::Empty(_), _) => "found nothing".to_string(),
        (Feature::Shape(path), _) => format!("gave {} a shape no example's had", path.js()),
        (feature, _) => format!("gave {} a value no example had", subject(feature)),
    };
    let why = format!("step {} ({tool}) {what}", at + 1);
    line(
        out,
        depth,
        &format!("if ({refused}) uncovered({});", Value::String(why)),
    );
}

/// What a feature reads, in words.
fn subject(feature: &Feature) -> String {
    match feature {
        Feature::Failed(at) => format!("the outcome of step {}", at + 1),
        Feature::Empty(at) => format!("the result of step {}", at + 1),
        Feature::Value(path) => path.js(),
        Feature::Shape(path) => format!("the shape of {}", path.js()),
    }
}

/// What an arm's examples had, in words.
fn describe(feature: &Feature, values: &[Value]) -> String {
    let listed: Vec<String> = values.iter().map(Value::to_string).collect();
    match (feature, values) {
        (Feature::Failed(at), [Value::Bool(true)]) => format!("step {} failed", at + 1),
        (Feature::Failed(at), _) => format!("step {} succeeded", at + 1),
        (Feature::Empty(at), [Value::Bool(true)]) => format!("step {} found nothing", at + 1),
        (Feature::Empty(at), _) => format!("step {} found something", at + 1),
        _ => format!("{} was {}", subject(feature), listed.join(" or ")),
    }
}

/// JavaScript that is true when `feature` has one of `values`.
fn test(feature: &Feature, values: &[Value], used: &mut Vec<&'static str>) -> String {
    let read = match feature {
        Feature::Failed(at) => format!("a{}.failed", at + 1),
        Feature::Empty(at) => {
            used.push("isEmpty");
            format!("isEmpty(r{})", at + 1)
        }
        Feature::Value(path) => path.js_optional(),
        Feature::Shape(path) => {
            used.push("shape");
            format!("shape({})", path.js_optional())
        }
    };
    let one = |value: &Value| match value {
        Value::Bool(true) if matches!(feature, Feature::Failed(_) | Feature::Empty(_)) => {
            read.clone()
        }
        Value::Bool(false) if matches!(feature, Feature::Failed(_) | Feature::Empty(_)) => {
            format!("!{read}")
        }
        Value::Null => format!("{read} == null"),
        other => format!("{read} === {other}"),
    };
    let tests: Vec<String> = values.iter().map(one).collect();
    tests.join(" || ")
}
