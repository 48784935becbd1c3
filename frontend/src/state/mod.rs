//! What the page knows about the host and its GPUs, rebuilt from snapshots and ticks.
//!
//! Pure data with no browser types, so the rules (a snapshot replaces, a tick
//! appends, duplicates are dropped, charts keep five minutes) are tested here.

use std::collections::VecDeque;

use shared::{DeviceHistory, DeviceInfo, DeviceSample, HostInfo, MemoryPoint, Tick};

/// How much memory history a chart shows, in milliseconds.
pub const HISTORY_WINDOW_MS: u64 = 5 * 60 * 1000;

/// Memory-used points of one device, oldest first, no older than
/// [`HISTORY_WINDOW_MS`] before the newest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryRing {
    points: VecDeque<MemoryPoint>,
}

impl MemoryRing {
    /// A ring holding the tail of `points` (oldest first) that fits the window.
    pub fn from_points(points: impl IntoIterator<Item = MemoryPoint>) -> Self {
        let mut ring = Self::default();
        for point in points {
            ring.push(point);
        }
        ring
    }

    /// Appends a point and forgets what fell out of the window. A point older
    /// than the newest is dropped: the chart's x axis is time, so order matters.
    pub fn push(&mut self, point: MemoryPoint) {
        if self.newest_ms().is_some_and(|newest| point.timestamp_ms < newest) {
            return;
        }
        self.points.push_back(point);
        let cutoff = point.timestamp_ms.saturating_sub(HISTORY_WINDOW_MS);
        while self.points.front().is_some_and(|p| p.timestamp_ms < cutoff) {
            self.points.pop_front();
        }
    }

    /// Timestamp of the newest point, the chart's "0 seconds ago".
    pub fn newest_ms(&self) -> Option<u64> {
        self.points.back().map(|p| p.timestamp_ms)
    }

    pub fn iter(&self) -> impl Iterator<Item = &MemoryPoint> {
        self.points.iter()
    }
}

/// One GPU as the page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceState {
    pub info: DeviceInfo,
    pub latest: Option<DeviceSample>,
    pub memory: MemoryRing,
    /// Changes whenever `memory` does, so a chart redraws only for its own device.
    pub memory_revision: u64,
}

/// What applying a tick did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickOutcome {
    Applied,
    /// Applied, but ticks between the last one and this were never received:
    /// the page should ask for a fresh snapshot.
    AppliedAfterGap,
    /// Already seen (or no snapshot yet): nothing changed.
    Ignored,
}

/// The whole client state. `host` is `None` until the first snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DashboardState {
    pub host: Option<HostInfo>,
    pub devices: Vec<DeviceState>,
    /// Sequence number of the last tick applied.
    pub seq: u64,
    revision: u64,
}

impl DashboardState {
    /// Replaces everything with a snapshot's contents.
    pub fn apply_snapshot(
        &mut self,
        seq: u64,
        host: HostInfo,
        devices: Vec<DeviceInfo>,
        mut latest: Vec<DeviceSample>,
        mut history: Vec<DeviceHistory>,
    ) {
        self.revision += 1;
        let revision = self.revision;
        self.devices = devices
            .into_iter()
            .map(|info| {
                let sample = take_where(&mut latest, |s| s.index == info.index);
                let points = take_where(&mut history, |h| h.index == info.index).map(|h| h.points);
                DeviceState {
                    memory: MemoryRing::from_points(points.unwrap_or_default()),
                    latest: sample,
                    memory_revision: revision,
                    info,
                }
            })
            .collect();
        self.host = Some(host);
        self.seq = seq;
    }

    /// Appends a tick unless it was already applied.
    pub fn apply_tick(&mut self, tick: Tick) -> TickOutcome {
        if self.host.is_none() || tick.seq <= self.seq {
            return TickOutcome::Ignored;
        }
        let gap = tick.seq > self.seq + 1;
        self.seq = tick.seq;
        self.revision += 1;
        for sample in tick.samples {
            let Some(device) = self.devices.iter_mut().find(|d| d.info.index == sample.index) else {
                continue;
            };
            if let Some(used) = sample.memory_used {
                device.memory.push(MemoryPoint { timestamp_ms: sample.timestamp_ms, memory_used: used });
                device.memory_revision = self.revision;
            }
            device.latest = Some(sample);
        }
        if gap { TickOutcome::AppliedAfterGap } else { TickOutcome::Applied }
    }

