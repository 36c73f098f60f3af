-- agora store, schema 3: what the node's programmer learns from and what it tried (SQLite
-- dialect; migrations/postgres/0003_programmer.sql is the same schema). Conventions as in
-- 0001_init.sql.

-- Examples: requests of a protocol the LLM answered, with the tool calls it made and the reply
-- it gave. The programmer shows them to the LLM and tests candidate routines against them.
-- `tool_calls` is a JSON array of {"tool", "arguments", "result"} or {"tool", "arguments",
-- "error"} objects, in call order. Only the newest few per protocol are kept.
CREATE TABLE examples (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    protocol_hash TEXT    NOT NULL,
    query_id      TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    tool_calls    TEXT    NOT NULL,
    reply         TEXT    NOT NULL,
    created_at    INTEGER NOT NULL
);
CREATE INDEX examples_by_protocol ON examples (protocol_hash, id);

-- Routine attempts: every candidate the programmer asked the LLM for, kept whatever became of
-- it. `job` groups the attempts of one programmer run; `examples_upto` is the newest example
-- that run saw, so the next run is triggered by examples recorded after it. `outcome` is one of
-- passed, build_failed, tests_failed, llm_failed; `report` says why, for people and for the
-- repair prompt. `routine_id` is set on the attempt that became a routine.
CREATE TABLE routine_attempts (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
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
CREATE INDEX routine_attempts_by_protocol ON routine_attempts (protocol_hash, id);
