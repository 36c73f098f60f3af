-- agora store, schema 12: the operator's reviews of sender routines (postgres dialect;
-- migrations/sqlite/0012_sender_reviews.sql is the same schema). Conventions as in 0001_init.sql.

-- Under the `review` activation policy a sender routine the programmer wrote waits in
-- sender_routines with the status `pending` until the operator approves it (`active`), rejects it
-- (`rejected`; the key's next prompt reads the reason) or replaces it with an edit (`rejected`,
-- decision `edited`; the edit is a new pending routine), as routine_reviews does for receiver
-- routines. One row per decision, with who made it.
CREATE TABLE sender_routine_reviews (
    id                BIGSERIAL PRIMARY KEY,
    sender_routine_id BIGINT  NOT NULL,
    target            TEXT    NOT NULL,
    task              TEXT    NOT NULL,
    protocol_hash     TEXT    NOT NULL,
    decision          TEXT    NOT NULL,
    reason            TEXT    NOT NULL,
    reviewer          TEXT    NOT NULL,
    created_at        BIGINT  NOT NULL
);
CREATE INDEX sender_routine_reviews_by_key
    ON sender_routine_reviews (target, task, protocol_hash, id);
