#![allow(clippy::unwrap_used)]
//! A demo server's service database through its public API, on a temporary SQLite file: seeding,
//! statements an LLM would write, SQLite's own errors, the statements it refuses, and its bounds.

use agora_network::service_db::{MAX_ROWS, ServiceDatabase, ServiceDbError, ServiceTable};
use serde_json::{Map, Value, json};

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn hotel_tables() -> Vec<ServiceTable> {
    vec![
        ServiceTable {
            name: "Rooms".into(),
            columns: vec![
                ("RoomNumber".into(), "INTEGER".into()),
                ("Kind".into(), "TEXT NOT NULL".into()),
                ("Price".into(), "REAL".into()),
            ],
            constraints: vec!["PRIMARY KEY (RoomNumber)".into()],
            rows: vec![
                object(json!({"RoomNumber": 101, "Kind": "single", "Price": 80.5})),
                object(json!({"RoomNumber": 102, "Kind": "double", "Price": 120})),
            ],
        },
        ServiceTable {
            name: "Bookings".into(),
            columns: vec![
                ("RoomNumber".into(), "INTEGER".into()),
                ("StartDate".into(), "DATE".into()),
                ("Guest".into(), "TEXT".into()),
            ],
            constraints: vec!["PRIMARY KEY (RoomNumber, StartDate)".into()],
            rows: vec![object(
                json!({"RoomNumber": 101, "StartDate": "2025-03-01", "Guest": "Ada"}),
            )],
        },
    ]
}

async fn hotel() -> (ServiceDatabase, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = ServiceDatabase::create(&dir.path().join("hotel.db"), &hotel_tables())
        .await
        .unwrap();
    (db, dir)
}

