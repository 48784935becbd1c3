//! The hub between the sampler thread and every viewer: latest readings,
//! recent history, and ticks serialized once and shared by all sockets.
//!
//! What names people (process users, command lines, containers) is encoded a
//! second time, redacted, for anonymous viewers of a server with tokens: once
//! per message, and only when such viewers may connect, never per socket.

use std::sync::{Arc, Mutex, RwLock};

use axum::extract::ws::Utf8Bytes;
use std::collections::VecDeque;

use shared::health::{DeviceHealth, XidEvent};
use shared::processes::{GpuProcess, redact_all};
use shared::topology::Topology;
use shared::{Details, DeviceHistory, DeviceInfo, DeviceSample, HostInfo, MemoryPoint, ServerMessage, Snapshot, Tick};
use tokio::sync::broadcast;

use super::DeviceQuery;
use super::activity::ActivityBoard;
use super::history::{HISTORY_WINDOW_MS, MemoryRing};
use super::idle::{IdleRule, IdleTracker};

/// Most points per device in a snapshot, whatever the sampling period.
pub const SNAPSHOT_POINTS: usize = 300;
/// Ticks a slow socket may fall behind before it is resynchronised with a snapshot.
const FRAME_BACKLOG: usize = 64;
/// XID errors kept per device.
const XIDS_KEPT: usize = 16;

/// How much of who runs what a viewer may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Everything: a signed-in viewer, or anyone on a server without tokens.
    Full,
    /// Processes without user, executable, command line or container
    /// ([`GpuProcess::redact`]): an anonymous viewer of a server with tokens.
    Redacted,
}

/// A serialized message, ready to send on any number of sockets.
#[derive(Debug, Clone)]
pub struct Frame {
    /// For a tick or snapshot, the last tick it covers; `None` for other messages.
    pub seq: Option<u64>,
    /// The message for [`Visibility::Full`].
    pub text: Utf8Bytes,
    /// The message for [`Visibility::Redacted`]: the same bytes when it names nobody
    /// (ticks), a redacted encoding otherwise; `None` when there is none (a hub that
    /// admits no anonymous viewers makes none), and such a viewer then gets nothing.
    pub redacted: Option<Utf8Bytes>,
}

impl Frame {
    /// The bytes a viewer may get, or `None` when this frame has nothing for them.
    pub fn text_for(&self, visibility: Visibility) -> Option<&Utf8Bytes> {
        match visibility {
            Visibility::Full => Some(&self.text),
            Visibility::Redacted => self.redacted.as_ref(),
        }
    }
}

/// Shared state of the live path. Locks are held for copies only, never across `.await`.
#[derive(Debug)]
pub struct Telemetry {
    host: HostInfo,
    devices: Vec<DeviceInfo>,
    /// How the GPUs connect, read from the source once at start.
    topology: Option<Topology>,
    /// The source's live readings on demand, for the lab's guards.
    query: Option<Arc<dyn DeviceQuery>>,
    live: RwLock<Live>,
    /// The snapshot of the current tick, serialized at most once per tick and visibility.
    snapshot: Mutex<Option<Frame>>,
    redacted_snapshot: Mutex<Option<Frame>>,
    /// Anonymous viewers may connect while tokens exist: details get a redacted encoding too.
    redacting: bool,
    ticks: broadcast::Sender<Frame>,
    /// The GPM loop's newest window per GPU.
    activity: Mutex<ActivityBoard>,
    /// Who holds memory on a GPU that does nothing.
    idle: Mutex<IdleTracker>,
}

#[derive(Debug)]
struct Live {
    seq: u64,
    latest: Vec<DeviceSample>,
    history: Vec<MemoryRing>,
    last_tick_ms: Option<u64>,
    health: Vec<DeviceHealth>,
    processes: Vec<GpuProcess>,
    workload_problems: Vec<String>,
    xids: VecDeque<XidEvent>,
}

