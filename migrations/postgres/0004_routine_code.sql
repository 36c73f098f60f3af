-- agora store, schema 4: routine code in a table of its own (Postgres dialect;
-- migrations/sqlite/0004_routine_code.sql is the same schema). Conventions as in 0001_init.sql.

-- A routine's code, apart from its row in `routines`, which is updated with every request the
-- routine runs (its counters). Postgres keeps a large value out of line and does not copy it on
-- update, but SQLite rewrites the whole row, and both dialects keep the same tables.
-- The code never changes once stored, and is read only to load the routine.
CREATE TABLE routine_code (
    routine_id BIGINT  PRIMARY KEY NOT NULL REFERENCES routines (id) ON DELETE CASCADE,
    source     TEXT,
    component  BYTEA   NOT NULL
);
INSERT INTO routine_code (routine_id, source, component)
    SELECT id, source, component FROM routines;
ALTER TABLE routines DROP COLUMN source;
ALTER TABLE routines DROP COLUMN component;
