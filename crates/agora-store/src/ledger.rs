//! The LLM ledger: one row per model call, for cost accounting and for tracing a request's calls.
//!
//! Every call is kept (not just totals) so a request can be audited by its query id and totals
//! can be regrouped later. Sums are cast to `BIGINT` in SQL because Postgres widens `SUM(bigint)`
//! to `NUMERIC`, a type sqlx's `Any` driver cannot carry; the cast is a no-op on SQLite.

use agora_protocol::ProtocolHash;
use sqlx::any::AnyRow;

use crate::records::parse_optional_hash;
use crate::sql::{Columns, execute, fetch_all, from_columns};
use crate::{LedgerTotals, LlmCallRecord, Store, StoreError};

const CALL_COLUMNS: &str = "node, category, model, prompt_tokens, completion_tokens, latency_ms, \
     cost_usd, query_id, protocol_hash, created_at, cached_prompt_tokens";

impl Ledger<'_> {
    /// Appends one LLM call to the ledger.
    pub async fn record_llm_call(self, call: &LlmCallRecord) -> Result<(), StoreError> {
        let _writer = self.store.writer().await;
        let sql = format!(
            "INSERT INTO llm_calls ({CALL_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        );
        let statement = sqlx::query(&sql)
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
            .bind(call.cached_prompt_tokens);
        execute(&self.store.pool, statement, "record_llm_call").await?;
        Ok(())
    }

    /// The recorded calls, oldest first; only those of `query_id` when given.
    pub async fn llm_calls(self, query_id: Option<&str>) -> Result<Vec<LlmCallRecord>, StoreError> {
        let filter = if query_id.is_some() {
            "WHERE query_id = $1"
        } else {
            ""
        };
        let sql = format!("SELECT {CALL_COLUMNS} FROM llm_calls {filter} ORDER BY created_at, id");
        let mut statement = sqlx::query(&sql);
        if let Some(query_id) = query_id {
            statement = statement.bind(query_id);
        }
        fetch_all(
            &self.store.pool,
            statement,
            "llm_calls: select",
            call_from_row,
        )
        .await
    }

    /// The calls recorded after the row `after_id` (0 for all), oldest first, each with its row
    /// id: a reader that keeps the last id it saw reads only what is new.
    pub async fn llm_calls_after(
        self,
        after_id: i64,
    ) -> Result<Vec<(i64, LlmCallRecord)>, StoreError> {
        let sql = format!("SELECT id, {CALL_COLUMNS} FROM llm_calls WHERE id > $1 ORDER BY id");
        let statement = sqlx::query(&sql).bind(after_id);
        fetch_all(
            &self.store.pool,
            statement,
            "llm_calls_after: select",
            |row| {
                let id = Columns::new(row, "llm_calls_after: read").get("id")?;
                Ok((id, call_from_row(row)?))
            },
        )
        .await
    }

    /// The newest `limit` calls (a negative limit means none), newest first, each with its row
    /// id; only those of `category` and of `protocol` when given.
    pub async fn recent_llm_calls(
        self,
        category: Option<&str>,
        protocol: Option<&ProtocolHash>,
        limit: i64,
    ) -> Result<Vec<(i64, LlmCallRecord)>, StoreError> {
        let sql = format!(
            "SELECT id, {CALL_COLUMNS} FROM llm_calls \
             WHERE (CAST($1 AS TEXT) IS NULL OR category = $1) \
             AND (CAST($2 AS TEXT) IS NULL OR protocol_hash = $2) \
             ORDER BY id DESC LIMIT $3"
        );
        let statement = sqlx::query(&sql)
            .bind(category.map(str::to_string))
            .bind(protocol.map(ProtocolHash::to_hex))
            .bind(limit.max(0));
        fetch_all(
            &self.store.pool,
            statement,
            "recent_llm_calls: select",
            |row| {
                let id = Columns::new(row, "recent_llm_calls: read").get("id")?;
                Ok((id, call_from_row(row)?))
            },
        )
        .await
    }

    /// Totals per (node, category, model), sorted by node, then category, then model.
    pub async fn ledger_totals(self) -> Result<Vec<LedgerTotals>, StoreError> {
        let statement = sqlx::query(
            "SELECT node, category, model, COUNT(*) AS calls, \
             CAST(SUM(prompt_tokens) AS BIGINT) AS prompt_tokens, \
             CAST(SUM(completion_tokens) AS BIGINT) AS completion_tokens, \
             CAST(SUM(cached_prompt_tokens) AS BIGINT) AS cached_prompt_tokens, \
             SUM(cost_usd) AS cost_usd \
             FROM llm_calls GROUP BY node, category, model",
        );
        let mut totals = fetch_all(
            &self.store.pool,
            statement,
            "ledger_totals: select",
            totals_from_row,
        )
        .await?;
        // Sorted here rather than in SQL: Postgres may order text by locale, SQLite by bytes.
        totals.sort_by(|a, b| {
            (&a.node, &a.category, &a.model).cmp(&(&b.node, &b.category, &b.model))
        });
        Ok(totals)
    }
}

fn call_from_row(row: &AnyRow) -> Result<LlmCallRecord, StoreError> {
    let columns = Columns::new(row, "llm_calls: read column");
    let hash = columns.get("protocol_hash")?;
    Ok(from_columns!(columns => LlmCallRecord {
        node, category, model, prompt_tokens, cached_prompt_tokens, completion_tokens, latency_ms,
        cost_usd, query_id,
        protocol_hash: parse_optional_hash("llm_calls.protocol_hash", hash)?,
        created_at_ms: columns.get("created_at")?,
    }))
}

fn totals_from_row(row: &AnyRow) -> Result<LedgerTotals, StoreError> {
    let columns = Columns::new(row, "ledger_totals: read column");
    Ok(from_columns!(columns => LedgerTotals {
        node, category, model, calls, prompt_tokens, cached_prompt_tokens, completion_tokens,
        cost_usd,
    }))
}

/// The LLM ledger: one row per model call. Reached through [`Store::ledger`].
#[derive(Clone, Copy)]
pub struct Ledger<'a> {
    pub(crate) store: &'a Store,
}
