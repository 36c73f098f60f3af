//! One rule per task type, as `Judge` methods (the rules in words: [`super::RULES`]). Each reads
//! the task data (an unreadable one is `Err`, so the query is unjudged), advances the server's
//! reference state as a correct server would, and judges the output.

use serde_json::{Value, json};

use super::written::{self, is_int, is_text};
use super::{Case, Judge, Judged, data_number, dedup, field, film, judge_status, number, status};
use crate::Verdict;
use crate::mocks::{MockKind, WEEKDAYS, weekday};
use crate::reference::RoomBooking;
use crate::rules::rules_of;
use crate::writes::{TableRow, Writes};

impl Judge<'_> {
    pub(super) fn query_weather(&self, case: &Case<'_>) -> Judged {
        let Case { data, output, .. } = *case;
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

    pub(super) fn book_room(&mut self, case: &Case<'_>) -> Judged {
        let Case {
            server,
            rules,
            data,
            output,
            writes,
        } = *case;
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
        let said = output.get("roomNumber").and_then(number).map(|r| r as i64);
        if verdict == Verdict::Correct
            && status(output) == Ok(true)
            && let Some(room) = said
            && !free.contains(&room)
        {
            return Ok(Verdict::Wrong(format!(
                "room {room} is not a free room ({why})"
            )));
        }
        let booking_ok = |row: &TableRow| {
            is_text(row, "StartDate", &start)?;
            is_text(row, "EndDate", &end)?;
            match written::int(row.get("RoomNumber")) {
                Some(room) if said.is_some_and(|said| said != room) => Err(format!(
                    "room {room}, but the reply says {}",
                    said.unwrap_or(room)
                )),
                Some(room) if free.contains(&room) => Ok(()),
                _ => Err(format!("RoomNumber is not a free room ({why})")),
            }
        };
        Ok(written::one_row(
            verdict, output, writes, "Bookings", "booking", booking_ok,
        ))
    }

    pub(super) fn rent_ski(&mut self, case: &Case<'_>) -> Judged {
        let Case {
            server,
            data,
            output,
            writes,
            ..
        } = *case;
        let date = field(data, "date")?.to_string();
        let kind = field(data, "type")?.to_string();
        let state = self.state(server);
        let free_skis = state.free_skis(&kind, &date);
        let free = free_skis.first().cloned();
        if let Some(ski) = &free {
            state.ski_rentals.insert((ski.clone(), date.clone()));
        }
        let why = match &free {
            Some(ski) => format!("{kind} ski {ski} is free on {date}"),
            None => format!("no {kind} ski is free on {date}"),
        };
        let verdict = judge_status(output, &[free.is_some()], &why);
        let rental_ok = |row: &TableRow| {
            is_text(row, "StartDate", &date)?;
            if let Some(end) = written::text(row.get("EndDate"))
                && end < date
            {
                return Err(format!("EndDate {end} is before {date}"));
            }
            match written::text(row.get("SkiId")) {
                Some(ski) if free_skis.contains(&ski) => Ok(()),
                ski => Err(format!(
                    "SkiId {} is not a free {kind} ski",
                    ski.unwrap_or_else(|| "missing".into())
                )),
            }
        };
        Ok(written::one_row(
            verdict,
            output,
            writes,
            "SkiRentals",
            "rental",
            rental_ok,
        ))
    }

    pub(super) fn suggest_restaurant(&self, case: &Case<'_>) -> Judged {
        let Case {
            rules,
            data,
            output,
            ..
        } = *case;
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

    pub(super) fn book_table(&mut self, case: &Case<'_>) -> Judged {
        let Case {
            server,
            rules,
            data,
            output,
            writes,
        } = *case;
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
        let people = data.get("numPeople").and_then(number).map(|n| n as i64);
        let table_ok = |row: &TableRow| {
            is_text(row, "Date", &date)?;
            is_int(row, "Hour", hour)?;
            if let Some(people) = people {
                is_int(row, "NumPeople", people)?;
            }
            match written::text(row.get("Surname")) {
                Some(name) if name.to_lowercase().contains(&surname) => Ok(()),
                name => Err(format!(
                    "Surname is {}, not {surname}",
                    name.unwrap_or_else(|| "missing".into())
                )),
            }
        };
        Ok(written::one_row(
            judge_status(output, &[ok], &why),
            output,
            writes,
            "Bookings",
            "table booking",
            table_ok,
        ))
    }

    pub(super) fn opening_times(case: &Case<'_>) -> Judged {
        let Case { rules, output, .. } = *case;
        let opening = rules.opening.ok_or("the server has no opening hours")?;
        let Some(entries) = output.get("openingTimes").and_then(Value::as_array) else {
            return Ok(Verdict::Wrong("no openingTimes list".into()));
        };
        let mut seen = Vec::new();
        for entry in entries {
            let day = entry.get("day").and_then(Value::as_str).unwrap_or_default();
            let Some(day) = WEEKDAYS.iter().find(|d| d.eq_ignore_ascii_case(day.trim())) else {
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
        let missing: Vec<&&str> = WEEKDAYS
            .iter()
            .filter(|d| **d != opening.closed && !seen.contains(d))
            .collect();
        Ok(if missing.is_empty() {
            Verdict::Correct
        } else {
            Verdict::Wrong(format!("missing {missing:?}"))
        })
    }

    pub(super) fn order_everything(&self, case: &Case<'_>) -> Judged {
        let Case { data, output, .. } = *case;
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

    pub(super) fn available_movies(&mut self, case: &Case<'_>) -> Judged {
        let Case {
            server,
            data,
            output,
            ..
        } = *case;
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

    pub(super) fn buy_tickets(&mut self, case: &Case<'_>) -> Judged {
        let Case {
            server,
            data,
            output,
            writes,
            ..
        } = *case;
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
        let verdict = judge_status(output, &[ok], &why);
        Ok(match writes {
            Some(writes) if verdict == Verdict::Correct => {
                if status(output) == Ok(true) {
                    tickets_taken(writes, &date, hour, &movie, wanted)
                } else {
                    written::failure_wrote_nothing(writes)
                }
            }
            _ => verdict,
        })
    }

    pub(super) fn call_taxi(&self, case: &Case<'_>) -> Judged {
        let Case {
            server,
            rules,
            data,
            output,
            ..
        } = *case;
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

    pub(super) fn get_traffic(&self, case: &Case<'_>) -> Judged {
        let Case { data, output, .. } = *case;
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

/// A ticket sale's writes: the screening's row, and nothing else, changed from `n` tickets left
/// to `n - wanted`.
fn tickets_taken(writes: &Writes, date: &str, hour: i64, movie: &str, wanted: i64) -> Verdict {
    let screening = |row: &TableRow| {
        row.is_in("Screenings")
            && is_text(row, "Date", date).is_ok()
            && is_int(row, "Hour", hour).is_ok()
            && written::text(row.get("Movie")).is_some_and(|m| film(&m) == movie)
    };
    let left = |rows: &[TableRow]| -> Vec<Option<i64>> {
        rows.iter()
            .filter(|row| screening(row))
            .map(|row| written::int(row.get("TicketsLeft")))
            .collect()
    };
    let (before, after) = (left(&writes.removed), left(&writes.added));
    let verdict = match (before.as_slice(), after.as_slice()) {
        ([], []) => written::wrong(format!(
            "the reply says success, but the screening's TicketsLeft did not change (tickets: {wanted})"
        )),
        ([Some(was)], [Some(now)]) if was - now == wanted => Verdict::Correct,
        ([Some(was)], [Some(now)]) => written::wrong(format!(
            "TicketsLeft went from {was} to {now}, but {wanted} tickets were bought"
        )),
        _ => written::wrong(format!(
            "the screening's rows changed unreadably: removed {before:?}, added {after:?}"
        )),
    };
    let mut others = writes
        .outside(None)
        .filter(|row| !screening(row))
        .peekable();
    match verdict {
        Verdict::Correct if others.peek().is_some() => written::wrong(format!(
            "besides the screening, the database changed: {}",
            written::quote(others)
        )),
        verdict => verdict,
    }
}
