-- agora store, schema 9: counters shared by replicas (sqlite dialect; the other folder holds the
-- same schema). Conventions as in 0001_init.sql.

-- Named counters every replica of a node bumps together, e.g. the natural-language
-- conversations since the node last negotiated a protocol.
CREATE TABLE node_counters (
    name          TEXT    PRIMARY KEY NOT NULL,
    value         INTEGER NOT NULL
);
