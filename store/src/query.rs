//! History queries: any range, at most N points, min/avg/max per bucket so spikes survive.

use rusqlite::{Connection, params};
use shared::history::{HistoryPoint, Metric, Resolution};

use super::Retention;
use super::schema::METRIC_COLUMNS;

/// Most points one answer may hold.
pub const MAX_POINTS: u32 = 10_000;
/// Latest time a query may name: the last millisecond of year 9999, well inside SQLite's i64.
pub const MAX_TIME_MS: u64 = 253_402_300_799_999;

/// What to read: a validated `GET /api/history` request.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryQuery {
    pub device: u32,
    pub metric: Metric,
    pub from: u64,
    pub to: u64,
    pub points: u32,
}

impl HistoryQuery {
    /// The range and point count make sense, or why not.
    pub fn validate(&self) -> Result<(), QueryError> {
        for (name, value) in [("from", self.from), ("to", self.to)] {
            if value > MAX_TIME_MS {
                return Err(QueryError::Invalid(format!(
                    "'{name}' ({value}) is past the year 9999; times are ms since the epoch, at most {MAX_TIME_MS}"
                )));
            }
        }
        if self.from >= self.to {
            return Err(QueryError::Invalid(format!("'from' ({}) must be before 'to' ({})", self.from, self.to)));
        }
        if !(1..=MAX_POINTS).contains(&self.points) {
            return Err(QueryError::Invalid(format!("'points' must be from 1 to {MAX_POINTS}, not {}", self.points)));
        }
        Ok(())
    }
}

/// Points of one series and how they were made.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub bucket_ms: u64,
    pub resolution: Resolution,
    pub points: Vec<HistoryPoint>,
}

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Invalid(String),
    #[error("history database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// Bucket width so that `[from, to)` splits into at most `points` buckets.
pub fn bucket_width(from: u64, to: u64, points: u32) -> u64 {
    (to - from).div_ceil(u64::from(points.max(1))).max(1)
}

