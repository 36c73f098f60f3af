//! The reference state: each server's database as a correct server would have left it after
//! every earlier query of the screenplay, served in order.
//!
//! It starts from the seed rows of the server's database kind (`Rooms`, `Skis`, `Screenings`;
//! bookings and rentals start empty) and is changed only by the judge's rules, never by what a
//! run answered: a wrong answer early on does not change what later answers should be.

use std::collections::BTreeSet;

use crate::spec::DatabaseSpec;
use crate::writes::{cell as column, int, text};

/// A room booking: room, first and last night (inclusive, `YYYY-MM-DD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomBooking {
    /// The room.
    pub room: i64,
    /// First day.
    pub start: String,
    /// Last day (inclusive).
    pub end: String,
}

/// A screening and the tickets it has left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screening {
    /// `YYYY-MM-DD`.
    pub date: String,
    /// Hour of the day.
    pub hour: i64,
    /// The film's title.
    pub movie: String,
    /// Tickets still for sale.
    pub tickets_left: i64,
}

/// One server's reference state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerState {
    /// Room numbers, in seed order.
    pub rooms: Vec<i64>,
    /// Room bookings made.
    pub room_bookings: Vec<RoomBooking>,
    /// Skis: (id, type), in seed order.
    pub skis: Vec<(String, String)>,
    /// Ski rentals made: (ski id, date).
    pub ski_rentals: BTreeSet<(String, String)>,
    /// Table bookings made: (surname, date, hour).
    pub tables: BTreeSet<(String, String, i64)>,
    /// Screenings with their tickets left.
    pub screenings: Vec<Screening>,
}

impl ServerState {
    /// The state of a fresh database of kind `database` (its seed rows).
    pub fn seeded(database: &DatabaseSpec) -> ServerState {
        let mut state = ServerState::default();
        let rows = |table: &str| {
            database
                .tables
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(table))
                .map(|(_, t)| t.rows.clone())
                .unwrap_or_default()
        };
        state.rooms = rows("Rooms")
            .iter()
            .filter_map(|row| int(column(row, "RoomNumber")))
            .collect();
        state.skis = rows("Skis")
            .iter()
            .filter_map(|row| Some((text(column(row, "SkiId"))?, text(column(row, "SkiType"))?)))
            .collect();
        state.screenings = rows("Screenings")
            .iter()
            .filter_map(|row| {
                Some(Screening {
                    date: text(column(row, "Date"))?,
                    hour: int(column(row, "Hour"))?,
                    movie: text(column(row, "Movie"))?,
                    tickets_left: int(column(row, "TicketsLeft"))?,
                })
            })
            .collect();
        state
    }

    /// The rooms free for every day of `start..=end`, in seed order.
    pub fn free_rooms(&self, start: &str, end: &str) -> Vec<i64> {
        self.rooms
            .iter()
            .copied()
            .filter(|room| {
                !self
                    .room_bookings
                    .iter()
                    .any(|b| b.room == *room && b.start.as_str() <= end && start <= b.end.as_str())
            })
            .collect()
    }

    /// The skis of `kind` not rented on `date`, in seed order.
    pub fn free_skis(&self, kind: &str, date: &str) -> Vec<String> {
        self.skis
            .iter()
            .filter(|(_, k)| k.eq_ignore_ascii_case(kind))
            .map(|(id, _)| id)
            .filter(|id| {
                !self
                    .ski_rentals
                    .contains(&((*id).clone(), date.to_string()))
            })
            .cloned()
            .collect()
    }
}
