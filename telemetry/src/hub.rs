//! The hub between the sampler thread and every reader: latest readings, recent history, and
//! each tick and each slow-loop reading published once as a typed value shared by every
//! subscriber. The hub encodes nothing: `web` turns what it publishes into wire messages, once
//! for every socket (`web/live.rs`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};

use shared::health::{DeviceHealth, XidEvent};
use shared::processes::GpuProcess;
use shared::topology::Topology;
use shared::{Details, DeviceHistory, DeviceInfo, DeviceSample, HostInfo, MemoryPoint, Snapshot, Tick};
use tokio::sync::broadcast;

use super::GpuReadings;
use super::activity::ActivityBoard;
use super::history::{HISTORY_WINDOW_MS, MemoryRing};
use super::idle::{IdleRule, IdleTracker};
use base::sync::{lock, read, write};

/// Most points per device in a snapshot, whatever the sampling period.
pub const SNAPSHOT_POINTS: usize = 300;
/// Updates a slow subscriber may fall behind before it skips some (it then reads the newest state).
const UPDATE_BACKLOG: usize = 64;
/// XID errors kept per device.
const XIDS_KEPT: usize = 16;

/// What the hub publishes, shared by every subscriber (one allocation per update, never a copy each).
#[derive(Debug, Clone)]
pub enum Update {
    /// The fast loop's readings of one sampling period.
    Tick(Arc<Tick>),
    /// The slow loop's health and processes (with recent XIDs and idle holders marked).
    Details(Arc<Details>),
}

impl Update {
    /// A tick's sequence number; `None` for details.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Self::Tick(tick) => Some(tick.seq),
            Self::Details(_) => None,
        }
    }
}

/// Which state a snapshot shows: the newest tick and how many slow-loop readings came before it.
/// Equal versions mean equal snapshots, so a reader may cache what it made of one.
pub type Version = (u64, u64);

/// Shared state of the live path. Locks are held for copies only, never across `.await`.
#[derive(Debug)]
pub struct Telemetry {
    host: HostInfo,
    devices: Vec<DeviceInfo>,
    /// How the GPUs connect, read from the source once at start.
    topology: Option<Topology>,
    /// The source's live readings on demand, for the lab's guards.
    query: Option<Arc<dyn GpuReadings>>,
    live: RwLock<Live>,
    updates: broadcast::Sender<Update>,
    /// The GPM loop's newest window per GPU.
    activity: Mutex<ActivityBoard>,
    /// Pages watching the live stream: the GPM loop keeps 1 s windows only while one does.
    watchers: super::activity::Watchers,
    /// Who holds memory on a GPU that does nothing.
    idle: Mutex<IdleTracker>,
}

#[derive(Debug)]
struct Live {
    seq: u64,
    /// Slow-loop readings published so far.
    details_seq: u64,
    latest: Vec<DeviceSample>,
    history: Vec<MemoryRing>,
    last_tick_ms: Option<u64>,
    health: Vec<DeviceHealth>,
    processes: Vec<GpuProcess>,
    workload_problems: Vec<String>,
    scheduled: Vec<shared::workload::ScheduledGpu>,
    xids: VecDeque<XidEvent>,
}

impl Telemetry {
    pub fn new(host: HostInfo, devices: Vec<DeviceInfo>) -> Self {
        let history = devices.iter().map(|_| MemoryRing::new(HISTORY_WINDOW_MS)).collect();
        let (updates, _) = broadcast::channel(UPDATE_BACKLOG);
        Self {
            host,
            devices,
            topology: None,
            query: None,
            live: RwLock::new(Live {
                seq: 0,
                details_seq: 0,
                latest: Vec::new(),
                history,
                last_tick_ms: None,
                health: Vec::new(),
                processes: Vec::new(),
                workload_problems: Vec::new(),
                scheduled: Vec::new(),
                xids: VecDeque::new(),
            }),
            updates,
            activity: Mutex::default(),
            watchers: super::activity::Watchers::default(),
            idle: Mutex::new(IdleTracker::new(IdleRule::default())),
        }
    }

    /// With the rule that flags idle holders (`--idle-memory`, `--idle-after`).
    #[must_use]
    pub fn with_idle_rule(self, rule: IdleRule) -> Self {
        *lock(&self.idle) = IdleTracker::new(rule);
        self
    }

    /// Keeps the GPM loop's newest windows; the next tick carries them.
    pub fn publish_activity(&self, windows: Vec<(u32, shared::activity::Activity)>) {
        lock(&self.activity).update(windows);
    }

