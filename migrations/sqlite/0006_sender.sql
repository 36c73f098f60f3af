-- agora store, schema 6: the sender's memory and its log (SQLite dialect;
-- migrations/postgres/0006_sender.sql is the same schema). Conventions as in 0001_init.sql.

-- Per (target, task): how often the task was sent there, the protocol in use (with the sources
-- the receiver can fetch it from, a JSON array), whether suitable protocols were looked for since
-- the last change, the protocols that target refused (a JSON array of hex hashes), whether the
-- target asked to negotiate, and the use count at which negotiating may be tried again.
CREATE TABLE sender_memory (
    target                TEXT    NOT NULL,
    task                  TEXT    NOT NULL,
    uses                  INTEGER NOT NULL,
    protocol_hash         TEXT,
    protocol_sources      TEXT    NOT NULL,
    explored              INTEGER NOT NULL,
    rejected              TEXT    NOT NULL,
    negotiation_requested INTEGER NOT NULL,
    next_negotiation_at   INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    PRIMARY KEY (target, task)
);

-- One row per task run: the rung of the ladder it took (natural, protocol), the steps it made
-- on the way (explored, negotiated), how it ended, and what it cost on the sender's side.
CREATE TABLE sender_runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    target        TEXT    NOT NULL,
    task          TEXT    NOT NULL,
    rung          TEXT    NOT NULL,
    steps         TEXT    NOT NULL,
    protocol_hash TEXT,
    outcome       TEXT    NOT NULL,
    error         TEXT,
    llm_calls     INTEGER NOT NULL,
    tokens        INTEGER NOT NULL,
    cost_usd      REAL    NOT NULL,
    created_at    INTEGER NOT NULL
);
CREATE INDEX sender_runs_by_target_task ON sender_runs (target, task, id);
