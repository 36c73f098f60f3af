//! The examples' traces merged into one program: a tree of calls, branches and replies.
//!
//! Examples that make the same call (tool and shape of arguments) at the same point share a
//! step; its arguments are the expression all of them allow, or the largest group's, the others
//! left out of the examination. Where examples go different ways (another call, a reply), a
//! *feature* of an earlier result must tell them apart: the call failed, the result is empty, a
//! short value (`"accident"`, `false`, `0`) or the shape of an id (`"000"` against `"KAYN86"`).
//! Each arm of a branch lists the values its examples had; a value none had is not covered, and
//! the routine leaves such a request to the LLM. Where nothing tells them apart the largest group
//! wins, unless they disagree on a member the protocol document names: then the examples
//! contradict each other and there is no program, except where the dissent is small (at most a
//! fifth, against a majority of four or more), when it is left out as the majority's outliers.

use std::collections::BTreeMap;

use serde_json::Value;

use super::expr::{Expr, Path, Root, Seg};
use super::trace::{Trace, Traced};

/// A dissent of at most this share of a group is left out as outliers, not a contradiction.
const OUTLIER_SHARE: f64 = 0.2;
/// The least majority that outvotes outliers.
const MIN_MAJORITY: usize = 4;
/// Distinct values a branch may test.
const MAX_FEATURE_VALUES: usize = 8;
/// Guards on one result at most.
const MAX_GUARDS: usize = 6;
/// Words from which a text is a sentence for people (the examination's measure).
const PROSE_WORDS: usize = 4;

/// What tells examples apart, read from an earlier step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Feature {
    /// The call failed.
    Failed(usize),
    /// The result is empty (`[]`, `{}`, `""`, `null`).
    Empty(usize),
    /// A short value inside the result.
    Value(Path),
    /// The character shape of an id inside the result (`LLLLDD` for `KAYN86`).
    Shape(Path),
}

impl Feature {
    /// What an example's trace has for it; `None` where it cannot say (the step failed, where a
    /// value of its result was asked).
    fn of(&self, trace: &Trace) -> Option<Value> {
        let result = |at: usize| trace.steps.get(at).map(|step| step.result.as_ref());
        match self {
            Feature::Failed(at) => Some(Value::Bool(result(*at)?.is_err())),
            Feature::Empty(at) => Some(Value::Bool(is_empty(result(*at)?.ok()?))),
            Feature::Value(path) => {
                let Root::Step(at) = path.root else {
                    return None;
                };
                let value = result(at)?.ok()?;
                Some(path.get(value).cloned().unwrap_or(Value::Null))
            }
            Feature::Shape(path) => {
                let Root::Step(at) = path.root else {
                    return None;
                };
                let value = result(at)?.ok()?;
                Some(match path.get(value) {
                    Some(Value::String(text)) => Value::String(shape(text)),
                    _ => Value::Null,
                })
            }
        }
    }
}

/// A check after a call: the result has what every example's had, or the request is left to
/// the LLM.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Guard {
    pub(crate) feature: Feature,
    pub(crate) allowed: Vec<Value>,
}

/// A part of the program.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// A tool call, then the rest.
    Call {
        at: usize,
        tool: String,
        arguments: Expr,
        /// The examples that made it.
        examples: Vec<usize>,
        /// What runs when it fails; `None`: no example's failed, so a failure is not covered.
        failed: Option<Box<Node>>,
        guards: Vec<Guard>,
        next: Box<Node>,
    },
    /// A call that failed in every example (so it changed nothing): left out.
    Skip {
        tool: String,
        examples: Vec<usize>,
        next: Box<Node>,
    },
    /// A branch on a feature; a value no arm lists is not covered.
    Split {
        feature: Feature,
        arms: Vec<Arm>,
    },
    Return {
        reply: Expr,
        examples: Vec<usize>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Arm {
    pub(crate) values: Vec<Value>,
    pub(crate) examples: Vec<usize>,
    pub(crate) node: Node,
}

/// Why no program can be compiled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Contradiction {
    /// What they disagree on: a member of the reply, or `the reply`.
    pub(crate) member: String,
    /// The groups of examples that agree among themselves, largest first.
    pub(crate) groups: Vec<Vec<usize>>,
}

