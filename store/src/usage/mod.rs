//! Usage sums: per-minute buckets (user, GPU, minute) that each flush adds to, rolled up into
//! hours once past the minute retention and kept a year. One writer thread owns the connection
//! (the history database, or an in-memory database with `--no-history`); reads go through the
//! same queue, so a read sees every flush queued before it.

use std::path::Path;

use rusqlite::{Connection, params};

pub mod totals;

use self::totals::UsageTotals;
use crate::writer::{self, DbWriter};

/// How long hourly rollups are kept: a year's query range.
pub const HOURS_KEPT_MS: u64 = shared::usage::MAX_RANGE_MS;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS usage_minutes (
    user TEXT NOT NULL, device INTEGER NOT NULL, start INTEGER NOT NULL,
    gpu_s REAL NOT NULL, memory_gib_s REAL NOT NULL, idle_gib_s REAL NOT NULL, energy_j REAL NOT NULL,
    workload TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (start, user, device, workload)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_hours (
    user TEXT NOT NULL, device INTEGER NOT NULL, start INTEGER NOT NULL,
    gpu_s REAL NOT NULL, memory_gib_s REAL NOT NULL, idle_gib_s REAL NOT NULL, energy_j REAL NOT NULL,
    workload TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (start, user, device, workload)
) WITHOUT ROWID;
";

/// Tables from before workloads (their key was start, user, device) get the `workload` column,
/// empty for every old bucket: a WITHOUT ROWID table's key cannot change in place, so each is
/// copied into a new one in one transaction.
const MIGRATE: &[&str] = &["usage_minutes", "usage_hours"];

fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    for table in MIGRATE {
        let has_workload: bool = conn.query_row(
            &format!("SELECT COUNT(*) > 0 FROM pragma_table_info('{table}') WHERE name = 'workload'"),
            [],
            |r| r.get(0),
        )?;
        let exists: bool =
            conn.query_row("SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = ?1", [table], |r| r.get(0))?;
        if exists && !has_workload {
            let transaction = conn.transaction()?;
            transaction.execute_batch(&format!(
                "ALTER TABLE {table} RENAME TO {table}_old;
                 {schema}
                 INSERT INTO {table} (user, device, start, gpu_s, memory_gib_s, idle_gib_s, energy_j)
                     SELECT user, device, start, gpu_s, memory_gib_s, idle_gib_s, energy_j FROM {table}_old;
                 DROP TABLE {table}_old;",
                schema = SCHEMA
            ))?;
            transaction.commit()?;
        }
    }
    Ok(())
}

/// The four sums of one bucket or group.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sums {
    pub gpu_s: f64,
    pub memory_gib_s: f64,
    pub idle_gib_s: f64,
    pub energy_j: f64,
}

/// What one user used on one GPU in one minute (to add) or one UTC day (as read), in one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub user: String,
    pub device: u32,
    /// Its workload as `shared::workload::usage_key` writes it; empty outside one.
    pub workload: String,
    /// Start of the minute (adding) or of the UTC day (reading), ms since the epoch.
    pub start: u64,
    pub sums: Sums,
}

/// Why the usage tables could not be used.
#[derive(Debug, thiserror::Error)]
pub enum UsageStoreError {
    #[error("usage database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot start the usage writer: {0}")]
    Thread(std::io::Error),
    #[error("the usage writer has stopped")]
    Stopped,
}

/// The handle to the usage tables' writer; dropping the last clone writes what is queued.
#[derive(Debug, Clone)]
pub struct UsageStore {
    writer: DbWriter,
    persistent: bool,
    /// Lifetime sums per owner (`/metrics`' counters), read from the database at start.
    totals: UsageTotals,
}

impl UsageStore {
    /// The tables in the history database at `path`.
    pub fn open(path: &Path) -> Result<Self, UsageStoreError> {
        Self::start(writer::open_file(path)?, true)
    }

    /// Tables that live as long as the process (`--no-history`).
    pub fn memory() -> Result<Self, UsageStoreError> {
        Self::start(Connection::open_in_memory()?, false)
    }

    fn start(mut conn: Connection, persistent: bool) -> Result<Self, UsageStoreError> {
        migrate(&mut conn)?;
        conn.execute_batch(SCHEMA)?;
        let totals = UsageTotals::new(totals::open(&mut conn)?);
        let writer = DbWriter::start("gpudash-usagedb", conn).map_err(UsageStoreError::Thread)?;
        Ok(Self { writer, persistent, totals })
    }

    /// True when the sums outlive the process (the history database).
    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// Queues adding `buckets` to their minutes, in one transaction; never blocks. A failed write is logged.
    pub fn add(&self, buckets: Vec<Bucket>) {
        if buckets.is_empty() {
            return;
        }
        self.totals.add(&buckets);
        let sent = self.send(move |conn| {
            if let Err(e) = add(conn, &buckets) {
                tracing::error!("could not store {} usage buckets: {e}", buckets.len());
            }
        });
        if sent.is_err() {
            tracing::error!("the usage writer has stopped; usage was not stored");
        }
    }

