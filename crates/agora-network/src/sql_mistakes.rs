//! What a statement that names a column or table the schema lacks got wrong, said from the
//! schema, for `run_sql_query`'s errors under `--explain-sql-errors`
//! ([`crate::tools::SqlTool::explaining_mistakes`]).
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
//! on those 100 queries it made them worse, 49 correct to 34 (see `crate::network`): the LLM
//! joined the rentals of the requested date, found none, and answered that no ski was free.

use std::collections::BTreeMap;

/// Each table's columns in the schema's order, by table name.
pub type Columns = BTreeMap<String, Vec<String>>;

/// What the statement got wrong and how to make it right, from `error` (SQLite's message) and
/// the `tables`; `None` when the error is not about a missing column or table, or the schema
/// has nothing to add.
pub fn explain(error: &str, statement: &str, tables: &Columns) -> Option<String> {
    if let Some(column) = error.strip_prefix("no such column: ") {
        return missing_column(unqualified(column.trim()), statement, tables);
    }
    if let Some(table) = error.strip_prefix("no such table: ") {
        return Some(format!(
            "There is no table {}; the tables are {}. Fix the statement and run it again.",
            unqualified(table.trim()),
            tables
                .iter()
                .map(|(name, columns)| format!("{name} ({})", columns.join(", ")))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    None
}

fn missing_column(column: &str, statement: &str, tables: &Columns) -> Option<String> {
    let named: Vec<(&String, &Vec<String>)> = tables
        .iter()
        .filter(|(name, _)| names_word(statement, name))
        .collect();
    let lacking: Vec<&(&String, &Vec<String>)> = named
        .iter()
        .filter(|(_, columns)| !has(columns, column))
        .collect();
    if named.is_empty() || lacking.len() < named.len() {
        // Not about the tables it names (an alias, a misspelt table): nothing to add.
        return None;
    }
    let mut text: Vec<String> = lacking
        .iter()
        .map(|(name, columns)| {
            format!(
                "{name} has no column {column}: its columns are {}.",
                columns.join(", ")
            )
        })
        .collect();
    let owners: Vec<(&String, &Vec<String>)> = tables
        .iter()
        .filter(|(_, columns)| has(columns, column))
        .collect();
    if owners.is_empty() {
        text.push(format!("No table has a column {column}."));
    }
    let shared_with = |columns: &Vec<String>| {
        named.iter().find_map(|(name, named_columns)| {
            named_columns
                .iter()
                .find(|c| has(columns, c))
                .map(|c| (*name, c))
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
            Some((name, key)) => format!(
                "{column} is a column of {owner} ({}), which shares {key} with {name}: join them \
                 (FROM {name} JOIN {owner} USING ({key})), or query {owner}.",
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

/// Whether `word` stands in `text` as a whole identifier, in any case.
fn names_word(text: &str, word: &str) -> bool {
    let text = text.to_ascii_lowercase();
    let word = word.to_ascii_lowercase();
    let identifier = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(&word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(identifier) && !after.is_some_and(identifier)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resort() -> Columns {
        let mut tables = Columns::new();
        for (name, columns) in [
            ("Rooms", &["RoomNumber"][..]),
            ("SkiRentals", &["SkiId", "StartDate", "EndDate"][..]),
            ("Skis", &["SkiId", "SkiType"][..]),
        ] {
            tables.insert(name.into(), columns.iter().map(|c| c.to_string()).collect());
        }
        tables
    }

    #[test]
    fn a_column_of_another_table_is_placed_and_the_join_named() {
        let statement =
            "SELECT * FROM SkiRentals WHERE SkiType = 'carving' AND StartDate = '2024-01-05'";
        assert_eq!(
            explain("no such column: SkiType", statement, &resort()).as_deref(),
            Some(
                "SkiRentals has no column SkiType: its columns are SkiId, StartDate, EndDate. \
                 SkiType is a column of Skis (SkiId, SkiType), which shares SkiId with \
                 SkiRentals: join them (FROM SkiRentals JOIN Skis USING (SkiId)), or query Skis. \
                 Fix the statement and run it again."
            )
        );
        // Qualified, and in another case.
        let hint = explain(
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
            "Bookings".into(),
            vec!["RoomNumber".into(), "StartDate".into()],
        );
        let hint = explain(
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
        let hint = explain("no such column: SkiId", "SELECT SkiId FROM Rooms", &tables).unwrap();
        assert_eq!(
            hint,
            "Rooms has no column SkiId: its columns are RoomNumber. SkiId is a column of \
             SkiRentals (SkiId, StartDate, EndDate). SkiId is a column of Skis (SkiId, SkiType). \
             Fix the statement and run it again."
        );
    }

    #[test]
    fn a_column_no_table_has_is_said_to_be_nowhere() {
        let hint = explain(
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
    fn a_missing_table_lists_the_tables() {
        let hint = explain("no such table: Rentals", "SELECT * FROM Rentals", &resort()).unwrap();
        assert!(
            hint.starts_with("There is no table Rentals; the tables are Rooms (RoomNumber), "),
            "{hint}"
        );
    }

    #[test]
    fn other_errors_and_statements_the_schema_cannot_explain_get_nothing() {
        let tables = resort();
        assert_eq!(
            explain("near \"FORM\": syntax error", "SELEC", &tables),
            None
        );
        // The column is in a table the statement names (an alias went wrong): nothing to add.
        assert_eq!(
            explain(
                "no such column: r.SkiType",
                "SELECT * FROM SkiRentals r JOIN Skis s USING (SkiId) WHERE r.SkiType = 'x'",
                &tables
            ),
            None
        );
        // No table of the schema is named: nothing to add.
        assert_eq!(explain("no such column: x", "SELECT x", &tables), None);
        // A table name inside another identifier does not count.
        assert!(!names_word("SELECT * FROM SkisOld", "Skis"));
        assert!(names_word("select * from skis;", "Skis"));
    }
}
