//! What a query wrote: the rows it added to and removed from its server's database, found by
//! comparing the database's tables before and after the query ([`Writes::between`]).
//!
//! A reply is only what the server said. A server whose reply says "booked" has booked only if
//! its database holds the booking, and one whose reply says "failure" has booked nothing. The
//! runner reads the server's database around each query and keeps the difference in the query's
//! record; the judge then holds the reply of a write task (a room, a ski, a table, tickets) to
//! it (see [`crate::judge`]). An `UPDATE` shows as the old row removed and the new one added.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A database's tables: each table's name and rows (column name to value).
pub type Tables = [(String, Vec<Map<String, Value>>)];

/// One row of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRow {
    /// The table.
    pub table: String,
    /// The row: column name to value.
    pub row: Map<String, Value>,
}

/// The value of `column` in `row` (named without regard to case).
pub(crate) fn cell<'a>(row: &'a Map<String, Value>, column: &str) -> Option<&'a Value> {
    row.iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(column))
        .map(|(_, value)| value)
}

/// A cell's value as text (a string trimmed, or a number).
pub(crate) fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A cell's value as a whole number (a whole number, or a string holding one).
pub(crate) fn int(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl TableRow {
    /// The value of `column` (named without regard to case).
    pub fn get(&self, column: &str) -> Option<&Value> {
        cell(&self.row, column)
    }

    /// In table `table` (named without regard to case).
    pub fn is_in(&self, table: &str) -> bool {
        self.table.eq_ignore_ascii_case(table)
    }
}

impl std::fmt::Display for TableRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.table, Value::Object(self.row.clone()))
    }
}

/// The rows a query added and removed, table by table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Writes {
    /// Rows there after the query and not before (as many times as they were added).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<TableRow>,
    /// Rows there before the query and not after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<TableRow>,
}

impl Writes {
    /// The difference between a database's tables `before` and `after` a query, row by row
    /// (a row counted as often as it occurs), in the order of `after` and `before`.
    pub fn between(before: &Tables, after: &Tables) -> Writes {
        let rows = |tables: &Tables| -> Vec<TableRow> {
            tables
                .iter()
                .flat_map(|(table, rows)| {
                    rows.iter().map(|row| TableRow {
                        table: table.clone(),
                        row: row.clone(),
                    })
                })
                .collect()
        };
        let (before, after) = (rows(before), rows(after));
        Writes {
            added: minus(&after, &before),
            removed: minus(&before, &after),
        }
    }

    /// Nothing was written.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }

    /// The rows added to `table`.
    pub fn added_to<'a>(&'a self, table: &'a str) -> impl Iterator<Item = &'a TableRow> {
        self.added.iter().filter(move |row| row.is_in(table))
    }

    /// Every row added or removed outside `table` (none when `table` is `None`: all of them).
    pub fn outside<'a>(&'a self, table: Option<&'a str>) -> impl Iterator<Item = &'a TableRow> {
        self.added
            .iter()
            .chain(&self.removed)
            .filter(move |row| table.is_none_or(|table| !row.is_in(table)))
    }
}

/// The rows of `rows` not matched one for one by a row of `other`.
fn minus(rows: &[TableRow], other: &[TableRow]) -> Vec<TableRow> {
    let key = |row: &TableRow| {
        (
            row.table.clone(),
            Value::Object(row.row.clone()).to_string(),
        )
    };
    let mut available: BTreeMap<(String, String), usize> = BTreeMap::new();
    for row in other {
        *available.entry(key(row)).or_default() += 1;
    }
    rows.iter()
        .filter(|row| match available.get_mut(&key(row)) {
            Some(count) if *count > 0 => {
                *count -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn table(name: &str, rows: Value) -> (String, Vec<Map<String, Value>>) {
        let rows = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row.as_object().unwrap().clone())
            .collect();
        (name.to_string(), rows)
    }

    #[test]
    fn writes_are_the_rows_added_and_removed_counted_one_for_one() {
        let before = [
            table("Rooms", json!([{"RoomNumber": 101}, {"RoomNumber": 102}])),
            table(
                "Bookings",
                json!([{"RoomNumber": 101, "StartDate": "2024-03-01"}]),
            ),
        ];
        let after = [
            table("Rooms", json!([{"RoomNumber": 101}, {"RoomNumber": 102}])),
            table(
                "Bookings",
                json!([
                    {"RoomNumber": 101, "StartDate": "2024-03-01"},
                    {"RoomNumber": 101, "StartDate": "2024-03-01"},
                    {"RoomNumber": null, "StartDate": "2024-03-05"}
                ]),
            ),
        ];
        let writes = Writes::between(&before, &after);
        assert_eq!(writes.added.len(), 2, "{writes:?}");
        assert!(writes.removed.is_empty());
        assert_eq!(writes.added_to("bookings").count(), 2);
        assert_eq!(writes.outside(Some("Bookings")).count(), 0);
        assert_eq!(writes.outside(None).count(), 2);
        assert_eq!(writes.added[1].get("roomnumber"), Some(&Value::Null));

        let update = Writes::between(
            &[table(
                "Screenings",
                json!([{"Movie": "M", "TicketsLeft": 5}]),
            )],
            &[table(
                "Screenings",
                json!([{"Movie": "M", "TicketsLeft": 3}]),
            )],
        );
        assert_eq!(update.added.len(), 1);
        assert_eq!(update.removed.len(), 1);
        assert_eq!(update.removed[0].get("TicketsLeft"), Some(&json!(5)));
        assert!(Writes::between(&before, &before).is_empty());
    }
}
