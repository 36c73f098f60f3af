//! Protocol documents and the sources they can be fetched from.
//!
//! Architecture invariant: a document leaves the store only as a `VerifiedDocument` whose text
//! was re-hashed on the way out. The database is not trusted to keep bytes intact (an operator's
//! stray `UPDATE`, a restored backup, a bad disk), so a row whose text no longer matches its hash
//! is reported as [`StoreError::Corrupt`] rather than served to a peer under the wrong name.
//! Re-putting the genuine document repairs such a row.
//!
//! Sources keep the order in which they were learnt: each one is a row with an increasing id,
//! and `(hash, source)` is unique, so adding a known source is a no-op and never reorders.

use std::collections::HashMap;

use agora_protocol::{ProtocolHash, VerifiedDocument};
use sqlx::{AnyConnection, Row};

use crate::{Store, StoreError, StoredDocument};

impl Store {
    /// Stores a document with its sources, in one transaction.
    ///
    /// Idempotent: putting a known document keeps its `created_at_ms` and existing sources and
    /// appends the sources it did not know yet, in the given order. The stored text is rewritten
    /// from `doc`, which repairs a tampered row.
    pub async fn put_document(
        &self,
        doc: &VerifiedDocument,
        sources: &[String],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        let hash = doc.hash().to_hex();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("put_document: begin"))?;
        sqlx::query(
            "INSERT INTO documents (hash, text, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (hash) DO UPDATE SET text = excluded.text",
        )
        .bind(&hash)
        .bind(doc.text())
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("put_document: insert document"))?;
        insert_sources(&mut tx, &hash, sources).await?;
        tx.commit()
            .await
            .map_err(StoreError::db("put_document: commit"))
    }

    /// The document named by `hash`, if stored; [`StoreError::Corrupt`] if its text no longer
    /// hashes to `hash`.
    pub async fn document(
        &self,
        hash: &ProtocolHash,
    ) -> Result<Option<StoredDocument>, StoreError> {
        let hex = hash.to_hex();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("document: begin"))?;
        let row = sqlx::query("SELECT text, created_at FROM documents WHERE hash = $1")
            .bind(&hex)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db("document: select"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let text: String = row
            .try_get("text")
            .map_err(StoreError::db("document: text"))?;
        let created_at_ms: i64 = row
            .try_get("created_at")
            .map_err(StoreError::db("document: created_at"))?;
        let sources =
            sqlx::query("SELECT source FROM document_sources WHERE hash = $1 ORDER BY id")
                .bind(&hex)
                .fetch_all(&mut *tx)
                .await
                .map_err(StoreError::db("document: select sources"))?
                .iter()
                .map(|row| row.try_get("source"))
                .collect::<Result<Vec<String>, _>>()
                .map_err(StoreError::db("document: source"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("document: commit"))?;
        Ok(Some(StoredDocument {
            document: verify(hash, &text)?,
            sources,
            created_at_ms,
        }))
    }

    /// Every stored document, oldest first (ties broken by hash).
    ///
    /// Fails with [`StoreError::Corrupt`] if any stored text no longer matches its hash: a listing
    /// that silently skipped rows would hide the tampering.
    pub async fn documents(&self) -> Result<Vec<StoredDocument>, StoreError> {
        // One read transaction, so documents and sources come from the same snapshot.
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("documents: begin"))?;
        let rows =
            sqlx::query("SELECT hash, text, created_at FROM documents ORDER BY created_at, hash")
                .fetch_all(&mut *tx)
                .await
                .map_err(StoreError::db("documents: select"))?;
        let source_rows = sqlx::query("SELECT hash, source FROM document_sources ORDER BY id")
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db("documents: select sources"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("documents: commit"))?;

        let mut sources: HashMap<String, Vec<String>> = HashMap::new();
        for row in &source_rows {
            let hash: String = row
                .try_get("hash")
                .map_err(StoreError::db("documents: hash"))?;
            let source: String = row
                .try_get("source")
                .map_err(StoreError::db("documents: source"))?;
            sources.entry(hash).or_default().push(source);
        }
        let mut documents = Vec::with_capacity(rows.len());
        for row in &rows {
            let hex: String = row
                .try_get("hash")
                .map_err(StoreError::db("documents: hash"))?;
            let text: String = row
                .try_get("text")
                .map_err(StoreError::db("documents: text"))?;
            let created_at_ms: i64 = row
                .try_get("created_at")
                .map_err(StoreError::db("documents: created_at"))?;
            let hash = crate::records::parse_hash("documents.hash", &hex)?;
            documents.push(StoredDocument {
                document: verify(&hash, &text)?,
                sources: sources.remove(&hex).unwrap_or_default(),
                created_at_ms,
            });
        }
        Ok(documents)
    }

    /// Appends the sources a stored document did not know yet, in the given order.
    ///
    /// A hash with no stored document is ignored: there is nothing to attach sources to, and the
    /// caller will pass them again with [`Store::put_document`] once it has the text.
    pub async fn add_sources(
        &self,
        hash: &ProtocolHash,
        sources: &[String],
    ) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        if sources.is_empty() {
            return Ok(());
        }
        let hex = hash.to_hex();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("add_sources: begin"))?;
        insert_sources(&mut tx, &hex, sources).await?;
        tx.commit()
            .await
            .map_err(StoreError::db("add_sources: commit"))
    }
}

/// Inserts the sources not yet recorded for `hash`, in order; nothing when the document is absent.
async fn insert_sources(
    connection: &mut AnyConnection,
    hash: &str,
    sources: &[String],
) -> Result<(), StoreError> {
    for source in sources {
        // INSERT ... SELECT rather than VALUES, so an unknown hash inserts nothing instead of
        // tripping the foreign key.
        sqlx::query(
            "INSERT INTO document_sources (hash, source) \
             SELECT hash, $2 FROM documents WHERE hash = $1 \
             ON CONFLICT (hash, source) DO NOTHING",
        )
        .bind(hash)
        .bind(source)
        .execute(&mut *connection)
        .await
        .map_err(StoreError::db("insert document source"))?;
    }
    Ok(())
}

/// Re-checks stored text against the hash it is filed under.
fn verify(hash: &ProtocolHash, text: &str) -> Result<VerifiedDocument, StoreError> {
    VerifiedDocument::verify(hash, text.as_bytes())
        .map_err(|error| StoreError::corrupt(format!("document {hash}: {error}")))
}
