//! Ground truth for the paper's network demo, as pure code: no LLM, no I/O.
//!
//! - `spec`: the network (servers, users, protocol databases, tasks, tools, databases with
//!   their seed rows) and the screenplay, as data.
//! - `mocks`: the servers' seeded mock tools (the servers call them; the judge does too).
//! - `rules`: each server's house rules as values (hours, fares, temperature window, ...).
//! - `reference`: each server's database as a correct server would have left it.
//! - `judge`: a verdict for every answer of a run (`correct`, `wrong`, `failed`, `unjudged`).
//! - `writes`: what a query wrote to its server's database, which the judge holds replies to.
//! - `generator`: the paper's screenplay generator.

pub mod generator;
pub mod judge;
pub mod mocks;
pub mod reference;
pub mod rules;
pub mod spec;
pub mod writes;

pub use judge::{BY_THE_DATABASE, Judge, RULES, Verdict};
pub use writes::{TableRow, Writes};
