//! Turning token counts into money.
//!
//! The ledger records tokens; the price table converts them to US dollars so
//! runs can be compared with the paper's cost figures. The default prices are
//! the ones the paper used for GPT-4o; a deployment passes its own table. A table may name a
//! cached-input price: prompt tokens the endpoint took from its cache are charged at it (the
//! paper's prices name none, so its figures stay as the paper priced them).

use serde::{Deserialize, Serialize};

use crate::Usage;

/// Prices per million tokens, in US dollars.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct PriceTable {
    /// US dollars per million prompt (input) tokens.
    pub prompt_usd_per_million: f64,
    /// US dollars per million completion (output) tokens.
    pub completion_usd_per_million: f64,
    /// US dollars per million prompt tokens read from the endpoint's cache; `None`: charged as
    /// other prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_prompt_usd_per_million: Option<f64>,
}

impl Default for PriceTable {
    /// The paper's GPT-4o prices: $5 per million prompt tokens, $15 per
    /// million completion tokens.
    fn default() -> Self {
        Self {
            prompt_usd_per_million: 5.0,
            completion_usd_per_million: 15.0,
            cached_prompt_usd_per_million: None,
        }
    }
}

impl PriceTable {
    /// The cost of one call in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_prompt_tokens.min(usage.prompt_tokens);
        let cached_price = self
            .cached_prompt_usd_per_million
            .unwrap_or(self.prompt_usd_per_million);
        (f64::from(usage.prompt_tokens - cached) * self.prompt_usd_per_million
            + f64::from(cached) * cached_price
            + f64::from(usage.completion_tokens) * self.completion_usd_per_million)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt_tokens: u32, completion_tokens: u32) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            cached_prompt_tokens: 0,
        }
    }

    #[test]
    fn default_prices_are_gpt4o_from_the_paper() {
        let table = PriceTable::default();
        assert_eq!(table.prompt_usd_per_million, 5.0);
        assert_eq!(table.completion_usd_per_million, 15.0);
    }

    #[test]
    fn cost_adds_prompt_and_completion() {
        let table = PriceTable::default();
        assert_eq!(table.cost(&usage(1_000_000, 0)), 5.0);
        assert_eq!(table.cost(&usage(0, 1_000_000)), 15.0);
        assert!((table.cost(&usage(1000, 200)) - 0.008).abs() < 1e-12);
        assert_eq!(table.cost(&usage(0, 0)), 0.0);
    }

    #[test]
    fn a_free_table_costs_nothing() {
        let free = PriceTable {
            prompt_usd_per_million: 0.0,
            completion_usd_per_million: 0.0,
            cached_prompt_usd_per_million: None,
        };
        assert_eq!(free.cost(&usage(123, 456)), 0.0);
    }

    #[test]
    fn table_deserializes_from_config() {
        let table: PriceTable = serde_json::from_str(
            r#"{"prompt_usd_per_million": 2.5, "completion_usd_per_million": 10}"#,
        )
        .expect("valid table");
        assert_eq!(table.cost(&usage(2_000_000, 100_000)), 6.0);
        assert_eq!(table.cached_prompt_usd_per_million, None);
    }

    #[test]
    fn cached_tokens_are_charged_at_the_cached_price() {
        let table: PriceTable = serde_json::from_str(
            r#"{"prompt_usd_per_million": 2.5, "completion_usd_per_million": 10,
                "cached_prompt_usd_per_million": 1.25}"#,
        )
        .expect("valid table");
        let call = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 0,
            cached_prompt_tokens: 600_000,
        };
        assert!((table.cost(&call) - (0.4 * 2.5 + 0.6 * 1.25)).abs() < 1e-12);
        let uncached = PriceTable {
            cached_prompt_usd_per_million: None,
            ..table.clone()
        };
        assert!((uncached.cost(&call) - table.cost(&call) - 0.6 * 1.25).abs() < 1e-12);
    }

    #[test]
    fn without_a_cached_price_cached_tokens_cost_as_others() {
        let table = PriceTable::default();
        let call = Usage {
            prompt_tokens: 1000,
            completion_tokens: 200,
            cached_prompt_tokens: 900,
        };
        assert_eq!(table.cost(&call), table.cost(&usage(1000, 200)));
    }

    #[test]
    fn a_cached_count_above_the_prompt_is_clamped() {
        let table = PriceTable {
            cached_prompt_usd_per_million: Some(0.0),
            ..PriceTable::default()
        };
        let call = Usage {
            prompt_tokens: 100,
            completion_tokens: 0,
            cached_prompt_tokens: 500,
        };
        assert_eq!(table.cost(&call), 0.0);
    }
}