/// Builds the tree over `traces`, recording which examples the majority left out.
pub(crate) struct Builder<'a> {
    pub(crate) traces: &'a [Trace],
    pub(crate) document: String,
    /// Examples left out of the examination, with why (the first reason).
    pub(crate) left_out: BTreeMap<usize, String>,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(traces: &'a [Trace], document: &str) -> Self {
        Self {
            traces,
            document: document.to_lowercase(),
            left_out: BTreeMap::new(),
        }
    }

    fn leave_out(&mut self, examples: &[usize], why: String) {
        for &example in examples {
            self.left_out.entry(example).or_insert_with(|| why.clone());
        }
    }

    /// The program for `examples`, which share their first `at` steps.
    pub(crate) fn build(&mut self, examples: Vec<usize>, at: usize) -> Result<Node, Contradiction> {
        let groups = group_by(&examples, |&e| match self.traces[e].steps.get(at) {
            Some(step) => format!("call {}", step.signature),
            None => "return".to_string(),
        });
        if groups.len() == 1 {
            return match self.traces[examples[0]].steps.get(at) {
                None => self.returns(examples),
                Some(_) => self.call(examples, at),
            };
        }
        let members: Vec<Vec<usize>> = groups.into_iter().map(|(_, group)| group).collect();
        if let Some((feature, values)) = separating(self.traces, &members, at) {
            let mut arms = Vec::new();
            for (group, values) in members.into_iter().zip(values) {
                arms.push(Arm {
                    values,
                    node: self.build(group.clone(), at)?,
                    examples: group,
                });
            }
            return Ok(Node::Split { feature, arms });
        }
        let (main, rest) = self.majority(members, "what they did next")?;
        for group in rest {
            let what = match self.traces[group[0]].steps.get(at) {
                Some(step) => format!("called {} instead", step.tool),
                None => "replied instead".to_string(),
            };
            let why = format!(
                "{} {} at step {} where {} did not",
                numbers(&group),
                what,
                at + 1,
                numbers(&main)
            );
            self.leave_out(&group, why);
        }
        self.build(main, at)
    }

    /// The largest group, and the rest: a contradiction where they differ in the reply's named
    /// members and the rest is more than outliers.
    fn majority(
        &self,
        mut groups: Vec<Vec<usize>>,
        what: &str,
    ) -> Result<(Vec<usize>, Vec<Vec<usize>>), Contradiction> {
        groups.sort_by_key(|group| std::cmp::Reverse(group.len()));
        let total: usize = groups.iter().map(Vec::len).sum();
        let main = groups.remove(0);
        let dissent = total - main.len();
        let outliers =
            main.len() >= MIN_MAJORITY && (dissent as f64) <= OUTLIER_SHARE * total as f64;
        if !outliers
            && let Some(member) = groups
                .iter()
                .find_map(|group| self.named_difference(&main, group))
        {
            let mut all = vec![main];
            all.extend(groups);
            return Err(Contradiction {
                member: format!("{member} ({what})"),
                groups: all,
            });
        }
        Ok((main, groups))
    }

    /// A member the document names on which the replies of `a` and `b` differ, if one is.
    fn named_difference(&self, a: &[usize], b: &[usize]) -> Option<String> {
        let outcome = |e: usize| -> Vec<(String, Value)> {
            let reply = &self.traces[e].reply;
            match &reply.value {
                Value::Object(map) => map
                    .iter()
                    .filter(|(key, value)| self.named(key) && !is_prose(value))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect(),
                other if !is_prose(other) => vec![("the reply".to_string(), other.clone())],
                _ => Vec::new(),
            }
        };
        let seen_in_a: Vec<Vec<(String, Value)>> = a.iter().map(|&e| outcome(e)).collect();
        for &e in b {
            let theirs = outcome(e);
            if seen_in_a.contains(&theirs) {
                continue;
            }
            let differs = theirs
                .iter()
                .find(|(key, value)| {
                    seen_in_a.iter().all(|ours| {
                        ours.iter()
                            .find(|(k, _)| k == key)
                            .is_none_or(|(_, v)| v != value)
                    })
                })
                .or_else(|| theirs.first());
            return Some(
                differs
                    .map(|(key, _)| key.clone())
                    .unwrap_or_else(|| "the reply".to_string()),
            );
        }
        None
    }

    /// Whether the protocol document names `key` (as a word).
    pub(crate) fn named(&self, key: &str) -> bool {
        let key = key.to_lowercase();
        let bytes = self.document.as_bytes();
        self.document.match_indices(&key).any(|(at, _)| {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            let after = bytes.get(at + key.len()).copied();
            let word = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
            !word(before) && !word(after)
        })
    }

    fn call(&mut self, examples: Vec<usize>, at: usize) -> Result<Node, Contradiction> {
        let traced: Vec<(usize, &Traced)> = examples
            .iter()
            .map(|&e| (e, &self.traces[e].steps[at].arguments))
            .collect();
        let mut clusters = cluster(&traced);
        let (arguments, main) = clusters.remove(0);
        for (_, group) in &clusters {
            let why = format!(
                "{} called {} at step {} with other arguments than {}",
                numbers(group),
                self.traces[group[0]].steps[at].tool,
                at + 1,
                numbers(&main)
            );
            self.leave_out(group, why);
        }
        let tool = self.traces[examples[0]].steps[at].tool.clone();
        let (failed, ok): (Vec<usize>, Vec<usize>) = examples
            .iter()
            .partition(|&&e| self.traces[e].steps[at].result.is_err());
        if ok.is_empty() {
            return Ok(Node::Skip {
                tool,
                next: Box::new(self.build(examples.clone(), at + 1)?),
                examples,
            });
        }
        let failed = if failed.is_empty() {
            None
        } else {
            Some(Box::new(self.build(failed, at + 1)?))
        };
        let next = Box::new(self.build(ok, at + 1)?);
        Ok(Node::Call {
            at,
            tool,
            arguments,
            examples: main,
            failed,
            guards: Vec::new(),
            next,
        })
    }

    /// The reply of `examples`, which made the same calls.
    fn returns(&mut self, examples: Vec<usize>) -> Result<Node, Contradiction> {
        let objects = examples.iter().all(|&e| self.traces[e].reply.object);
        // Examples that differ in a named member (or, for a reply that is not an object, in the
        // whole) are told apart by a feature, or are a contradiction.
        let outcomes = self.outcomes(&examples, objects);
        if outcomes.len() > 1 {
            let steps = self.traces[examples[0]].steps.len();
            if let Some((feature, values)) = separating(self.traces, &outcomes, steps) {
                let mut arms = Vec::new();
                for (group, values) in outcomes.into_iter().zip(values) {
                    arms.push(Arm {
                        values,
                        node: self.returns(group.clone())?,
                        examples: group,
                    });
                }
                return Ok(Node::Split { feature, arms });
            }
            let (main, rest) = self.majority(outcomes, "with the same tool results")?;
            for group in rest {
                let why = format!(
                    "{} replied otherwise than {} with the same tool results",
                    numbers(&group),
                    numbers(&main)
                );
                self.leave_out(&group, why);
            }
            return self.returns(main);
        }
        let reply = if objects {
            self.object_reply(&examples)
        } else {
            let traced: Vec<(usize, &Traced)> = examples
                .iter()
                .map(|&e| (e, &self.traces[e].reply.traced))
                .collect();
            cluster(&traced).remove(0).0
        };
        Ok(Node::Return { reply, examples })
    }

    /// `examples` grouped by the members their replies have (`""` and `null` are none) and by
    /// what they reply in the members the document names, sentences aside (the whole reply where
    /// it is not an object).
    fn outcomes(&self, examples: &[usize], objects: bool) -> Vec<Vec<usize>> {
        // Each group keeps its members and, per named member, the expressions all its examples
        // allow.
        type Group = (Vec<String>, Vec<(String, Vec<Expr>)>, Vec<usize>);
        let mut groups: Vec<Group> = Vec::new();
        for &e in examples {
            let named = named_members(&self.traces[e].reply, self, objects);
            let present = present_members(&self.traces[e].reply.value);
            let joined = groups
                .iter()
                .enumerate()
                .find_map(|(index, (members, exprs, _))| {
                    if *members != present || exprs.len() != named.len() {
                        return None;
                    }
                    let mut narrowed = Vec::new();
                    for (key, traced) in &named {
                        let (_, candidates) = exprs.iter().find(|(k, _)| k == key)?;
                        let theirs = alternatives(traced);
                        let met: Vec<Expr> = candidates
                            .iter()
                            .filter_map(|ours| theirs.iter().find_map(|alt| ours.meet(alt)))
                            .collect();
                        if met.is_empty() {
                            return None;
                        }
                        narrowed.push((key.clone(), met));
                    }
                    Some((index, narrowed))
                });
            match joined {
                Some((index, narrowed)) => {
                    groups[index].1 = narrowed;
                    groups[index].2.push(e);
                }
                None => {
                    let exprs = named
                        .iter()
                        .map(|(key, traced)| (key.clone(), alternatives(traced)))
                        .collect();
                    groups.push((present, exprs, vec![e]));
                }
            }
        }
        groups.into_iter().map(|(_, _, group)| group).collect()
    }

    /// The reply object the examples share: members most of them have, each as most of them
    /// compute it; an example that differs in a member is left out of the examination.
    fn object_reply(&mut self, examples: &[usize]) -> Expr {
        // A member every example has with the same empty value (`"error": ""`) is kept as it
        // is: the protocol's reply has it, though nothing shows where it would come from.
        let blank = |key: &str| -> Option<Value> {
            let mut values = examples.iter().map(|&e| match &self.traces[e].reply.value {
                Value::Object(map) => map.get(key).filter(|v| is_empty(v)).cloned(),
                _ => None,
            });
            let first = values.next()??;
            values
                .all(|value| value.as_ref() == Some(&first))
                .then_some(first)
        };
        let mut keys: Vec<String> = Vec::new();
        for &e in examples {
            if let Value::Object(map) = &self.traces[e].reply.value {
                for (key, value) in map {
                    if (!is_empty(value) || blank(key).is_some()) && !keys.contains(key) {
                        keys.push(key.clone());
                    }
                }
            }
        }
        let mut members = Vec::new();
        for key in keys {
            if let Some(value) = blank(&key) {
                members.push((key, Expr::Literal(value)));
                continue;
            }
            let having: Vec<(usize, &Traced, &Value)> = examples
                .iter()
                .filter_map(|&e| {
                    let reply = &self.traces[e].reply;
                    let (Traced::Object(_, members), Value::Object(map)) =
                        (&reply.traced, &reply.value)
                    else {
                        return None;
                    };
                    let value = map.get(&key).filter(|value| !is_empty(value))?;
                    let traced = members.iter().find(|(k, _)| *k == key)?;
                    Some((e, &traced.1, value))
                })
                .collect();
            let with: Vec<usize> = having.iter().map(|(e, _, _)| *e).collect();
            let without: Vec<usize> = examples
                .iter()
                .copied()
                .filter(|e| !with.contains(e))
                .collect();
            if with.len() * 2 <= examples.len() {
                let why = format!(
                    "{} replied with a member {key:?} that {} did not",
                    numbers(&with),
                    numbers(&without)
                );
                self.leave_out(&with, why);
                continue;
            }
            if !without.is_empty() {
                let why = format!(
                    "{} replied without the member {key:?} that {} had",
                    numbers(&without),
                    numbers(&with)
                );
                self.leave_out(&without, why);
            }
            let traced: Vec<(usize, &Traced)> = having.iter().map(|(e, t, _)| (*e, *t)).collect();
            let mut clusters = cluster(&traced);
            let (expr, main) = clusters.remove(0);
            // A sentence may be worded otherwise (the examination allows it): no one is left out.
            let prose = having.iter().all(|(_, _, value)| is_prose(value));
            if !prose {
                for (_, group) in &clusters {
                    let why = format!(
                        "{} replied another {key:?} than {}",
                        numbers(group),
                        numbers(&main)
                    );
                    self.leave_out(group, why);
                }
            }
            members.push((key, expr));
        }
        Expr::Object(members)
    }
}

