//! The GPU lab's runs in the history database: one row per run, kept across
//! restarts, behind the [`RunStore`] trait.
//!
//! The table lives in the same SQLite file as the samples (WAL lets this
//! connection write beside the recorder's). What the list filters on is in
//! columns; parameters, plan, environment and result are JSON, the same shapes
//! `GET /api/runs/{id}` serves.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use shared::lab::{ExperimentKind, Run, RunStatus, RunSummary};

use super::{RunFilter, RunStore, RunStoreError};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS lab_runs (
    id INTEGER PRIMARY KEY,
    device INTEGER NOT NULL,
    devices TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    submitted_ms INTEGER NOT NULL,
    started_ms INTEGER,
    finished_ms INTEGER,
    simulated INTEGER NOT NULL,
    passed INTEGER,
    error TEXT,
    force INTEGER NOT NULL, -- 0, 1 (forced), or 2 (forced by an admin)
    params TEXT NOT NULL,
    plan TEXT NOT NULL,
    environment TEXT NOT NULL,
    progress TEXT,
    result TEXT
);
CREATE INDEX IF NOT EXISTS lab_runs_by_device_kind ON lab_runs (device, kind, id);
";

/// Columns read back, in this order, by [`SqliteRunStore::get`] and [`SqliteRunStore::list`].
const COLUMNS: &str = "id, device, devices, kind, status, requested_by, submitted_ms, started_ms, finished_ms, \
                       simulated, passed, error";

/// What a run still queued or running when the server stopped is marked with at the next start.
pub const INTERRUPTED: &str = "the server stopped before this run ended";

/// Runs kept in SQLite. Blocking: called from the lab's worker threads and `spawn_blocking`.
#[derive(Debug)]
pub struct SqliteRunStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// The last id handed out; ids are never reused, even for runs never saved.
    last_id: Mutex<u64>,
    /// Finished runs kept; older ones are deleted when a run finishes.
    kept: usize,
}

#[expect(clippy::needless_pass_by_value, reason = "called as map_err(sql)")]
fn sql(e: rusqlite::Error) -> RunStoreError {
    RunStoreError(format!("the runs table: {e}"))
}

#[expect(clippy::needless_pass_by_value, reason = "called as map_err(json_err)")]
fn json_err(e: serde_json::Error) -> RunStoreError {
    RunStoreError(format!("a stored run is not valid JSON: {e}"))
}

fn text<T: serde::Serialize>(value: &T) -> Result<String, RunStoreError> {
    serde_json::to_string(value).map_err(json_err)
}

fn parse<T: serde::de::DeserializeOwned>(text: Option<&str>) -> Result<T, RunStoreError> {
    serde_json::from_str(text.unwrap_or("null")).map_err(json_err)
}

fn parse_status(name: &str) -> RunStatus {
    RunStatus::parse(name).unwrap_or(RunStatus::Failed)
}

impl SqliteRunStore {
    /// Opens the runs table in the database at `path` (creating it), marks runs a previous
    /// server left queued or running as failed (nothing will finish them now), and keeps
    /// the newest `kept` finished runs, then and whenever a run finishes.
    pub fn open(path: &Path, now_ms: u64, kept: usize) -> Result<Self, RunStoreError> {
        let conn = Connection::open(path)
            .map_err(|e| RunStoreError(format!("cannot open '{}' for lab runs: {e}", path.display())))?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)).map_err(sql)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(RunStoreError(format!("'{}' is in journal mode '{mode}', WAL is needed", path.display())));
        }
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.execute_batch(SCHEMA).map_err(sql)?;
        let interrupted = conn
            .execute(
                "UPDATE lab_runs SET status = 'failed', error = ?1, finished_ms = ?2
                 WHERE status IN ('queued', 'running')",
                params![INTERRUPTED, now_ms as i64],
            )
            .map_err(sql)?;
        if interrupted > 0 {
            tracing::warn!(interrupted, "lab runs left unfinished by the previous server are marked failed");
        }
        let last: i64 =
            conn.query_row("SELECT COALESCE(MAX(id), 0) FROM lab_runs", [], |row| row.get(0)).map_err(sql)?;
        prune(&conn, kept)?;
        Ok(Self {
            path: path.to_owned(),
            conn: Mutex::new(conn),
            last_id: Mutex::new(u64::try_from(last).unwrap_or(0)),
            kept,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        base::sync::lock(&self.conn)
    }
}

/// Deletes finished runs past the newest `kept` (queued and running ones stay).
fn prune(conn: &Connection, kept: usize) -> Result<(), RunStoreError> {
    let deleted = conn
        .execute(
            "DELETE FROM lab_runs WHERE id IN (
                 SELECT id FROM lab_runs WHERE status NOT IN ('queued', 'running')
                 ORDER BY id DESC LIMIT -1 OFFSET ?1)",
            params![i64::try_from(kept).unwrap_or(i64::MAX)],
        )
        .map_err(sql)?;
    if deleted > 0 {
        tracing::debug!(deleted, kept, "older lab runs deleted");
    }
    Ok(())
}

