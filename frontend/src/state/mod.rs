//! What the page knows about the host and its GPUs, rebuilt from snapshots and ticks.
//!
//! Pure data with no browser types, so the rules (a snapshot replaces, a tick
//! appends, duplicates are dropped, details replace health and processes) are
//! tested here; the charts' five minutes are `shared::MemoryRing`'s.

pub mod alert_groups;
pub mod alerts;
pub mod history;
pub mod lab;
pub mod lab_form;
pub mod lab_target;
pub mod process_filter;
pub mod url;

use shared::{
    Details, DeviceHistory, DeviceInfo, DeviceSample, HostInfo, MemoryPoint, MemoryRing, Tick,
    health::DeviceHealth,
    processes::GpuProcess,
    reservations::{Reservation, free_unreserved},
    severity::Condition,
    usability::{UnhealthyDevice, unhealthy_devices},
};

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
    /// Latest slow-loop readings, one per device that has one (a lost GPU has none).
    pub health: Vec<DeviceHealth>,
    /// Every GPU process, as of the latest details.
    pub processes: Vec<GpuProcess>,
    /// Workload sources that do not answer (`Details::workload_problems`).
    pub workload_problems: Vec<String>,
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
        details: Details,
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
        self.apply_details(details);
    }

    /// Replaces health and processes with the slower loop's latest readings.
    pub fn apply_details(&mut self, details: Details) {
        self.health = details.health;
        self.processes = details.processes;
        self.workload_problems = details.workload_problems;
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

    /// Why GPU `index` stopped answering, when it did.
    pub fn lost_reason(&self, index: u32) -> Option<&str> {
        self.device(index)?.latest.as_ref()?.lost.as_deref()
    }

    /// The latest health reading of GPU `index`.
    pub fn health(&self, index: u32) -> Option<&DeviceHealth> {
        self.health.iter().find(|h| h.index == index)
    }

    /// Processes on GPU `index`, in the server's order.
    pub fn processes_on(&self, index: u32) -> impl Iterator<Item = &GpuProcess> {
        self.processes.iter().filter(move |p| p.device == index)
    }

    /// GPU `index`'s condition as the severity rules read it (its latest sample and health).
    pub fn condition(&self, index: u32) -> Option<Condition> {
        let device = self.device(index)?;
        Some(Condition::of(&device.info, device.latest.as_ref(), self.health(index)))
    }

    /// Every GPU's condition, in the server's order.
    fn conditions(&self) -> Vec<(u32, Condition)> {
        self.devices
            .iter()
            .map(|d| (d.info.index, Condition::of(&d.info, d.latest.as_ref(), self.health(d.info.index))))
            .collect()
    }

    /// Why GPU `index` cannot take new work ([`shared::usability::unhealthy`]), when it cannot.
    pub fn unhealthy(&self, index: u32) -> Option<String> {
        shared::usability::unhealthy(&self.condition(index)?)
    }

    /// Every unhealthy GPU, lost ones included, in the server's order: `unhealthy_devices` of `/api/processes`.
    pub fn unhealthy_devices(&self) -> Vec<UnhealthyDevice> {
        unhealthy_devices(self.conditions().iter().map(|(i, c)| (*i, c)))
    }

    /// GPUs that are healthy, held by no process and by none of `reservations` at `now_ms`, in
    /// the server's order: the rule of [`free_unreserved`], as `/api/processes` applies it.
    pub fn free_devices(&self, reservations: &[Reservation], now_ms: u64) -> Vec<u32> {
        let conditions = self.conditions();
        free_unreserved(conditions.iter().map(|(i, c)| (*i, c)), &self.processes, reservations, now_ms)
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
            history: false,
        }
    }

    fn info(index: u32) -> DeviceInfo {
        DeviceInfo { name: "Sim H100".to_owned(), simulated: true, ..shared::testing::device(index) }
    }

    fn sample(index: u32, seconds: u64, used: u64) -> DeviceSample {
        DeviceSample { index, timestamp_ms: seconds * 1000, memory_used: Some(used), ..Default::default() }
    }

    fn process(device: u32, pid: u32) -> GpuProcess {
        GpuProcess { used_memory: Some(1 << 30), user: Some("ana".to_owned()), ..shared::testing::process(device, pid) }
    }

    fn snapshot(state: &mut DashboardState, seq: u64) {
        let history = vec![DeviceHistory { index: 0, points: vec![point(10, 1), point(11, 2)] }];
        let details = Details { processes: vec![process(1, 5)], ..Details::default() };
        state.apply_snapshot(seq, host(), vec![info(0), info(1)], vec![sample(1, 11, 7)], history, details);
    }

    #[test]
    fn snapshot_replaces_everything() {
        let mut state = DashboardState::default();
        snapshot(&mut state, 5);
        assert_eq!(state.devices.len(), 2);
        assert_eq!(state.device(0).map(|d| d.memory.iter().count()), Some(2));
        assert_eq!(state.device(1).and_then(|d| d.latest.as_ref()).and_then(|s| s.memory_used), Some(7));

        assert_eq!(state.processes.len(), 1);
        state.apply_snapshot(2, host(), vec![info(3)], vec![], vec![], Details::default());
        assert!(state.processes.is_empty());
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

    #[test]
    fn details_replace_processes_and_lost_gpus_are_not_free() {
        let mut state = DashboardState::default();
        snapshot(&mut state, 1);
        assert_eq!(state.free_devices(&[], 0), [0]);
        state.apply_details(Details { processes: vec![process(0, 9)], ..Details::default() });
        assert_eq!(state.processes_on(0).map(|p| p.pid).collect::<Vec<_>>(), [9]);
        assert_eq!(state.free_devices(&[], 0), [1]);
        let reserved = Reservation {
            id: 1,
            devices: vec![1],
            user: "ana".into(),
            start_ms: 10,
            end_ms: 20,
            note: String::new(),
            created_ms: 0,
            released_ms: None,
            intruders: Vec::new(),
            redacted: false,
        };
        assert!(state.free_devices(std::slice::from_ref(&reserved), 15).is_empty(), "reserved now");
        assert_eq!(state.free_devices(&[reserved], 20), [1], "expired");

        let lost = DeviceSample { index: 1, timestamp_ms: 20_000, lost: Some("fell off".into()), ..Default::default() };
        state.apply_tick(Tick { seq: 2, samples: vec![lost] });
        assert_eq!(state.lost_reason(1), Some("fell off"));
        assert!(state.free_devices(&[], 0).is_empty());
    }

    #[test]
    fn a_gpu_with_a_recent_hardware_xid_is_unhealthy_not_free() {
        use shared::health::XidEvent;
        let mut state = DashboardState::default();
        snapshot(&mut state, 1);
        state.apply_details(Details::default());
        assert_eq!(state.free_devices(&[], 0), [0, 1]);
        let xid = XidEvent { device: 1, timestamp_ms: 10_000, code: 79, meaning: String::new() };
        let health = DeviceHealth { index: 1, timestamp_ms: 10_000, xids: vec![xid], ..DeviceHealth::default() };
        state.apply_details(Details { health: vec![health], ..Details::default() });
        assert_eq!(state.free_devices(&[], 0), [0]);
        assert_eq!(state.unhealthy(1).as_deref(), Some("XID 79"));
        assert_eq!(state.unhealthy_devices(), [UnhealthyDevice { index: 1, reason: "XID 79".into() }]);
        assert_eq!(state.unhealthy(0), None);
    }
}