/// The members of a reply object that hold something, sorted.
fn present_members(reply: &Value) -> Vec<String> {
    let mut members: Vec<String> = match reply {
        Value::Object(map) => map
            .iter()
            .filter(|(_, value)| !is_empty(value))
            .map(|(key, _)| key.clone())
            .collect(),
        _ => Vec::new(),
    };
    members.sort();
    members
}

fn named_members<'t>(
    reply: &'t super::trace::Reply,
    builder: &Builder<'_>,
    objects: bool,
) -> Vec<(String, &'t Traced)> {
    match (&reply.traced, &reply.value) {
        (Traced::Object(_, members), Value::Object(map)) if objects => members
            .iter()
            .filter(|(key, _)| builder.named(key))
            .filter(|(key, _)| {
                map.get(key)
                    .is_some_and(|value| !is_prose(value) && !is_empty(value))
            })
            .map(|(key, traced)| (key.clone(), traced))
            .collect(),
        (traced, value) if !is_prose(value) => vec![("the reply".to_string(), traced)],
        _ => Vec::new(),
    }
}

/// The explanations of a traced value as a whole, best first: its own, then (for an object or
/// array) the one built member by member.
fn alternatives(traced: &Traced) -> Vec<Expr> {
    match traced {
        Traced::Leaf(alternatives) => alternatives.clone(),
        Traced::Object(whole, _) | Traced::Array(whole, _) => {
            let mut all = whole.clone();
            if let Some(built) = unify(&[traced]) {
                all.push(built);
            }
            all
        }
    }
}

