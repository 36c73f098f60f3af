-- agora store, schema 8: the HTTP edge (sqlite dialect; the other folder holds the same schema).
-- Conventions as in 0001_init.sql.

-- Who sent a request (the client identity the edge authenticated or inferred: a token's name or
-- `ip:<address>`), and the full error behind a failure reply. Peers get a sentence they can act
-- on; the detail (internal URLs, OS errors) stays here and in the log.
ALTER TABLE requests ADD COLUMN client TEXT;
ALTER TABLE requests ADD COLUMN error_detail TEXT;

-- Idempotency keys (the `Idempotency-Key` header): one row per (client scope, key). A row with
-- a NULL `status` is a request still being answered; a finished row holds the reply to give a
-- repeat. `fingerprint` is the SHA-256 of the method, path and body: the same key with other
-- content is refused. Rows older than the node's window are purged.
CREATE TABLE idempotency_keys (
    scope         TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    fingerprint   TEXT    NOT NULL,
    status        INTEGER,
    reply         TEXT,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);

-- Leases on cluster-wide work: replicas sharing a store take a named lease (a programmer job for
-- one protocol or sender key) before doing the work, renew it while they do, and drop it after.
-- A replica that dies stops renewing; once `expires_at` passes, another may take the work up.
CREATE TABLE job_leases (
    name          TEXT    PRIMARY KEY NOT NULL,
    holder        TEXT    NOT NULL,
    expires_at    INTEGER NOT NULL
);
