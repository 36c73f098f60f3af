-- agora store, schema 7: sender-side routines (SQLite dialect; migrations/postgres/0007_sender_routines.sql
-- is the same schema). Conventions as in 0001_init.sql. Everything is keyed by (target, task,
-- protocol_hash): the sender's routine for one task sent to one target under one protocol.

-- Sender examples: successful protocol runs of a task written and read by the LLM. `data` is the
-- task's input (JSON), `body` the request body sent, `reply` the reply body received, `output`
-- the validated output (JSON). Only the newest few per key are kept.
CREATE TABLE sender_examples (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    target        TEXT    NOT NULL,
    task          TEXT    NOT NULL,
    protocol_hash TEXT    NOT NULL,
    data          TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    reply         TEXT    NOT NULL,
    output        TEXT    NOT NULL,
    created_at    INTEGER NOT NULL
);
CREATE INDEX sender_examples_by_key ON sender_examples (target, task, protocol_hash, id);

-- Sender routines that passed their examination: the JavaScript source and the built component,
-- `status` active or disabled (at most one active per key), and run-time counters.
CREATE TABLE sender_routines (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    target        TEXT    NOT NULL,
    task          TEXT    NOT NULL,
    protocol_hash TEXT    NOT NULL,
    source        TEXT    NOT NULL,
    component     BLOB    NOT NULL,
    status        TEXT    NOT NULL,
    runs          INTEGER NOT NULL,
    failures      INTEGER NOT NULL,
    last_error    TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX sender_routines_one_active ON sender_routines (target, task, protocol_hash)
    WHERE status = 'active';

-- Every candidate the LLM wrote, whatever became of it (as routine_attempts for receivers).
CREATE TABLE sender_routine_attempts (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    target            TEXT    NOT NULL,
    task              TEXT    NOT NULL,
    protocol_hash     TEXT    NOT NULL,
    job               TEXT    NOT NULL,
    attempt           INTEGER NOT NULL,
    reason            TEXT    NOT NULL,
    source            TEXT,
    outcome           TEXT    NOT NULL,
    report            TEXT    NOT NULL,
    examples_upto     INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_usd          REAL    NOT NULL,
    routine_id        INTEGER,
    created_at        INTEGER NOT NULL
);
CREATE INDEX sender_routine_attempts_by_key
    ON sender_routine_attempts (target, task, protocol_hash, id);