/// The best expression every value allows: one of their explanations as a whole, or one built
/// member by member (objects with the same members, arrays of the same length).
pub(crate) fn unify(values: &[&Traced]) -> Option<Expr> {
    let first = values.first()?;
    let own = |traced: &Traced| -> Vec<Expr> {
        match traced {
            Traced::Leaf(alternatives) => alternatives.clone(),
            Traced::Object(whole, _) | Traced::Array(whole, _) => whole.clone(),
        }
    };
    for candidate in own(first) {
        let met = values[1..].iter().try_fold(candidate, |expr, traced| {
            own(traced).iter().find_map(|alt| expr.meet(alt))
        });
        if met.is_some() {
            return met;
        }
    }
    match first {
        Traced::Object(_, members) => {
            let mut built = Vec::new();
            for (key, _) in members {
                let children: Option<Vec<&Traced>> = values
                    .iter()
                    .map(|traced| match traced {
                        Traced::Object(_, theirs) if theirs.len() == members.len() => theirs
                            .iter()
                            .find(|(k, _)| k == key)
                            .map(|(_, child)| child),
                        _ => None,
                    })
                    .collect();
                built.push((key.clone(), unify(&children?)?));
            }
            Some(Expr::Object(built))
        }
        Traced::Array(_, items) => {
            let mut built = Vec::new();
            for index in 0..items.len() {
                let children: Option<Vec<&Traced>> = values
                    .iter()
                    .map(|traced| match traced {
                        Traced::Array(_, theirs) if theirs.len() == items.len() => {
                            theirs.get(index)
                        }
                        _ => None,
                    })
                    .collect();
                built.push(unify(&children?)?);
            }
            Some(Expr::Array(built))
        }
        Traced::Leaf(_) => None,
    }
}

