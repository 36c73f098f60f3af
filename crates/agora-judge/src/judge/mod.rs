//! The judge: a verdict for every answer of a run, from the servers' own rules.
//!
//! Queries are judged in screenplay order by one [`Judge`], which keeps the reference state of
//! every server ([`crate::reference`]) as a correct server would have left it. Each verdict is
//! `correct`, `wrong` (with the reason), `failed` (the query gave no output) or `unjudged`
//! (with the reason: a task type or server without a rule, or task data the rule cannot read).
//!
//! The rules, one per task type (also in the report, see [`RULES`]):
//! - **queryWeather**: `temperature` and `precipitation` equal (±0.5) the `getWeather` mock's for
//!   the requested date.
//! - **bookRoom**: `status` is `success` iff a room is free on every day of `startDate..=endDate`
//!   (no overlap with earlier bookings) and, at a ski resort, the temperature forecast for the
//!   start date is within −10…+1 °C; a `roomNumber` given with a success must be a free room.
//!   The reference books the first free room.
//! - **rentSki**: `status` is `success` iff a ski of that type is not yet rented on that date
//!   (the seed `Skis`, two of each type): the third rental of a type and date fails.
//! - **suggestRestaurant**: the answer names the server's restaurant iff that restaurant is
//!   open on the date (its closed weekday), and says no restaurant otherwise (names, not wording).
//! - **bookTable**: `status` is `success` iff the restaurant is open that weekday, the hour is
//!   within its opening hours (the closing hour excluded) and that surname, date and hour is
//!   not booked yet.
//! - **openingTimes**: every open weekday with the right opening and closing hours; the closed
//!   day absent (or listed with no hours).
//! - **orderEverything**: `status` is `success` iff `trafficInfo` for today at the address does
//!   not report heavy traffic or an accident (the delivery service refuses then).
//! - **availableMovies**: the set of films screened on the date (seed `Screenings`), compared
//!   without case and a leading "The".
//! - **buyTickets**: `status` is `success` iff that screening exists and has at least that many
//!   tickets left; the reference then takes them (a screening sells out).
//! - **callTaxi**: `failure` iff `getAvailableTaxi` says `"000"` for the time; otherwise
//!   `success` with the fare: base, +20 % per surcharge that applies (taxi1: 20:00–23:00 and
//!   heavy traffic or an accident; taxi2: rain today and heavy traffic or an accident), ±0.01.
//! - **getTraffic**: `traffic` equals the `trafficInfo` mock's for that location and date.
//!
//! **What was written.** Where the runner observed the server's database around the query
//! ([`crate::writes::Writes`], [`Judge::judge_with_writes`]), a reply judged correct must also
//! agree with it: a write task's success must have written exactly its row (the booking with the
//! requested dates and a free room; the rental of a free ski of that type on the date; the table
//! for that surname, party, date and hour; the screening's tickets taken) and nothing else, a
//! failure nothing at all, and any other task nothing at all. Otherwise the answer is wrong, with
//! the rows that show it.
//!
//! The seeded mocks draw from their arguments, and some arguments are the server's free choice
//! of spelling (a place `"London, UK"`, `"London"` or none at all for the weather, a time
//! `"8:5"` or `"08:05"`). Where the rule meets such a choice, the judge draws every reasonable
//! spelling and accepts an answer that is right for any of them; the reference state follows
//! the first (canonical) one. Where the rule names the argument, only that is drawn: traffic
//! "there" is the traffic at the delivery or pick-up address, today. Nothing here depends on a
//! query's index.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::mocks::{self, MockKind};
use crate::reference::ServerState;
use crate::rules::rules_of;
use crate::spec::{NetworkSpec, ToolSpecEntry};
use crate::writes::Writes;

mod tasks;
mod written;

pub use written::BY_THE_DATABASE;

