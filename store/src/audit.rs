//! The audit table, written by its own [`DbWriter`] thread, so handlers never touch SQLite on the
//! async runtime. Inserts are queued and return at once; reads and pruning go through the same
//! queue, so a read sees every row queued before it (a test that reads the log right after an
//! action's response finds the action).

use std::path::Path;

use rusqlite::types::{FromSqlError, ValueRef};
use rusqlite::{Connection, params};
use shared::auth::{AuditEntry, AuditOutcome, AuditQuery};

use super::writer::{self, DbWriter, Stopped};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts INTEGER NOT NULL,
    user TEXT NOT NULL,
    client TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_ts ON audit (ts);
CREATE INDEX IF NOT EXISTS audit_outcome ON audit (outcome, id);";

/// Why the audit table could not be read or pruned.
#[derive(Debug, thiserror::Error)]
pub enum AuditStoreError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot start the audit writer: {0}")]
    Thread(std::io::Error),
    #[error("the audit writer has stopped")]
    Stopped,
}

impl From<Stopped> for AuditStoreError {
    fn from(_: Stopped) -> Self {
        Self::Stopped
    }
}

/// One row to insert; its id comes from the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub timestamp_ms: u64,
    pub user: String,
    pub client: String,
    pub action: &'static str,
    pub target: String,
    pub outcome: AuditOutcome,
    pub detail: String,
}

/// The handle to the audit table's writer thread; dropping the last clone writes what is
/// queued and waits for the thread.
#[derive(Debug, Clone)]
pub struct AuditStore {
    writer: DbWriter,
}

impl AuditStore {
    /// Opens (or creates) the audit table in the database at `path` and starts its writer.
    pub fn open(path: &Path) -> Result<Self, AuditStoreError> {
        let conn = writer::open_file(path)?;
        conn.execute_batch(SCHEMA)?;
        let writer = DbWriter::start("gpudash-audit", conn).map_err(AuditStoreError::Thread)?;
        Ok(Self { writer })
    }

    /// Queues a row; never blocks. A failed write is logged by the writer.
    pub fn insert(&self, row: AuditRow) {
        let sent = self.writer.send(move |conn| {
            if let Err(e) = insert(conn, &row) {
                tracing::error!("could not write the audit log: {e}");
            }
        });
        if sent.is_err() {
            tracing::error!("the audit writer has stopped; an audit entry was not stored");
        }
    }

    /// The newest rows that pass `query`'s filters, newest first (blocking: call from `spawn_blocking`).
    pub fn list(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, AuditStoreError> {
        let query = query.clone();
        Ok(self.writer.ask(move |conn| list(conn, &query))??)
    }

    /// Deletes the rows older than `oldest_ms`; returns how many (blocking).
    pub fn prune(&self, oldest_ms: u64) -> Result<usize, AuditStoreError> {
        Ok(self
            .writer
            .ask(move |conn| conn.execute("DELETE FROM audit WHERE ts < ?1", params![as_i64(oldest_ms)]))??)
    }

    /// Deletes the oldest denials past `denied` rows, and with `others` the oldest other rows
    /// past that many; returns how many (blocking).
    pub fn cap(&self, denied: usize, others: Option<usize>) -> Result<usize, AuditStoreError> {
        Ok(self.writer.ask(move |conn| {
            let mut deleted = conn.execute(
                "DELETE FROM audit WHERE outcome = 'denied' AND id <= (SELECT id FROM audit WHERE outcome = 'denied' \
                 ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                params![as_i64(denied as u64)],
            )?;
            if let Some(others) = others {
                deleted += conn.execute(
                    "DELETE FROM audit WHERE outcome != 'denied' AND id <= (SELECT id FROM audit \
                     WHERE outcome != 'denied' ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                    params![as_i64(others as u64)],
                )?;
            }
            Ok::<_, rusqlite::Error>(deleted)
        })??)
    }

    /// Waits until every row queued so far is written (blocking).
    pub fn sync(&self) -> Result<(), AuditStoreError> {
        Ok(self.writer.ask(|_| ())?)
    }
}

fn insert(conn: &Connection, row: &AuditRow) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT INTO audit (ts, user, client, action, target, outcome, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        as_i64(row.timestamp_ms),
        row.user,
        row.client,
        row.action,
        row.target,
        row.outcome.name(),
        row.detail
    ])
}

fn list(conn: &Connection, query: &AuditQuery) -> rusqlite::Result<Vec<AuditEntry>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, ts, user, client, action, target, outcome, detail FROM audit
         WHERE id < ?1 AND (?2 IS NULL OR user = ?2) AND (?3 IS NULL OR action = ?3)
           AND (?4 IS NULL OR outcome = ?4) AND ts >= ?5 AND ts <= ?6
         ORDER BY id DESC LIMIT ?7",
    )?;
    let rows = statement.query_map(
        params![
            query.before.map_or(i64::MAX, as_i64),
            query.user,
            query.action,
            query.outcome.map(AuditOutcome::name),
            query.from.map_or(0, as_i64),
            query.to.map_or(i64::MAX, as_i64),
            query.limit(),
        ],
        |r| {
            Ok(AuditEntry {
                id: r.get::<_, i64>(0)? as u64,
                timestamp_ms: r.get::<_, i64>(1)? as u64,
                user: r.get(2)?,
                client: r.get(3)?,
                action: r.get(4)?,
                target: r.get(5)?,
                outcome: outcome(r.get_ref(6)?)
                    .map_err(|e| rusqlite::Error::FromSqlConversionFailure(6, rusqlite::types::Type::Text, e.into()))?,
                detail: r.get(7)?,
                summary: String::new(),
            })
        },
    )?;
    rows.collect()
}

fn outcome(value: ValueRef<'_>) -> Result<AuditOutcome, FromSqlError> {
    let name = value.as_str()?;
    AuditOutcome::parse(name).ok_or_else(|| FromSqlError::Other(format!("unknown audit outcome '{name}'").into()))
}

fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ts: u64, action: &'static str) -> AuditRow {
        AuditRow {
            timestamp_ms: ts,
            user: "ana".to_owned(),
            client: "::1".to_owned(),
            action,
            target: "GPU 0".to_owned(),
            outcome: AuditOutcome::Ok,
            detail: String::new(),
        }
    }

    #[test]
    fn a_read_sees_every_row_queued_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = AuditStore::open(&dir.path().join("a.db")).unwrap();
        for ts in 0..500 {
            store.insert(row(ts, "login"));
        }
        let rows = store.list(&AuditQuery { limit: Some(1000), ..AuditQuery::default() }).unwrap();
        assert_eq!(rows.len(), 500);
        assert_eq!(rows[0].timestamp_ms, 499, "newest first");
    }

    #[test]
    fn dropping_the_last_handle_writes_what_is_queued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let store = AuditStore::open(&path).unwrap();
        let clone = store.clone();
        for ts in 0..200 {
            clone.insert(row(ts, "login"));
        }
        drop((store, clone));
        let reopened = AuditStore::open(&path).unwrap();
        assert_eq!(reopened.list(&AuditQuery { limit: Some(1000), ..AuditQuery::default() }).unwrap().len(), 200);
    }

    #[test]
    fn pruning_deletes_only_older_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = AuditStore::open(&dir.path().join("a.db")).unwrap();
        store.insert(row(10, "login"));
        store.insert(row(20, "empty_cache"));
        assert_eq!(store.prune(15).unwrap(), 1);
        store.sync().unwrap();
        let left = store.list(&AuditQuery::default()).unwrap();
        assert_eq!(left.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["empty_cache"]);
    }
}