/// Examples grouped so that each group's values unify, largest group first (ties: first seen),
/// each with its expression.
fn cluster(values: &[(usize, &Traced)]) -> Vec<(Expr, Vec<usize>)> {
    let mut clusters: Vec<(Vec<&Traced>, Vec<usize>)> = Vec::new();
    for &(example, traced) in values {
        let joined = clusters.iter_mut().find(|(members, _)| {
            let mut all = members.clone();
            all.push(traced);
            unify(&all).is_some()
        });
        match joined {
            Some((members, examples)) => {
                members.push(traced);
                examples.push(example);
            }
            None => clusters.push((vec![traced], vec![example])),
        }
    }
    let mut clusters: Vec<(Expr, Vec<usize>)> = clusters
        .into_iter()
        .filter_map(|(members, examples)| Some((unify(&members)?, examples)))
        .collect();
    clusters.sort_by_key(|(_, examples)| std::cmp::Reverse(examples.len()));
    clusters
}

/// Groups of `examples` with the same key, in the order first seen.
fn group_by(examples: &[usize], key: impl Fn(&usize) -> String) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for example in examples {
        let key = key(example);
        match groups.iter_mut().find(|(seen, _)| *seen == key) {
            Some((_, group)) => group.push(*example),
            None => groups.push((key, vec![*example])),
        }
    }
    groups
}

/// A feature of the steps before `before` whose values tell `groups` apart (each group's
/// values differ from every other's), with each group's values: the latest step first, then
/// failure, emptiness, a short value, an id's shape.
fn separating(
    traces: &[Trace],
    groups: &[Vec<usize>],
    before: usize,
) -> Option<(Feature, Vec<Vec<Value>>)> {
    let all: Vec<usize> = groups.iter().flatten().copied().collect();
    for at in (0..before).rev() {
        let mut features = vec![Feature::Failed(at), Feature::Empty(at)];
        let (values, shapes) = leaf_paths(traces, &all, at);
        features.extend(values.into_iter().map(Feature::Value));
        features.extend(shapes.into_iter().map(Feature::Shape));
        for feature in features {
            if let Some(values) = tells_apart(traces, groups, &feature) {
                return Some((feature, values));
            }
        }
    }
    None
}

