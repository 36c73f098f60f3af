-- agora store, schema 5: the protocol database role (Postgres dialect;
-- migrations/sqlite/0005_protocol_db.sql is the same schema). Conventions as in 0001_init.sql.

-- The catalogue a protocol database publishes, apart from `documents` (the PDs a node has
-- resolved for its own use), because publishing and using are different decisions.
-- `seq` numbers entries in the order this database learnt them; peers page through the
-- catalogue by it, so it only ever grows. (A sequence allocates numbers before commit, so the
-- code serializes inserts with a table lock: a reader never sees seq 5 before seq 4 commits.)
-- `name` and `description` come from the PD's front matter (NULL when absent); `search_text` is
-- both, lowercased by the code, so matching does not depend on the dialect's idea of case.
-- `peer` is the base URL of the peer the entry was pulled from, NULL for a document posted to
-- this database. The text is re-verified on every read.
CREATE TABLE published_documents (
    seq          BIGSERIAL PRIMARY KEY,
    hash         TEXT    NOT NULL UNIQUE,
    text         TEXT    NOT NULL,
    name         TEXT,
    description  TEXT,
    search_text  TEXT    NOT NULL,
    peer         TEXT,
    published_at BIGINT  NOT NULL
);

-- One row per peer this database pulls from. `last_seq` is the highest peer `seq` already taken
-- (advanced in the same transaction as the entries it covers, so a restart neither refetches nor
-- loses anything); the rest describes the last attempts, for operators.
CREATE TABLE protocol_db_peers (
    url          TEXT    PRIMARY KEY NOT NULL,
    last_seq     BIGINT  NOT NULL,
    synced_at    BIGINT,
    errors       BIGINT  NOT NULL,
    last_error   TEXT,
    rejected     BIGINT  NOT NULL
);
