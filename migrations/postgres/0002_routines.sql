-- agora store, schema 2: routines (Postgres dialect; migrations/sqlite/0002_routines.sql is the
-- same schema). Conventions as in 0001_init.sql.

-- Routines: code that answers one protocol without the LLM. `component` is always the built
-- WebAssembly component (the node loads it at start-up and never compiles on the request path);
-- `source` keeps the JavaScript it was built from, when it was written in JavaScript. `tools` is a
-- JSON array of the tool names the routine may call. Run and failure counters are bumped in the
-- same transaction as the request that ran the routine (see `requests.routine_id`).
CREATE TABLE routines (
    id              BIGSERIAL PRIMARY KEY,
    name            TEXT    NOT NULL UNIQUE,
    protocol_hash   TEXT    NOT NULL,
    language        TEXT    NOT NULL,
    source          TEXT,
    component       BYTEA   NOT NULL,
    tools           TEXT    NOT NULL,
    timeout_ms      BIGINT  NOT NULL,
    memory_bytes    BIGINT  NOT NULL,
    origin          TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    runs            BIGINT  NOT NULL,
    failures        BIGINT  NOT NULL,
    last_error      TEXT,
    last_failure_at BIGINT,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL
);
-- At most one active routine per protocol, whoever writes to the database.
CREATE UNIQUE INDEX routines_one_active_per_protocol ON routines (protocol_hash)
    WHERE status = 'active';

-- One row whose version is bumped by every change to the set of routines (add, enable, disable,
-- remove), so a running node notices changes made by another process with one cheap read.
CREATE TABLE routine_registry (
    id      BIGINT  PRIMARY KEY NOT NULL CHECK (id = 1),
    version BIGINT  NOT NULL
);
INSERT INTO routine_registry (id, version) VALUES (1, 0);

-- Which routine ran for a request (answering it, or failing before a fallback), and its error.
ALTER TABLE requests ADD COLUMN routine_id BIGINT;
ALTER TABLE requests ADD COLUMN routine_error TEXT;
