-- agora store, schema 11: shadow checks of active routines (sqlite dialect;
-- migrations/postgres/0011_shadow_checks.sql is the same schema). Conventions as in 0001_init.sql.

-- A share of the requests a routine answered is answered again by the LLM, off the request path
-- and on scratch copies of the tools' state, and the two answers compared as answers (the reply
-- and the effects on the tools' state). One row per check: the request the routine answered
-- (`query_id`), both replies, whether they agreed (0/1) and, when not, how they differ.
-- `cost_usd` is the check's LLM cost (its calls are in llm_calls under the category `shadow`).
-- Only a routine's newest checks are kept (the store's SHADOW_CHECKS_KEPT); shadow_tallies counts
-- every check, in the same transaction as its row.
CREATE TABLE shadow_checks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    routine_id    INTEGER NOT NULL,
    protocol_hash TEXT    NOT NULL,
    query_id      TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    routine_reply TEXT    NOT NULL,
    llm_reply     TEXT    NOT NULL,
    agreed        INTEGER NOT NULL,
    difference    TEXT    NOT NULL,
    cost_usd      REAL    NOT NULL,
    created_at    INTEGER NOT NULL
);
CREATE INDEX shadow_checks_by_routine ON shadow_checks (routine_id, id);

CREATE TABLE shadow_tallies (
    routine_id    INTEGER PRIMARY KEY,
    checks        INTEGER NOT NULL,
    disagreements INTEGER NOT NULL,
    cost_usd      REAL    NOT NULL
);
