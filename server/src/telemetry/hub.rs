//! The hub between the sampler thread and every viewer: latest readings,
//! recent history, and ticks serialized once and shared by all sockets.

use std::sync::{Mutex, RwLock};

use axum::extract::ws::Utf8Bytes;
use shared::{DeviceHistory, DeviceInfo, DeviceSample, HostInfo, MemoryPoint, ServerMessage, Tick};
use tokio::sync::broadcast;

use super::MemoryRing;

/// How much memory history a page gets when it connects.
pub const HISTORY_WINDOW_MS: u64 = 5 * 60 * 1000;
/// Most points per device in a snapshot, whatever the sampling period.
pub const SNAPSHOT_POINTS: usize = 600;
/// Ticks a slow socket may fall behind before it is resynchronised with a snapshot.
const FRAME_BACKLOG: usize = 64;

/// A serialized message, ready to send on any number of sockets.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The last tick this frame covers.
    pub seq: u64,
    pub text: Utf8Bytes,
}

/// Shared state of the live path. Locks are held for copies only, never across `.await`.
#[derive(Debug)]
pub struct Telemetry {
    host: HostInfo,
    devices: Vec<DeviceInfo>,
    live: RwLock<Live>,
    /// The snapshot of the current tick, serialized at most once per tick.
    snapshot: Mutex<Option<Frame>>,
    ticks: broadcast::Sender<Frame>,
}

#[derive(Debug)]
struct Live {
    seq: u64,
    latest: Vec<DeviceSample>,
    history: Vec<MemoryRing>,
    last_tick_ms: Option<u64>,
}

impl Telemetry {
    pub fn new(host: HostInfo, devices: Vec<DeviceInfo>) -> Self {
        let history = devices.iter().map(|_| MemoryRing::new(HISTORY_WINDOW_MS)).collect();
        let (ticks, _) = broadcast::channel(FRAME_BACKLOG);
        Self {
            host,
            devices,
            live: RwLock::new(Live { seq: 0, latest: Vec::new(), history, last_tick_ms: None }),
            snapshot: Mutex::new(None),
            ticks,
        }
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
        // No receivers is normal: nobody has the page open.
        let _ = self.ticks.send(Frame { seq, text });
    }

    /// Everything a page needs to start, as of the newest tick; serialized
    /// once per tick however many sockets connect during it.
    pub fn snapshot(&self) -> Frame {
        let mut cached = self.snapshot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (seq, _) = self.last_tick();
        if let Some(frame) = cached.as_ref().filter(|f| f.seq == seq) {
            return frame.clone();
        }
        let message = self.read_live(|live| ServerMessage::Snapshot {
            seq: live.seq,
            host: self.host.clone(),
            devices: self.devices.clone(),
            latest: live.latest.clone(),
            history: self
                .devices
                .iter()
                .zip(&live.history)
                .map(|(d, ring)| DeviceHistory { index: d.index, points: ring.decimated(SNAPSHOT_POINTS) })
                .collect(),
        });
        let ServerMessage::Snapshot { seq, .. } = &message else { unreachable!("built as a snapshot above") };
        let frame = Frame { seq: *seq, text: encode(&message) };
        *cached = Some(frame.clone());
        frame
    }

    fn read_live<T>(&self, f: impl FnOnce(&Live) -> T) -> T {
        f(&self.live.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Serializes a message to JSON text. Our own types always serialize.
pub fn encode(message: &ServerMessage) -> Utf8Bytes {
    serde_json::to_string(message).expect("wire types serialize infallibly").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(devices: u32) -> Telemetry {
        let host = HostInfo {
            hostname: "h".into(),
            driver_version: None,
            cuda_driver_version: None,
            simulated: true,
            gpu_error: None,
            interval_ms: 100,
            version: "0".into(),
            history_path: None,
        };
        let devices = (0..devices)
            .map(|index| DeviceInfo {
                index,
                name: format!("gpu{index}"),
                uuid: String::new(),
                pci_bus_id: String::new(),
                compute_capability: None,
                memory_total: 100,
                simulated: true,
            })
            .collect();
        Telemetry::new(host, devices)
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
        assert_eq!((a1.seq, b1.seq), (1, 1));
        assert_eq!(a1.text.as_str().as_ptr(), b1.text.as_str().as_ptr(), "one serialization shared");
        assert_eq!(a.try_recv().unwrap().seq, 2);
        assert_eq!(hub.last_tick(), (2, Some(20)));
    }

    #[test]
    fn snapshot_carries_history_and_is_cached_per_tick() {
        let hub = hub(1);
        hub.publish(vec![sample(0, 10, 5)], 10);
        let first = hub.snapshot();
        assert_eq!(first.text.as_str().as_ptr(), hub.snapshot().text.as_str().as_ptr());
        let ServerMessage::Snapshot { seq, history, .. } = serde_json::from_str(first.text.as_str()).unwrap() else {
            panic!("not a snapshot")
        };
        assert_eq!(seq, 1);
        assert_eq!(history[0].points, vec![MemoryPoint { timestamp_ms: 10, memory_used: 5 }]);
        hub.publish(vec![sample(0, 20, 6)], 20);
        assert_eq!(hub.snapshot().seq, 2);
    }

    #[test]
    fn samples_for_unknown_devices_are_ignored_in_history() {
        let hub = hub(1);
        hub.publish(vec![sample(7, 10, 5)], 10);
        assert_eq!(hub.last_tick().0, 1);
    }
}
