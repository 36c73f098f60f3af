//! The protocol database's catalogue: the documents it publishes, and the peers it pulls from.
//!
//! The catalogue is a table of its own, not the node's `documents`: a node resolves documents
//! to use them, a protocol database stores them to give them away, and one process may do both
//! without one leaking into the other.
//!
//! Every entry has a `seq`, increasing in the order this store learnt the entries; a peer pages
//! through the catalogue with "everything after seq N". For that to lose nothing, an entry must
//! never become visible after an entry with a higher seq. SQLite has one writer (and the store's
//! writer lock) so commits follow seq order; Postgres allocates sequence numbers before commit,
//! so writes to the catalogue take a table lock that only writers of the catalogue contend for.
//!
//! A peer's cursor (the highest peer seq taken) moves in the same transaction as the entries it
//! covers, and never backwards: a crash between fetching a page and storing it refetches the
//! page, and nothing is skipped.
//!
//! Architecture invariant: like `documents`, a catalogue entry leaves the store only as a
//! re-verified `VerifiedDocument`; a row whose text no longer matches its hash is
//! [`StoreError::Corrupt`].

use agora_protocol::{ProtocolHash, VerifiedDocument};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use crate::sql::{Columns, commit, execute, fetch_all, fetch_optional, from_columns};
use crate::{Backend, Store, StoreError};

/// One entry of the catalogue.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedDocument {
    /// Its position in this store's catalogue (1, 2, ...; gaps are possible).
    pub seq: i64,
    /// The document, re-verified on the way out.
    pub document: VerifiedDocument,
    /// The base URL of the peer it was pulled from; `None` when it was posted here.
    pub peer: Option<String>,
    /// When this store first stored it, in Unix milliseconds.
    pub published_at_ms: i64,
}

/// A catalogue entry without its text: what search ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedSummary {
    /// Its position in the catalogue.
    pub seq: i64,
    /// The document's hash.
    pub hash: ProtocolHash,
    /// The name from the front matter, if any.
    pub name: Option<String>,
    /// The description from the front matter, if any.
    pub description: Option<String>,
}

/// How many entries the catalogue holds, by where they came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishedCounts {
    /// Entries posted to this database.
    pub local: i64,
    /// Entries pulled from peers.
    pub from_peers: i64,
}

/// What this store remembers about one peer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerState {
    /// The peer's base URL.
    pub url: String,
    /// The highest seq of the peer's catalogue already taken (0: nothing yet).
    pub last_seq: i64,
    /// When a pull from the peer last succeeded, in Unix milliseconds.
    pub synced_at_ms: Option<i64>,
    /// Failed pulls so far.
    pub errors: i64,
    /// Why the last pull failed; cleared by the next success.
    pub last_error: Option<String>,
    /// Entries the peer served that failed verification (wrong hash, too large, not text).
    pub rejected: i64,
}

/// One page pulled from a peer, ready to be stored.
#[derive(Debug, Clone, Copy)]
pub struct PeerPage<'a> {
    /// The peer's base URL.
    pub url: &'a str,
    /// The verified documents of the page, in the peer's order.
    pub documents: &'a [VerifiedDocument],
    /// The peer's seq of the last entry on the page, verified or not.
    pub last_seq: i64,
    /// How many entries of the page failed verification.
    pub rejected: i64,
}

