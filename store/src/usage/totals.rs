//! Lifetime usage per owner: the sums `/metrics` exports as counters
//! (`gpudash_usage_*_total{owner}`), so a Prometheus can sum usage across hosts with `increase()`.
//!
//! A table of its own (one row per owner, added to in the same transaction as the minutes) rather
//! than a sum over the buckets: buckets older than a year are deleted, and a counter must never go
//! back. The table is read once at start, so the counters carry on across a restart; the running
//! figures live in memory ([`UsageTotals`]), so a scrape never waits on SQLite.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, params};

use super::{Bucket, Sums};

const SCHEMA: &str = "CREATE TABLE usage_totals (
    user TEXT NOT NULL PRIMARY KEY,
    gpu_s REAL NOT NULL, memory_gib_s REAL NOT NULL, idle_gib_s REAL NOT NULL, energy_j REAL NOT NULL
) WITHOUT ROWID;";

/// Creates the table when missing, seeded with every bucket kept so far (a database from before
/// the counters starts them at what it holds), and reads it.
pub fn open(conn: &mut Connection) -> rusqlite::Result<BTreeMap<String, Sums>> {
    let exists: bool =
        conn.query_row("SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = 'usage_totals'", [], |r| r.get(0))?;
    if !exists {
        let transaction = conn.transaction()?;
        transaction.execute_batch(SCHEMA)?;
        let buckets: bool = transaction.query_row(
            "SELECT COUNT(*) = 2 FROM sqlite_master WHERE name IN ('usage_minutes', 'usage_hours')",
            [],
            |r| r.get(0),
        )?;
        if buckets {
            transaction.execute_batch(
                "INSERT INTO usage_totals (user, gpu_s, memory_gib_s, idle_gib_s, energy_j)
                 SELECT user, SUM(gpu_s), SUM(memory_gib_s), SUM(idle_gib_s), SUM(energy_j)
                 FROM (SELECT * FROM usage_minutes UNION ALL SELECT * FROM usage_hours) GROUP BY user",
            )?;
        }
        transaction.commit()?;
    }
    let mut statement =
        conn.prepare("SELECT user, gpu_s, memory_gib_s, idle_gib_s, energy_j FROM usage_totals ORDER BY user")?;
    let rows = statement.query_map([], |r| {
        Ok((r.get(0)?, Sums { gpu_s: r.get(1)?, memory_gib_s: r.get(2)?, idle_gib_s: r.get(3)?, energy_j: r.get(4)? }))
    })?;
    rows.collect()
}

/// Adds `buckets` to their owners' rows (inside the caller's transaction).
pub fn add(conn: &Connection, buckets: &[Bucket]) -> rusqlite::Result<()> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO usage_totals (user, gpu_s, memory_gib_s, idle_gib_s, energy_j) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (user) DO UPDATE SET gpu_s = gpu_s + excluded.gpu_s,
             memory_gib_s = memory_gib_s + excluded.memory_gib_s, idle_gib_s = idle_gib_s + excluded.idle_gib_s,
             energy_j = energy_j + excluded.energy_j",
    )?;
    for (user, s) in per_owner(buckets) {
        insert.execute(params![user, s.gpu_s, s.memory_gib_s, s.idle_gib_s, s.energy_j])?;
    }
    Ok(())
}

fn per_owner(buckets: &[Bucket]) -> BTreeMap<&str, Sums> {
    let mut owners: BTreeMap<&str, Sums> = BTreeMap::new();
    for b in buckets {
        add_to(owners.entry(b.user.as_str()).or_default(), &b.sums);
    }
    owners
}

fn add_to(total: &mut Sums, s: &Sums) {
    total.gpu_s += s.gpu_s;
    total.memory_gib_s += s.memory_gib_s;
    total.idle_gib_s += s.idle_gib_s;
    total.energy_j += s.energy_j;
}

/// The running lifetime sums per owner, shared by the store's handle and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct UsageTotals(Arc<Mutex<Running>>);