impl Telemetry {
    pub fn new(host: HostInfo, devices: Vec<DeviceInfo>) -> Self {
        let history = devices.iter().map(|_| MemoryRing::new(HISTORY_WINDOW_MS)).collect();
        let (ticks, _) = broadcast::channel(FRAME_BACKLOG);
        Self {
            host,
            devices,
            topology: None,
            query: None,
            live: RwLock::new(Live {
                seq: 0,
                latest: Vec::new(),
                history,
                last_tick_ms: None,
                health: Vec::new(),
                processes: Vec::new(),
                workload_problems: Vec::new(),
                xids: VecDeque::new(),
            }),
            snapshot: Mutex::new(None),
            redacted_snapshot: Mutex::new(None),
            redacting: false,
            ticks,
            activity: Mutex::default(),
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

    /// Gives each sample its GPU's newest GPM window (called by the fast loop before recording).
    pub fn attach_activity(&self, samples: &mut [DeviceSample]) {
        lock(&self.activity).attach(samples);
    }

    /// With `yes`, every message that names people is also encoded redacted
    /// (see [`Frame::redacted`]): for a server whose anonymous viewers may connect while tokens exist.
    #[must_use]
    pub fn with_redacted_frames(mut self, yes: bool) -> Self {
        self.redacting = yes;
        self
    }

    /// With what the source says once at start besides its devices: how the GPUs connect
    /// ([`super::GpuSource::topology`]) and its on-demand readings ([`super::GpuSource::device_query`]).
    #[must_use]
    pub fn with_hardware(mut self, topology: Option<Topology>, query: Option<Arc<dyn DeviceQuery>>) -> Self {
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
    pub fn device_query(&self) -> Option<Arc<dyn DeviceQuery>> {
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
        })
    }

    /// Sequence number of the newest tick and when it was taken.
    pub fn last_tick(&self) -> (u64, Option<u64>) {
        self.read_live(|live| (live.seq, live.last_tick_ms))
    }

    /// Receives every tick published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Frame> {
        self.ticks.subscribe()
    }

