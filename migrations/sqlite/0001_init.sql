-- agora store, schema 1 (SQLite dialect; migrations/postgres/0001_init.sql is the same schema).
--
-- Conventions shared by both dialects:
--   * protocol hashes are 40 lowercase hex characters (TEXT);
--   * timestamps are Unix milliseconds (INTEGER here, BIGINT in Postgres), passed in by the caller;
--   * booleans are INTEGER 0/1, so one code path reads them through sqlx's Any driver;
--   * enum-like columns hold lowercase words and are checked by the code when read back.
-- Routines, examples, negotiations and peers arrive in later migrations (0002_...).

-- Protocol documents, keyed by hash. The text is re-verified against the hash on every read.
CREATE TABLE documents (
    hash       TEXT    PRIMARY KEY NOT NULL,
    text       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX documents_created_at ON documents (created_at);

-- Where a document was (or can be) fetched from. `id` keeps the order in which sources were learnt.
CREATE TABLE document_sources (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    hash   TEXT    NOT NULL REFERENCES documents (hash) ON DELETE CASCADE,
    source TEXT    NOT NULL,
    UNIQUE (hash, source)
);

-- Whether this node accepts a protocol; one decision per hash, not tied to a stored document.
CREATE TABLE suitability (
    hash       TEXT    PRIMARY KEY NOT NULL,
    allowed    INTEGER NOT NULL,
    origin     TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    decided_at INTEGER NOT NULL
);

-- Multiround conversations: the LLM history as opaque JSON text.
CREATE TABLE conversations (
    id            TEXT    PRIMARY KEY NOT NULL,
    kind          TEXT    NOT NULL,
    protocol_hash TEXT,
    messages      TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    last_active   INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
);
CREATE INDEX conversations_expires_at ON conversations (expires_at);

-- One row per finished request.
CREATE TABLE requests (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    query_id          TEXT    NOT NULL,
    node              TEXT    NOT NULL,
    protocol_hash     TEXT,
    channel           TEXT    NOT NULL,
    path              TEXT    NOT NULL,
    status            TEXT    NOT NULL,
    llm_calls         INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_usd          REAL    NOT NULL,
    latency_ms        INTEGER NOT NULL,
    created_at        INTEGER NOT NULL
);
CREATE INDEX requests_created_at ON requests (created_at);
CREATE INDEX requests_query_id ON requests (query_id);

-- Running counters per protocol, bumped in the same transaction as the request row.
CREATE TABLE protocol_usage (
    hash                  TEXT    PRIMARY KEY NOT NULL,
    requests              INTEGER NOT NULL,
    llm                   INTEGER NOT NULL,
    routine               INTEGER NOT NULL,
    fallback              INTEGER NOT NULL,
    rejected              INTEGER NOT NULL,
    failed                INTEGER NOT NULL,
    llm_prompt_tokens     INTEGER NOT NULL,
    llm_completion_tokens INTEGER NOT NULL,
    llm_cost_usd          REAL    NOT NULL,
    last_used             INTEGER NOT NULL
);

-- The LLM ledger: one row per model call.
CREATE TABLE llm_calls (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    node              TEXT    NOT NULL,
    category          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms        INTEGER NOT NULL,
    cost_usd          REAL    NOT NULL,
    query_id          TEXT,
    protocol_hash     TEXT,
    created_at        INTEGER NOT NULL
);
CREATE INDEX llm_calls_query_id ON llm_calls (query_id);
CREATE INDEX llm_calls_created_at ON llm_calls (created_at);
