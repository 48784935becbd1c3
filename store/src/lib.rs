//! Where samples are stored: an embedded SQLite database (WAL mode) with raw
//! samples for a short window and per-minute min/avg/max rollups for longer.
//!
//! Writes happen on the recorder's own thread in batches; queries run on
//! blocking threads through a separate read connection.

pub mod alerts;
pub mod audit;
pub mod jobs;
mod query;
mod recorder;
pub mod reservations;
pub mod runs;
mod schema;
pub mod usage;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

pub use query::{HistoryQuery, QueryError, bucket_width};
pub use recorder::Recorder;
pub use writer::metrics_text as writer_metrics_text;

/// How long each resolution is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Every sample, e.g. 48 h.
    pub raw: Duration,
    /// Per-minute rollups, e.g. 30 days.
    pub minute: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self { raw: Duration::from_secs(48 * 3600), minute: Duration::from_secs(30 * 24 * 3600) }
    }
}

/// Why the history database cannot be used. Each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot use data directory '{dir}': {source}; pass --data-dir with a writable directory, or --no-history to keep no history"
    )]
    Directory { dir: PathBuf, source: std::io::Error },
    #[error(
        "cannot open history database '{path}': {source}; move the file aside or pass another --data-dir (or --no-history)"
    )]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error(
        "history database '{path}' is corrupt ({detail}); move it aside (gpudash starts a new one) or pass another --data-dir"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error("history database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// The history database: a read connection for queries; writes go through a [`Recorder`].
#[derive(Debug, Clone)]
pub struct Store {
    path: PathBuf,
    reader: Arc<Mutex<Connection>>,
    retention: Retention,
}

impl Store {
    /// Opens (or creates) the database in `dir`. Simulated and real history
    /// live in different files, so they never mix.
    pub fn open(dir: &Path, simulated: bool, retention: Retention) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Directory { dir: dir.to_owned(), source })?;
        check_writable(dir)?;
        let path = dir.join(if simulated { "history-simulated.db" } else { "history.db" });
        let writer = schema::open(&path)?;
        drop(writer);
        let reader = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|source| StoreError::Open { path: path.clone(), source })?;
        reader.busy_timeout(Duration::from_secs(5))?;
        Ok(Self { path, reader: Arc::new(Mutex::new(reader)), retention })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Starts the writer thread for this database.
    pub fn recorder(&self) -> Result<Recorder, StoreError> {
        Recorder::spawn(&self.path, self.retention)
    }

    /// Runs a history query (blocking: call from `spawn_blocking`).
    pub fn history(&self, query: &HistoryQuery, now_ms: u64) -> Result<query::Answer, QueryError> {
        let reader = base::sync::lock(&self.reader);
        query::run(&reader, query, self.retention, now_ms)
    }

    /// Every metric of every GPU in `devices` over `(from, to, points)` (blocking: call
    /// from `spawn_blocking`). The range is checked like a [`HistoryQuery`]'s.
    pub fn history_all(
        &self,
        devices: &[u32],
        range: (u64, u64, u32),
        now_ms: u64,
    ) -> Result<Vec<(u32, shared::history::Metric, query::Answer)>, QueryError> {
        let reader = base::sync::lock(&self.reader);
        query::run_all(&reader, devices, range, self.retention, now_ms)
    }
}

/// Where history goes when `--data-dir` is not given: systemd's state
/// directory for a service, /var/lib/gpudash for root, else the user's
/// XDG state directory.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        // systemd may pass several, colon-separated; the first is ours.
        let first = dir.to_string_lossy().split(':').next().unwrap_or_default().to_owned();
        return PathBuf::from(first);
    }
    if is_root() {
        return PathBuf::from("/var/lib/gpudash");
    }
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(state).join("gpudash");
    }
    std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from(".gpudash"), |home| PathBuf::from(home).join(".local/state/gpudash"))
}

fn is_root() -> bool {
    // /proc/self/status is always there on Linux, the only platform NVML serves.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Creating a file is the only honest test of writability (permissions, read-only mounts, ACLs).
fn check_writable(dir: &Path) -> Result<(), StoreError> {
    let probe = dir.join(format!(".gpudash-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|source| StoreError::Directory { dir: dir.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwritable_directory_is_a_clear_error() {
        let err = Store::open(Path::new("/proc/gpudash-cannot-exist"), false, Retention::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/proc/gpudash-cannot-exist") && text.contains("--data-dir"), "{text}");
    }

    #[test]
    fn a_corrupt_file_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("history.db"), vec![0x42u8; 8192]).unwrap();
        let err = Store::open(dir.path(), false, Retention::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("history.db") && text.contains("move"), "{text}");
    }

    #[test]
    fn simulated_history_has_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let real = Store::open(dir.path(), false, Retention::default()).unwrap();
        let simulated = Store::open(dir.path(), true, Retention::default()).unwrap();
        assert_ne!(real.path(), simulated.path());
    }
}
