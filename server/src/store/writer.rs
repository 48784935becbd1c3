//! One SQLite connection owned by its own thread and fed jobs in order: the writer behind the
//! audit, alerts and usage tables. Saves are queued and return at once; a read ([`DbWriter::ask`]) goes
//! through the same queue, so it sees every save queued before it. Dropping the last handle
//! writes what is queued, then ends the thread.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// The writer's thread has ended: nothing more can be queued or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

/// A handle to the writer thread; clones share it.
#[derive(Debug, Clone)]
pub struct DbWriter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    jobs: Option<Sender<Job>>,
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
    pub fn start(name: &str, mut conn: Connection) -> std::io::Result<Self> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            while let Ok(job) = receiver.recv() {
                job(&mut conn);
            }
        })?;
        Ok(Self { inner: Arc::new(Inner { jobs: Some(jobs), thread: Some(thread) }) })
    }

    /// Queues `job`; never blocks.
    pub fn send(&self, job: impl FnOnce(&mut Connection) + Send + 'static) -> Result<(), Stopped> {
        let jobs = self.inner.jobs.as_ref().ok_or(Stopped)?;
        jobs.send(Box::new(job)).map_err(|_| Stopped)
    }

    /// Runs `work` after everything queued before it and waits for its answer (blocking).
    pub fn ask<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.send(move |conn| {
            let _ = reply.send(work(conn));
        })?;
        answer.recv().map_err(|_| Stopped)
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
}
