//! The paper's screenplay generator (`generate_screenplay.py` with the constants that match the
//! published `actions.json`, see `paper-demo.md` §6), deterministic per seed.
//!
//! - Query budgets per user: a discrete power law ([`discrete_power_law`]) with shape 0.5 and at
//!   least 1 per user, in the network's user order.
//! - Per user: 3 distinct (server, task) pairs drawn from every server's tasks, the budget split
//!   between them by the same law with shape 1 (pairs that get 0 are dropped).
//! - Each query's data from the paper's task generators (dates up to a year before the network's
//!   "today"; names, streets, films and cities from the paper's lists); then all queries shuffled.
//! - A protocol database sync after every 10 queries, cycling the databases; the list ends with
//!   one.
//!
//! The random draws are a SplitMix64 stream of the seed: a given seed always gives the same
//! screenplay, but not the paper's (which came from Python's unseeded `random`).

use serde_json::{Value, json};

use crate::mocks::{civil_from_days, days_from_civil};
use crate::spec::NetworkSpec;

/// First names of `bookTable`'s guests.
pub const FIRST_NAMES: [&str; 10] = [
    "Brooke", "Toby", "Maxwell", "Cliff", "Manfred", "Valerie", "Kara", "Nina", "Madge", "Laurel",
];
/// Surnames (guests, streets).
pub const SURNAMES: [&str; 10] = [
    "Smith", "Jones", "Johnson", "Brown", "Williams", "Miller", "Taylor", "Wilson", "Davis",
    "White",
];
/// The films `buyTickets` asks for.
pub const MOVIES: [&str; 3] = ["Forrest Gump", "Stand by Me", "The Silence of the Lambs"];
/// The places `getTraffic` asks about.
pub const CITIES: [&str; 8] = [
    "New York",
    "Los Angeles",
    "London",
    "Vienna",
    "Tokyo",
    "Zurich",
    "Cairo",
    "Rome",
];
/// The places `queryWeather` asks about.
pub const WEATHER_PLACES: [&str; 3] = ["Paris, France", "New York, USA", "London, UK"];

/// The paper's constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneratorConfig {
    /// Queries in all.
    pub queries: usize,
    /// Shape of the users' budgets.
    pub user_shape: f64,
    /// (server, task) pairs per user.
    pub pairs_per_user: usize,
    /// Shape of a user's split between its pairs.
    pub pair_shape: f64,
    /// Queries between two protocol database syncs.
    pub sync_every: usize,
}

impl GeneratorConfig {
    /// The paper's constants for `queries` queries.
    pub fn paper(queries: usize) -> GeneratorConfig {
        GeneratorConfig {
            queries,
            user_shape: 0.5,
            pairs_per_user: 3,
            pair_shape: 1.0,
            sync_every: 10,
        }
    }
}

/// Why no screenplay could be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeneratorError {
    /// Every user gets at least one query.
    #[error("{queries} queries cannot give each of the {users} users one")]
    TooFewQueries {
        /// Asked for.
        queries: usize,
        /// Users in the network.
        users: usize,
    },
    /// The network has fewer (server, task) pairs than each user needs.
    #[error("the network has {0} (server, task) pairs, fewer than a user needs")]
    TooFewPairs(usize),
}

/// `n` integers summing to `total`, each at least `min`, shaped like the Pareto density
/// `shape / i^(shape+1)` (the paper's `generate_discrete_power_law`): rescaled to
/// `total - n*min` plus `min`, divided by the largest if that is below 1, floored, and the
/// remainder spread again by the same law with `min` 0.
pub fn discrete_power_law(n: usize, shape: f64, min: u64, total: u64) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let weights: Vec<f64> = (1..=n)
        .map(|i| shape / (i as f64).powf(shape + 1.0))
        .collect();
    let sum: f64 = weights.iter().sum();
    let spread = total as f64 - (n as u64 * min) as f64;
    let mut values: Vec<f64> = weights
        .iter()
        .map(|w| w * spread / sum + min as f64)
        .collect();
    let max = values.iter().cloned().fold(f64::MIN, f64::max);
    if max < 1.0 && max > 0.0 {
        values.iter_mut().for_each(|v| *v /= max);
    }
    let mut counts: Vec<u64> = values.iter().map(|v| v.floor().max(0.0) as u64).collect();
    let given: u64 = counts.iter().sum();
    if given < total {
        let more = discrete_power_law(n, shape, 0, total - given);
        counts.iter_mut().zip(more).for_each(|(c, m)| *c += m);
    }
    counts
}

/// SplitMix64: a small, fixed, seedable stream.
pub(crate) struct Draws(pub(crate) u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn int(&mut self, low: i64, high: i64) -> i64 {
        low + (self.next() % (high - low + 1) as u64) as i64
    }

    fn choose<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.int(0, items.len() as i64 - 1) as usize]
    }

    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.int(0, i as i64) as usize;
            items.swap(i, j);
        }
    }
}