pub(super) fn run(
    conn: &Connection,
    q: &HistoryQuery,
    retention: Retention,
    now_ms: u64,
) -> Result<Answer, QueryError> {
    q.validate()?;
    let width = bucket_width(q.from, q.to, q.points);
    let column = METRIC_COLUMNS[Metric::ALL.iter().position(|m| *m == q.metric).unwrap_or(0)];
    let device = i64::from(q.device);

    // Minutes serve wide buckets and whatever raw samples no longer cover;
    // raw samples serve the rest, including the minute still being rolled up.
    let rolled_until: Option<i64> =
        conn.query_row("SELECT max(minute) + 60000 FROM minutes WHERE device = ?1", [device], |r| r.get(0))?;
    let oldest_raw: Option<i64> =
        conn.query_row("SELECT min(ts) FROM samples WHERE device = ?1", [device], |r| r.get(0))?;
    let raw_from = oldest_raw.map_or(now_ms.saturating_sub(retention.raw.as_millis() as u64), |t| t as u64);
    let split = if width >= 60_000 {
        rolled_until.map_or(q.from, |t| t as u64)
    } else {
        raw_from.min(rolled_until.map_or(q.from, |t| t as u64).max(raw_from))
    };
    let split = split.clamp(q.from, q.to);

    let sql = format!(
        "SELECT b, min(lo), sum(mean * n) / sum(n), max(hi), max(rolled) FROM (
             SELECT (minute - ?2) / ?4 AS b, {column}_min AS lo, {column}_avg AS mean, {column}_max AS hi, samples AS n, 1 AS rolled
               FROM minutes WHERE device = ?1 AND minute >= ?2 AND minute < ?3 AND {column}_avg IS NOT NULL
             UNION ALL
             SELECT (ts - ?2) / ?4, {column}, {column}, {column}, 1, 0
               FROM samples WHERE device = ?1 AND ts >= ?3 AND ts < ?5 AND {column} IS NOT NULL
         ) GROUP BY b ORDER BY b"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let mut used_minutes = false;
    let points = statement
        .query_map(params![device, q.from as i64, split as i64, width as i64, q.to as i64], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, f64>(1)?,
                row.get::<_, f64>(2)?,
                row.get::<_, f64>(3)?,
                row.get::<_, i64>(4)?,
            ))
        })?
        .map(|row| {
            row.map(|(b, min, avg, max, rolled)| {
                used_minutes |= rolled == 1;
                HistoryPoint { t: q.from + b as u64 * width, min, avg, max }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Buckets are counted from `from`, so there are never more than asked; say so in code too.
    let mut points = points;
    points.truncate(q.points as usize);
    Ok(Answer { bucket_ms: width, resolution: if used_minutes { Resolution::Minute } else { Resolution::Raw }, points })
}

/// Every metric of every GPU in `devices` over `from..to` in at most `points` buckets
/// each (all on one grid): one lock and one pass for `GET /api/history/all`.
pub(super) fn run_all(
    conn: &Connection,
    devices: &[u32],
    range: (u64, u64, u32),
    retention: Retention,
    now_ms: u64,
) -> Result<Vec<(u32, Metric, Answer)>, QueryError> {
    let (from, to, points) = range;
    let mut lines = Vec::with_capacity(devices.len() * Metric::ALL.len());
    for &device in devices {
        for metric in Metric::ALL {
            let answer = run(conn, &HistoryQuery { device, metric, from, to, points }, retention, now_ms)?;
            lines.push((device, metric, answer));
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shared::DeviceSample;

    use super::*;
    use crate::Store;

    const T0: u64 = 1_700_000_000_000;

    fn filled_store(seconds: u64, retention: Retention) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true, retention).unwrap();
        let recorder = store.recorder().unwrap();
        for s in 0..seconds {
            // A flat line at 100 with one spike to 900 at second 1234.
            let used = if s == 1234 { 900 } else { 100 };
            recorder.record_waiting(&[DeviceSample {
                index: 0,
                timestamp_ms: T0 + s * 1000,
                memory_used: Some(used),
                ..Default::default()
            }]);
        }
        recorder.stop();
        (dir, store)
    }

    fn query(from: u64, to: u64, points: u32) -> HistoryQuery {
        HistoryQuery { device: 0, metric: Metric::MemoryUsed, from, to, points }
    }

    #[test]
    fn buckets_never_exceed_the_points_asked_for() {
        for (from, to, points) in [(0, 1000, 7), (5, 6, 1000), (0, 604_800_000, 1000), (3, 10_000_003, 999)] {
            let width = bucket_width(from, to, points);
            assert!((to - from).div_ceil(width) <= u64::from(points), "{from} {to} {points}");
        }
    }

    #[test]
    fn spikes_survive_downsampling_of_raw_samples() {
        let (_dir, store) = filled_store(3600, Retention::default());
        // 100 points over an hour: 36 s buckets, finer than the minute rollups.
        let answer = store.history(&query(T0, T0 + 3_600_000, 100), T0 + 3_600_000).unwrap();
        assert_eq!(answer.resolution, Resolution::Raw);
        assert_eq!(answer.bucket_ms, 36_000);
        assert!(answer.points.len() <= 100);
        assert_eq!(answer.points.iter().map(|p| p.max).fold(0.0, f64::max), 900.0);
        assert!(answer.points.iter().all(|p| p.min == 100.0));
        let spiked = answer.points.iter().find(|p| p.max == 900.0).unwrap();
        assert!((spiked.avg - (35.0 * 100.0 + 900.0) / 36.0).abs() < 1e-9, "{spiked:?}");
    }

    #[test]
    fn wide_buckets_read_minute_rollups_and_keep_the_spike() {
        let (_dir, store) = filled_store(3600, Retention::default());
        let answer = store.history(&query(T0, T0 + 3_600_000, 10), T0 + 3_600_000).unwrap();
        assert_eq!(answer.resolution, Resolution::Minute);
        assert!(answer.points.len() <= 10);
        assert_eq!(answer.points.iter().map(|p| p.max).fold(0.0, f64::max), 900.0);
    }

    #[test]
    fn old_ranges_come_from_minute_rollups_with_the_spike() {
        let retention = Retention { raw: Duration::from_secs(600), minute: Duration::from_secs(86_400) };
        let (_dir, store) = filled_store(7200, retention);
        let now = T0 + 7_200_000;
        let answer = store.history(&query(T0, now, 1000), now).unwrap();
        assert_eq!(answer.resolution, Resolution::Minute);
        assert_eq!(answer.points.iter().map(|p| p.max).fold(0.0, f64::max), 900.0);
        // Rolled-up minutes and the recent raw tail join without a hole.
        let last = answer.points.last().unwrap();
        assert!(last.t >= now - 2 * answer.bucket_ms.max(60_000), "{last:?} now={now}");
        assert!(answer.points.len() > 100);
    }

    #[test]
    fn bad_ranges_are_refused_with_the_rule() {
        let (_dir, store) = filled_store(10, Retention::default());
        let err = store.history(&query(T0 + 5, T0, 10), T0).unwrap_err().to_string();
        assert!(err.contains("'from'") && err.contains("before"), "{err}");
        let err = store.history(&query(T0, T0 + 5, 0), T0).unwrap_err().to_string();
        assert!(err.contains("from 1 to 10000"), "{err}");
        let err = store.history(&query(T0, u64::MAX, 10), T0).unwrap_err().to_string();
        assert!(err.contains("'to'") && err.contains("year 9999"), "{err}");
        let err = store.history(&query(u64::MAX - 1, u64::MAX, 10), T0).unwrap_err().to_string();
        assert!(err.contains("'from'"), "{err}");
        let answer = store.history(&query(0, MAX_TIME_MS, 7), T0).unwrap();
        assert!(answer.points.len() <= 7, "{}", answer.points.len());
    }

    #[test]
    fn every_metric_of_every_gpu_shares_one_grid() {
        let (_dir, store) = filled_store(600, Retention::default());
        let lines = store.history_all(&[0, 1], (T0, T0 + 600_000, 60), T0 + 600_000).unwrap();
        assert_eq!(lines.len(), 2 * Metric::ALL.len());
        assert!(lines.iter().all(|(_, _, a)| a.bucket_ms == 10_000));
        let memory = |device| lines.iter().find(|(d, m, _)| *d == device && *m == Metric::MemoryUsed).unwrap();
        assert_eq!(memory(0).2.points.len(), 60, "GPU 0 recorded memory every second");
        assert!(memory(1).2.points.is_empty(), "GPU 1 recorded nothing");
    }
}
