//! Turning token counts into money.
//!
//! The ledger records tokens; the price table converts them to US dollars so
//! runs can be compared with the paper's cost figures. The default prices are
//! the ones the paper used for GPT-4o; a deployment passes its own table.

use serde::{Deserialize, Serialize};

use crate::Usage;

/// Prices per million tokens, in US dollars.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct PriceTable {
    /// US dollars per million prompt (input) tokens.
    pub prompt_usd_per_million: f64,
    /// US dollars per million completion (output) tokens.
    pub completion_usd_per_million: f64,
}

impl Default for PriceTable {
    /// The paper's GPT-4o prices: $5 per million prompt tokens, $15 per
    /// million completion tokens.
    fn default() -> Self {
        Self {
            prompt_usd_per_million: 5.0,
            completion_usd_per_million: 15.0,
        }
    }
}

impl PriceTable {
    /// The cost of one call in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (f64::from(usage.prompt_tokens) * self.prompt_usd_per_million
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
    }
}
