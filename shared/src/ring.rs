//! The last few minutes of memory readings of one device: kept by the server
//! for a page that just connected, and by the page for its live chart.

use std::collections::VecDeque;

use crate::MemoryPoint;

/// How much memory history a page gets when it connects, and its live chart shows, in ms.
pub const HISTORY_WINDOW_MS: u64 = 5 * 60 * 1000;

/// Memory-used points of one device, oldest first, with strictly increasing
/// timestamps, none older than the window before the newest.
///
/// A point not newer than the newest is ignored. The chart's x axis is time and a
/// device has one reading per instant: a second point at the same millisecond is
/// the same reading seen twice (a tick overlapping the snapshot the page started
/// from) or a clock that stepped back, and either would draw a vertical jump. So
/// pushing the same point again changes nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRing {
    window_ms: u64,
    points: VecDeque<MemoryPoint>,
}

impl Default for MemoryRing {
    /// An empty ring over [`HISTORY_WINDOW_MS`].
    fn default() -> Self {
        Self::new(HISTORY_WINDOW_MS)
    }
}

impl MemoryRing {
    /// An empty ring keeping `window_ms` before its newest point.
    pub fn new(window_ms: u64) -> Self {
        Self { window_ms, points: VecDeque::new() }
    }

    /// A ring over [`HISTORY_WINDOW_MS`] holding the tail of `points` (oldest first) that fits it.
    pub fn from_points(points: impl IntoIterator<Item = MemoryPoint>) -> Self {
        let mut ring = Self::default();
        for point in points {
            ring.push(point);
        }
        ring
    }

    /// Appends a point newer than the newest and forgets what fell out of the window.
    pub fn push(&mut self, point: MemoryPoint) {
        if self.newest_ms().is_some_and(|newest| point.timestamp_ms <= newest) {
            return;
        }
        let cutoff = point.timestamp_ms.saturating_sub(self.window_ms);
        while self.points.front().is_some_and(|p| p.timestamp_ms < cutoff) {
            self.points.pop_front();
        }
        self.points.push_back(point);
    }

    /// Timestamp of the newest point, a chart's "0 seconds ago".
    pub fn newest_ms(&self) -> Option<u64> {
        self.points.back().map(|p| p.timestamp_ms)
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &MemoryPoint> {
        self.points.iter()
    }

    /// At most `max_points` points spread evenly over the window, always
    /// ending with the newest one, so a chart drawn from it ends where the
    /// live ticks continue.
    pub fn decimated(&self, max_points: usize) -> Vec<MemoryPoint> {
        let len = self.points.len();
        if max_points == 0 {
            return Vec::new();
        }
        if len <= max_points {
            return self.points.iter().copied().collect();
        }
        let stride = len.div_ceil(max_points);
        // Count back from the newest point so the last one is always kept.
        let mut out: Vec<MemoryPoint> = self.points.iter().rev().step_by(stride).copied().collect();
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: u64) -> MemoryPoint {
        MemoryPoint { timestamp_ms: t, memory_used: t * 10 }
    }

    #[test]
    fn keeps_only_the_window() {
        let mut ring = MemoryRing::new(1_000);
        for t in (0..=3_000).step_by(100) {
            ring.push(point(t));
        }
        let all = ring.decimated(usize::MAX);
        assert_eq!(all.first().unwrap().timestamp_ms, 2_000);
        assert_eq!(all.last().unwrap().timestamp_ms, 3_000);
        assert_eq!(ring.len(), 11);
    }

    #[test]
    fn default_window_is_five_minutes_before_the_newest_point() {
        let ring = MemoryRing::from_points((0..=400).map(|s| point(s * 1000)));
        assert_eq!(ring.newest_ms(), Some(400_000));
        assert_eq!(ring.iter().next(), Some(&point(100_000)));
        assert_eq!(ring.len(), 301);
    }

    #[test]
    fn equal_and_older_timestamps_are_ignored() {
        let mut ring = MemoryRing::new(1_000);
        ring.push(point(500));
        ring.push(MemoryPoint { timestamp_ms: 500, memory_used: 1 });
        ring.push(point(400));
        assert_eq!(ring.iter().copied().collect::<Vec<_>>(), [point(500)], "the first reading of an instant stays");
        ring.push(point(501));
        assert_eq!(ring.len(), 2);
    }

    #[test]
    fn decimation_bounds_the_count_and_keeps_the_newest() {
        let mut ring = MemoryRing::new(u64::MAX);
        for t in 1..=3_000 {
            ring.push(point(t));
        }
        let some = ring.decimated(600);
        assert!(some.len() <= 600, "{}", some.len());
        assert!(some.len() >= 500, "{}", some.len());
        assert_eq!(some.last().unwrap().timestamp_ms, 3_000);
        assert!(some.windows(2).all(|w| w[0].timestamp_ms < w[1].timestamp_ms));
        assert!(ring.decimated(0).is_empty());
        assert!(MemoryRing::default().decimated(10).is_empty());
    }
}