impl Catalogue<'_> {
    /// Adds a document to the catalogue, or repairs the stored text of a known one. Returns the
    /// entry's seq and whether it is new; a known document keeps its seq and origin.
    pub async fn publish_document(
        self,
        document: &VerifiedDocument,
        peer: Option<&str>,
        now_ms: i64,
    ) -> Result<(i64, bool), StoreError> {
        let _writer = self.store.writer().await;
        let mut tx = self.store.begin("publish_document").await?;
        self.lock_catalogue(&mut tx).await?;
        let outcome = upsert(&mut tx, document, peer, now_ms).await?;
        commit(tx, "publish_document").await?;
        Ok(outcome)
    }

    /// The catalogue entry for `hash`, if any.
    pub async fn published_document(
        self,
        hash: &ProtocolHash,
    ) -> Result<Option<PublishedDocument>, StoreError> {
        let statement = sqlx::query(
            "SELECT seq, hash, text, peer, published_at FROM published_documents WHERE hash = $1",
        )
        .bind(hash.to_hex());
        fetch_optional(
            &self.store.pool,
            statement,
            "published_document: select",
            read_published,
        )
        .await
    }

    /// At most `limit` entries with a seq above `after_seq`, in seq order.
    ///
    /// Fails with [`StoreError::Corrupt`] if a stored text no longer matches its hash: a page
    /// that skipped it would let peers advance past it for good.
    pub async fn published_since(
        self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<PublishedDocument>, StoreError> {
        let statement = sqlx::query(
            "SELECT seq, hash, text, peer, published_at FROM published_documents \
             WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(after_seq)
        .bind(limit.max(0));
        fetch_all(
            &self.store.pool,
            statement,
            "published_since: select",
            read_published,
        )
        .await
    }

    /// Newest first, at most `limit` entries whose lowercased name or description contains any
    /// of `words` (each compared literally, lowercased); every entry when `words` is empty.
    /// Ranking is the caller's business; this only narrows the candidates.
    pub async fn search_published(
        self,
        words: &[String],
        limit: i64,
    ) -> Result<Vec<PublishedSummary>, StoreError> {
        let mut sql =
            String::from("SELECT seq, hash, name, description FROM published_documents WHERE ");
        if words.is_empty() {
            sql.push_str("1 = 1");
        }
        for n in 1..=words.len() {
            if n > 1 {
                sql.push_str(" OR ");
            }
            sql.push_str(&format!("search_text LIKE ${n} ESCAPE '\\'"));
        }
        sql.push_str(&format!(" ORDER BY seq DESC LIMIT ${}", words.len() + 1));
        let mut query = sqlx::query(&sql);
        for word in words {
            query = query.bind(format!("%{}%", escape_like(&word.to_lowercase())));
        }
        let statement = query.bind(limit.max(0));
        fetch_all(
            &self.store.pool,
            statement,
            "search_published: select",
            |row| {
                let columns = Columns::new(row, "search_published");
                let hash: String = columns.get("hash")?;
                Ok(from_columns!(columns => PublishedSummary {
                    seq,
                    hash: crate::records::parse_hash("published_documents.hash", &hash)?,
                    name, description,
                }))
            },
        )
        .await
    }

    /// How many entries the catalogue holds, posted here and pulled from peers.
    pub async fn published_counts(self) -> Result<PublishedCounts, StoreError> {
        let row = sqlx::query(
            "SELECT \
               (SELECT COUNT(*) FROM published_documents WHERE peer IS NULL) AS local, \
               (SELECT COUNT(*) FROM published_documents WHERE peer IS NOT NULL) AS from_peers",
        )
        .fetch_one(&self.store.pool)
        .await
        .map_err(StoreError::db("published_counts: select"))?;
        let columns = Columns::new(&row, "published_counts");
        Ok(PublishedCounts {
            local: columns.get("local")?,
            from_peers: columns.get("from_peers")?,
        })
    }

    /// What is known about the peer at `url`; a peer never pulled from has `last_seq` 0.
    pub async fn peer_state(self, url: &str) -> Result<PeerState, StoreError> {
        let statement = sqlx::query(
            "SELECT url, last_seq, synced_at, errors, last_error, rejected \
             FROM protocol_db_peers WHERE url = $1",
        )
        .bind(url);
        let state =
            fetch_optional(&self.store.pool, statement, "peer_state: select", read_peer).await?;
        Ok(state.unwrap_or_else(|| PeerState {
            url: url.to_string(),
            ..PeerState::default()
        }))
    }

    /// Every peer pulled from (or tried), by URL.
    pub async fn peer_states(self) -> Result<Vec<PeerState>, StoreError> {
        let statement = sqlx::query(
            "SELECT url, last_seq, synced_at, errors, last_error, rejected \
             FROM protocol_db_peers ORDER BY url",
        );
        fetch_all(
            &self.store.pool,
            statement,
            "peer_states: select",
            read_peer,
        )
        .await
    }

    /// Stores a page pulled from a peer and moves the peer's cursor, in one transaction.
    /// Documents already in the catalogue are left as they are. Returns how many were new.
    pub async fn ingest_peer_page(
        self,
        page: PeerPage<'_>,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        let _writer = self.store.writer().await;
        let mut tx = self.store.begin("ingest_peer_page").await?;
        self.lock_catalogue(&mut tx).await?;
        let mut added = 0;
        for document in page.documents {
            let exists = sqlx::query("SELECT seq FROM published_documents WHERE hash = $1")
                .bind(document.hash().to_hex())
                .fetch_optional(&mut *tx)
                .await
                .map_err(StoreError::db("ingest_peer_page: select"))?
                .is_some();
            if !exists {
                upsert(&mut tx, document, Some(page.url), now_ms).await?;
                added += 1;
            }
        }
        // The cursor never moves backwards, whatever a peer that lost its data serves.
        sqlx::query(
            "INSERT INTO protocol_db_peers (url, last_seq, synced_at, errors, last_error, rejected) \
             VALUES ($1, $2, $3, 0, NULL, $4) \
             ON CONFLICT (url) DO UPDATE SET \
               last_seq = CASE WHEN excluded.last_seq > protocol_db_peers.last_seq \
                          THEN excluded.last_seq ELSE protocol_db_peers.last_seq END, \
               synced_at = excluded.synced_at, \
               last_error = NULL, \
               rejected = protocol_db_peers.rejected + excluded.rejected",
        )
        .bind(page.url)
        .bind(page.last_seq)
        .bind(now_ms)
        .bind(page.rejected)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("ingest_peer_page: cursor"))?;
        commit(tx, "ingest_peer_page").await?;
        Ok(added)
    }

    /// Records a failed pull from the peer at `url`; its cursor stays where it was.
    pub async fn record_peer_error(self, url: &str, error: &str) -> Result<(), StoreError> {
        let _writer = self.store.writer().await;
        let statement = sqlx::query(
            "INSERT INTO protocol_db_peers (url, last_seq, synced_at, errors, last_error, rejected) \
             VALUES ($1, 0, NULL, 1, $2, 0) \
             ON CONFLICT (url) DO UPDATE SET \
               errors = protocol_db_peers.errors + 1, last_error = excluded.last_error",
        )
        .bind(url)
        .bind(error);
        execute(&self.store.pool, statement, "record_peer_error: upsert").await?;
        Ok(())
    }

    /// On Postgres, makes this transaction the only writer of the catalogue until it ends, so
    /// entries become visible in seq order. Readers are not blocked. SQLite needs nothing: the
    /// caller holds the writer lock, and SQLite has one writer anyway.
    async fn lock_catalogue(self, tx: &mut AnyConnection) -> Result<(), StoreError> {
        if self.store.backend() == Backend::Postgres {
            sqlx::query("LOCK TABLE published_documents IN SHARE ROW EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("lock published_documents"))?;
        }
        Ok(())
    }
}

/// Inserts `document`, or rewrites the text of the entry already filed under its hash.
async fn upsert(
    tx: &mut AnyConnection,
    document: &VerifiedDocument,
    peer: Option<&str>,
    now_ms: i64,
) -> Result<(i64, bool), StoreError> {
    let hash = document.hash().to_hex();
    let existing = sqlx::query("SELECT seq FROM published_documents WHERE hash = $1")
        .bind(&hash)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::db("publish: select"))?;
    if let Some(row) = existing {
        let seq: i64 = row.try_get("seq").map_err(StoreError::db("publish: seq"))?;
        // Repairs a row whose text was changed behind the store's back.
        sqlx::query("UPDATE published_documents SET text = $2 WHERE hash = $1")
            .bind(&hash)
            .bind(document.text())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("publish: repair"))?;
        return Ok((seq, false));
    }
    let metadata = document.metadata();
    let search_text = format!(
        "{}\n{}",
        metadata.name.as_deref().unwrap_or(""),
        metadata.description.as_deref().unwrap_or("")
    )
    .to_lowercase();
    let row = sqlx::query(
        "INSERT INTO published_documents \
         (hash, text, name, description, search_text, peer, published_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
    )
    .bind(&hash)
    .bind(document.text())
    .bind(metadata.name.clone())
    .bind(metadata.description.clone())
    .bind(search_text)
    .bind(peer.map(str::to_string))
    .bind(now_ms)
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::db("publish: insert"))?;
    let seq: i64 = row.try_get("seq").map_err(StoreError::db("publish: seq"))?;
    Ok((seq, true))
}

fn read_published(row: &AnyRow) -> Result<PublishedDocument, StoreError> {
    let columns = Columns::new(row, "published");
    let hex: String = columns.get("hash")?;
    let text: String = columns.get("text")?;
    let hash = crate::records::parse_hash("published_documents.hash", &hex)?;
    let document = VerifiedDocument::verify(&hash, text.as_bytes())
        .map_err(|error| StoreError::corrupt(format!("published document {hash}: {error}")))?;
    Ok(PublishedDocument {
        seq: columns.get("seq")?,
        document,
        peer: columns.get("peer")?,
        published_at_ms: columns.get("published_at")?,
    })
}

fn read_peer(row: &AnyRow) -> Result<PeerState, StoreError> {
    let columns = Columns::new(row, "peer");
    Ok(from_columns!(columns => PeerState {
        url, last_seq,
        synced_at_ms: columns.get("synced_at")?,
        errors, last_error, rejected,
    }))
}

/// `text` with LIKE's wildcards and the escape character escaped (for `ESCAPE '\'`).
fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A protocol database's catalogue and its peers' sync state. Reached through [`Store::catalogue`].
#[derive(Clone, Copy)]
pub struct Catalogue<'a> {
    pub(crate) store: &'a Store,
}