    /// Records one sampling period and sends it, serialized once, to every subscriber.
    /// Called from the sampler thread only, so ticks go out in order.
    pub fn publish(&self, samples: Vec<DeviceSample>, timestamp_ms: u64) {
        lock(&self.idle).observe(&samples);
        let seq = {
            let mut live = self.live.write().unwrap_or_else(std::sync::PoisonError::into_inner);
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
        let text = encode(&ServerMessage::Tick(Tick { seq, samples }));
        // No receivers is normal: nobody has the page open. Samples name nobody: everyone gets the same bytes.
        let _ = self.ticks.send(Frame { seq: Some(seq), redacted: Some(text.clone()), text });
    }

    /// Records the slow loop's readings and sends them, serialized once, to every subscriber.
    pub fn publish_details(&self, mut details: Details) {
        lock(&self.idle).mark(&mut details.processes, super::now_ms());
        {
            let mut live = self.live.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            for health in &mut details.health {
                health.xids = live.xids.iter().filter(|x| x.device == health.index).cloned().collect();
            }
            live.health.clone_from(&details.health);
            live.processes.clone_from(&details.processes);
            live.workload_problems.clone_from(&details.workload_problems);
        }
        self.invalidate_snapshot();
        let redacted = self.redacting.then(|| {
            let mut redacted = details.clone();
            redact_all(&mut redacted.processes);
            hide_paths_in(&mut redacted.workload_problems);
            encode(&ServerMessage::Details(redacted))
        });
        let _ = self.ticks.send(Frame { seq: None, text: encode(&ServerMessage::Details(details)), redacted });
    }

    /// Keeps an XID error for the health view (the newest few per device).
    pub fn record_xid(&self, event: XidEvent) {
        tracing::warn!(device = event.device, code = event.code, "XID error: {}", event.meaning);
        let mut live = self.live.write().unwrap_or_else(std::sync::PoisonError::into_inner);
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

    fn invalidate_snapshot(&self) {
        for cache in [&self.snapshot, &self.redacted_snapshot] {
            *cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
    }

    /// Everything a page needs to start, as of the newest tick; serialized
    /// once per tick and visibility however many sockets connect during it.
    /// Encoded on demand, so a redacted one costs nothing until an anonymous viewer asks.
    /// The frame's `text` is what `visibility` may see (a redacted frame has no other bytes).
    pub fn snapshot(&self, visibility: Visibility) -> Frame {
        let cache = match visibility {
            Visibility::Full => &self.snapshot,
            Visibility::Redacted => &self.redacted_snapshot,
        };
        let mut cached = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (seq, _) = self.last_tick();
        if let Some(frame) = cached.as_ref().filter(|f| f.seq == Some(seq)) {
            return frame.clone();
        }
        let mut snapshot = self.read_live(|live| Snapshot {
            seq: live.seq,
            // Sockets do not tell admins apart: the driver's error goes out without file paths
            // (an admin has the full text in `/api/devices` and the log).
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
        });
        let seq = Some(snapshot.seq);
        let frame = match visibility {
            Visibility::Full => Frame { seq, text: encode(&ServerMessage::Snapshot(snapshot)), redacted: None },
            Visibility::Redacted => {
                redact_all(&mut snapshot.processes);
                hide_paths_in(&mut snapshot.workload_problems);
                let text = encode(&ServerMessage::Snapshot(snapshot));
                Frame { seq, text: text.clone(), redacted: Some(text) }
            }
        };
        *cached = Some(frame.clone());
        frame
    }

    fn read_live<T>(&self, f: impl FnOnce(&Live) -> T) -> T {
        f(&self.live.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Where sockets live is nothing an anonymous viewer needs (an admin reads it in the log).
fn hide_paths_in(problems: &mut [String]) {
    for problem in problems {
        *problem = shared::status::hide_paths(problem);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serializes a message to JSON text. Our own types always serialize.
pub fn encode(message: &ServerMessage) -> Utf8Bytes {
    serde_json::to_string(message).expect("wire types serialize infallibly").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(devices: u32) -> Telemetry {
        use crate::telemetry::GpuSource as _;
        let sim = crate::telemetry::simulator::Simulator::new(devices, 100);
        Telemetry::new(sim.host(), sim.devices())
    }

    fn sample(index: u32, t: u64, used: u64) -> DeviceSample {
        DeviceSample { index, timestamp_ms: t, memory_used: Some(used), ..Default::default() }
    }

    #[test]
    fn publish_numbers_ticks_and_fans_out_the_same_bytes() {
        let hub = hub(2);
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        hub.publish(vec![sample(0, 10, 1), sample(1, 10, 2)], 10);
        hub.publish(vec![sample(0, 20, 3), sample(1, 20, 4)], 20);
        let (a1, b1) = (a.try_recv().unwrap(), b.try_recv().unwrap());
        assert_eq!((a1.seq, b1.seq), (Some(1), Some(1)));
        assert_eq!(a1.text.as_str().as_ptr(), b1.text.as_str().as_ptr(), "one serialization shared");
        assert_eq!(a.try_recv().unwrap().seq, Some(2));
        assert_eq!(hub.last_tick(), (2, Some(20)));
    }

    #[test]
    fn snapshot_carries_history_and_is_cached_per_tick() {
        let hub = hub(1);
        hub.publish(vec![sample(0, 10, 5)], 10);
        let first = hub.snapshot(Visibility::Full);
        assert_eq!(first.text.as_str().as_ptr(), hub.snapshot(Visibility::Full).text.as_str().as_ptr());
        let ServerMessage::Snapshot(Snapshot { seq, history, .. }) = serde_json::from_str(first.text.as_str()).unwrap()
        else {
            panic!("not a snapshot")
        };
        assert_eq!(seq, 1);
        assert_eq!(history[0].points, vec![MemoryPoint { timestamp_ms: 10, memory_used: 5 }]);
        hub.publish(vec![sample(0, 20, 6)], 20);
        assert_eq!(hub.snapshot(Visibility::Full).seq, Some(2));
    }

    #[test]
    fn details_carry_recent_xids_and_refresh_the_snapshot() {
        let hub = hub(2);
        hub.publish(vec![sample(0, 10, 5)], 10);
        let before = hub.snapshot(Visibility::Full);
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
        });
        let details = hub.details();
        assert_eq!(details.health[0].xids.len(), 1);
        assert_eq!(details.health[1].xids.len(), XIDS_KEPT);
        assert_eq!(details.health[1].xids.last().unwrap().code, 19, "newest kept");
        assert_eq!(rx.try_recv().unwrap().seq, None, "details are not ticks");
        assert_ne!(
            before.text.as_str().as_ptr(),
            hub.snapshot(Visibility::Full).text.as_str().as_ptr(),
            "snapshot rebuilt"
        );
    }

    fn with_a_process(hub: &Telemetry) -> broadcast::Receiver<Frame> {
        hub.publish(vec![sample(0, 10, 5)], 10);
        let rx = hub.subscribe();
        let process = GpuProcess {
            used_memory: Some(5),
            user: Some("ana".into()),
            name: Some("python3".into()),
            command: Some("python3 serve.py --api-key=s3cret".into()),
            workload: Some(shared::workload::Workload {
                container: Some(shared::workload::Container { id: "c0ffee123456".into(), ..Default::default() }),
                ..Default::default()
            }),
            ..shared::testing::process(0, 4242)
        };
        hub.publish_details(Details { health: vec![], processes: vec![process], workload_problems: vec![] });
        rx
    }

    fn names_someone(text: &str) -> bool {
        ["ana", "python3", "s3cret", "c0ffee"].iter().any(|word| text.contains(word))
    }

    #[test]
    fn anonymous_viewers_get_redacted_details_and_snapshots_encoded_once() {
        let hub = hub(1).with_redacted_frames(true);
        let mut rx = with_a_process(&hub);
        let details = rx.try_recv().unwrap();
        assert!(names_someone(&details.text), "signed-in viewers see who runs what");
        let redacted = details.text_for(Visibility::Redacted).unwrap();
        assert!(!names_someone(redacted) && redacted.contains("4242"), "{redacted}");

        let (full, anonymous) = (hub.snapshot(Visibility::Full), hub.snapshot(Visibility::Redacted));
        assert!(names_someone(&full.text) && full.text_for(Visibility::Redacted).is_none());
        let text = anonymous.text_for(Visibility::Redacted).unwrap();
        assert!(!names_someone(text) && text.contains("\"redacted\":true"), "{text}");
        let again = hub.snapshot(Visibility::Redacted);
        assert_eq!(again.text.as_str().as_ptr(), anonymous.text.as_str().as_ptr(), "cached per tick");

        hub.publish(vec![sample(0, 20, 6)], 20);
        let tick = rx.try_recv().unwrap();
        let (a, b) = (tick.text_for(Visibility::Full).unwrap(), tick.text_for(Visibility::Redacted).unwrap());
        assert_eq!(a.as_str().as_ptr(), b.as_str().as_ptr(), "ticks name nobody: one encoding for all");
    }

    #[test]
    fn a_hub_without_anonymous_viewers_encodes_details_once_and_gives_them_nothing() {
        let hub = hub(1);
        let mut rx = with_a_process(&hub);
        assert!(rx.try_recv().unwrap().text_for(Visibility::Redacted).is_none());
    }

    #[test]
    fn samples_for_unknown_devices_are_ignored_in_history() {
        let hub = hub(1);
        hub.publish(vec![sample(7, 10, 5)], 10);
        assert_eq!(hub.last_tick().0, 1);
    }
}
