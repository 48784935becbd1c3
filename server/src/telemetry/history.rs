//! The last few minutes of memory readings per device, for a page that just connected.

use std::collections::VecDeque;

use shared::MemoryPoint;

/// Memory-used points of one device within a time window, oldest first.
#[derive(Debug, Clone)]
pub struct MemoryRing {
    window_ms: u64,
    points: VecDeque<MemoryPoint>,
}

impl MemoryRing {
    pub fn new(window_ms: u64) -> Self {
        Self { window_ms, points: VecDeque::new() }
    }

    /// Appends a point and drops those older than the window before it.
    /// A point not newer than the last one is ignored (clock stepped back).
    pub fn push(&mut self, point: MemoryPoint) {
        if self.points.back().is_some_and(|last| last.timestamp_ms >= point.timestamp_ms) {
            return;
        }
        let oldest = point.timestamp_ms.saturating_sub(self.window_ms);
        while self.points.front().is_some_and(|p| p.timestamp_ms < oldest) {
            self.points.pop_front();
        }
        self.points.push_back(point);
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// At most `max_points` points spread evenly over the window, always
    /// ending with the newest one, so a chart drawn from it ends where the
    /// live ticks continue.
    pub fn decimated(&self, max_points: usize) -> Vec<MemoryPoint> {
        let len = self.points.len();
        if len <= max_points || max_points == 0 {
            return if max_points == 0 { Vec::new() } else { self.points.iter().copied().collect() };
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
    fn ignores_points_that_go_back_in_time() {
        let mut ring = MemoryRing::new(1_000);
        ring.push(point(500));
        ring.push(point(500));
        ring.push(point(400));
        assert_eq!(ring.len(), 1);
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
    }
}
