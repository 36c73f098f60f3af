-- agora store, schema 4: routine code in a table of its own (SQLite dialect;
-- migrations/postgres/0004_routine_code.sql is the same schema). Conventions as in 0001_init.sql.

-- A routine's code, apart from its row in `routines`. That row is updated with every request the
-- routine runs (its counters), and SQLite rewrites a whole row to update one column: with the
-- component (a few MiB for JavaScript) in it, every request read and compared megabytes of
-- overflow pages (measured: 560 µs per counter update, against 30 µs without the code).
-- The code never changes once stored, and is read only to load the routine.
CREATE TABLE routine_code (
    routine_id INTEGER PRIMARY KEY NOT NULL REFERENCES routines (id) ON DELETE CASCADE,
    source     TEXT,
    component  BLOB    NOT NULL
);
INSERT INTO routine_code (routine_id, source, component)
    SELECT id, source, component FROM routines;
ALTER TABLE routines DROP COLUMN source;
ALTER TABLE routines DROP COLUMN component;
