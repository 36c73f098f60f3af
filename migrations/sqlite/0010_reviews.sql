-- agora store, schema 10: the operator's reviews of LLM-written routines (sqlite dialect;
-- migrations/postgres/0010_reviews.sql is the same schema). Conventions as in 0001_init.sql.

-- Under the `review` activation policy a routine the programmer wrote waits with the status
-- `pending` until the operator approves it (it becomes `active`), rejects it with a reason (it
-- becomes `rejected`, and the programmer's next prompt reads the reason), or replaces it with an
-- edited routine (`edited`; the edit is a new pending routine). One row per decision, with who
-- made it; `routine_id` is the routine decided on.
CREATE TABLE routine_reviews (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    routine_id    INTEGER NOT NULL,
    protocol_hash TEXT    NOT NULL,
    decision      TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    reviewer      TEXT    NOT NULL,
    created_at    INTEGER NOT NULL
);
CREATE INDEX routine_reviews_by_protocol ON routine_reviews (protocol_hash, id);
