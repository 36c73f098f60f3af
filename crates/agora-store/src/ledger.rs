//! The LLM ledger: one row per model call, for cost accounting and for tracing a request's calls.
//!
//! Every call is kept (not just totals) so a request can be audited by its query id and totals
//! can be regrouped later. Sums are cast to `BIGINT` in SQL because Postgres widens `SUM(bigint)`
//! to `NUMERIC`, a type sqlx's `Any` driver cannot carry; the cast is a no-op on SQLite.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::records::parse_optional_hash;
use crate::{LedgerTotals, LlmCallRecord, Store, StoreError};

const CALL_COLUMNS: &str = "node, category, model, prompt_tokens, completion_tokens, latency_ms, \
     cost_usd, query_id, protocol_hash, created_at";

impl Store {
    /// Appends one LLM call to the ledger.
    pub async fn record_llm_call(&self, call: &LlmCallRecord) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        sqlx::query(&format!(
            "INSERT INTO llm_calls ({CALL_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(&call.node)
        .bind(&call.category)
        .bind(&call.model)
        .bind(call.prompt_tokens)
        .bind(call.completion_tokens)
        .bind(call.latency_ms)
        .bind(call.cost_usd)
        .bind(call.query_id.clone())
        .bind(call.protocol_hash.map(|hash| hash.to_hex()))
        .bind(call.created_at_ms)
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("record_llm_call"))?;
        Ok(())
    }

    /// The recorded calls, oldest first; only those of `query_id` when given.
    pub async fn llm_calls(
        &self,
        query_id: Option<&str>,
    ) -> Result<Vec<LlmCallRecord>, StoreError> {
        let rows = match query_id {
            Some(query_id) => {
                sqlx::query(&format!(
                    "SELECT {CALL_COLUMNS} FROM llm_calls WHERE query_id = $1 \
                     ORDER BY created_at, id"
                ))
                .bind(query_id)
                .fetch_all(&self.pool)
                .await
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {CALL_COLUMNS} FROM llm_calls ORDER BY created_at, id"
                ))
                .fetch_all(&self.pool)
                .await
            }
        }
        .map_err(StoreError::db("llm_calls: select"))?;
        rows.iter().map(call_from_row).collect()
    }

    /// The calls recorded after the row `after_id` (0 for all), oldest first, each with its row
    /// id: a reader that keeps the last id it saw reads only what is new.
    pub async fn llm_calls_after(
        &self,
        after_id: i64,
    ) -> Result<Vec<(i64, LlmCallRecord)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT id, {CALL_COLUMNS} FROM llm_calls WHERE id > $1 ORDER BY id"
        ))
        .bind(after_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("llm_calls_after: select"))?;
        rows.iter()
            .map(|row| {
                let id: i64 = row
                    .try_get("id")
                    .map_err(StoreError::db("llm_calls_after: read id"))?;
                Ok((id, call_from_row(row)?))
            })
            .collect()
    }

    /// Totals per (node, category, model), sorted by node, then category, then model.
    pub async fn ledger_totals(&self) -> Result<Vec<LedgerTotals>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, category, model, COUNT(*) AS calls, \
             CAST(SUM(prompt_tokens) AS BIGINT) AS prompt_tokens, \
             CAST(SUM(completion_tokens) AS BIGINT) AS completion_tokens, \
             SUM(cost_usd) AS cost_usd \
             FROM llm_calls GROUP BY node, category, model",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("ledger_totals: select"))?;
        let mut totals = rows
            .iter()
            .map(totals_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        // Sorted here rather than in SQL: Postgres may order text by locale, SQLite by bytes.
        totals.sort_by(|a, b| {
            (&a.node, &a.category, &a.model).cmp(&(&b.node, &b.category, &b.model))
        });
        Ok(totals)
    }
}

fn call_from_row(row: &AnyRow) -> Result<LlmCallRecord, StoreError> {
    let read = || StoreError::db("llm_calls: read column");
    let protocol_hash: Option<String> = row.try_get("protocol_hash").map_err(read())?;
    let call = (|| {
        Ok::<_, sqlx::Error>(LlmCallRecord {
            node: row.try_get("node")?,
            category: row.try_get("category")?,
            model: row.try_get("model")?,
            prompt_tokens: row.try_get("prompt_tokens")?,
            completion_tokens: row.try_get("completion_tokens")?,
            latency_ms: row.try_get("latency_ms")?,
            cost_usd: row.try_get("cost_usd")?,
            query_id: row.try_get("query_id")?,
            protocol_hash: None,
            created_at_ms: row.try_get("created_at")?,
        })
    })()
    .map_err(read())?;
    Ok(LlmCallRecord {
        protocol_hash: parse_optional_hash("llm_calls.protocol_hash", protocol_hash)?,
        ..call
    })
}

fn totals_from_row(row: &AnyRow) -> Result<LedgerTotals, StoreError> {
    let fields = (|| {
        Ok::<_, sqlx::Error>(LedgerTotals {
            node: row.try_get("node")?,
            category: row.try_get("category")?,
            model: row.try_get("model")?,
            calls: row.try_get("calls")?,
            prompt_tokens: row.try_get("prompt_tokens")?,
            completion_tokens: row.try_get("completion_tokens")?,
            cost_usd: row.try_get("cost_usd")?,
        })
    })();
    fields.map_err(StoreError::db("ledger_totals: read column"))
}
