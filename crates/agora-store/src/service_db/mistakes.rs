//! What a statement that names a column its tables lack got wrong, said from the schema
//! ([`super::ServiceDatabase::explain_mistake`]; the network demo's `run_sql_query` under
//! `--explain-sql-errors`). An unknown table never reaches SQLite: the `statement` gate refuses
//! it first, with the list of tables.
//!
//! SQLite says only `no such column: SkiType`. On the paper's first 100 queries with
//! `--require-effects`, skiResort2's LLM looked a ski's type up in `SkiRentals` (whose columns
//! are `SkiId, StartDate, EndDate`) 14 times, was told that, and answered every time that the
//! rental failed: 14 of its 23 wrong `rentSki` answers. Those 14 conversations replayed with
//! other texts after the error (Qwen2.5-Coder-1.5B, temperature 0):
//! - the table's columns, the table that has the column and the join that reaches it, then the
//!   responder's "Fix the arguments, or answer without this tool": 14 answers that the rental
//!   failed;
//! - the table's columns and the table that has the column, without the join, then "Fix the
//!   statement and run it again": 14 repeated statements;
//! - with the join, then "Fix the statement and run it again": 4 statements on `Skis` that run,
//!   7 that name another missing column (`StartDate` on `Skis`), 3 repeats;
//! - the same, ending "This error is in your call, not an answer to the request: fix the call and
//!   make it again": 3 that run, 4 failure answers, 4 other missing columns, 3 repeats.
//!
//! The third is what [`explain`] says. It is a hint from the schema, never a rewritten
//! statement: the model is told where the column is, and writes the statement itself. Recorded
//! on those 100 queries it made them worse, 49 correct to 34 (see `agora_network::network`): the LLM
//! joined the rentals of the requested date, found none, and answered that no ski was free.

/// What `error` (SQLite's message) says a statement got wrong, from the `names` it uses (its
/// identifiers, outside literals and comments) and each of the database's `tables` with its
/// columns; `None` when the error is not about a missing column, or the schema has nothing to
/// add.
pub(super) fn explain(
    error: &str,
    names: &[String],
    tables: &[(&str, &[String])],
) -> Option<String> {
    let column = unqualified(error.strip_prefix("no such column: ")?.trim());
    let named: Vec<(&str, &[String])> = tables
        .iter()
        .copied()
        .filter(|(table, _)| names.iter().any(|name| name.eq_ignore_ascii_case(table)))
        .collect();
    let lacking: Vec<&(&str, &[String])> = named
        .iter()
        .filter(|(_, columns)| !has(columns, column))
        .collect();
    if named.is_empty() || lacking.len() < named.len() {
        // Not about the tables it names (an alias, a misspelt table): nothing to add.
        return None;
    }
    let mut text: Vec<String> = lacking
        .iter()
        .map(|(table, columns)| {
            format!(
                "{table} has no column {column}: its columns are {}.",
                columns.join(", ")
            )
        })
        .collect();
    let owners: Vec<(&str, &[String])> = tables
        .iter()
        .copied()
        .filter(|(_, columns)| has(columns, column))
        .collect();
    if owners.is_empty() {
        text.push(format!("No table has a column {column}."));
    }
    let shared_with = |columns: &[String]| {
        named.iter().find_map(|(table, named_columns)| {
            named_columns
                .iter()
                .find(|c| has(columns, c))
                .map(|c| (*table, c))
        })
    };
    // The tables a join reaches, when some are: a table the statement cannot join (a hotel's
    // bookings, for a ski's rental) is only a wrong turn.
    let joinable = owners
        .iter()
        .any(|(_, columns)| shared_with(columns).is_some());
    for (owner, columns) in owners {
        let shared = shared_with(columns);
        if joinable && shared.is_none() {
            continue;
        }
        text.push(match shared {
            Some((table, key)) => format!(
                "{column} is a column of {owner} ({}), which shares {key} with {table}: join them \
                 (FROM {table} JOIN {owner} USING ({key})), or query {owner}.",
                columns.join(", ")
            ),
            None => format!("{column} is a column of {owner} ({}).", columns.join(", ")),
        });
    }
    text.push("Fix the statement and run it again.".into());
    Some(text.join(" "))
}

