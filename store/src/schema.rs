//! The database file: pragmas, tables, and the integrity check at open.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use super::StoreError;

/// Columns of a sample row, in the order of [`shared::history::Metric::ALL`].
pub const METRIC_COLUMNS: [&str; 9] = [
    "memory_used",
    "gpu_util",
    "mem_util",
    "power_draw",
    "temperature",
    "sm_clock",
    "mem_clock",
    "sm_active",
    "tensor_active",
];

/// Columns added after the first schema, appended by [`add_columns`] to a database that lacks them
/// (appended, so `minutes` keeps the order of [`METRIC_COLUMNS`] that its rollup inserts by).
const ADDED_COLUMNS: [&str; 2] = ["sm_active", "tensor_active"];

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS samples (
    device INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    memory_used REAL, gpu_util REAL, mem_util REAL, power_draw REAL,
    temperature REAL, sm_clock REAL, mem_clock REAL, sm_active REAL, tensor_active REAL,
    PRIMARY KEY (device, ts)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS minutes (
    device INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    memory_used_min REAL, memory_used_avg REAL, memory_used_max REAL,
    gpu_util_min REAL, gpu_util_avg REAL, gpu_util_max REAL,
    mem_util_min REAL, mem_util_avg REAL, mem_util_max REAL,
    power_draw_min REAL, power_draw_avg REAL, power_draw_max REAL,
    temperature_min REAL, temperature_avg REAL, temperature_max REAL,
    sm_clock_min REAL, sm_clock_avg REAL, sm_clock_max REAL,
    mem_clock_min REAL, mem_clock_avg REAL, mem_clock_max REAL,
    sm_active_min REAL, sm_active_avg REAL, sm_active_max REAL,
    tensor_active_min REAL, tensor_active_avg REAL, tensor_active_max REAL,
    PRIMARY KEY (device, minute)
) WITHOUT ROWID;
";

/// The alerts tables (`store/alerts.rs`): alerts (the wire form as JSON, with the columns
/// queries filter on), silences and each user's subscriptions.
pub const ALERTS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    rule TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    fired_ms INTEGER NOT NULL,
    resolved_ms INTEGER,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_fired ON alerts (fired_ms);
CREATE INDEX IF NOT EXISTS alerts_resolved ON alerts (resolved_ms);
CREATE INDEX IF NOT EXISTS alerts_open ON alerts (fired_ms) WHERE resolved_ms IS NULL;
CREATE TABLE IF NOT EXISTS alert_silences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    rule TEXT NOT NULL,
    gpu_uuid TEXT NOT NULL,
    by_user TEXT NOT NULL,
    reason TEXT NOT NULL,
    from_ms INTEGER NOT NULL,
    until_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS alert_subscriptions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user TEXT NOT NULL,
    kind TEXT NOT NULL,
    UNIQUE (user, kind)
);
";

/// Opens the file for writing, checks it is a sound database and creates the tables.
pub fn open(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|source| StoreError::Open { path: path.to_owned(), source })?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let corrupt = |detail: String| StoreError::Corrupt { path: path.to_owned(), detail };
    // WAL: readers never block the writer; NORMAL sync: a committed batch survives a killed process.
    let mode: String =
        conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)).map_err(|e| corrupt(e.to_string()))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(corrupt(format!("journal mode is '{mode}', WAL is needed")));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let check: String =
        conn.query_row("PRAGMA quick_check", [], |row| row.get(0)).map_err(|e| corrupt(e.to_string()))?;
    if check != "ok" {
        return Err(corrupt(check));
    }
    conn.execute_batch(SCHEMA).map_err(|e| corrupt(e.to_string()))?;
    conn.execute_batch(ALERTS_SCHEMA).map_err(|e| corrupt(e.to_string()))?;
    add_columns(&conn).map_err(|e| corrupt(e.to_string()))?;
    Ok(conn)
}

/// Brings a database written by an older gpudash up to [`METRIC_COLUMNS`].
fn add_columns(conn: &Connection) -> rusqlite::Result<()> {
    let has = |table: &str, column: &str| -> rusqlite::Result<bool> {
        let mut statement = conn.prepare(&format!("SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?1"))?;
        statement.exists([column])
    };
    for column in ADDED_COLUMNS {
        if !has("samples", column)? {
            conn.execute_batch(&format!("ALTER TABLE samples ADD COLUMN {column} REAL"))?;
        }
        if !has("minutes", &format!("{column}_min"))? {
            conn.execute_batch(&format!(
                "ALTER TABLE minutes ADD COLUMN {column}_min REAL; ALTER TABLE minutes ADD COLUMN {column}_avg REAL; \
                 ALTER TABLE minutes ADD COLUMN {column}_max REAL"
            ))?;
        }
    }
    Ok(())
}
