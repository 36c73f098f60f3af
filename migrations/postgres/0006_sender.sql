-- agora store, schema 6: the sender's memory and its log (Postgres dialect;
-- migrations/sqlite/0006_sender.sql is the same schema). Conventions as in 0001_init.sql.

-- Per (target, task): how often the task was sent there, the protocol in use (with the sources
-- the receiver can fetch it from, a JSON array), whether suitable protocols were looked for since
-- the last change, the protocols that target refused (a JSON array of hex hashes), whether the
-- target asked to negotiate, and the use count at which negotiating may be tried again.
CREATE TABLE sender_memory (
    target                TEXT    NOT NULL,
    task                  TEXT    NOT NULL,
    uses                  BIGINT  NOT NULL,
    protocol_hash         TEXT,
    protocol_sources      TEXT    NOT NULL,
    explored              BIGINT  NOT NULL,
    rejected              TEXT    NOT NULL,
    negotiation_requested BIGINT  NOT NULL,
    next_negotiation_at   BIGINT  NOT NULL,
    updated_at            BIGINT  NOT NULL,
    PRIMARY KEY (target, task)
);

-- One row per task run: the rung of the ladder it took (natural, protocol), the steps it made
-- on the way (explored, negotiated), how it ended, and what it cost on the sender's side.
CREATE TABLE sender_runs (
    id            BIGSERIAL PRIMARY KEY,
    target        TEXT    NOT NULL,
    task          TEXT    NOT NULL,
    rung          TEXT    NOT NULL,
    steps         TEXT    NOT NULL,
    protocol_hash TEXT,
    outcome       TEXT    NOT NULL,
    error         TEXT,
    llm_calls     BIGINT  NOT NULL,
    tokens        BIGINT  NOT NULL,
    cost_usd      DOUBLE PRECISION NOT NULL,
    created_at    BIGINT  NOT NULL
);
CREATE INDEX sender_runs_by_target_task ON sender_runs (target, task, id);