    /// Pages watching the live stream; a socket holds [`super::activity::Watchers::watch`]'s guard while open.
    pub fn watchers(&self) -> super::activity::Watchers {
        self.watchers.clone()
    }

    /// Gives each sample its GPU's newest GPM window (called by the fast loop before recording).
    pub fn attach_activity(&self, samples: &mut [DeviceSample]) {
        lock(&self.activity).attach(samples);
    }

    /// With what the source says once at start besides its devices: how the GPUs connect
    /// ([`super::GpuSource::topology`]) and its on-demand readings ([`super::GpuSource::device_query`]).
    #[must_use]
    pub fn with_hardware(mut self, topology: Option<Topology>, query: Option<Arc<dyn GpuReadings>>) -> Self {
        self.topology = topology;
        self.query = query;
        self
    }

    /// How the GPUs connect, read at start; `None` where the source cannot say (no NVML).
    pub fn topology(&self) -> Option<&Topology> {
        self.topology.as_ref()
    }

    /// Live readings on demand, over the source's own hardware handle; `None` without hardware.
    /// Blocking when called: off the async runtime.
    pub fn device_query(&self) -> Option<Arc<dyn GpuReadings>> {
        self.query.clone()
    }

    pub fn host(&self) -> &HostInfo {
        &self.host
    }

    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    /// The newest reading of every device (empty before the first tick).
    pub fn latest(&self) -> Vec<DeviceSample> {
        self.read_live(|live| live.latest.clone())
    }

    /// The slow loop's newest health readings (with recent XIDs) and processes.
    pub fn details(&self) -> Details {
        self.read_live(|live| Details {
            health: live.health.clone(),
            processes: live.processes.clone(),
            workload_problems: live.workload_problems.clone(),
            scheduled: live.scheduled.clone(),
        })
    }

    /// Sequence number of the newest tick and when it was taken.
    pub fn last_tick(&self) -> (u64, Option<u64>) {
        self.read_live(|live| (live.seq, live.last_tick_ms))
    }

