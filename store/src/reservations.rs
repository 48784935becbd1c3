//! Reservations' table: in the history database, or in memory with `--no-history`. Callers run
//! these on a blocking thread; conflicts are checked above (`crate::reservations`), under the
//! one lock that also serializes the writes.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};
use shared::reservations::Reservation;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    devices TEXT NOT NULL,
    user TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    note TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    released_ms INTEGER
);
CREATE INDEX IF NOT EXISTS reservations_end ON reservations (end_ms);
";

/// Most rows `GET /api/reservations?all=1` returns.
pub const LIST_LIMIT: u32 = 1000;

/// Why the reservations table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReservationStoreError {
    #[error("reservations database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored reservation {id} names GPUs '{devices}' that are not a list of indexes")]
    Devices { id: u64, devices: String },
}

/// The reservations table (one connection; the caller holds it under a lock).
#[derive(Debug)]
pub struct ReservationStore {
    conn: Connection,
    persistent: bool,
}

impl ReservationStore {
    /// The table in the history database at `path`.
    pub fn open(path: &Path) -> Result<Self, ReservationStoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self { conn, persistent: true })
    }

    /// A table that lives as long as the process (`--no-history`).
    pub fn memory() -> Result<Self, ReservationStoreError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self { conn, persistent: false })
    }

    /// True when reservations outlive the process.
    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// Stores `r` (its `id` is ignored) and returns the id it got.
    pub fn insert(&self, r: &Reservation) -> Result<u64, ReservationStoreError> {
        let devices = r.devices.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        self.conn.execute(
            "INSERT INTO reservations (devices, user, start_ms, end_ms, note, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![devices, r.user, sql(r.start_ms), sql(r.end_ms), r.note, sql(r.created_ms)],
        )?;
        Ok(u64::try_from(self.conn.last_insert_rowid()).unwrap_or(0))
    }

    /// Marks reservation `id` released at `at_ms`; false when there is none still unreleased.
    pub fn release(&self, id: u64, at_ms: u64) -> Result<bool, ReservationStoreError> {
        let changed = self.conn.execute(
            "UPDATE reservations SET released_ms = ?2 WHERE id = ?1 AND released_ms IS NULL",
            params![sql(id), sql(at_ms)],
        )?;
        Ok(changed > 0)
    }

    /// Reservations not released that end after `now_ms`, by start.
    pub fn current(&self, now_ms: u64) -> Result<Vec<Reservation>, ReservationStoreError> {
        self.select(
            "SELECT * FROM reservations WHERE released_ms IS NULL AND end_ms > ?1 ORDER BY start_ms, id LIMIT ?2",
            now_ms,
        )
    }

    /// Every reservation (released and past too), newest start first, at most [`LIST_LIMIT`].
    pub fn all(&self) -> Result<Vec<Reservation>, ReservationStoreError> {
        self.select("SELECT * FROM reservations WHERE ?1 >= 0 ORDER BY start_ms DESC, id DESC LIMIT ?2", 0)
    }

    /// Reservation `id`, released or not.
    pub fn get(&self, id: u64) -> Result<Option<Reservation>, ReservationStoreError> {
        self.conn
            .query_row("SELECT * FROM reservations WHERE id = ?1", params![sql(id)], read)
            .optional()?
            .map(parse)
            .transpose()
    }

    fn select(&self, query: &str, ms: u64) -> Result<Vec<Reservation>, ReservationStoreError> {
        let mut statement = self.conn.prepare_cached(query)?;
        let rows = statement.query_map(params![sql(ms), LIST_LIMIT], read)?;
        rows.map(|row| parse(row?)).collect()
    }
}

/// SQLite integers are signed; times and ids stay far below `i64::MAX`.
fn sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A row as read: the devices still as text.
type Raw = (Reservation, String);

fn read(row: &Row<'_>) -> rusqlite::Result<Raw> {
    let unsigned = |i: usize| row.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
    let reservation = Reservation {
        id: unsigned(0)?,
        devices: Vec::new(),
        user: row.get(2)?,
        start_ms: unsigned(3)?,
        end_ms: unsigned(4)?,
        note: row.get(5)?,
        created_ms: unsigned(6)?,
        released_ms: row.get::<_, Option<i64>>(7)?.map(|v| u64::try_from(v).unwrap_or(0)),
        intruders: Vec::new(),
        redacted: false,
    };
    Ok((reservation, row.get(1)?))
}

fn parse((mut reservation, devices): Raw) -> Result<Reservation, ReservationStoreError> {
    reservation.devices = devices
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| ReservationStoreError::Devices { id: reservation.id, devices: devices.clone() })?;
    Ok(reservation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(devices: &[u32], start_ms: u64, end_ms: u64) -> Reservation {
        Reservation {
            id: 0,
            devices: devices.to_vec(),
            user: "ana".into(),
            start_ms,
            end_ms,
            note: "fine-tuning".into(),
            created_ms: 1,
            released_ms: None,
            intruders: Vec::new(),
            redacted: false,
        }
    }

    #[test]
    fn stores_lists_and_releases() {
        let store = ReservationStore::memory().unwrap();
        let a = store.insert(&reservation(&[0, 2], 100, 200)).unwrap();
        let b = store.insert(&reservation(&[1], 50, 150)).unwrap();
        assert!(b > a);
        let current = store.current(120).unwrap();
        assert_eq!(current.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
        assert_eq!(current[1].devices, [0, 2]);
        assert_eq!(store.current(160).unwrap().len(), 1, "b ended");
        assert!(store.release(a, 130).unwrap());
        assert!(!store.release(a, 140).unwrap(), "released once");
        assert!(store.current(120).unwrap().iter().all(|r| r.id != a));
        assert_eq!(store.get(a).unwrap().unwrap().released_ms, Some(130));
        assert_eq!(store.all().unwrap().len(), 2);
        assert!(store.get(99).unwrap().is_none());
    }
}