    /// The device with NVML index `index`.
    pub fn device(&self, index: u32) -> Option<&DeviceState> {
        self.devices.iter().find(|d| d.info.index == index)
    }
}

/// Removes and returns the first item matching `pred`.
fn take_where<T>(items: &mut Vec<T>, pred: impl Fn(&T) -> bool) -> Option<T> {
    let at = items.iter().position(pred)?;
    Some(items.swap_remove(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(seconds: u64, used: u64) -> MemoryPoint {
        MemoryPoint { timestamp_ms: seconds * 1000, memory_used: used }
    }

    fn host() -> HostInfo {
        HostInfo {
            hostname: "node1".to_owned(),
            driver_version: None,
            cuda_driver_version: None,
            simulated: true,
            gpu_error: None,
            interval_ms: 1000,
            version: "0.1.0".to_owned(),
        }
    }

    fn info(index: u32) -> DeviceInfo {
        DeviceInfo {
            index,
            name: "Sim H100".to_owned(),
            uuid: format!("GPU-{index}"),
            pci_bus_id: format!("00000000:0{index}:00.0"),
            compute_capability: None,
            memory_total: 80 << 30,
            simulated: true,
        }
    }

    fn sample(index: u32, seconds: u64, used: u64) -> DeviceSample {
        DeviceSample { index, timestamp_ms: seconds * 1000, memory_used: Some(used), ..Default::default() }
    }

    fn snapshot(state: &mut DashboardState, seq: u64) {
        let history = vec![DeviceHistory { index: 0, points: vec![point(10, 1), point(11, 2)] }];
        state.apply_snapshot(seq, host(), vec![info(0), info(1)], vec![sample(1, 11, 7)], history);
    }

    #[test]
    fn ring_keeps_five_minutes_before_the_newest_point() {
        let mut ring = MemoryRing::from_points((0..=400).map(|s| point(s, s)));
        assert_eq!(ring.newest_ms(), Some(400_000));
        assert_eq!(ring.iter().next(), Some(&point(100, 100)));
        assert_eq!(ring.iter().count(), 301);
        ring.push(point(399, 0));
        assert_eq!(ring.iter().count(), 301, "a point older than the newest is dropped");
    }

    #[test]
    fn snapshot_replaces_everything() {
        let mut state = DashboardState::default();
        snapshot(&mut state, 5);
        assert_eq!(state.devices.len(), 2);
        assert_eq!(state.device(0).map(|d| d.memory.iter().count()), Some(2));
        assert_eq!(state.device(1).and_then(|d| d.latest.as_ref()).and_then(|s| s.memory_used), Some(7));

        state.apply_snapshot(2, host(), vec![info(3)], vec![], vec![]);
        assert_eq!(state.seq, 2);
        assert_eq!(state.devices.len(), 1);
        assert!(state.device(3).is_some_and(|d| d.memory.newest_ms().is_none() && d.latest.is_none()));
    }

    #[test]
    fn ticks_append_and_duplicates_are_ignored() {
        let mut state = DashboardState::default();
        assert_eq!(state.apply_tick(Tick { seq: 1, samples: vec![sample(0, 1, 1)] }), TickOutcome::Ignored);

        snapshot(&mut state, 5);
        let before = state.device(0).map(|d| d.memory_revision);
        assert_eq!(state.apply_tick(Tick { seq: 5, samples: vec![sample(0, 12, 9)] }), TickOutcome::Ignored);
        assert_eq!(state.device(0).map(|d| d.memory.iter().count()), Some(2));

        assert_eq!(state.apply_tick(Tick { seq: 6, samples: vec![sample(0, 12, 9)] }), TickOutcome::Applied);
        let device = state.device(0).expect("device 0");
        assert_eq!(device.memory.iter().count(), 3);
        assert_eq!(device.latest.as_ref().and_then(|s| s.memory_used), Some(9));
        assert_ne!(Some(device.memory_revision), before);

        assert_eq!(state.apply_tick(Tick { seq: 9, samples: vec![] }), TickOutcome::AppliedAfterGap);
        assert_eq!(state.seq, 9);
    }
}