fn past_date(draws: &mut Draws, today: i64) -> (i64, String) {
    let day = today - draws.int(1, 365);
    (day, civil_from_days(day))
}

fn street(draws: &mut Draws) -> String {
    format!("{} {} Street", draws.int(1, 100), draws.choose(&SURNAMES))
}

/// One query's data for `task`, from the paper's generators (`today` in days since 1970).
fn task_data(task: &str, draws: &mut Draws, today: i64) -> Value {
    match task {
        "queryWeather" => {
            let (_, date) = past_date(draws, today);
            json!({"date": date, "location": draws.choose(&WEATHER_PLACES)})
        }
        "bookRoom" => {
            let (start, start_date) = past_date(draws, today);
            let end = civil_from_days(start + draws.int(1, 20));
            json!({"startDate": start_date, "endDate": end})
        }
        "suggestRestaurant" => json!({"date": past_date(draws, today).1}),
        "rentSki" => {
            let date = past_date(draws, today).1;
            json!({"date": date, "type": draws.choose(&["racing", "carving", "backcountry"])})
        }
        "bookTable" => {
            let name = format!("{} {}", draws.choose(&FIRST_NAMES), draws.choose(&SURNAMES));
            let date = past_date(draws, today).1;
            json!({"fullName": name, "date": date, "numPeople": draws.int(1, 10), "hour": draws.int(16, 23)})
        }
        "orderEverything" => json!({"deliveryAddress": street(draws)}),
        // The paper's generator wrote the cinema dates as one-element lists.
        "availableMovies" => json!({"date": [format!("2024-03-{}", draws.int(15, 18))]}),
        "buyTickets" => {
            let date = format!("2024-03-{}", draws.int(15, 18));
            let hour = if draws.int(0, 1) == 0 { 18 } else { 20 };
            json!({"date": [date], "hour": hour, "numTickets": draws.int(1, 6), "movie": draws.choose(&MOVIES)})
        }
        "callTaxi" => {
            let address = street(draws);
            // Not zero-padded, as in the paper ("17:0").
            json!({"address": address, "time": format!("{}:{}", draws.int(0, 23), draws.int(0, 59))})
        }
        "getTraffic" => {
            let date = past_date(draws, today).1;
            json!({"date": date, "location": draws.choose(&CITIES)})
        }
        _ => json!({}),
    }
}

/// A screenplay for `network` in the committed format: `[user, [server, task], data]` queries and
/// `[protocolDb, [null, "synchronization"], null]` syncs.
pub fn generate(
    network: &NetworkSpec,
    config: &GeneratorConfig,
    seed: u64,
) -> Result<Vec<Value>, GeneratorError> {
    let users = network.users.len();
    if config.queries < users {
        return Err(GeneratorError::TooFewQueries {
            queries: config.queries,
            users,
        });
    }
    let pairs: Vec<(&str, &str)> = network
        .servers
        .iter()
        .flat_map(|s| s.tasks.iter().map(|t| (s.id.as_str(), t.as_str())))
        .collect();
    if pairs.len() < config.pairs_per_user {
        return Err(GeneratorError::TooFewPairs(pairs.len()));
    }
    let today = {
        let parts: Vec<i64> = network
            .today
            .split('-')
            .map(|p| p.parse().unwrap_or(1))
            .collect();
        days_from_civil(parts[0], parts[1], *parts.get(2).unwrap_or(&1))
    };
    let mut draws = Draws(seed);
    let budgets = discrete_power_law(users, config.user_shape, 1, config.queries as u64);
    let mut queries = Vec::with_capacity(config.queries);
    for (user, budget) in network.users.iter().zip(budgets) {
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        draws.shuffle(&mut order);
        let split = discrete_power_law(config.pairs_per_user, config.pair_shape, 1, budget);
        for (pair, count) in order.iter().map(|i| pairs[*i]).zip(split) {
            for _ in 0..count {
                let data = task_data(pair.1, &mut draws, today);
                queries.push(json!([user.id, [pair.0, pair.1], data]));
            }
        }
    }
    draws.shuffle(&mut queries);
    let dbs: Vec<&str> = network.protocol_dbs.iter().map(|d| d.id.as_str()).collect();
    let mut entries = Vec::with_capacity(queries.len() + queries.len() / config.sync_every + 1);
    let mut syncs = 0;
    let total = queries.len();
    for (n, query) in queries.into_iter().enumerate() {
        entries.push(query);
        if (n + 1) % config.sync_every == 0 || n + 1 == total {
            entries.push(json!([
                dbs[syncs % dbs.len()],
                [null, "synchronization"],
                null
            ]));
            syncs += 1;
        }
    }
    Ok(entries)
}

/// The screenplay as text: one entry per line, like the committed `screenplay.json`.
pub fn to_text(entries: &[Value]) -> String {
    let lines: Vec<String> = entries.iter().map(Value::to_string).collect();
    format!("[\n{}\n]\n", lines.join(",\n"))
}
