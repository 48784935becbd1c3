//! The audit log: every state-changing action (experiment start/cancel,
//! empty_cache, login success/failure) with who, when, from where and how it
//! ended. Kept in the history database when there is one, else in memory.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, params};
use shared::auth::AuditEntry;

use crate::telemetry::now_ms;

/// Entries kept when there is no database.
const MEMORY_ENTRIES: usize = 10_000;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts INTEGER NOT NULL,
    user TEXT NOT NULL,
    client TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL
)";

/// What happened, before it gets an id and a time.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    pub user: &'a str,
    pub client: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub outcome: Outcome,
    pub detail: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Denied,
    Failed,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Denied => "denied",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug)]
enum Backend {
    Sqlite(Mutex<Connection>),
    Memory(Mutex<(u64, VecDeque<AuditEntry>)>),
}

/// A shared handle to the audit log.
#[derive(Debug, Clone)]
pub struct Audit {
    backend: Arc<Backend>,
}

impl Audit {
    /// The log inside the database file at `path`.
    pub fn sqlite(path: &Path) -> rusqlite::Result<Self> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self { backend: Arc::new(Backend::Sqlite(Mutex::new(conn))) })
    }

    /// A log that lives as long as the process (with `--no-history`).
    pub fn memory() -> Self {
        Self { backend: Arc::new(Backend::Memory(Mutex::new((0, VecDeque::new())))) }
    }

    /// Records an event; also logged, so nothing is lost if the database fails.
    pub fn record(&self, event: &Event<'_>) {
        tracing::info!(
            target: "gpudash::audit",
            user = event.user, client = event.client, action = event.action, target = event.target,
            outcome = event.outcome.name(), "{}", event.detail
        );
        let ts = now_ms();
        match &*self.backend {
            Backend::Sqlite(conn) => {
                let conn = conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Err(e) = conn.execute(
                    "INSERT INTO audit (ts, user, client, action, target, outcome, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![ts as i64, event.user, event.client, event.action, event.target, event.outcome.name(), event.detail],
                ) {
                    tracing::error!("could not write the audit log: {e}");
                }
            }
            Backend::Memory(log) => {
                let mut log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                log.0 += 1;
                let entry = AuditEntry {
                    id: log.0,
                    timestamp_ms: ts,
                    user: event.user.to_owned(),
                    client: event.client.to_owned(),
                    action: event.action.to_owned(),
                    target: event.target.to_owned(),
                    outcome: event.outcome.name().to_owned(),
                    detail: event.detail.to_owned(),
                };
                log.1.push_back(entry);
                if log.1.len() > MEMORY_ENTRIES {
                    log.1.pop_front();
                }
            }
        }
    }

    /// The newest `limit` entries, newest first, older than `before` when given.
    pub fn list(&self, limit: usize, before: Option<u64>) -> rusqlite::Result<Vec<AuditEntry>> {
        match &*self.backend {
            Backend::Sqlite(conn) => {
                let conn = conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let mut statement = conn.prepare_cached(
                    "SELECT id, ts, user, client, action, target, outcome, detail FROM audit
                     WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
                )?;
                let rows = statement.query_map(params![before.map_or(i64::MAX, |b| b as i64), limit as i64], |r| {
                    Ok(AuditEntry {
                        id: r.get::<_, i64>(0)? as u64,
                        timestamp_ms: r.get::<_, i64>(1)? as u64,
                        user: r.get(2)?,
                        client: r.get(3)?,
                        action: r.get(4)?,
                        target: r.get(5)?,
                        outcome: r.get(6)?,
                        detail: r.get(7)?,
                    })
                })?;
                rows.collect()
            }
            Backend::Memory(log) => {
                let log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok(log.1.iter().rev().filter(|e| before.is_none_or(|b| e.id < b)).take(limit).cloned().collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(action: &str) -> Event<'_> {
        Event { user: "ana", client: "127.0.0.1", action, target: "GPU 0", outcome: Outcome::Ok, detail: "" }
    }

    #[test]
    fn both_backends_list_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        for audit in [Audit::sqlite(&dir.path().join("a.db")).unwrap(), Audit::memory()] {
            audit.record(&event("login"));
            audit.record(&event("empty_cache"));
            let all = audit.list(10, None).unwrap();
            assert_eq!(all.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["empty_cache", "login"]);
            assert_eq!(audit.list(10, Some(all[0].id)).unwrap().len(), 1);
        }
    }

    #[test]
    fn the_sqlite_log_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        Audit::sqlite(&path).unwrap().record(&event("login"));
        assert_eq!(Audit::sqlite(&path).unwrap().list(10, None).unwrap().len(), 1);
    }
}
