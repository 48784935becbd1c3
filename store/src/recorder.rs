//! The recorder thread: batches samples into SQLite, rolls them up per
//! minute and drops what is past its retention.
//!
//! The sampler never waits for it: samples are handed over through a bounded
//! channel, and if the disk stalls long enough to fill it, ticks are counted
//! as dropped (and logged) instead of slowing live telemetry.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use base::clock::Deadline;

use rusqlite::{Connection, params};
use shared::DeviceSample;
use shared::history::Metric;

use super::schema::{self, METRIC_COLUMNS};
use super::{Retention, StoreError};

/// A kill -9 loses at most this much history (plus one tick).
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Rollups and pruning run this often.
const MAINTAIN_EVERY: Duration = Duration::from_secs(30);
/// Ticks waiting for the disk before new ones are dropped (at 10 Hz: over a minute).
const BACKLOG: usize = 1024;
const MINUTE_MS: u64 = 60_000;

/// Hands samples to the writer thread; dropping or stopping it flushes what is pending.
#[derive(Debug)]
pub struct Recorder {
    sender: Option<SyncSender<Vec<DeviceSample>>>,
    thread: Option<JoinHandle<()>>,
    dropped: Arc<AtomicU64>,
}

impl Recorder {
    pub(super) fn spawn(path: &Path, retention: Retention) -> Result<Self, StoreError> {
        let conn = schema::open(path)?;
        let (sender, receiver) = mpsc::sync_channel(BACKLOG);
        let thread = std::thread::Builder::new()
            .name("gpudash-record".into())
            .spawn(move || Writer { conn, retention, newest_ms: 0 }.run(&receiver))
            .map_err(|source| StoreError::Directory { dir: path.to_owned(), source })?;
        Ok(Self { sender: Some(sender), thread: Some(thread), dropped: Arc::new(AtomicU64::new(0)) })
    }