#[derive(Debug, Default)]
struct Running {
    sums: BTreeMap<String, Sums>,
    /// Owners `/metrics` has shown (or that the database held at start).
    shown: BTreeSet<String>,
}

impl UsageTotals {
    pub fn new(start: BTreeMap<String, Sums>) -> Self {
        let shown = start.keys().cloned().collect();
        Self(Arc::new(Mutex::new(Running { sums: start, shown })))
    }

    /// Adds `buckets` (what the store is about to write).
    pub fn add(&self, buckets: &[Bucket]) {
        let mut totals = base::sync::lock(&self.0);
        for (user, s) in per_owner(buckets) {
            add_to(totals.sums.entry(user.to_owned()).or_default(), &s);
        }
    }

    /// Every owner's sums now.
    pub fn snapshot(&self) -> BTreeMap<String, Sums> {
        base::sync::lock(&self.0).sums.clone()
    }

    /// The sums to export as counters: an owner new since start reads 0 the first time it is
    /// shown and its sums from the next time on, so a scraper sees its series start at 0 and
    /// `increase()` counts its first charges (a series that starts above 0 loses its first value).
    pub fn for_export(&self) -> BTreeMap<String, Sums> {
        let mut totals = base::sync::lock(&self.0);
        let Running { sums, shown } = &mut *totals;
        sums.iter()
            .map(|(owner, s)| (owner.clone(), if shown.insert(owner.clone()) { Sums::default() } else { *s }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_from_before_the_counters_starts_them_at_its_sums() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE usage_minutes (user TEXT, device INTEGER, start INTEGER, gpu_s REAL, memory_gib_s REAL,
                 idle_gib_s REAL, energy_j REAL, workload TEXT);
             CREATE TABLE usage_hours (user TEXT, device INTEGER, start INTEGER, gpu_s REAL, memory_gib_s REAL,
                 idle_gib_s REAL, energy_j REAL, workload TEXT);
             INSERT INTO usage_minutes VALUES ('ana', 0, 60000, 5.0, 1.0, 0.5, 2.0, '');
             INSERT INTO usage_hours VALUES ('ana', 1, 0, 10.0, 2.0, 0.0, 3.0, 'job=1');
             INSERT INTO usage_hours VALUES ('bo', 1, 0, 1.0, 0.0, 0.0, 0.0, '');",
        )
        .unwrap();
        let totals = open(&mut conn).unwrap();
        assert_eq!(totals["ana"], Sums { gpu_s: 15.0, memory_gib_s: 3.0, idle_gib_s: 0.5, energy_j: 5.0 });
        assert_eq!(totals["bo"].gpu_s, 1.0);
        // Opened again, it is read, not seeded twice; buckets add.
        let bucket = Bucket {
            user: "bo".into(),
            device: 0,
            workload: String::new(),
            start: 0,
            sums: Sums { gpu_s: 2.0, ..Sums::default() },
        };
        add(&conn, &[bucket.clone(), bucket]).unwrap();
        let again = open(&mut conn).unwrap();
        assert_eq!((again["ana"].gpu_s, again["bo"].gpu_s), (15.0, 5.0));
    }

    #[test]
    fn a_new_owner_is_exported_at_zero_once_and_owners_from_the_database_at_once() {
        let totals = UsageTotals::new(BTreeMap::from([("ana".to_owned(), Sums { gpu_s: 9.0, ..Sums::default() })]));
        let charge = |user: &str| Bucket {
            user: user.into(),
            device: 0,
            workload: String::new(),
            start: 0,
            sums: Sums { gpu_s: 1.0, ..Sums::default() },
        };
        totals.add(&[charge("ana"), charge("bo")]);
        let first = totals.for_export();
        assert_eq!((first["ana"].gpu_s, first["bo"].gpu_s), (10.0, 0.0));
        let second = totals.for_export();
        assert_eq!((second["ana"].gpu_s, second["bo"].gpu_s), (10.0, 1.0));
        assert_eq!(totals.snapshot()["bo"].gpu_s, 1.0);
    }
}
