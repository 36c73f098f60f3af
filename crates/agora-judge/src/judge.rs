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

use crate::mocks::{self, MockKind, weekday};
use crate::reference::{RoomBooking, ServerState};
use crate::rules::{ServerRules, rules_of};
use crate::spec::{NetworkSpec, ToolSpecEntry};

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
        let data = self.network.normalize_data(task, data);
        let Some(rules) = rules_of(server) else {
            return Verdict::Unjudged(format!("no rules for the server {server}"));
        };
        let null = Value::Null;
        let answer = output.unwrap_or(&null);
        let judged = match task {
            "queryWeather" => self.query_weather(&data, answer),
            "bookRoom" => self.book_room(server, &rules, &data, answer),
            "rentSki" => self.rent_ski(server, &data, answer),
            "suggestRestaurant" => self.suggest_restaurant(&rules, &data, answer),
            "bookTable" => self.book_table(server, &rules, &data, answer),
            "openingTimes" => Self::opening_times(&rules, answer),
            "orderEverything" => self.order_everything(&data, answer),
            "availableMovies" => self.available_movies(server, &data, answer),
            "buyTickets" => self.buy_tickets(server, &data, answer),
            "callTaxi" => self.call_taxi(server, &rules, &data, answer),
            "getTraffic" => self.get_traffic(&data, answer),
            other => Err(format!("no rule for the task type {other}")),
        };
        match (judged, output) {
            (Err(reason), _) => Verdict::Unjudged(reason),
            (Ok(_), None) => Verdict::Failed,
            (Ok(_), Some(output)) if !output.is_object() => {
                Verdict::Wrong("the output is not an object".into())
            }
            (Ok(verdict), Some(_)) => verdict,
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

    fn query_weather(&self, data: &Value, output: &Value) -> Judged {
        let date = field(data, "date")?;
        let places: Vec<&str> = data
            .get("location")
            .and_then(Value::as_str)
            .into_iter()
            .collect();
        let forecasts = self.weathers(date, &places)?;
        let got = (
            output.get("temperature").and_then(number),
            output.get("precipitation").and_then(number),
        );
        let (Some(temperature), Some(precipitation)) = got else {
            return Ok(Verdict::Wrong("no temperature or precipitation".into()));
        };
        let close = |a: f64, b: &Value| b.as_f64().is_some_and(|b| (a - b).abs() <= 0.5);
        if forecasts.iter().any(|f| {
            close(temperature, &f["temperature"]) && close(precipitation, &f["precipitation"])
        }) {
            return Ok(Verdict::Correct);
        }
        let canonical = forecasts.first().cloned().unwrap_or_default();
        Ok(Verdict::Wrong(format!(
            "{temperature} °C, {precipitation} mm; the forecast for {date} is {} °C, {} mm",
            canonical["temperature"], canonical["precipitation"]
        )))
    }

    fn book_room(
        &mut self,
        server: &str,
        rules: &ServerRules,
        data: &Value,
        output: &Value,
    ) -> Judged {
        let start = field(data, "startDate")?.to_string();
        let end = field(data, "endDate")?.to_string();
        // The temperature rule: every spelling of the resort's place, canonical first.
        let warm_enough: Vec<bool> = match rules.room_temperature {
            None => vec![true],
            Some((low, high)) => self
                .weathers(&start, &[rules.city])?
                .iter()
                .map(|w| {
                    w["temperature"]
                        .as_i64()
                        .is_some_and(|t| low <= t && t <= high)
                })
                .collect(),
        };
        let state = self.state(server);
        let free = if start <= end {
            state.free_rooms(&start, &end)
        } else {
            Vec::new()
        };
        let canonical = !free.is_empty() && warm_enough.first().copied().unwrap_or(false);
        if canonical {
            state.room_bookings.push(RoomBooking {
                room: free[0],
                start: start.clone(),
                end: end.clone(),
            });
        }
        let accepted: Vec<bool> = if free.is_empty() {
            vec![false]
        } else {
            dedup(warm_enough)
        };
        let why = if free.is_empty() {
            format!("no room is free from {start} to {end}")
        } else if let (Some((low, high)), [false]) = (rules.room_temperature, accepted.as_slice()) {
            format!("the forecast for {start} is outside {low}..{high} °C")
        } else {
            format!("room {} is free from {start} to {end}", free[0])
        };
        let verdict = judge_status(output, &accepted, &why);
        if verdict == Verdict::Correct
            && status(output) == Ok(true)
            && let Some(room) = output.get("roomNumber").and_then(number)
            && !free.contains(&(room as i64))
        {
            return Ok(Verdict::Wrong(format!(
                "room {room} is not a free room ({why})"
            )));
        }
        Ok(verdict)
    }

    fn rent_ski(&mut self, server: &str, data: &Value, output: &Value) -> Judged {
        let date = field(data, "date")?.to_string();
        let kind = field(data, "type")?.to_string();
        let state = self.state(server);
        let free = state.free_ski(&kind, &date);
        if let Some(ski) = &free {
            state.ski_rentals.insert((ski.clone(), date.clone()));
        }
        let why = match &free {
            Some(ski) => format!("{kind} ski {ski} is free on {date}"),
            None => format!("no {kind} ski is free on {date}"),
        };
        Ok(judge_status(output, &[free.is_some()], &why))
    }

    fn suggest_restaurant(&self, rules: &ServerRules, data: &Value, output: &Value) -> Judged {
        let date = field(data, "date")?;
        let recommendation = rules
            .recommends
            .ok_or("the server recommends no restaurant")?;
        let opening = rules_of(recommendation.server)
            .and_then(|r| r.opening)
            .ok_or("the recommended restaurant has no opening rule")?;
        let day = weekday(date).ok_or_else(|| format!("{date:?} is not a date"))?;
        let open = opening.open_on(day);
        let Some(said) = output.get("recommendedRestaurant").and_then(Value::as_str) else {
            return Ok(Verdict::Wrong("no recommendedRestaurant".into()));
        };
        let names_it = said
            .to_lowercase()
            .contains(&recommendation.restaurant.to_lowercase());
        Ok(match (open, names_it) {
            (true, true) | (false, false) => Verdict::Correct,
            (true, false) => Verdict::Wrong(format!(
                "{said:?}, but {} is open on {day} {date}",
                recommendation.restaurant
            )),
            (false, true) => Verdict::Wrong(format!(
                "{said:?}, but {} is closed on {day} {date}",
                recommendation.restaurant
            )),
        })
    }

    fn book_table(
        &mut self,
        server: &str,
        rules: &ServerRules,
        data: &Value,
        output: &Value,
    ) -> Judged {
        let opening = rules.opening.ok_or("the server takes no table bookings")?;
        let date = field(data, "date")?.to_string();
        let hour = data_number(data, "hour")?;
        let surname = field(data, "fullName")?
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_lowercase();
        let day = weekday(&date).ok_or_else(|| format!("{date:?} is not a date"))?;
        let key = (surname.clone(), date.clone(), hour);
        let state = self.state(server);
        let (ok, why) = if !opening.open_on(day) {
            (false, format!("closed on {day}s"))
        } else if !opening.bookable(day, hour) {
            (
                false,
                format!(
                    "{hour}:00 is outside {}:00-{}:00",
                    opening.open, opening.close
                ),
            )
        } else if state.tables.contains(&key) {
            (false, format!("{surname} already has {date} {hour}:00"))
        } else {
            (true, format!("open on {day} at {hour}:00 and free"))
        };
        if ok {
            state.tables.insert(key);
        }
        Ok(judge_status(output, &[ok], &why))
    }

    fn opening_times(rules: &ServerRules, output: &Value) -> Judged {
        let opening = rules.opening.ok_or("the server has no opening hours")?;
        let Some(entries) = output.get("openingTimes").and_then(Value::as_array) else {
            return Ok(Verdict::Wrong("no openingTimes list".into()));
        };
        const DAYS: [&str; 7] = [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ];
        let mut seen = Vec::new();
        for entry in entries {
            let day = entry.get("day").and_then(Value::as_str).unwrap_or_default();
            let Some(day) = DAYS.iter().find(|d| d.eq_ignore_ascii_case(day.trim())) else {
                return Ok(Verdict::Wrong(format!("{day:?} is not a weekday")));
            };
            let hours = (
                entry.get("openingHour").and_then(number),
                entry.get("closingHour").and_then(number),
            );
            if *day == opening.closed {
                let no_hours = match hours {
                    (Some(o), Some(c)) => o == c,
                    _ => true,
                };
                if !no_hours {
                    return Ok(Verdict::Wrong(format!("open on {day}, its closed day")));
                }
                continue;
            }
            if hours != (Some(opening.open as f64), Some(opening.close as f64)) {
                return Ok(Verdict::Wrong(format!(
                    "{day} {:?}-{:?}, expected {}-{}",
                    hours.0, hours.1, opening.open, opening.close
                )));
            }
            seen.push(*day);
        }
        let missing: Vec<&&str> = DAYS
            .iter()
            .filter(|d| **d != opening.closed && !seen.contains(d))
            .collect();
        Ok(if missing.is_empty() {
            Verdict::Correct
        } else {
            Verdict::Wrong(format!("missing {missing:?}"))
        })
    }

    fn order_everything(&self, data: &Value, output: &Value) -> Judged {
        let address = field(data, "deliveryAddress")?;
        let levels = self.traffics(&self.network.today, &[address])?;
        let accepted: Vec<bool> = dedup(
            levels
                .iter()
                .map(|l| l != "heavy" && l != "accident")
                .collect(),
        );
        let why = format!(
            "traffic today: {}",
            levels.first().map(String::as_str).unwrap_or("?")
        );
        Ok(judge_status(output, &accepted, &why))
    }

    fn movies_on(&mut self, server: &str, date: &str) -> Vec<String> {
        dedup(
            self.state(server)
                .screenings
                .iter()
                .filter(|s| s.date == date)
                .map(|s| film(&s.movie))
                .collect(),
        )
    }

    fn available_movies(&mut self, server: &str, data: &Value, output: &Value) -> Judged {
        let date = field(data, "date")?.to_string();
        let mut truth = self.movies_on(server, &date);
        let Some(listed) = output.get("movies").and_then(Value::as_array) else {
            return Ok(Verdict::Wrong("no movies list".into()));
        };
        let mut got = dedup(listed.iter().filter_map(Value::as_str).map(film).collect());
        truth.sort();
        got.sort();
        Ok(if got == truth {
            Verdict::Correct
        } else {
            Verdict::Wrong(format!("{got:?}, expected {truth:?} on {date}"))
        })
    }

    fn buy_tickets(&mut self, server: &str, data: &Value, output: &Value) -> Judged {
        let date = field(data, "date")?.to_string();
        let movie = film(field(data, "movie")?);
        let hour = data_number(data, "hour")?;
        let wanted = data_number(data, "numTickets")?;
        let state = self.state(server);
        let screening = state
            .screenings
            .iter_mut()
            .find(|s| s.date == date && s.hour == hour && film(&s.movie) == movie);
        let (ok, why) = match screening {
            None => (
                false,
                format!("no screening of {movie} on {date} at {hour}:00"),
            ),
            Some(s) if s.tickets_left < wanted => (
                false,
                format!("{} tickets left, {wanted} wanted", s.tickets_left),
            ),
            Some(s) => {
                s.tickets_left -= wanted;
                (
                    true,
                    format!("{} tickets were left", s.tickets_left + wanted),
                )
            }
        };
        Ok(judge_status(output, &[ok], &why))
    }

    fn call_taxi(&self, server: &str, rules: &ServerRules, data: &Value, output: &Value) -> Judged {
        let fare = rules.taxi.ok_or("the server runs no taxis")?;
        let address = field(data, "address")?;
        let time = field(data, "time")?;
        let (hour, minute) = time
            .split_once(':')
            .and_then(|(h, m)| Some((h.trim().parse::<i64>().ok()?, m.trim().parse::<i64>().ok()?)))
            .ok_or_else(|| format!("{time:?} is not a time"))?;
        let padded = format!("{hour:02}:{minute:02}");
        let mut free = Vec::new();
        for spelling in dedup(vec![time.to_string(), padded]) {
            let taxi = self.mock(
                MockKind::AvailableTaxi,
                Some(server),
                json!({"time": spelling}),
            )?;
            free.push(taxi["taxiId"] != json!("000") && !taxi["taxiId"].is_null());
        }
        let night = u32::from(fare.night_surcharge && (20..23).contains(&hour));
        let today = self.network.today.clone();
        let jams: Vec<u32> = self
            .traffics(&today, &[address])?
            .iter()
            .map(|l| u32::from(l == "heavy" || l == "accident"))
            .collect();
        let rains: Vec<u32> = if fare.rain_surcharge {
            self.weathers(&today, &[rules.city])?
                .iter()
                .map(|w| u32::from(w["weather"] == json!("rainy")))
                .collect()
        } else {
            vec![0]
        };
        let mut prices = Vec::new();
        for jam in dedup(jams) {
            for rain in dedup(rains.clone()) {
                prices.push(fare.price(night + jam + rain));
            }
        }
        let accepted = dedup(free.clone());
        let why = format!(
            "{} at {time}; fares {prices:?}",
            if free[0] {
                "a taxi is free"
            } else {
                "no taxi is free"
            }
        );
        let verdict = judge_status(output, &accepted, &why);
        if verdict != Verdict::Correct || status(output) != Ok(true) {
            return Ok(verdict);
        }
        let Some(price) = output.get("price").and_then(number) else {
            return Ok(Verdict::Wrong("success without a price".into()));
        };
        Ok(if prices.iter().any(|p| (p - price).abs() <= 0.01) {
            Verdict::Correct
        } else {
            Verdict::Wrong(format!("price {price}, expected one of {prices:?}"))
        })
    }

    fn get_traffic(&self, data: &Value, output: &Value) -> Judged {
        let date = field(data, "date")?;
        let location = field(data, "location")?;
        let levels = self.traffics(date, &[location])?;
        let got = output
            .get("traffic")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Ok(
            if levels.iter().any(|l| l.eq_ignore_ascii_case(got.trim())) {
                Verdict::Correct
            } else {
                Verdict::Wrong(format!("{got:?}, expected {:?}", levels[0]))
            },
        )
    }
}
