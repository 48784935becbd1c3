//! Jobs (`shared::jobs::Job`): one row each, its figures as JSON, its activity series in a
//! table of its own (only a job's page reads it). Rows are written when a job starts, every few
//! seconds while it runs and when it ends; a job still running when gpudash stopped is closed
//! at start with outcome "unknown" at the last moment it was seen. Kept a year.
//!
//! One writer thread owns the connection (the history database, or memory with `--no-history`).

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use shared::jobs::{Job, JobPoint, JobsQuery, Outcome};

use crate::writer::{self, DbWriter};

mod notices;

/// How long ended jobs are kept.
pub const KEPT_MS: u64 = shared::usage::MAX_RANGE_MS;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    owner TEXT NOT NULL,
    runtime TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    ended_ms INTEGER,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, id);
CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs (ended_ms);
CREATE TABLE IF NOT EXISTS job_series (
    id INTEGER PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    points BLOB NOT NULL
);
";

/// Why the jobs table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JobStoreError {
    #[error("jobs database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("a stored job is not readable: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot start the jobs writer: {0}")]
    Thread(std::io::Error),
    #[error("the jobs writer has stopped")]
    Stopped,
}

/// The handle to the jobs table's writer.
#[derive(Debug, Clone)]
pub struct JobStore {
    writer: DbWriter,
    persistent: bool,
    /// The id the next job takes (one more than any stored).
    first_free_id: u64,
}

impl JobStore {
    /// The table in the history database at `path`; jobs left running by an earlier gpudash are
    /// closed (outcome "unknown", ended when last seen) and those older than [`KEPT_MS`] deleted.
    pub fn open(path: &Path, now_ms: u64) -> Result<Self, JobStoreError> {
        Self::start(writer::open_file(path)?, true, now_ms)
    }

    /// A table that lives as long as the process (`--no-history`).
    pub fn memory() -> Result<Self, JobStoreError> {
        Self::start(Connection::open_in_memory()?, false, 0)
    }

    fn start(mut conn: Connection, persistent: bool, now_ms: u64) -> Result<Self, JobStoreError> {
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(notices::SCHEMA)?;
        close_left_running(&mut conn)?;
        conn.execute("DELETE FROM jobs WHERE ended_ms < ?1", [as_i64(now_ms.saturating_sub(KEPT_MS))])?;
        conn.execute("DELETE FROM job_series WHERE id NOT IN (SELECT id FROM jobs)", [])?;
        let last: i64 = conn.query_row("SELECT COALESCE(MAX(id), 0) FROM jobs", [], |r| r.get(0))?;
        let writer = DbWriter::start("gpudash-jobsdb", conn).map_err(JobStoreError::Thread)?;
        Ok(Self { writer, persistent, first_free_id: last.max(0) as u64 + 1 })
    }

    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// The id the first job of this run takes.
    pub fn first_free_id(&self) -> u64 {
        self.first_free_id
    }

    /// Queues writing `jobs` (each replaces its row; its series too when it has one) in one
    /// transaction; never blocks.
    pub fn save(&self, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        let sent = self.writer.send(move |conn| {
            if let Err(e) = save(conn, &jobs) {
                tracing::error!("could not store {} jobs: {e}", jobs.len());
            }
        });
        if sent.is_err() {
            tracing::error!("the jobs writer has stopped; jobs were not stored");
        }
    }

    /// The stored jobs `query` asks for, newest first, without their series, and whether more
    /// match past them (blocking).
    pub fn list(&self, query: JobsQuery) -> Result<(Vec<Job>, bool), JobStoreError> {
        self.writer.ask(move |conn| list(conn, &query)).map_err(|_| JobStoreError::Stopped)?
    }

    /// One stored job with its series (blocking).
    pub fn get(&self, id: u64) -> Result<Option<Job>, JobStoreError> {
        self.writer.ask(move |conn| get(conn, id)).map_err(|_| JobStoreError::Stopped)?
    }

    /// Waits until everything queued so far is written (blocking).
    pub fn sync(&self) {
        let _ = self.writer.ask(|_| ());
    }
}

