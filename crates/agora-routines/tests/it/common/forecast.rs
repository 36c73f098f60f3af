//! A deterministic weather forecast for the routine tests and the bench: the shape of the node's
//! built-in `weather_forecast` tool (`location`, `date`, `temperature_c`, `precipitation_mm`,
//! `condition`), with values drawn from a SHA-256 of the seed and the arguments. The routines only
//! pass the tool's values through, so the tests check their replies against this function rather
//! than against the node's generator, and the runtime needs no dependency on the node.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The forecast for a location and date under a seed.
pub fn forecast(seed: u64, location: &str, date: &str) -> Value {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    hasher.update(location.trim().to_lowercase().as_bytes());
    hasher.update([0]);
    hasher.update(date.trim().as_bytes());
    let digest = hasher.finalize();
    let temperature = (f64::from(digest[0]) / 255.0 * 400.0).round() / 10.0 - 10.0;
    let condition = ["sunny", "cloudy", "rainy", "snowy"][usize::from(digest[1] % 4)];
    let precipitation = match condition {
        "sunny" => 0.0,
        _ => (f64::from(digest[2]) / 255.0 * 200.0).round() / 10.0,
    };
    json!({
        "location": location,
        "date": date,
        "temperature_c": temperature,
        "precipitation_mm": precipitation,
        "condition": condition,
    })
}
