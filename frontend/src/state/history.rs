//! The history charts' data: the range picked, and each chart's series, the
//! buckets `/api/history` answered followed by the live tail merged in from ticks.

use shared::history::{HistoryPoint, Metric};

/// The time ranges the history section offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryRange {
    FiveMinutes,
    Hour,
    Day,
    Week,
}

impl HistoryRange {
    pub const ALL: [Self; 4] = [Self::FiveMinutes, Self::Hour, Self::Day, Self::Week];

    /// The button's label and `data-range`, e.g. "24h".
    pub fn key(self) -> &'static str {
        match self {
            Self::FiveMinutes => "5m",
            Self::Hour => "1h",
            Self::Day => "24h",
            Self::Week => "7d",
        }
    }

    pub fn millis(self) -> u64 {
        const MINUTE: u64 = 60_000;
        match self {
            Self::FiveMinutes => 5 * MINUTE,
            Self::Hour => 60 * MINUTE,
            Self::Day => 24 * 60 * MINUTE,
            Self::Week => 7 * 24 * 60 * MINUTE,
        }
    }
}

/// The metrics charted for every GPU, in the order shown.
pub const CHARTED: [Metric; 7] = [
    Metric::MemoryUsed,
    Metric::GpuUtil,
    Metric::SmActive,
    Metric::TensorActive,
    Metric::PowerDraw,
    Metric::Temperature,
    Metric::SmClock,
];

/// One chart's points, oldest first, on a grid of `bucket_ms`-wide buckets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistorySeries {
    points: Vec<HistoryPoint>,
    bucket_ms: u64,
    /// Samples merged into the last bucket, for its running mean (0: a fetched
    /// bucket, whose count the server does not say; it weighs as one).
    last_count: u32,
    /// Live samples seen since a fetch was sent, merged again into its answer.
    unfetched: Option<Vec<(u64, f64)>>,
}

impl HistorySeries {
    /// A series for live samples only, bucketed `bucket_ms` wide.
    pub fn live(bucket_ms: u64) -> Self {
        Self { bucket_ms, ..Self::default() }
    }

    pub fn points(&self) -> &[HistoryPoint] {
        &self.points
    }

    /// Width of the buckets, ms (0 before any fetch: one bucket per sample).
    pub fn bucket_ms(&self) -> u64 {
        self.bucket_ms
    }

    /// Starts remembering live samples, so a fetch's answer loses none that came meanwhile.
    pub fn begin_fetch(&mut self) {
        self.unfetched = Some(Vec::new());
    }

    /// Replaces the points with a fetch's answer, then merges in the live samples
    /// newer than its last bucket's start.
    pub fn finish_fetch(&mut self, bucket_ms: u64, points: Vec<HistoryPoint>) {
        let meanwhile = self.unfetched.take().unwrap_or_default();
        self.points = points;
        self.bucket_ms = bucket_ms;
        self.last_count = 0;
        for (t, value) in meanwhile {
            self.merge(t, value);
        }
    }

    /// Gives up on a fetch: the points stay as they are.
    pub fn abandon_fetch(&mut self) {
        self.unfetched = None;
    }

    /// Adds a live sample taken at `t` (ms since the epoch).
    pub fn push(&mut self, t: u64, value: f64) {
        if let Some(meanwhile) = &mut self.unfetched {
            meanwhile.push((t, value));
        }
        self.merge(t, value);
    }

    /// Forgets buckets that start before `from`.
    pub fn trim_before(&mut self, from: u64) {
        let keep_from = self.points.partition_point(|p| p.t < from);
        if keep_from > 0 {
            self.points.drain(..keep_from);
        }
    }

    fn merge(&mut self, t: u64, value: f64) {
        let Some(last) = self.points.last_mut() else {
            self.points.push(HistoryPoint { t, min: value, avg: value, max: value });
            self.last_count = 1;
            return;
        };
        if t < last.t {
            return;
        }
        if t - last.t < self.bucket_ms {
            let n = f64::from(self.last_count.max(1));
            last.min = last.min.min(value);
            last.max = last.max.max(value);
            last.avg = (last.avg * n + value) / (n + 1.0);
            self.last_count = self.last_count.max(1) + 1;
            return;
        }
        // Stay on the server's grid so buckets keep one width.
        let start = (t - last.t).checked_div(self.bucket_ms).map_or(t, |buckets| last.t + buckets * self.bucket_ms);
        self.points.push(HistoryPoint { t: start, min: value, avg: value, max: value });
        self.last_count = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(t: u64, min: f64, avg: f64, max: f64) -> HistoryPoint {
        HistoryPoint { t, min, avg, max }
    }

    #[test]
    fn live_samples_merge_into_buckets_on_the_grid() {
        let mut series = HistorySeries::live(1000);
        series.push(10_000, 4.0);
        series.push(10_400, 8.0);
        series.push(10_900, 6.0);
        series.push(9_000, 100.0);
        series.push(12_300, 1.0);
        assert_eq!(series.points(), [bucket(10_000, 4.0, 6.0, 8.0), bucket(12_000, 1.0, 1.0, 1.0)]);
        series.trim_before(11_000);
        assert_eq!(series.points(), [bucket(12_000, 1.0, 1.0, 1.0)]);
    }

    #[test]
    fn a_fetch_answer_keeps_the_samples_that_came_meanwhile() {
        let mut series = HistorySeries::live(1000);
        series.push(5_000, 1.0);
        series.begin_fetch();
        series.push(70_000, 9.0);
        series.push(130_000, 3.0);
        series.finish_fetch(60_000, vec![bucket(0, 1.0, 2.0, 5.0), bucket(60_000, 2.0, 2.0, 2.0)]);
        assert_eq!(
            series.points(),
            [bucket(0, 1.0, 2.0, 5.0), bucket(60_000, 2.0, 5.5, 9.0), bucket(120_000, 3.0, 3.0, 3.0)]
        );
        series.push(131_000, 5.0);
        assert_eq!(series.points()[2], bucket(120_000, 3.0, 4.0, 5.0));
    }

    #[test]
    fn ranges_read_as_their_buttons() {
        assert_eq!(HistoryRange::ALL.map(HistoryRange::key), ["5m", "1h", "24h", "7d"]);
    }
}