/// The summary columns of a row, as [`COLUMNS`] orders them.
fn summary(row: &Row<'_>) -> rusqlite::Result<RunSummary> {
    let opt_ms = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
    let kind: String = row.get(3)?;
    let devices: String = row.get(2)?;
    let status: String = row.get(4)?;
    Ok(RunSummary {
        id: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
        device: row.get(1)?,
        devices: serde_json::from_str(&devices).unwrap_or_default(),
        // A name no experiment may have (a database written by hand) reads as "unknown".
        kind: ExperimentKind::try_from(kind).unwrap_or(ExperimentKind::named("unknown")),
        status: parse_status(&status),
        requested_by: row.get(5)?,
        submitted_ms: u64::try_from(row.get::<_, i64>(6)?).unwrap_or(0),
        started_ms: opt_ms(row.get(7)?),
        finished_ms: opt_ms(row.get(8)?),
        simulated: row.get(9)?,
        passed: row.get(10)?,
        error: row.get(11)?,
    })
}

impl RunStore for SqliteRunStore {
    fn next_id(&self) -> Result<u64, RunStoreError> {
        let mut last = base::sync::lock(&self.last_id);
        *last += 1;
        Ok(*last)
    }

    fn save(&self, run: &Run) -> Result<(), RunStoreError> {
        let s = &run.summary;
        let result = run.result.as_ref().map(text).transpose()?;
        let progress = run.progress.as_ref().map(text).transpose()?;
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO lab_runs (id, device, devices, kind, status, requested_by, submitted_ms,
                     started_ms, finished_ms, simulated, passed, error, force, params, plan, environment, progress,
                     result)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                params![
                    ms(s.id),
                    s.device,
                    text(&s.devices)?,
                    s.kind.name(),
                    s.status.as_str(),
                    s.requested_by,
                    ms(s.submitted_ms),
                    s.started_ms.map(ms),
                    s.finished_ms.map(ms),
                    s.simulated,
                    s.passed,
                    s.error,
                    i64::from(run.force) + i64::from(run.force && run.forced_by_admin),
                    text(&run.params)?,
                    text(&run.plan)?,
                    text(&run.environment)?,
                    progress,
                    result,
                ],
            )
            .map_err(sql)?;
        if !matches!(s.status, RunStatus::Queued | RunStatus::Running) {
            prune(&self.conn(), self.kept)?;
        }
        Ok(())
    }

    fn get(&self, id: u64) -> Result<Option<Run>, RunStoreError> {
        let conn = self.conn();
        let query =
            format!("SELECT {COLUMNS}, force, params, plan, environment, progress, result FROM lab_runs WHERE id = ?1");
        let row = conn
            .query_row(&query, params![i64::try_from(id).unwrap_or(i64::MAX)], |row| {
                let texts: [Option<String>; 5] = [row.get(13)?, row.get(14)?, row.get(15)?, row.get(16)?, row.get(17)?];
                Ok((summary(row)?, row.get::<_, i64>(12)?, texts))
            })
            .optional()
            .map_err(sql)?;
        let Some((summary, force, [params, plan, environment, progress, result])) = row else { return Ok(None) };
        Ok(Some(Run {
            summary,
            params: parse(params.as_deref())?,
            force: force >= 1,
            forced_by_admin: force == 2,
            plan: parse(plan.as_deref())?,
            environment: parse(environment.as_deref())?,
            progress: parse(progress.as_deref())?,
            result: parse(result.as_deref())?,
            previous_id: None,
            takeaway: None,
        }))
    }

    fn list(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, RunStoreError> {
        let mut clauses = Vec::new();
        let mut values: Vec<Value> = Vec::new();
        if let Some(device) = filter.device {
            clauses.push("device = ?");
            values.push(Value::Integer(i64::from(device)));
        }
        if let Some(kind) = &filter.kind {
            clauses.push("kind = ?");
            values.push(Value::Text(kind.name().to_owned()));
        }
        if let Some(status) = filter.status {
            clauses.push("status = ?");
            values.push(Value::Text(status.as_str().to_owned()));
        }
        if let Some(before) = filter.before {
            clauses.push("id < ?");
            values.push(Value::Integer(i64::try_from(before).unwrap_or(i64::MAX)));
        }
        let limit = if filter.limit == 0 { -1 } else { i64::try_from(filter.limit).unwrap_or(-1) };
        values.push(Value::Integer(limit));
        let condition = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let query = format!("SELECT {COLUMNS} FROM lab_runs {condition} ORDER BY id DESC LIMIT ?");
        let conn = self.conn();
        let mut statement = conn.prepare(&query).map_err(sql)?;
        let rows = statement.query_map(params_from_iter(values), summary).map_err(sql)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::run;
    use super::*;
    use shared::lab::{ChartSpec, Check, Figure, RunResult, Stats};

    /// A latency-like result with one figure and one check.
    fn result() -> RunResult {
        RunResult {
            chart: ChartSpec::Bars { y_label: "µs".into() },
            unit: "µs".into(),
            series: Vec::new(),
            references: Vec::new(),
            figures: vec![Figure {
                name: "launch".into(),
                unit: "µs".into(),
                stats: Stats { median: 4.1, min: 4.0, max: 4.2, n: 2 },
            }],
            checks: vec![Check { name: "c".into(), passed: true, detail: "d".into() }],
            memory_steps: Vec::new(),
            timeline: Vec::new(),
            matrices: Vec::new(),
            l2_bytes: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn runs_survive_reopening_with_their_result_and_filters() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let store = SqliteRunStore::open(&path, 1, 100).unwrap();
        for id in 1..=3 {
            assert_eq!(store.next_id().unwrap(), id);
            let kind = if id == 2 { ExperimentKind::named("latency") } else { ExperimentKind::named("transfer") };
            let mut r = run(id, u32::try_from(id % 2).unwrap(), kind, RunStatus::Succeeded);
            r.summary.passed = Some(true);
            r.environment.gpu_uuid = format!("GPU-{id}");
            r.result = Some(result());
            // Forced by an admin (3), forced (2), not forced (1): all three read back as saved.
            (r.force, r.forced_by_admin) = (id >= 2, id == 3);
            store.save(&r).unwrap();
        }
        let mut running = run(4, 0, ExperimentKind::named("memory"), RunStatus::Running);
        store.next_id().unwrap();
        running.summary.devices = vec![0, 1];
        store.save(&running).unwrap();
        drop(store);

        let store = SqliteRunStore::open(&path, 99, 100).unwrap();
        assert_eq!(store.next_id().unwrap(), 5, "ids continue after a restart");
        let back = store.get(3).unwrap().unwrap();
        assert_eq!(back.environment.gpu_uuid, "GPU-3");
        assert_eq!(back.result, Some(result()));
        assert_eq!(back.summary.passed, Some(true));
        let forced: Vec<(bool, bool)> =
            (1..=3).map(|id| store.get(id).unwrap().map(|r| (r.force, r.forced_by_admin)).unwrap()).collect();
        assert_eq!(forced, [(false, false), (true, false), (true, true)]);
        let interrupted = store.get(4).unwrap().unwrap();
        assert_eq!(interrupted.summary.status, RunStatus::Failed);
        assert_eq!(interrupted.summary.error.as_deref(), Some(INTERRUPTED));
        assert_eq!(interrupted.summary.finished_ms, Some(99));
        assert_eq!(interrupted.summary.devices, vec![0, 1]);

        let all: Vec<u64> = store.list(&RunFilter::default()).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(all, vec![4, 3, 2, 1]);
        let filter = RunFilter {
            kind: Some(ExperimentKind::named("transfer")),
            status: Some(RunStatus::Succeeded),
            before: Some(3),
            limit: 1,
            ..RunFilter::default()
        };
        assert_eq!(store.list(&filter).unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), vec![1]);
        assert!(store.get(42).unwrap().is_none());
    }

    #[test]
    fn only_the_newest_finished_runs_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let store = SqliteRunStore::open(&path, 1, 100).unwrap();
        let waiting = run(1, 0, ExperimentKind::named("memory"), RunStatus::Queued);
        store.save(&waiting).unwrap();
        for id in 2..=7 {
            store.save(&run(id, 0, ExperimentKind::named("transfer"), RunStatus::Succeeded)).unwrap();
        }
        drop(store);
        // Reopened with a smaller limit: trimmed at once (the queued run is marked failed first).
        let store = SqliteRunStore::open(&path, 2, 3).unwrap();
        let ids = |store: &SqliteRunStore| -> Vec<u64> {
            store.list(&RunFilter::default()).unwrap().iter().map(|r| r.id).collect()
        };
        assert_eq!(ids(&store), vec![7, 6, 5]);
        // A running run is never deleted; each finished one pushes the oldest out.
        store.save(&run(8, 0, ExperimentKind::named("latency"), RunStatus::Running)).unwrap();
        assert_eq!(ids(&store), vec![8, 7, 6, 5]);
        store.save(&run(8, 0, ExperimentKind::named("latency"), RunStatus::Failed)).unwrap();
        assert_eq!(ids(&store), vec![8, 7, 6]);
        assert!(store.get(5).unwrap().is_none());
    }
}