fn tells_apart(
    traces: &[Trace],
    groups: &[Vec<usize>],
    feature: &Feature,
) -> Option<Vec<Vec<Value>>> {
    let mut sets: Vec<Vec<Value>> = Vec::new();
    for group in groups {
        let mut set: Vec<Value> = Vec::new();
        for &e in group {
            let value = feature.of(&traces[e])?;
            if !set.contains(&value) {
                set.push(value);
            }
        }
        sets.push(set);
    }
    let distinct: usize = sets.iter().map(Vec::len).sum();
    let disjoint = sets.iter().enumerate().all(|(i, a)| {
        sets.iter()
            .skip(i + 1)
            .all(|b| a.iter().all(|value| !b.contains(value)))
    });
    (disjoint && distinct <= MAX_FEATURE_VALUES).then_some(sets)
}

/// Paths of step `at`'s results (in any of `examples`) to short values, and to ids.
fn leaf_paths(traces: &[Trace], examples: &[usize], at: usize) -> (Vec<Path>, Vec<Path>) {
    let mut values = Vec::new();
    let mut ids = Vec::new();
    for &e in examples {
        let Some(Ok(result)) = traces[e].steps.get(at).map(|step| &step.result) else {
            continue;
        };
        let mut leaves = Vec::new();
        collect_leaves(&Path::root(Root::Step(at)), result, 0, &mut leaves);
        for (path, value) in leaves {
            if is_short(value) && !values.contains(&path) {
                values.push(path.clone());
            }
            if is_id(value) && !ids.contains(&path) {
                ids.push(path);
            }
        }
    }
    values.sort_by_key(|path| path.segs.len());
    ids.sort_by_key(|path| path.segs.len());
    (values, ids)
}

fn collect_leaves<'v>(
    path: &Path,
    value: &'v Value,
    depth: usize,
    out: &mut Vec<(Path, &'v Value)>,
) {
    if depth > 4 {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                collect_leaves(&path.child(Seg::Key(key.clone())), child, depth + 1, out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().take(3).enumerate() {
                collect_leaves(&path.child(Seg::Index(index)), child, depth + 1, out);
            }
        }
        leaf => out.push((path.clone(), leaf)),
    }
}

/// A value a program may branch on: a boolean, a small count, a word or two without digits.
fn is_short(value: &Value) -> bool {
    match value {
        Value::Bool(_) => true,
        Value::Number(n) => n.as_i64().is_some_and(|n| (0..=9).contains(&n)),
        Value::String(text) => {
            !text.is_empty()
                && text.chars().count() <= 30
                && text.split_whitespace().count() <= 3
                && !text.chars().any(|c| c.is_ascii_digit())
        }
        _ => false,
    }
}

/// An id: one word with a digit in it (`KAYN86`, `000`, `A234`).
fn is_id(value: &Value) -> bool {
    value.as_str().is_some_and(|text| {
        (1..=16).contains(&text.chars().count())
            && !text.chars().any(char::is_whitespace)
            && text.chars().any(|c| c.is_ascii_digit())
    })
}

/// `L` for each letter and `D` for each digit, other characters as they are.
pub(crate) fn shape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_alphabetic() {
                'L'
            } else if c.is_ascii_digit() {
                'D'
            } else {
                c
            }
        })
        .collect()
}

pub(crate) fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.trim().is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

fn is_prose(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|text| text.split_whitespace().count() >= PROSE_WORDS)
}

/// `examples 1-3, 7` (1-based).
pub(crate) fn numbers(examples: &[usize]) -> String {
    let mut sorted: Vec<usize> = examples.iter().map(|e| e + 1).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut ranges: Vec<String> = Vec::new();
    let mut at = 0;
    while at < sorted.len() {
        let start = sorted[at];
        let mut end = start;
        while at + 1 < sorted.len() && sorted[at + 1] == end + 1 {
            at += 1;
            end = sorted[at];
        }
        ranges.push(if end > start + 1 {
            format!("{start}-{end}")
        } else if end == start + 1 {
            format!("{start}, {end}")
        } else {
            start.to_string()
        });
        at += 1;
    }
    let word = if sorted.len() == 1 {
        "example"
    } else {
        "examples"
    };
    format!("{word} {}", ranges.join(", "))
}