    /// Every owner's lifetime sums (what was added, over restarts on the same database): never
    /// smaller than before, so `/metrics` exports them as counters.
    pub fn totals(&self) -> std::collections::BTreeMap<String, Sums> {
        self.totals.snapshot()
    }

    /// [`Self::totals`] as `/metrics` exports them ([`UsageTotals::for_export`]: a new owner reads 0 once).
    pub fn totals_for_export(&self) -> std::collections::BTreeMap<String, Sums> {
        self.totals.for_export()
    }

    /// Sums per user, GPU and day of the buckets that overlap `[from, to)`, days starting at the
    /// midnights of the zone `utc_offset` minutes east of UTC (blocking).
    pub fn days(&self, from: u64, to: u64, utc_offset: i32) -> Result<Vec<Bucket>, UsageStoreError> {
        Ok(self.ask(move |conn| days(conn, from, to, utc_offset))??)
    }

    /// Rolls minutes older than `minutes_from` into hours and deletes hours older than a year (blocking).
    pub fn roll_up(&self, minutes_from: u64, now_ms: u64) -> Result<(), UsageStoreError> {
        Ok(self.ask(move |conn| roll_up(conn, minutes_from, now_ms.saturating_sub(HOURS_KEPT_MS)))??)
    }

    /// Waits until everything queued so far is written (blocking).
    pub fn sync(&self) {
        let _ = self.ask(|_| ());
    }

    fn send(&self, job: impl FnOnce(&mut Connection) + Send + 'static) -> Result<(), UsageStoreError> {
        self.writer.send(job).map_err(|_| UsageStoreError::Stopped)
    }

    fn ask<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, UsageStoreError> {
        self.writer.ask(work).map_err(|_| UsageStoreError::Stopped)
    }
}

fn as_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn add(conn: &mut Connection, buckets: &[Bucket]) -> rusqlite::Result<()> {
    let transaction = conn.transaction()?;
    {
        let mut insert = transaction.prepare_cached(
            "INSERT INTO usage_minutes (user, device, start, gpu_s, memory_gib_s, idle_gib_s, energy_j, workload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (start, user, device, workload) DO UPDATE SET gpu_s = gpu_s + excluded.gpu_s,
                 memory_gib_s = memory_gib_s + excluded.memory_gib_s, idle_gib_s = idle_gib_s + excluded.idle_gib_s,
                 energy_j = energy_j + excluded.energy_j",
        )?;
        for b in buckets {
            let start = b.start - b.start % MINUTE_MS;
            let s = b.sums;
            insert.execute(params![
                b.user,
                b.device,
                as_i64(start),
                s.gpu_s,
                s.memory_gib_s,
                s.idle_gib_s,
                s.energy_j,
                b.workload
            ])?;
        }
    }
    totals::add(&transaction, buckets)?;
    transaction.commit()
}

/// Every bucket that overlaps `[from, to)`, summed per user, GPU and day (from the zone's
/// midnight, `utc_offset` minutes east of UTC): a range that starts mid-minute keeps that minute
/// (a job started a moment after `from` is not cut short). An hour rolled up from minutes falls
/// whole into the day it starts in: with a half-hour zone, its last half hour may belong to the next.
fn days(conn: &Connection, from: u64, to: u64, utc_offset: i32) -> rusqlite::Result<Vec<Bucket>> {
    let day = shared::usage::DAY_MS;
    let offset = i64::from(utc_offset) * 60_000;
    let mut statement = conn.prepare_cached(
        "SELECT user, device, start - ((start + ?4) % ?3 + ?3) % ?3 AS day, SUM(gpu_s), SUM(memory_gib_s), SUM(idle_gib_s), SUM(energy_j), workload
         FROM (SELECT * FROM usage_minutes WHERE start > ?1 - 60000 AND start < ?2
               UNION ALL SELECT * FROM usage_hours WHERE start > ?1 - 3600000 AND start < ?2)
         GROUP BY user, device, day, workload ORDER BY day, user, device, workload",
    )?;
    let rows = statement.query_map(params![as_i64(from), as_i64(to), as_i64(day), offset], |r| {
        Ok(Bucket {
            user: r.get(0)?,
            device: r.get(1)?,
            workload: r.get(7)?,
            start: r.get::<_, i64>(2)?.max(0) as u64,
            sums: Sums { gpu_s: r.get(3)?, memory_gib_s: r.get(4)?, idle_gib_s: r.get(5)?, energy_j: r.get(6)? },
        })
    })?;
    rows.collect()
}