/// The judge's rule for each task type, in words (the report prints these).
pub const RULES: &[(&str, &str)] = &[
    (
        "queryWeather",
        "temperature and precipitation equal (±0.5) the getWeather mock's for the requested date",
    ),
    (
        "bookRoom",
        "success iff a room is free on every day of startDate..=endDate and, at a ski resort, the forecast for the start date is within -10..+1 °C; a roomNumber given must be free",
    ),
    (
        "rentSki",
        "success iff a ski of that type is not yet rented on that date (two of each type)",
    ),
    (
        "suggestRestaurant",
        "names the server's restaurant iff it is open that weekday, else no restaurant",
    ),
    (
        "bookTable",
        "success iff open that weekday, the hour within opening hours (closing hour excluded) and that surname, date and hour not yet booked",
    ),
    (
        "openingTimes",
        "every open weekday with the right hours; the closed day absent or without hours",
    ),
    (
        "orderEverything",
        "success iff trafficInfo for today at the delivery address is not heavy or accident",
    ),
    (
        "availableMovies",
        "the set of films screened that date (case and a leading \"The\" ignored)",
    ),
    (
        "buyTickets",
        "success iff that screening exists with at least that many tickets left (then taken)",
    ),
    (
        "callTaxi",
        "failure iff getAvailableTaxi says 000 for the time; else success with the fare: base +20% per surcharge (taxi1: 20:00-23:00, heavy/accident traffic today at the address; taxi2: rain today in its city, heavy/accident traffic today at the address)",
    ),
    (
        "getTraffic",
        "traffic equals the trafficInfo mock's for that location and date",
    ),
];

/// A query's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "reason", rename_all = "lowercase")]
pub enum Verdict {
    /// The answer is what a correct server gives.
    Correct,
    /// The answer is not; why.
    Wrong(String),
    /// No output at all.
    Failed,
    /// No rule could judge it; why.
    Unjudged(String),
}

impl Verdict {
    /// `correct`, `wrong`, `failed` or `unjudged`.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Correct => "correct",
            Verdict::Wrong(_) => "wrong",
            Verdict::Failed => "failed",
            Verdict::Unjudged(_) => "unjudged",
        }
    }

    /// The reason, for `wrong` and `unjudged`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Wrong(reason) | Verdict::Unjudged(reason) => Some(reason),
            _ => None,
        }
    }
}

/// Judges a run's queries in screenplay order.
pub struct Judge<'a> {
    network: &'a NetworkSpec,
    seed: u64,
    states: BTreeMap<String, ServerState>,
}

/// A rule's verdict, or why the rule could not judge (the query is then `unjudged`).
type Judged = Result<Verdict, String>;

/// One answer to judge, as every task's rule reads it: the server that answered, its rules, the
/// query's (normalized) data, the output (`null` when there was none) and, when observed, what
/// the query wrote to the server's database.
#[derive(Clone, Copy)]
struct Case<'a> {
    server: &'a str,
    rules: &'a crate::rules::ServerRules,
    data: &'a Value,
    output: &'a Value,
    writes: Option<&'a Writes>,
}

fn field<'a>(data: &'a Value, name: &str) -> Result<&'a str, String> {
    data.get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .ok_or_else(|| format!("the task data has no {name}"))
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().trim_start_matches('$').trim().parse().ok(),
        _ => None,
    }
}

fn data_number(data: &Value, name: &str) -> Result<i64, String> {
    data.get(name)
        .and_then(number)
        .map(|n| n as i64)
        .ok_or_else(|| format!("the task data has no number {name}"))
}

/// The answer's `status`, `success` or `failure` (any case).
fn status(output: &Value) -> Result<bool, Verdict> {
    match output.get("status").and_then(Value::as_str).map(str::trim) {
        Some(s) if s.eq_ignore_ascii_case("success") => Ok(true),
        Some(s) if s.eq_ignore_ascii_case("failure") => Ok(false),
        Some(other) => Err(Verdict::Wrong(format!("status {other:?}"))),
        None => Err(Verdict::Wrong("no status".into())),
    }
}

fn word(success: bool) -> &'static str {
    if success { "success" } else { "failure" }
}

/// A status verdict: `accepted` holds every status a correct server could give.
fn judge_status(output: &Value, accepted: &[bool], why: &str) -> Verdict {
    match status(output) {
        Err(verdict) => verdict,
        Ok(got) if accepted.contains(&got) => Verdict::Correct,
        Ok(got) => Verdict::Wrong(format!("{}, expected {} ({why})", word(got), word(!got))),
    }
}

fn city(place: &str) -> &str {
    place.split(',').next().unwrap_or(place).trim()
}

/// A film title compared without case and a leading "The".
fn film(title: &str) -> String {
    let lower = title.trim().to_lowercase();
    lower
        .strip_prefix("the ")
        .unwrap_or(&lower)
        .trim()
        .to_string()
}