/// Adds the guards: after each call, what every example's result had that the program does not
/// read or branch on (emptiness, short values, id shapes) must hold, or the request is not
/// covered.
pub(crate) fn guard(node: &mut Node, traces: &[Trace]) {
    match node {
        Node::Call {
            at,
            examples,
            failed,
            guards,
            next,
            ..
        } => {
            if let Some(failed) = failed {
                guard(failed, traces);
            }
            guard(next, traces);
            let ok: Vec<usize> = examples
                .iter()
                .copied()
                .filter(|&e| traces[e].steps[*at].result.is_ok())
                .collect();
            let mut reads = Vec::new();
            let mut tested = Vec::new();
            uses(next, &mut reads, &mut tested);
            *guards = guards_for(traces, &ok, *at, &reads, &tested);
        }
        Node::Skip { next, .. } => guard(next, traces),
        Node::Split { arms, .. } => arms.iter_mut().for_each(|arm| guard(&mut arm.node, traces)),
        Node::Return { .. } => {}
    }
}

/// The paths `node` reads and the features it branches on.
fn uses(node: &Node, reads: &mut Vec<Path>, tested: &mut Vec<Feature>) {
    match node {
        Node::Call {
            arguments,
            failed,
            next,
            ..
        } => {
            arguments.reads(reads);
            if let Some(failed) = failed {
                uses(failed, reads, tested);
            }
            uses(next, reads, tested);
        }
        Node::Skip { next, .. } => uses(next, reads, tested),
        Node::Split { feature, arms } => {
            tested.push(feature.clone());
            arms.iter().for_each(|arm| uses(&arm.node, reads, tested));
        }
        Node::Return { reply, .. } => reply.reads(reads),
    }
}

/// Whether, in every example in `ok`, the feature's value is one the call at `at` was given
/// as an argument.
fn echoes(traces: &[Trace], ok: &[usize], at: usize, feature: &Feature) -> bool {
    ok.iter().all(|&e| {
        let trace = &traces[e];
        match (feature.of(trace), trace.steps.get(at)) {
            (Some(value), Some(step)) => contains_leaf(&step.called_with, &value),
            _ => false,
        }
    })
}

/// Whether `value` is `needle` or holds it as a member or element, at any depth.
fn contains_leaf(value: &Value, needle: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().any(|v| contains_leaf(v, needle)),
        Value::Array(items) => items.iter().any(|v| contains_leaf(v, needle)),
        scalar => scalar == needle,
    }
}

fn guards_for(
    traces: &[Trace],
    ok: &[usize],
    at: usize,
    reads: &[Path],
    tested: &[Feature],
) -> Vec<Guard> {
    if ok.is_empty() {
        return Vec::new();
    }
    let mut candidates = vec![Feature::Empty(at)];
    let (values, ids) = leaf_paths(traces, ok, at);
    let read = |path: &Path| reads.iter().any(|r| path.within(r) || r.within(path));
    candidates.extend(
        values
            .into_iter()
            .filter(|path| !read(path))
            .map(Feature::Value),
    );
    candidates.extend(ids.into_iter().map(Feature::Shape));
    let mut guards = Vec::new();
    for feature in candidates {
        if tested.contains(&feature) {
            continue;
        }
        let mut allowed: Vec<Value> = Vec::new();
        let mut complete = true;
        for &e in ok {
            match feature.of(&traces[e]) {
                Some(Value::Null) if !matches!(feature, Feature::Empty(_)) => complete = false,
                Some(value) => {
                    if !allowed.contains(&value) {
                        allowed.push(value);
                    }
                }
                None => complete = false,
            }
        }
        // A value some example's result did not have is no fact about the protocol; a guard
        // allowing both booleans checks nothing; a value the call was given back (the location
        // a forecast names) follows the request, and a guard on it would cover only the
        // examples' requests.
        if !complete
            || matches!(feature, Feature::Value(_)) && echoes(traces, ok, at, &feature)
            || allowed.len() > MAX_FEATURE_VALUES
            || allowed.len() == 2 && allowed.iter().all(Value::is_boolean)
        {
            continue;
        }
        guards.push(Guard { feature, allowed });
        if guards.len() >= MAX_GUARDS {
            break;
        }
    }
    guards
}