fn refusal(result: Result<Vec<Map<String, Value>>, ServiceDbError>) -> String {
    match result {
        Err(ServiceDbError::Refused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn seeded_rows_come_back_as_json() {
    let (db, _dir) = hotel().await;
    assert_eq!(db.table_names(), ["Rooms", "Bookings"]);
    let rooms = db
        .run(
            "SELECT RoomNumber, Kind, Price FROM Rooms ORDER BY RoomNumber",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        Value::Array(rooms.into_iter().map(Value::Object).collect()),
        json!([
            {"RoomNumber": 101, "Kind": "single", "Price": 80.5},
            {"RoomNumber": 102, "Kind": "double", "Price": 120.0},
        ])
    );
    let joined = db
        .run(
            "select b.Guest, r.Kind, b.StartDate, NULL AS Missing from bookings b \
             join rooms AS r on r.RoomNumber = b.RoomNumber;",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        Value::Object(joined[0].clone()),
        json!({"Guest": "Ada", "Kind": "single", "StartDate": "2025-03-01", "Missing": null})
    );
    db.close().await;
}

#[tokio::test]
async fn an_insert_is_seen_by_the_next_select() {
    let (db, _dir) = hotel().await;
    let inserted = db
        .run(
            "INSERT INTO Bookings (RoomNumber, StartDate, Guest) VALUES (102, '2025-03-02', 'Bob')",
            &[],
        )
        .await
        .unwrap();
    // A write without result rows reports how many rows it changed.
    assert_eq!(inserted, vec![object(json!({"changes": 1}))]);
    let guests = db
        .run("SELECT Guest FROM Bookings WHERE RoomNumber = 102", &[])
        .await
        .unwrap();
    assert_eq!(guests, vec![object(json!({"Guest": "Bob"}))]);
    // A clone shares the same file and connection.
    let updated = db
        .clone()
        .run(
            "UPDATE Bookings SET Guest = 'Eve' WHERE RoomNumber = 102 RETURNING Guest",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(updated, vec![object(json!({"Guest": "Eve"}))]);
}

#[tokio::test]
async fn a_primary_key_violation_is_sqlites_error() {
    let (db, _dir) = hotel().await;
    let result = db
        .run(
            "INSERT INTO Bookings VALUES (101, '2025-03-01', 'Mallory')",
            &[],
        )
        .await;
    match result {
        Err(ServiceDbError::Sql(message)) => {
            assert!(message.contains("UNIQUE constraint failed"), "{message}")
        }
        other => panic!("expected a SQL error, got {other:?}"),
    }
    match db.run("SELECT Colour FROM Rooms", &[]).await {
        Err(ServiceDbError::Sql(message)) => {
            assert!(message.contains("no such column"), "{message}")
        }
        other => panic!("expected a SQL error, got {other:?}"),
    }
}

#[tokio::test]
async fn statements_that_reach_past_the_tables_are_refused() {
    let (db, _dir) = hotel().await;
    let why = refusal(db.run("SELECT * FROM Rooms; DELETE FROM Rooms", &[]).await);
    assert!(why.contains("one statement"), "{why}");
    refusal(db.run("PRAGMA table_info(Rooms)", &[]).await);
    refusal(db.run("SELECT name FROM sqlite_master", &[]).await);
    refusal(
        db.run("ATTACH DATABASE '/tmp/other.db' AS other", &[])
            .await,
    );
    refusal(db.run("DROP TABLE Rooms", &[]).await);
    let why = refusal(db.run("SELECT * FROM Guests", &[]).await);
    assert!(why.contains("Rooms, Bookings"), "{why}");
    // Nothing was deleted or dropped.
    assert_eq!(db.run("SELECT * FROM Rooms", &[]).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_semicolon_inside_a_string_literal_is_one_statement() {
    let (db, _dir) = hotel().await;
    db.run(
        "INSERT INTO Bookings VALUES (102, '2025-04-01', 'a; DROP TABLE Rooms; --');",
        &[],
    )
    .await
    .unwrap();
    let rows = db
        .run("SELECT Guest FROM Bookings WHERE Guest LIKE '%;%'", &[])
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![object(json!({"Guest": "a; DROP TABLE Rooms; --"}))]
    );
}

#[tokio::test]
async fn results_are_capped() {
    let (db, _dir) = hotel().await;
    let rows = db
        .run(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) \
             SELECT i FROM n",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), MAX_ROWS);
    assert_eq!(rows[0], object(json!({"i": 1})));
    // An endless result stops at the cap, well before the time limit.
    let started = std::time::Instant::now();
    let rows = db
        .run(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), MAX_ROWS);
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(db.run("SELECT * FROM Rooms", &[]).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_runaway_statement_is_stopped() {
    let (db, _dir) = hotel().await;
    let started = std::time::Instant::now();
    let why = refusal(
        db.run(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
             SELECT count(*) FROM n",
            &[],
        )
        .await,
    );
    assert!(why.contains("longer than"), "{why}");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    // The connection is usable afterwards.
    assert_eq!(db.run("SELECT * FROM Rooms", &[]).await.unwrap().len(), 2);
}

#[tokio::test]
async fn create_replaces_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hotel.db");
    std::fs::write(&path, "not a database").unwrap();
    let db = ServiceDatabase::create(&path, &hotel_tables())
        .await
        .unwrap();
    db.run("DELETE FROM Rooms", &[]).await.unwrap();
    db.close().await;
    let db = ServiceDatabase::create(&path, &hotel_tables())
        .await
        .unwrap();
    assert_eq!(db.run("SELECT * FROM Rooms", &[]).await.unwrap().len(), 2);
}

#[tokio::test]
async fn params_are_bound_in_order_and_must_match_the_placeholders() {
    let (db, _dir) = hotel().await;
    let booked = db
        .run(
            "SELECT Guest FROM Bookings WHERE RoomNumber = ? AND StartDate = ?",
            &[json!(101), json!("2025-03-01")],
        )
        .await
        .unwrap();
    assert_eq!(booked, vec![object(json!({"Guest": "Ada"}))]);
    db.run(
        "INSERT INTO Bookings VALUES (?, ?, ?)",
        &[json!(102), json!("2025-03-02"), json!("Bo")],
    )
    .await
    .unwrap();
    assert_eq!(
        db.run("SELECT Guest FROM Bookings WHERE RoomNumber = 102", &[])
            .await
            .unwrap(),
        vec![object(json!({"Guest": "Bo"}))]
    );

    // A placeholder without a value is refused, never matched against NULL.
    let unbound = "SELECT Guest FROM Bookings WHERE RoomNumber = ?";
    let why = refusal(db.run(unbound, &[]).await);
    assert!(why.contains("1 `?` placeholder(s) but 0 value(s)"), "{why}");
    let why = refusal(db.run("SELECT Guest FROM Bookings", &[json!(1)]).await);
    assert!(why.contains("0 `?` placeholder(s) but 1 value(s)"), "{why}");
    let why = refusal(
        db.run(
            "SELECT Guest FROM Bookings WHERE RoomNumber = :room",
            &[json!(101)],
        )
        .await,
    );
    assert!(why.contains("plain `?`"), "{why}");
    // A `?` inside a string literal is text, not a placeholder.
    assert_eq!(
        db.run("SELECT Guest FROM Bookings WHERE Guest = '?'", &[])
            .await
            .unwrap(),
        Vec::<Map<String, Value>>::new()
    );
}

#[tokio::test]
async fn a_databases_tables_are_read_from_its_file_while_it_is_open() {
    let (db, dir) = hotel().await;
    db.run("INSERT INTO Bookings VALUES (102, '2025-03-02', 'Bo')", &[])
        .await
        .unwrap();
    let path = dir.path().join("hotel.db");
    let tables = ServiceDatabase::read_tables(&path).await.unwrap();
    let names: Vec<&str> = tables.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["Bookings", "Rooms"]);
    assert_eq!(
        tables[0].1,
        vec![
            object(json!({"RoomNumber": 101, "StartDate": "2025-03-01", "Guest": "Ada"})),
            object(json!({"RoomNumber": 102, "StartDate": "2025-03-02", "Guest": "Bo"})),
        ]
    );
    // The server's own connection goes on writing afterwards.
    db.run("DELETE FROM Bookings", &[]).await.unwrap();
    assert!(
        ServiceDatabase::read_tables(&path).await.unwrap()[0]
            .1
            .is_empty()
    );
    // A file that is not there is an error, not an empty database.
    assert!(matches!(
        ServiceDatabase::read_tables(&dir.path().join("none.db")).await,
        Err(ServiceDbError::Open(_))
    ));
}