    /// Receives every tick and every slow-loop reading published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Update> {
        self.updates.subscribe()
    }

    /// Records one sampling period and sends it, as one shared value, to every subscriber.
    /// Called from the sampler thread only, so ticks go out in order.
    pub fn publish(&self, samples: Vec<DeviceSample>, timestamp_ms: u64) {
        lock(&self.idle).observe(&samples);
        let seq = {
            let mut live = write(&self.live);
            live.seq += 1;
            live.last_tick_ms = Some(timestamp_ms);
            for sample in &samples {
                let ring = usize::try_from(sample.index).ok().and_then(|i| live.history.get_mut(i));
                if let (Some(ring), Some(used)) = (ring, sample.memory_used) {
                    ring.push(MemoryPoint { timestamp_ms: sample.timestamp_ms, memory_used: used });
                }
            }
            live.latest.clone_from(&samples);
            live.seq
        };
        // No receivers is normal: nobody has the page open.
        let _ = self.updates.send(Update::Tick(Arc::new(Tick { seq, samples })));
    }

    /// Records the slow loop's readings and sends them, as one shared value, to every subscriber.
    pub fn publish_details(&self, mut details: Details) {
        lock(&self.idle).mark(&mut details.processes, super::now_ms());
        {
            let mut live = write(&self.live);
            for health in &mut details.health {
                health.xids = live.xids.iter().filter(|x| x.device == health.index).cloned().collect();
            }
            live.health.clone_from(&details.health);
            live.processes.clone_from(&details.processes);
            live.workload_problems.clone_from(&details.workload_problems);
            live.scheduled.clone_from(&details.scheduled);
            live.details_seq += 1;
        }
        let _ = self.updates.send(Update::Details(Arc::new(details)));
    }

    /// Keeps an XID error for the health view (the newest few per device).
    pub fn record_xid(&self, event: XidEvent) {
        tracing::warn!(device = event.device, code = event.code, "XID error: {}", event.meaning);
        let mut live = write(&self.live);
        let device = event.device;
        if let Some(health) = live.health.iter_mut().find(|h| h.index == device) {
            health.xids.push(event.clone());
            if health.xids.len() > XIDS_KEPT {
                health.xids.remove(0);
            }
        }
        live.xids.push_back(event);
        while live.xids.iter().filter(|x| x.device == device).count() > XIDS_KEPT {
            if let Some(oldest) = live.xids.iter().position(|x| x.device == device) {
                live.xids.remove(oldest);
            }
        }
    }

    /// Which state [`Self::snapshot`] would show now: cheap, for a reader's cache.
    pub fn version(&self) -> Version {
        self.read_live(|live| (live.seq, live.details_seq))
    }

    /// Everything a page needs to start, as of the newest tick, with the version it shows.
    /// Sockets do not tell admins apart: the driver's error goes out without file paths
    /// (an admin has the full text in `/api/devices` and the log).
    pub fn snapshot(&self) -> (Version, Snapshot) {
        self.read_live(|live| {
            let snapshot = Snapshot {
                seq: live.seq,
                host: self.host.without_paths(),
                devices: self.devices.clone(),
                latest: live.latest.clone(),
                history: self
                    .devices
                    .iter()
                    .zip(&live.history)
                    .map(|(d, ring)| DeviceHistory { index: d.index, points: ring.decimated(SNAPSHOT_POINTS) })
                    .collect(),
                health: live.health.clone(),
                processes: live.processes.clone(),
                workload_problems: live.workload_problems.clone(),
            };
            ((live.seq, live.details_seq), snapshot)
        })
    }

    fn read_live<T>(&self, f: impl FnOnce(&Live) -> T) -> T {
        f(&read(&self.live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(devices: u32) -> Telemetry {
        use crate::GpuSource as _;
        let sim = crate::simulator::Simulator::new(devices, 100);
        Telemetry::new(sim.host(), sim.devices())
    }

    fn sample(index: u32, t: u64, used: u64) -> DeviceSample {
        DeviceSample { index, timestamp_ms: t, memory_used: Some(used), ..Default::default() }
    }

    fn tick(update: Update) -> Arc<Tick> {
        match update {
            Update::Tick(tick) => tick,
            Update::Details(_) => panic!("details, not a tick"),
        }
    }

    #[test]
    fn publish_numbers_ticks_and_fans_out_one_shared_value() {
        let hub = hub(2);
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        hub.publish(vec![sample(0, 10, 1), sample(1, 10, 2)], 10);
        hub.publish(vec![sample(0, 20, 3), sample(1, 20, 4)], 20);
        let (a1, b1) = (tick(a.try_recv().unwrap()), tick(b.try_recv().unwrap()));
        assert_eq!((a1.seq, b1.seq), (1, 1));
        assert!(Arc::ptr_eq(&a1, &b1), "one value shared");
        assert_eq!(a1.samples[1].memory_used, Some(2));
        assert_eq!(a.try_recv().unwrap().seq(), Some(2));
        assert_eq!(hub.last_tick(), (2, Some(20)));
    }

    #[test]
    fn snapshot_carries_history_and_its_version() {
        let hub = hub(1);
        assert_eq!(hub.version(), (0, 0));
        hub.publish(vec![sample(0, 10, 5)], 10);
        let (version, Snapshot { seq, history, .. }) = hub.snapshot();
        assert_eq!((version, seq), ((1, 0), 1));
        assert_eq!(history[0].points, vec![MemoryPoint { timestamp_ms: 10, memory_used: 5 }]);
        hub.publish(vec![sample(0, 20, 6)], 20);
        assert_eq!(hub.snapshot().0, (2, 0));
        assert_eq!(hub.version(), (2, 0));
    }

    #[test]
    fn details_carry_recent_xids_and_change_the_version() {
        let hub = hub(2);
        hub.publish(vec![sample(0, 10, 5)], 10);
        let before = hub.version();
        for code in 0..20 {
            hub.record_xid(XidEvent { device: 1, timestamp_ms: code, code, meaning: "m".into() });
        }
        hub.record_xid(XidEvent { device: 0, timestamp_ms: 1, code: 79, meaning: "off the bus".into() });
        let mut rx = hub.subscribe();
        hub.publish_details(Details {
            workload_problems: vec![],
            health: vec![
                DeviceHealth { index: 0, ..Default::default() },
                DeviceHealth { index: 1, ..Default::default() },
            ],
            processes: vec![],
            scheduled: vec![],
        });
        let details = hub.details();
        assert_eq!(details.health[0].xids.len(), 1);
        assert_eq!(details.health[1].xids.len(), XIDS_KEPT);
        assert_eq!(details.health[1].xids.last().unwrap().code, 19, "newest kept");
        let Update::Details(published) = rx.try_recv().unwrap() else { panic!("details are not ticks") };
        assert_eq!(published.health[1].xids.len(), XIDS_KEPT);
        assert_ne!(before, hub.version(), "a snapshot made before is stale");
        assert_eq!(hub.snapshot().1.health.len(), 2);
    }

    #[test]
    fn samples_for_unknown_devices_are_ignored_in_history() {
        let hub = hub(1);
        hub.publish(vec![sample(7, 10, 5)], 10);
        assert_eq!(hub.last_tick().0, 1);
    }
}