fn dedup<T: PartialEq>(items: Vec<T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

impl<'a> Judge<'a> {
    /// A judge of runs on `network` whose mocks were seeded with `seed`.
    pub fn new(network: &'a NetworkSpec, seed: u64) -> Judge<'a> {
        Judge {
            network,
            seed,
            states: BTreeMap::new(),
        }
    }

    /// The verdict on the next query of the screenplay: `server` ran `task` on `data` (as the
    /// screenplay has it) and answered `output` (none when the query failed). Advances the
    /// reference state whatever the answer.
    pub fn judge(
        &mut self,
        server: &str,
        task: &str,
        data: &Value,
        output: Option<&Value>,
    ) -> Verdict {
        self.judge_with_writes(server, task, data, output, None)
    }

    /// [`Judge::judge`], with what the query wrote to the server's database when that was
    /// observed: a reply judged correct is then wrong if the database disagrees with it (see
    /// [`written`]).
    pub fn judge_with_writes(
        &mut self,
        server: &str,
        task: &str,
        data: &Value,
        output: Option<&Value>,
        writes: Option<&Writes>,
    ) -> Verdict {
        let data = self.network.normalize_data(task, data);
        let Some(rules) = rules_of(server) else {
            return Verdict::Unjudged(format!("no rules for the server {server}"));
        };
        let null = Value::Null;
        let case = Case {
            server,
            rules: &rules,
            data: &data,
            output: output.unwrap_or(&null),
            writes,
        };
        let judged = match task {
            "queryWeather" => self.query_weather(&case),
            "bookRoom" => self.book_room(&case),
            "rentSki" => self.rent_ski(&case),
            "suggestRestaurant" => self.suggest_restaurant(&case),
            "bookTable" => self.book_table(&case),
            "openingTimes" => Self::opening_times(&case),
            "orderEverything" => self.order_everything(&case),
            "availableMovies" => self.available_movies(&case),
            "buyTickets" => self.buy_tickets(&case),
            "callTaxi" => self.call_taxi(&case),
            "getTraffic" => self.get_traffic(&case),
            other => Err(format!("no rule for the task type {other}")),
        };
        match (judged, output) {
            (Err(reason), _) => Verdict::Unjudged(reason),
            (Ok(_), None) => Verdict::Failed,
            (Ok(_), Some(output)) if !output.is_object() => {
                Verdict::Wrong("the output is not an object".into())
            }
            (Ok(verdict), Some(_)) => match (verdict, writes) {
                (Verdict::Correct, Some(writes)) if !written::WRITE_TASKS.contains(&task) => {
                    written::nothing(task, writes)
                }
                (verdict, _) => verdict,
            },
        }
    }

    fn state(&mut self, server: &str) -> &mut ServerState {
        let network = self.network;
        self.states.entry(server.to_string()).or_insert_with(|| {
            network
                .server(server)
                .ok()
                .and_then(|s| s.database.as_ref())
                .and_then(|db| network.databases.get(db))
                .map(ServerState::seeded)
                .unwrap_or_default()
        })
    }

    /// The name of the first mock tool of `kind` in the network (the name seeds its draws).
    fn mock_name(&self, kind: MockKind, server: Option<&str>) -> Result<String, String> {
        self.network
            .servers
            .iter()
            .filter(|s| server.is_none_or(|id| s.id == id))
            .flat_map(|s| &s.tools)
            .find_map(|tool| match tool {
                ToolSpecEntry::Mock { name, mock, .. } if MockKind::parse(mock) == Some(kind) => {
                    Some(name.clone())
                }
                _ => None,
            })
            .ok_or_else(|| format!("the network has no {kind:?} mock"))
    }

    fn mock(
        &self,
        kind: MockKind,
        server: Option<&str>,
        arguments: Value,
    ) -> Result<Value, String> {
        let name = self.mock_name(kind, server)?;
        mocks::answer(kind, &name, self.seed, &arguments, self.network).map_err(|e| e.to_string())
    }

    /// The `getWeather` forecasts for `date`, drawn for each spelling of each of `places` and
    /// without a place; the canonical call (the first place as given) first.
    fn weathers(&self, date: &str, places: &[&str]) -> Result<Vec<Value>, String> {
        let mut calls = Vec::new();
        for place in places {
            calls.push(json!({"date": date, "location": place}));
            calls.push(json!({"date": date, "location": city(place)}));
        }
        calls.push(json!({"date": date}));
        dedup(calls)
            .into_iter()
            .map(|call| self.mock(MockKind::Weather, None, call))
            .collect()
    }

    /// Traffic levels drawn for `places` on `date`, in order (the rules name the place:
    /// "there", the address; so no other spelling is drawn).
    fn traffics(&self, date: &str, places: &[&str]) -> Result<Vec<String>, String> {
        let mut levels = Vec::new();
        for place in dedup(places.to_vec()) {
            let answer = self.mock(
                MockKind::Traffic,
                None,
                json!({"date": date, "location": place}),
            )?;
            levels.push(answer["traffic"].as_str().unwrap_or_default().to_string());
        }
        Ok(levels)
    }
}
