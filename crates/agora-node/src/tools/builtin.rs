//! Built-in demo tools.
//!
//! They stand in for a real data source in demos and tests: deterministic
//! (seeded) so a run can be repeated, and shaped unlike any protocol's output
//! so that an LLM or routine has to map fields, as it would with a real API.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::tool::{Tool, ToolError, ToolSpec};

/// A weather forecast generator: the same (location, date, seed) always
/// gives the same forecast.
#[derive(Debug, Clone)]
pub struct WeatherForecastTool {
    spec: ToolSpec,
    seed: u64,
}

impl WeatherForecastTool {
    /// The tool with its default name `weather_forecast`.
    pub fn new(seed: u64) -> Self {
        Self::with_spec(Self::default_spec(), seed)
    }

    /// The tool under another name or description.
    pub fn with_spec(spec: ToolSpec, seed: u64) -> Self {
        Self { spec, seed }
    }

    /// The default spec.
    pub fn default_spec() -> ToolSpec {
        ToolSpec {
            name: "weather_forecast".into(),
            description: "Looks up the weather forecast for a location on a date. Returns \
                          temperature_c (degrees Celsius), precipitation_mm (millimetres) and \
                          condition (one of sunny, cloudy, rainy, snowy)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City and country, e.g. London, UK"},
                    "date": {"type": "string", "description": "Date as YYYY-MM-DD", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
                },
                "required": ["location", "date"],
                "additionalProperties": false
            }),
            returns: Some(json!({
                "type": "object",
                "properties": {
                    "temperature_c": {"type": "number"},
                    "precipitation_mm": {"type": "number"},
                    "condition": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]}
                }
            })),
        }
    }

    /// The forecast for a location and date.
    pub fn forecast(&self, location: &str, date: &str) -> Value {
        let mut hasher = Sha256::new();
        hasher.update(self.seed.to_le_bytes());
        hasher.update(location.trim().to_lowercase().as_bytes());
        hasher.update([0]);
        hasher.update(date.trim().as_bytes());
        let digest = hasher.finalize();
        let month: u32 = date.get(5..7).and_then(|m| m.parse().ok()).unwrap_or(6);
        // A rough northern-hemisphere season curve: cold in January, warm in July.
        let season = -((month as f64 - 7.0) / 6.0 * std::f64::consts::PI).cos();
        let base = 12.0 - 10.0 * season;
        let jitter = (digest[0] as f64 / 255.0 - 0.5) * 10.0;
        let temperature = ((base + jitter) * 10.0).round() / 10.0;
        let condition = match digest[1] % 10 {
            0..=3 => "sunny",
            4..=6 => "cloudy",
            _ if temperature <= 1.0 => "snowy",
            _ => "rainy",
        };
        let precipitation = match condition {
            "rainy" | "snowy" => ((digest[2] as f64 / 255.0 * 20.0 + 0.5) * 10.0).round() / 10.0,
            "cloudy" => ((digest[2] as f64 / 255.0 * 2.0) * 10.0).round() / 10.0,
            _ => 0.0,
        };
        json!({
            "location": location,
            "date": date,
            "temperature_c": temperature,
            "precipitation_mm": precipitation,
            "condition": condition,
        })
    }
}

#[async_trait::async_trait]
impl Tool for WeatherForecastTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn scratch(&self) -> Result<super::Scratch, ToolError> {
        Ok(super::Scratch::Stateless)
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let location = arguments.get("location").and_then(Value::as_str);
        let date = arguments.get("date").and_then(Value::as_str);
        match (location, date) {
            (Some(location), Some(date)) => Ok(self.forecast(location, date)),
            _ => Err(ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                reason: "location and date are required strings".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forecasts_are_deterministic_and_seeded() {
        let a = WeatherForecastTool::new(1);
        let b = WeatherForecastTool::new(2);
        let (x, y) = (
            a.forecast("London, UK", "2024-09-27"),
            a.forecast("london, uk ", "2024-09-27"),
        );
        assert_eq!(x["temperature_c"], y["temperature_c"]);
        assert_eq!(x["condition"], y["condition"]);
        let differs = (1..20).any(|d| {
            let date = format!("2024-09-{d:02}");
            a.forecast("Paris", &date) != b.forecast("Paris", &date)
        });
        assert!(differs);
        let f = a.forecast("Oslo", "2024-01-10");
        assert!(["sunny", "cloudy", "rainy", "snowy"].contains(&f["condition"].as_str().unwrap()));
    }
}