/// `Skis.SkiType` → `SkiType`.
fn unqualified(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

fn has(columns: &[String], column: &str) -> bool {
    columns.iter().any(|c| c.eq_ignore_ascii_case(column))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_db::statement;

    fn resort() -> Vec<(String, Vec<String>)> {
        [
            ("Rooms", &["RoomNumber"][..]),
            ("SkiRentals", &["SkiId", "StartDate", "EndDate"][..]),
            ("Skis", &["SkiId", "SkiType"][..]),
        ]
        .iter()
        .map(|(name, columns)| {
            (
                name.to_string(),
                columns.iter().map(|c| c.to_string()).collect(),
            )
        })
        .collect()
    }

    fn explained(error: &str, statement: &str, tables: &[(String, Vec<String>)]) -> Option<String> {
        let tables: Vec<(&str, &[String])> = tables
            .iter()
            .map(|(name, columns)| (name.as_str(), columns.as_slice()))
            .collect();
        explain(error, &statement::names(statement), &tables)
    }

    #[test]
    fn a_column_of_another_table_is_placed_and_the_join_named() {
        let statement =
            "SELECT * FROM SkiRentals WHERE SkiType = 'carving' AND StartDate = '2024-01-05'";
        assert_eq!(
            explained("no such column: SkiType", statement, &resort()).as_deref(),
            Some(
                "SkiRentals has no column SkiType: its columns are SkiId, StartDate, EndDate. \
                 SkiType is a column of Skis (SkiId, SkiType), which shares SkiId with \
                 SkiRentals: join them (FROM SkiRentals JOIN Skis USING (SkiId)), or query Skis. \
                 Fix the statement and run it again."
            )
        );
        // Qualified, and in another case.
        let hint = explained(
            "no such column: skirentals.skitype",
            "select * from skirentals",
            &resort(),
        )
        .unwrap();
        assert!(hint.contains("skitype is a column of Skis"), "{hint}");
    }

    #[test]
    fn only_the_tables_a_join_reaches_are_named_when_some_are() {
        let mut tables = resort();
        tables.insert(
            0,
            (
                "Bookings".into(),
                vec!["RoomNumber".into(), "StartDate".into()],
            ),
        );
        let hint = explained(
            "no such column: StartDate",
            "SELECT * FROM Skis WHERE SkiType = 'carving' AND StartDate = '2024-01-05'",
            &tables,
        )
        .unwrap();
        assert!(
            hint.contains("StartDate is a column of SkiRentals"),
            "{hint}"
        );
        assert!(!hint.contains("Bookings"), "{hint}");
        // With nothing to join, every table that has it.
        let hint = explained("no such column: SkiId", "SELECT SkiId FROM Rooms", &tables).unwrap();
        assert_eq!(
            hint,
            "Rooms has no column SkiId: its columns are RoomNumber. SkiId is a column of \
             SkiRentals (SkiId, StartDate, EndDate). SkiId is a column of Skis (SkiId, SkiType). \
             Fix the statement and run it again."
        );
    }

    #[test]
    fn a_column_no_table_has_is_said_to_be_nowhere() {
        let hint = explained(
            "no such column: Type",
            "SELECT * FROM Skis WHERE Type = 'racing'",
            &resort(),
        )
        .unwrap();
        assert_eq!(
            hint,
            "Skis has no column Type: its columns are SkiId, SkiType. No table has a column \
             Type. Fix the statement and run it again."
        );
    }

    #[test]
    fn other_errors_and_statements_the_schema_cannot_explain_get_nothing() {
        let tables = resort();
        assert_eq!(
            explained("near \"FORM\": syntax error", "SELEC", &tables),
            None
        );
        // The gate refuses an unknown table before SQLite; SQLite's words for one get nothing.
        assert_eq!(
            explained("no such table: Rentals", "SELECT * FROM Rentals", &tables),
            None
        );
        // The column is in a table the statement names (an alias went wrong): nothing to add.
        assert_eq!(
            explained(
                "no such column: r.SkiType",
                "SELECT * FROM SkiRentals r JOIN Skis s USING (SkiId) WHERE r.SkiType = 'x'",
                &tables
            ),
            None
        );
        // No table of the schema is named: nothing to add.
        assert_eq!(explained("no such column: x", "SELECT x", &tables), None);
        // A table's name inside another identifier, or inside a literal, does not count.
        assert_eq!(
            explained(
                "no such column: SkiType",
                "SELECT * FROM SkisOld WHERE SkiType = 'SkiRentals'",
                &tables
            ),
            None
        );
        assert!(explained("no such column: Floor", "select floor from skis;", &tables).is_some());
    }
}
