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
use sqlx::AnyConnection;

use crate::sql::{Columns, commit, execute, fetch_all, fetch_optional};
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
        let mut tx = self.begin("put_document").await?;
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
        commit(tx, "put_document").await
    }

    /// The document named by `hash`, if stored; [`StoreError::Corrupt`] if its text no longer
    /// hashes to `hash`.
    pub async fn document(
        &self,
        hash: &ProtocolHash,
    ) -> Result<Option<StoredDocument>, StoreError> {
        let hex = hash.to_hex();
        let mut tx = self.begin("document").await?;
        let statement =
            sqlx::query("SELECT text, created_at FROM documents WHERE hash = $1").bind(&hex);
        let row = fetch_optional(&mut *tx, statement, "document: select", |row| {
            let columns = Columns::new(row, "document");
            Ok((columns.get::<String>("text")?, columns.get("created_at")?))
        })
        .await?;
        let Some((text, created_at_ms)) = row else {
            return Ok(None);
        };
        let statement =
            sqlx::query("SELECT source FROM document_sources WHERE hash = $1 ORDER BY id")
                .bind(&hex);
        let sources = fetch_all(&mut *tx, statement, "document: select sources", |row| {
            Columns::new(row, "document").get("source")
        })
        .await?;
        commit(tx, "document").await?;
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
        let mut tx = self.begin("documents").await?;
        let statement =
            sqlx::query("SELECT hash, text, created_at FROM documents ORDER BY created_at, hash");
        let rows: Vec<(String, String, i64)> =
            fetch_all(&mut *tx, statement, "documents: select", |row| {
                let columns = Columns::new(row, "documents");
                let hash = columns.get("hash")?;
                Ok((hash, columns.get("text")?, columns.get("created_at")?))
            })
            .await?;
        let statement = sqlx::query("SELECT hash, source FROM document_sources ORDER BY id");
        let source_rows: Vec<(String, String)> =
            fetch_all(&mut *tx, statement, "documents: select sources", |row| {
                let columns = Columns::new(row, "documents");
                Ok((columns.get("hash")?, columns.get("source")?))
            })
            .await?;
        commit(tx, "documents").await?;

        let mut sources: HashMap<String, Vec<String>> = HashMap::new();
        for (hash, source) in source_rows {
            sources.entry(hash).or_default().push(source);
        }
        rows.into_iter()
            .map(|(hex, text, created_at_ms)| {
                let hash = crate::records::parse_hash("documents.hash", &hex)?;
                Ok(StoredDocument {
                    document: verify(&hash, &text)?,
                    sources: sources.remove(&hex).unwrap_or_default(),
                    created_at_ms,
                })
            })
            .collect()
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
        let mut tx = self.begin("add_sources").await?;
        insert_sources(&mut tx, &hex, sources).await?;
        commit(tx, "add_sources").await
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
        let statement = sqlx::query(
            "INSERT INTO document_sources (hash, source) \
             SELECT hash, $2 FROM documents WHERE hash = $1 \
             ON CONFLICT (hash, source) DO NOTHING",
        )
        .bind(hash)
        .bind(source);
        execute(&mut *connection, statement, "insert document source").await?;
    }
    Ok(())
}

/// Re-checks stored text against the hash it is filed under.
fn verify(hash: &ProtocolHash, text: &str) -> Result<VerifiedDocument, StoreError> {
    VerifiedDocument::verify(hash, text.as_bytes())
        .map_err(|error| StoreError::corrupt(format!("document {hash}: {error}")))
}