fn roll_up(conn: &mut Connection, minutes_from: u64, hours_from: u64) -> rusqlite::Result<()> {
    let transaction = conn.transaction()?;
    transaction.execute(
        "INSERT INTO usage_hours (user, device, start, gpu_s, memory_gib_s, idle_gib_s, energy_j, workload)
         SELECT user, device, start - start % ?2 AS hour, SUM(gpu_s), SUM(memory_gib_s), SUM(idle_gib_s), SUM(energy_j), workload
         FROM usage_minutes WHERE start < ?1 GROUP BY user, device, hour, workload
         ON CONFLICT (start, user, device, workload) DO UPDATE SET gpu_s = gpu_s + excluded.gpu_s,
             memory_gib_s = memory_gib_s + excluded.memory_gib_s, idle_gib_s = idle_gib_s + excluded.idle_gib_s,
             energy_j = energy_j + excluded.energy_j",
        params![as_i64(minutes_from), as_i64(HOUR_MS)],
    )?;
    transaction.execute("DELETE FROM usage_minutes WHERE start < ?1", [as_i64(minutes_from)])?;
    transaction.execute("DELETE FROM usage_hours WHERE start < ?1", [as_i64(hours_from)])?;
    transaction.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(user: &str, device: u32, start: u64, gpu_s: f64) -> Bucket {
        Bucket {
            user: user.to_owned(),
            device,
            workload: String::new(),
            start,
            sums: Sums { gpu_s, memory_gib_s: 2.0 * gpu_s, ..Sums::default() },
        }
    }

    #[test]
    fn tables_from_before_workloads_keep_their_sums_and_take_workloads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE usage_minutes (user TEXT NOT NULL, device INTEGER NOT NULL, start INTEGER NOT NULL,
                    gpu_s REAL NOT NULL, memory_gib_s REAL NOT NULL, idle_gib_s REAL NOT NULL, energy_j REAL NOT NULL,
                    PRIMARY KEY (start, user, device)) WITHOUT ROWID;
                 INSERT INTO usage_minutes VALUES ('ana', 0, 60000, 5.0, 1.0, 0.0, 2.0);",
            )
            .unwrap();
        }
        let store = UsageStore::open(&path).unwrap();
        let mut in_job = bucket("ana", 0, 60_000, 1.0);
        in_job.workload = "job=42".to_owned();
        store.add(vec![in_job, bucket("ana", 0, 60_000, 1.0)]);
        let days = store.days(0, 3_600_000, 0).unwrap();
        let sum = |w: &str| days.iter().find(|b| b.workload == w).map(|b| b.sums.gpu_s);
        assert_eq!((sum(""), sum("job=42")), (Some(6.0), Some(1.0)), "{days:?}");
    }

    #[test]
    fn adding_to_a_minute_adds_and_days_sum_minutes_and_hours() {
        let store = UsageStore::memory().unwrap();
        store.add(vec![bucket("ana", 0, 60_000, 1.5), bucket("ana", 0, 61_000, 2.0), bucket("bo", 1, 120_000, 4.0)]);
        let days = store.days(0, 3_600_000, 0).unwrap();
        assert_eq!(days.len(), 2, "{days:?}");
        assert_eq!((days[0].user.as_str(), days[0].sums.gpu_s, days[0].sums.memory_gib_s), ("ana", 3.5, 7.0));
        assert_eq!(store.days(120_000, 180_000, 0).unwrap().len(), 1, "the minute before the range stays out");
        let overlapping = store.days(150_000, 160_000, 0).unwrap();
        assert_eq!(overlapping.len(), 1, "a range that starts mid-minute keeps that minute: {overlapping:?}");
        assert_eq!(overlapping[0].user, "bo");
        // Rolled into hours, the sums stay, and a later minute adds to them.
        store.roll_up(10 * 60_000, 10 * 60_000).unwrap();
        store.add(vec![bucket("ana", 0, 11 * 60_000, 1.0)]);
        store.roll_up(20 * 60_000, 20 * 60_000).unwrap();
        let days = store.days(0, 3_600_000, 0).unwrap();
        assert_eq!(days.iter().find(|b| b.user == "ana").unwrap().sums.gpu_s, 4.5);
        // Hours older than a year go.
        store.roll_up(0, HOURS_KEPT_MS + 2 * 3_600_000).unwrap();
        assert!(store.days(0, 3_600_000, 0).unwrap().is_empty());
    }

    #[test]
    fn days_start_at_the_zones_midnight() {
        use shared::usage::DAY_MS;
        const HOUR: u64 = 3_600_000;
        let monday = 20_423 * DAY_MS; // 2025-12-01 00:00 UTC
        let store = UsageStore::memory().unwrap();
        // 22:30 and 23:30 UTC on Monday: Monday in UTC, Monday and Tuesday in UTC+1, Monday in UTC−5.
        let (early, late) = (monday + 22 * HOUR + HOUR / 2, monday + 23 * HOUR + HOUR / 2);
        store.add(vec![bucket("ana", 0, early, 1.0), bucket("ana", 0, late, 2.0)]);
        let starts = |offset| {
            let days = store.days(monday - DAY_MS, monday + 2 * DAY_MS, offset).unwrap();
            days.iter().map(|b| (b.start, b.sums.gpu_s)).collect::<Vec<_>>()
        };
        assert_eq!(starts(0), [(monday, 3.0)]);
        assert_eq!(starts(60), [(monday - HOUR, 1.0), (monday + DAY_MS - HOUR, 2.0)]);
        assert_eq!(starts(-300), [(monday + 5 * HOUR, 3.0)]);
    }
}
