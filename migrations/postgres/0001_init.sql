-- agora store, schema 1 (Postgres dialect; migrations/sqlite/0001_init.sql is the same schema).
--
-- Conventions shared by both dialects:
--   * protocol hashes are 40 lowercase hex characters (TEXT);
--   * timestamps are Unix milliseconds (BIGINT here, INTEGER in SQLite), passed in by the caller;
--   * booleans are BIGINT 0/1, so one code path reads them through sqlx's Any driver;
--   * enum-like columns hold lowercase words and are checked by the code when read back.
-- Routines, examples, negotiations and peers arrive in later migrations (0002_...).

-- Protocol documents, keyed by hash. The text is re-verified against the hash on every read.
CREATE TABLE documents (
    hash       TEXT    PRIMARY KEY NOT NULL,
    text       TEXT    NOT NULL,
    created_at BIGINT  NOT NULL
);
CREATE INDEX documents_created_at ON documents (created_at);

-- Where a document was (or can be) fetched from. `id` keeps the order in which sources were learnt.
CREATE TABLE document_sources (
    id     BIGSERIAL PRIMARY KEY,
    hash   TEXT    NOT NULL REFERENCES documents (hash) ON DELETE CASCADE,
    source TEXT    NOT NULL,
    UNIQUE (hash, source)
);

-- Whether this node accepts a protocol; one decision per hash, not tied to a stored document.
CREATE TABLE suitability (
    hash       TEXT    PRIMARY KEY NOT NULL,
    allowed    BIGINT  NOT NULL,
    origin     TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    decided_at BIGINT  NOT NULL
);

-- Multiround conversations: the LLM history as opaque JSON text.
CREATE TABLE conversations (
    id            TEXT    PRIMARY KEY NOT NULL,
    kind          TEXT    NOT NULL,
    protocol_hash TEXT,
    messages      TEXT    NOT NULL,
    created_at    BIGINT  NOT NULL,
    last_active   BIGINT  NOT NULL,
    expires_at    BIGINT  NOT NULL
);
CREATE INDEX conversations_expires_at ON conversations (expires_at);

-- One row per finished request.
CREATE TABLE requests (
    id                BIGSERIAL PRIMARY KEY,
    query_id          TEXT    NOT NULL,
    node              TEXT    NOT NULL,
    protocol_hash     TEXT,
    channel           TEXT    NOT NULL,
    path              TEXT    NOT NULL,
    status            TEXT    NOT NULL,
    llm_calls         BIGINT  NOT NULL,
    prompt_tokens     BIGINT  NOT NULL,
    completion_tokens BIGINT  NOT NULL,
    cost_usd          DOUBLE PRECISION NOT NULL,
    latency_ms        BIGINT  NOT NULL,
    created_at        BIGINT  NOT NULL
);
CREATE INDEX requests_created_at ON requests (created_at);
CREATE INDEX requests_query_id ON requests (query_id);

-- Running counters per protocol, bumped in the same transaction as the request row.
CREATE TABLE protocol_usage (
    hash                  TEXT    PRIMARY KEY NOT NULL,
    requests              BIGINT  NOT NULL,
    llm                   BIGINT  NOT NULL,
    routine               BIGINT  NOT NULL,
    fallback              BIGINT  NOT NULL,
    rejected              BIGINT  NOT NULL,
    failed                BIGINT  NOT NULL,
    llm_prompt_tokens     BIGINT  NOT NULL,
    llm_completion_tokens BIGINT  NOT NULL,
    llm_cost_usd          DOUBLE PRECISION NOT NULL,
    last_used             BIGINT  NOT NULL
);

-- The LLM ledger: one row per model call.
CREATE TABLE llm_calls (
    id                BIGSERIAL PRIMARY KEY,
    node              TEXT    NOT NULL,
    category          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    prompt_tokens     BIGINT  NOT NULL,
    completion_tokens BIGINT  NOT NULL,
    latency_ms        BIGINT  NOT NULL,
    cost_usd          DOUBLE PRECISION NOT NULL,
    query_id          TEXT,
    protocol_hash     TEXT,
    created_at        BIGINT  NOT NULL
);
CREATE INDEX llm_calls_query_id ON llm_calls (query_id);
CREATE INDEX llm_calls_created_at ON llm_calls (created_at);