fn as_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn save(conn: &mut Connection, jobs: &[Job]) -> Result<(), JobStoreError> {
    let transaction = conn.transaction()?;
    {
        let mut row = transaction.prepare_cached(
            "INSERT OR REPLACE INTO jobs (id, key, owner, runtime, started_ms, ended_ms, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let mut series =
            transaction.prepare_cached("INSERT OR REPLACE INTO job_series (id, points) VALUES (?1, ?2)")?;
        for job in jobs {
            let mut bare = job.clone();
            let points = std::mem::take(&mut bare.series);
            row.execute(params![
                as_i64(job.id),
                job.key,
                job.owner,
                job.runtime.name(),
                as_i64(job.started_ms),
                job.ended_ms.map(as_i64),
                serde_json::to_string(&bare)?,
            ])?;
            if !points.is_empty() {
                series.execute(params![as_i64(job.id), encode(&points)])?;
            }
        }
    }
    transaction.commit()?;
    Ok(())
}

fn list(conn: &Connection, q: &JobsQuery) -> Result<(Vec<Job>, bool), JobStoreError> {
    let mut sql = String::from("SELECT body FROM jobs WHERE id < ?1");
    if q.owner.is_some() {
        sql.push_str(" AND owner = ?2");
    }
    if q.runtime.is_some() {
        sql.push_str(" AND runtime = ?3");
    }
    match q.running {
        Some(true) => sql.push_str(" AND ended_ms IS NULL"),
        Some(false) => sql.push_str(" AND ended_ms IS NOT NULL"),
        None => {}
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?4");
    let mut statement = conn.prepare_cached(&sql)?;
    let before = q.before.map_or(i64::MAX, as_i64);
    let owner = q.owner.clone().unwrap_or_default();
    let runtime = q.runtime.map_or("", |r| r.name());
    let limit = i64::from(q.limit) + 1;
    let mut bind: Vec<(&str, &dyn rusqlite::ToSql)> = vec![("?1", &before), ("?4", &limit)];
    if q.owner.is_some() {
        bind.push(("?2", &owner));
    }
    if q.runtime.is_some() {
        bind.push(("?3", &runtime));
    }
    let bodies: Vec<String> =
        statement.query_map(bind.as_slice(), |r| r.get::<_, String>(0))?.collect::<Result<_, _>>()?;
    let more = bodies.len() > q.limit as usize;
    let jobs = bodies.iter().take(q.limit as usize).map(|b| serde_json::from_str(b)).collect::<Result<_, _>>()?;
    Ok((jobs, more))
}

fn get(conn: &Connection, id: u64) -> Result<Option<Job>, JobStoreError> {
    let row: Option<(String, Option<Vec<u8>>)> = conn
        .query_row(
            "SELECT jobs.body, job_series.points FROM jobs LEFT JOIN job_series USING (id) WHERE jobs.id = ?1",
            [as_i64(id)],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((body, series)) = row else { return Ok(None) };
    let mut job: Job = serde_json::from_str(&body)?;
    if let Some(series) = series {
        job.series = decode(&series);
    }
    Ok(Some(job))
}

/// Bytes of one point in a stored series: the step from the previous point (ms, u32), SM, tensor
/// and DRAM activity (1/10000, u16, `u16::MAX` for none) and memory (KiB, u32), little-endian.
const POINT_BYTES: usize = 4 + 3 * 2 + 4;

/// A series as stored: the first point's time (ms, u64), then [`POINT_BYTES`] per point; about
/// 5 KiB for a full series (JSON took 36). Activity keeps 4 decimals, memory whole KiB.
fn encode(points: &[JobPoint]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + points.len() * POINT_BYTES);
    let first = points.first().map_or(0, |p| p.at_ms);
    out.extend_from_slice(&first.to_le_bytes());
    let mut previous = first;
    let share = |v: Option<f64>| v.map_or(u16::MAX, |v| (v.clamp(0.0, 1.0) * 10_000.0).round() as u16);
    for p in points {
        let step = u32::try_from(p.at_ms.saturating_sub(previous)).unwrap_or(u32::MAX);
        previous = p.at_ms;
        out.extend_from_slice(&step.to_le_bytes());
        for v in [p.sm_active, p.tensor_active, p.dram_active] {
            out.extend_from_slice(&share(v).to_le_bytes());
        }
        out.extend_from_slice(&u32::try_from(p.memory_bytes >> 10).unwrap_or(u32::MAX).to_le_bytes());
    }
    out
}

/// The points [`encode`] wrote; a cut-short tail is left out.
fn decode(bytes: &[u8]) -> Vec<JobPoint> {
    let Some((first, rest)) = bytes.split_first_chunk::<8>() else { return Vec::new() };
    let mut at = u64::from_le_bytes(*first);
    let share = |b: &[u8]| {
        let v = u16::from_le_bytes([b[0], b[1]]);
        (v != u16::MAX).then(|| f64::from(v) / 10_000.0)
    };
    rest.chunks_exact(POINT_BYTES)
        .map(|c| {
            at += u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            JobPoint {
                at_ms: at,
                sm_active: share(&c[4..6]),
                tensor_active: share(&c[6..8]),
                dram_active: share(&c[8..10]),
                memory_bytes: u64::from(u32::from_le_bytes([c[10], c[11], c[12], c[13]])) << 10,
            }
        })
        .collect()
}

/// Closes the jobs an earlier gpudash left running: ended when last seen, outcome unknown.
fn close_left_running(conn: &mut Connection) -> Result<(), JobStoreError> {
    let open: Vec<String> = conn
        .prepare("SELECT body FROM jobs WHERE ended_ms IS NULL")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let transaction = conn.transaction()?;
    for body in open {
        let mut job: Job = serde_json::from_str(&body)?;
        job.ended_ms = Some(job.last_seen_ms);
        job.outcome = Outcome::Unknown;
        transaction.execute(
            "UPDATE jobs SET ended_ms = ?2, body = ?3 WHERE id = ?1",
            params![as_i64(job.id), as_i64(job.last_seen_ms), serde_json::to_string(&job)?],
        )?;
    }
    transaction.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::jobs::{JobFigures, Runtime};

    fn job(id: u64, owner: &str, runtime: Runtime, ended: bool) -> Job {
        Job {
            id,
            key: format!("process:{id}"),
            name: format!("job {id}"),
            owner: owner.to_owned(),
            runtime,
            gpus: vec![0],
            started_ms: id * 1000,
            watched_from_ms: id * 1000,
            last_seen_ms: id * 1000 + 500,
            ended_ms: ended.then_some(id * 1000 + 500),
            outcome: if ended { Outcome::Ended } else { Outcome::Running },
            figures: JobFigures { held_s: id as f64, ..JobFigures::default() },
            series: vec![JobPoint { at_ms: id * 1000, memory_bytes: 1 << 30, ..JobPoint::default() }],
            pids: vec![id as u32],
        }
    }

    fn ids(jobs: &[Job]) -> Vec<u64> {
        jobs.iter().map(|j| j.id).collect()
    }

    #[test]
    fn jobs_list_newest_first_filtered_and_paged() {
        let store = JobStore::memory().unwrap();
        assert_eq!(store.first_free_id(), 1);
        store.save((1..=6).map(|i| job(i, if i % 2 == 0 { "ana" } else { "bo" }, Runtime::Process, i < 5)).collect());
        store.save(vec![job(7, "ana", Runtime::Slurm, true)]);
        let q = |f: fn(&mut JobsQuery)| {
            let mut q = JobsQuery { limit: 3, ..JobsQuery::default() };
            f(&mut q);
            store.list(q).unwrap()
        };
        let (page, more) = q(|_| {});
        assert_eq!((ids(&page), more), (vec![7, 6, 5], true));
        assert!(page[0].series.is_empty(), "a list leaves series out");
        let (page, more) = q(|q| q.before = Some(5));
        assert_eq!((ids(&page), more), (vec![4, 3, 2], true));
        assert_eq!(ids(&q(|q| q.owner = Some("ana".into())).0), [7, 6, 4]);
        assert_eq!(ids(&q(|q| q.runtime = Some(Runtime::Slurm)).0), [7]);
        assert_eq!(ids(&q(|q| q.running = Some(true)).0), [6, 5]);
        assert_eq!(ids(&q(|q| q.running = Some(false)).0), [7, 4, 3]);
        let one = store.get(7).unwrap().unwrap();
        assert_eq!((one.series.len(), one.figures.held_s), (1, 7.0));
        assert_eq!(store.get(99).unwrap(), None);
    }

    #[test]
    fn a_series_is_stored_compactly_and_read_back() {
        let points = vec![
            JobPoint {
                at_ms: 1_000,
                sm_active: Some(0.4213),
                tensor_active: None,
                dram_active: Some(1.0),
                memory_bytes: 40 << 30,
            },
            JobPoint {
                at_ms: 21_000,
                sm_active: Some(0.0),
                tensor_active: Some(0.5),
                dram_active: None,
                memory_bytes: 0,
            },
        ];
        let bytes = encode(&points);
        assert_eq!(bytes.len(), 8 + 2 * POINT_BYTES);
        assert_eq!(decode(&bytes), points);
        assert_eq!(decode(&bytes[..bytes.len() - 1]), points[..1], "a cut-short point is left out");
        assert!(decode(&[1, 2]).is_empty());
    }

    #[test]
    fn a_job_left_running_is_closed_at_start_and_ids_carry_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        {
            let store = JobStore::open(&path, 10_000).unwrap();
            store.save(vec![job(1, "ana", Runtime::Pod, true), job(2, "bo", Runtime::Container, false)]);
            store.sync();
        }
        let store = JobStore::open(&path, 10_000).unwrap();
        assert_eq!(store.first_free_id(), 3);
        let left = store.get(2).unwrap().unwrap();
        assert_eq!((left.outcome, left.ended_ms), (Outcome::Unknown, Some(2_500)));
        // A year later the old jobs go.
        drop(store);
        let store = JobStore::open(&path, KEPT_MS + 3_000).unwrap();
        assert!(store.list(JobsQuery { limit: 10, ..JobsQuery::default() }).unwrap().0.is_empty());
    }
}
