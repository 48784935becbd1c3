//! One SQLite connection owned by its own thread and fed jobs in order: the writer behind the
//! audit, alerts and usage tables. Saves are queued and return at once; a read ([`DbWriter::ask`],
//! or [`DbWriter::request`] from async code) goes through the same queue, so it sees every save
//! queued before it, and gets its answer through a oneshot. Dropping the last handle writes what is
//! queued, then ends the thread.
//!
//! The queue is bounded ([`QUEUE`] jobs). A save that finds it full is dropped and counted
//! (`gpudash_store_writes_dropped_total{writer}` in `/metrics`), so a stuck disk can't grow the
//! server's memory without end; a read waits for room (back-pressure), since its caller waits anyway.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use base::prom_text::{Exposition, Kind, escape};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// How many jobs a writer's queue holds before a save is dropped (and counted).
pub const QUEUE: usize = 8192;

/// The writer's thread has ended: nothing more can be queued or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

/// Saves dropped on a full queue, per writer thread name, since start.
static DROPPED: Mutex<BTreeMap<String, Arc<AtomicU64>>> = Mutex::new(BTreeMap::new());

fn dropped_counter(name: &str) -> Arc<AtomicU64> {
    base::sync::lock(&DROPPED).entry(name.to_owned()).or_default().clone()
}

/// `gpudash_store_writes_dropped_total`, one series per writer thread, for `/metrics`.
pub fn metrics_text() -> String {
    let counts: Vec<(String, f64)> = base::sync::lock(&DROPPED)
        .iter()
        .map(|(name, n)| (format!("writer=\"{}\"", escape(name)), n.load(Ordering::Relaxed) as f64))
        .collect();
    let mut out = Exposition::default();
    out.family(
        "gpudash_store_writes_dropped_total",
        "Saves to the history database dropped because a writer's queue was full (a stuck or slow disk).",
        Kind::Counter,
        counts.into_iter(),
    );
    out.into_text()
}

/// A handle to the writer thread; clones share it.
#[derive(Debug, Clone)]
pub struct DbWriter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
    jobs: Option<mpsc::Sender<Job>>,
    dropped: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Opens the history database's file for a writer of its own: it waits up to 5 s for another
/// writer's lock, and syncs as the history database does (a committed write survives a killed process).
pub fn open_file(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

impl DbWriter {
    /// Starts the thread `name`, which owns `conn` from now on.
    pub fn start(name: &str, conn: Connection) -> std::io::Result<Self> {
        Self::with_queue(name, conn, QUEUE)
    }

    fn with_queue(name: &str, mut conn: Connection, queue: usize) -> std::io::Result<Self> {
        let (jobs, mut receiver) = mpsc::channel::<Job>(queue);
        let thread = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            while let Some(job) = receiver.blocking_recv() {
                job(&mut conn);
            }
        })?;
        let dropped = dropped_counter(name);
        Ok(Self { inner: Arc::new(Inner { name: name.to_owned(), jobs: Some(jobs), dropped, thread: Some(thread) }) })
    }

    /// Queues `job`; never blocks. On a full queue the job is dropped and counted.
    pub fn send(&self, job: impl FnOnce(&mut Connection) + Send + 'static) -> Result<(), Stopped> {
        let jobs = self.inner.jobs.as_ref().ok_or(Stopped)?;
        match jobs.try_send(Box::new(job)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Stopped),
            Err(mpsc::error::TrySendError::Full(_)) => {
                let before = self.inner.dropped.fetch_add(1, Ordering::Relaxed);
                if (before + 1).is_power_of_two() {
                    tracing::warn!(
                        "{}: the write queue is full ({QUEUE} jobs); {} saves dropped so far",
                        self.inner.name,
                        before + 1
                    );
                }
                Ok(())
            }
        }
    }

    /// Runs `work` after everything queued before it; the answer comes through a oneshot. Waits for
    /// room in the queue rather than dropping a read.
    pub async fn request<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        let jobs = self.inner.jobs.as_ref().ok_or(Stopped)?;
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = reply.send(work(conn));
        });
        jobs.send(job).await.map_err(|_| Stopped)?;
        answer.await.map_err(|_| Stopped)
    }

    /// [`Self::request`], waiting on this thread for the answer (blocking: call it off the runtime).
    pub fn ask<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        base::sync::wait(self.request(work))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_order_and_a_read_sees_every_write_queued_before_it() {
        let writer = DbWriter::start("test-writer", Connection::open_in_memory().unwrap()).unwrap();
        writer.ask(|conn| conn.execute_batch("CREATE TABLE t (n INTEGER)")).unwrap().unwrap();
        for n in 0..100 {
            writer.send(move |conn| drop(conn.execute("INSERT INTO t VALUES (?1)", [n]))).unwrap();
        }
        let count: i64 =
            writer.ask(|conn| conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))).unwrap().unwrap();
        assert_eq!(count, 100);
    }

    #[test]
    fn dropping_the_last_handle_writes_what_is_queued() {
        let dir = std::env::temp_dir().join(format!("gpudash-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.db");
        let writer = DbWriter::start("test-writer", open_file(&path).unwrap()).unwrap();
        writer
            .send(|conn| conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (7)").unwrap())
            .unwrap();
        drop(writer);
        let n: i64 = Connection::open(&path).unwrap().query_row("SELECT n FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_full_queue_drops_saves_and_counts_them_and_a_read_still_gets_through() {
        let writer = DbWriter::with_queue("test-writer-full", Connection::open_in_memory().unwrap(), 2).unwrap();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let (release_tx, release) = std::sync::mpsc::channel::<()>();
        writer
            .send(move |_| {
                started_tx.send(()).unwrap();
                release.recv().unwrap();
            })
            .unwrap();
        started.recv().unwrap();
        for _ in 0..5 {
            writer.send(|_| ()).unwrap();
        }
        assert_eq!(writer.inner.dropped.load(Ordering::Relaxed), 3, "two fit the queue of two");
        assert!(
            metrics_text().contains("gpudash_store_writes_dropped_total{writer=\"test-writer-full\"} 3\n"),
            "{}",
            metrics_text()
        );
        release_tx.send(()).unwrap();
        assert_eq!(writer.ask(|_| 9).unwrap(), 9);
    }

    #[tokio::test]
    async fn a_request_answers_through_a_oneshot_without_blocking_the_runtime() {
        let writer = DbWriter::start("test-writer-async", Connection::open_in_memory().unwrap()).unwrap();
        writer
            .send(|conn| conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (5)").unwrap())
            .unwrap();
        let n: i64 = writer.request(|conn| conn.query_row("SELECT n FROM t", [], |r| r.get(0))).await.unwrap().unwrap();
        assert_eq!(n, 5);
    }
}
