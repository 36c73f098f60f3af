//! The servers' mock tools, as pure functions: the network demo's servers call them (through
//! `agora-network`'s tool adapters) and the judge calls them to know what a correct server saw.
//!
//! The paper's value distributions, made deterministic: each result is drawn from a SHA-256
//! stream seeded with the network's seed, the tool's name and its arguments (objects in key
//! order), so the same call always gives the same answer (a run can be replayed from a cassette)
//! while different calls are spread as in the paper. The arguments are part of the seed, so
//! `getWeather` for `"London"` and for `"London, UK"` are two draws: the judge accounts for that
//! (see `crate::judge`).
//!
//! Deviations from the paper's mocks, on purpose: `currentDate` returns the screenplay's
//! generation day instead of a random date on every call; `getAvailableTaxi` says `"000"` (as
//! its schema promises) instead of `null` when no taxi is free; `getWeather` does not require a
//! location (its schema marks it optional and it has no effect in the paper).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::spec::NetworkSpec;

/// A deterministic stream of draws for one call.
struct Draws {
    seed: Vec<u8>,
    counter: u32,
}

impl Draws {
    fn new(seed: u64, tool: &str, arguments: &Value) -> Draws {
        let mut canonical = arguments.clone();
        canonical.sort_all_objects();
        let mut bytes = seed.to_le_bytes().to_vec();
        bytes.extend_from_slice(tool.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(canonical.to_string().as_bytes());
        Draws {
            seed: bytes,
            counter: 0,
        }
    }

    /// A uniform integer in `low..=high`.
    fn int(&mut self, low: i64, high: i64) -> i64 {
        let mut hasher = Sha256::new();
        hasher.update(&self.seed);
        hasher.update(self.counter.to_le_bytes());
        self.counter += 1;
        let digest = hasher.finalize();
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        let span = (high - low + 1) as u64;
        low + (u64::from_le_bytes(word) % span) as i64
    }

    fn choose<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.int(0, items.len() as i64 - 1) as usize]
    }
}

/// Which mock a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MockKind {
    /// `{temperature, precipitation, weather}` for a date.
    Weather,
    /// The screenplay's "today".
    CurrentDate,
    /// A static menu per cuisine.
    Menu,
    /// The weekday of a date.
    DayOfTheWeek,
    /// Always sends a driver.
    SendDriver,
    /// One of five traffic levels.
    Traffic,
    /// A free taxi 85 % of the time.
    AvailableTaxi,
    /// Always assigns.
    AssignTaxi,
}

impl MockKind {
    /// The mock of the paper's name.
    pub fn parse(name: &str) -> Option<MockKind> {
        Some(match name {
            "weather" => MockKind::Weather,
            "currentDate" => MockKind::CurrentDate,
            "getMenu" => MockKind::Menu,
            "dayOfTheWeek" => MockKind::DayOfTheWeek,
            "sendDriver" => MockKind::SendDriver,
            "trafficInfo" => MockKind::Traffic,
            "getAvailableTaxi" => MockKind::AvailableTaxi,
            "assignTaxi" => MockKind::AssignTaxi,
            _ => return None,
        })
    }
}

/// Why a mock refused a call (the text is what the calling model reads).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MockError {
    /// The arguments do not fit the tool.
    #[error("{0}")]
    InvalidArguments(String),
    /// The arguments fit but the tool has no answer.
    #[error("{0}")]
    Failed(String),
}

fn string_arg<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, MockError> {
    arguments.get(name).and_then(Value::as_str).ok_or_else(|| {
        MockError::InvalidArguments(format!("{name} is required and must be a string"))
    })
}

/// The mock `kind`'s answer when called as `tool` (the name the server knows it by, part of the
/// seed) with `arguments`. Pure: same call, same answer.
pub fn answer(
    kind: MockKind,
    tool: &str,
    seed: u64,
    arguments: &Value,
    network: &NetworkSpec,
) -> Result<Value, MockError> {
    let mut draws = Draws::new(seed, tool, arguments);
    Ok(match kind {
        MockKind::Weather => {
            string_arg(arguments, "date")?;
            let temperature = draws.int(-10, 30);
            let mut precipitation = draws.int(0, 100);
            let weather = if precipitation > 50 {
                if temperature > 0 { "rainy" } else { "snowy" }
            } else {
                precipitation = draws.int(0, 100);
                draws.choose(&["sunny", "cloudy"])
            };
            json!({"temperature": temperature, "precipitation": precipitation, "weather": weather})
        }
        MockKind::CurrentDate => json!({"date": network.today}),
        MockKind::Menu => {
            let cuisine = string_arg(arguments, "cuisineType")?.to_lowercase();
            let menu = network
                .menus
                .get(&cuisine)
                .ok_or_else(|| MockError::Failed(format!("no menu for the cuisine {cuisine:?}")))?;
            let dishes: Vec<Value> = menu
                .iter()
                .map(|(name, price)| json!({"name": name, "price": price}))
                .collect();
            json!({"menu": dishes})
        }
        MockKind::DayOfTheWeek => {
            let date = string_arg(arguments, "date")?;
            let day = weekday(date).ok_or_else(|| {
                MockError::InvalidArguments(format!("{date:?} is not a date like 2024-09-22"))
            })?;
            json!({"day": day})
        }
        MockKind::SendDriver | MockKind::AssignTaxi => json!({"status": "success"}),
        MockKind::Traffic => {
            json!({"traffic": draws.choose(&["clear", "light", "moderate", "heavy", "accident"])})
        }
        MockKind::AvailableTaxi => {
            string_arg(arguments, "time")?;
            if draws.int(1, 100) <= 85 {
                let letters: String = (0..4)
                    .map(|_| char::from(b'A' + draws.int(0, 25) as u8))
                    .collect();
                let digits: String = (0..2)
                    .map(|_| char::from(b'0' + draws.int(0, 9) as u8))
                    .collect();
                json!({"taxiId": format!("{letters}{digits}")})
            } else {
                json!({"taxiId": "000"})
            }
        }
    })
}

/// The weekday of a `YYYY-MM-DD` date (proleptic Gregorian).
pub fn weekday(date: &str) -> Option<&'static str> {
    let mut parts = date.trim().splitn(3, '-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: i64 = parts.next()?.parse().ok()?;
    let day: i64 = parts.next()?.get(..2)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil); 1970-01-01 was a Thursday.
    let days = days_from_civil(year, month, day);
    Some(WEEKDAYS[(days + 3).rem_euclid(7) as usize])
}

/// The days of the week, Monday first.
pub const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The `YYYY-MM-DD` date `days` after 1970-01-01 (Howard Hinnant's civil_from_days).
pub fn civil_from_days(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weekdays_are_right() {
        assert_eq!(weekday("2024-09-22"), Some("Sunday"));
        assert_eq!(weekday("2000-02-29"), Some("Tuesday"));
        assert_eq!(weekday("1970-01-01"), Some("Thursday"));
        assert_eq!(weekday("2024-13-01"), None);
        assert_eq!(weekday("soon"), None);
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in [-1000, 0, 19_000, 19_988, 20_000] {
            let date = civil_from_days(days);
            let parts: Vec<i64> = date.split('-').map(|p| p.parse().unwrap_or(0)).collect();
            assert_eq!(
                days_from_civil(parts[0], parts[1], parts[2]),
                days,
                "{date}"
            );
        }
        assert_eq!(civil_from_days(days_from_civil(2024, 9, 22)), "2024-09-22");
    }
}