    /// Queues one tick for writing; never blocks.
    pub fn record(&self, samples: &[DeviceSample]) {
        let Some(sender) = &self.sender else { return };
        match sender.try_send(samples.to_vec()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(dropped, "history writer is behind; ticks are not being stored");
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped == 1 {
                    tracing::error!("history writer stopped; history is no longer recorded");
                }
            }
        }
    }

    /// Queues one tick, waiting while the writer is behind: for imports,
    /// benchmarks and tests, never for the sampler.
    pub fn record_waiting(&self, samples: &[DeviceSample]) {
        if let Some(sender) = &self.sender
            && sender.send(samples.to_vec()).is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Ticks that could not be stored.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes what is pending and waits for the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Writer {
    conn: Connection,
    retention: Retention,
    /// Newest sample time written, the clock for rollups and pruning.
    newest_ms: u64,
}

impl Writer {
    fn run(mut self, receiver: &mpsc::Receiver<Vec<DeviceSample>>) {
        let mut batch: Vec<Vec<DeviceSample>> = Vec::new();
        // Flushes and maintenance fall on real time: the channel's wait is the system's.
        let mut flush_by = Deadline::after(FLUSH_EVERY);
        let mut maintain_by: Option<Deadline> = None;
        loop {
            let disconnected = match receiver.recv_timeout(flush_by.left()) {
                Ok(tick) => {
                    batch.push(tick);
                    false
                }
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            if disconnected || flush_by.passed() {
                self.flush(&mut batch);
                flush_by = Deadline::after(FLUSH_EVERY);
            }
            if disconnected || maintain_by.is_none_or(|by| by.passed()) {
                if let Err(e) = self.maintain() {
                    tracing::error!("history rollup/pruning failed: {e}");
                }
                maintain_by = Some(Deadline::after(MAINTAIN_EVERY));
            }
            if disconnected {
                return;
            }
        }
    }

    fn flush(&mut self, batch: &mut Vec<Vec<DeviceSample>>) {
        if batch.is_empty() {
            return;
        }
        match insert(&mut self.conn, batch) {
            Ok(newest) => self.newest_ms = self.newest_ms.max(newest),
            Err(e) => tracing::error!(ticks = batch.len(), "could not write history: {e}"),
        }
        batch.clear();
    }

    /// Rolls up every complete minute not yet rolled up, then prunes.
    fn maintain(&mut self) -> rusqlite::Result<()> {
        if self.newest_ms == 0 {
            self.newest_ms =
                self.conn.query_row("SELECT coalesce(max(ts), 0) FROM samples", [], |r| r.get::<_, i64>(0))? as u64;
        }
        let complete_until = self.newest_ms / MINUTE_MS * MINUTE_MS;
        let rolled_until: i64 =
            self.conn.query_row("SELECT coalesce(max(minute) + 60000, 0) FROM minutes", [], |r| r.get(0))?;
        // Redo the last rolled minute too: samples can land a little late.
        let from = (rolled_until as u64).saturating_sub(MINUTE_MS);
        if complete_until > from {
            rollup(&self.conn, from, complete_until)?;
        }
        let raw_keep = self.newest_ms.saturating_sub(duration_ms(self.retention.raw)).min(complete_until);
        let minute_keep = self.newest_ms.saturating_sub(duration_ms(self.retention.minute));
        self.conn.execute("DELETE FROM samples WHERE ts < ?1", params![raw_keep as i64])?;
        self.conn.execute("DELETE FROM minutes WHERE minute < ?1", params![minute_keep as i64])?;
        Ok(())
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Inserts the ticks in one transaction; returns the newest timestamp.
fn insert(conn: &mut Connection, ticks: &[Vec<DeviceSample>]) -> rusqlite::Result<u64> {
    let tx = conn.transaction()?;
    let mut newest = 0;
    {
        let mut statement = tx.prepare_cached(
            "INSERT OR REPLACE INTO samples (device, ts, memory_used, gpu_util, mem_util, power_draw, temperature, \
             sm_clock, mem_clock, sm_active, tensor_active) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?;
        for sample in ticks.iter().flatten() {
            newest = newest.max(sample.timestamp_ms);
            let values = metric_values(sample);
            statement.execute(params![
                sample.index,
                sample.timestamp_ms as i64,
                values[0],
                values[1],
                values[2],
                values[3],
                values[4],
                values[5],
                values[6],
                values[7],
                values[8]
            ])?;
        }
    }
    tx.commit()?;
    Ok(newest)
}

/// A sample's values in the order of [`METRIC_COLUMNS`] (that of [`Metric::ALL`]), in each metric's unit.
pub fn metric_values(sample: &DeviceSample) -> [Option<f64>; 9] {
    Metric::ALL.map(|metric| metric.value(sample))
}

fn rollup(conn: &Connection, from_ms: u64, until_ms: u64) -> rusqlite::Result<usize> {
    let aggregates: Vec<String> = METRIC_COLUMNS.iter().map(|c| format!("min({c}), avg({c}), max({c})")).collect();
    let sql = format!(
        "INSERT OR REPLACE INTO minutes SELECT device, (ts / 60000) * 60000 AS m, count(*), {} \
         FROM samples WHERE ts >= ?1 AND ts < ?2 GROUP BY device, m",
        aggregates.join(", ")
    );
    conn.execute(&sql, params![from_ms as i64, until_ms as i64])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    fn sample(device: u32, t: u64, used: u64) -> DeviceSample {
        DeviceSample {
            index: device,
            timestamp_ms: t,
            memory_used: Some(used),
            gpu_util: Some(50),
            ..Default::default()
        }
    }

    #[test]
    fn rollups_keep_min_avg_max_and_raw_is_pruned_after_its_window() {
        let dir = tempfile::tempdir().unwrap();
        let retention = Retention { raw: Duration::from_secs(120), minute: Duration::from_secs(3600) };
        let store = Store::open(dir.path(), true, retention).unwrap();
        let recorder = store.recorder().unwrap();
        // Ten minutes at 1 Hz; one spike in minute 2.
        for s in 0..600u64 {
            let used = if s == 150 { 9_000 } else { 1_000 + s % 10 };
            recorder.record_waiting(&[sample(0, 1_000_000_020_000 + s * 1000, used)]);
        }
        recorder.stop();
        let conn = Connection::open(store.path()).unwrap();
        let minutes: i64 = conn.query_row("SELECT count(*) FROM minutes", [], |r| r.get(0)).unwrap();
        assert!((9..=10).contains(&minutes), "{minutes}");
        let max: f64 = conn.query_row("SELECT max(memory_used_max) FROM minutes", [], |r| r.get(0)).unwrap();
        assert_eq!(max, 9_000.0);
        let oldest: i64 = conn.query_row("SELECT min(ts) FROM samples", [], |r| r.get(0)).unwrap();
        assert!(oldest as u64 >= 1_000_000_020_000 + 600_000 - 120_000 - 60_000, "raw kept too long: {oldest}");
    }
}
