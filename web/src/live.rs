//! The hub's ticks, details and snapshots as WebSocket [`Frame`]s. One task encodes each update
//! the hub publishes, once, and every socket shares the bytes; a snapshot is encoded at most once
//! per hub [`Version`] and visibility however many sockets connect during it, and only when a
//! viewer of that visibility asks.
//!
//! What names people (process users, command lines, containers) is encoded a second time,
//! redacted, for anonymous viewers of a server with tokens: once per message, and only when such
//! viewers may connect, never per socket.

use std::sync::{Arc, Mutex};

use shared::processes::redact_all;
use shared::{Details, ServerMessage, Snapshot, Tick};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use super::frames::{Frame, Visibility};
use base::sync::lock;
use telemetry::{Telemetry, Update, Version};

/// Frames a slow socket may fall behind before it is resynchronised with a snapshot.
const FRAME_BACKLOG: usize = 64;

/// The hub's updates as frames, and the snapshot a socket starts from.
#[derive(Debug, Clone)]
pub struct LiveFrames {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    telemetry: Arc<Telemetry>,
    frames: broadcast::Sender<Frame>,
    /// Anonymous viewers may connect while tokens exist: details get a redacted encoding too.
    redacting: bool,
    /// The newest snapshot per visibility, with the hub version it shows.
    full: Mutex<Option<(Version, Frame)>>,
    redacted: Mutex<Option<(Version, Frame)>>,
}

impl LiveFrames {
    /// Starts encoding what `telemetry` publishes, on a task that ends when the hub goes away.
    /// With `redacting`, details also get an encoding without people for anonymous viewers.
    /// If the task itself falls behind the hub, sockets get a fresh snapshot in place of what it missed.
    pub fn relay(telemetry: &Arc<Telemetry>, redacting: bool) -> Self {
        let (frames, _) = broadcast::channel(FRAME_BACKLOG);
        let inner = Arc::new(Inner {
            telemetry: telemetry.clone(),
            frames,
            redacting,
            full: Mutex::new(None),
            redacted: Mutex::new(None),
        });
        let mut updates = telemetry.subscribe();
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            loop {
                let update = updates.recv().await;
                let Some(inner) = weak.upgrade() else { return };
                let frame = match update {
                    Ok(update) => inner.encode(&update),
                    Err(RecvError::Lagged(skipped)) => {
                        tracing::debug!(skipped, "tick relay fell behind; sockets get a snapshot");
                        inner.snapshot_for_all()
                    }
                    Err(RecvError::Closed) => return,
                };
                // No socket listening is normal.
                let _ = inner.frames.send(frame);
            }
        });
        Self { inner }
    }

    /// Receives every tick and details frame from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Frame> {
        self.inner.frames.subscribe()
    }

    /// Everything a page needs to start, as of the newest tick, for `visibility`; the frame's
    /// bytes for that visibility are the snapshot (a redacted one has no other bytes).
    pub fn snapshot(&self, visibility: Visibility) -> Frame {
        self.inner.snapshot(visibility)
    }
}

impl Inner {
    fn encode(&self, update: &Update) -> Frame {
        match update {
            // Samples name nobody: everyone gets the same bytes.
            Update::Tick(tick) => Frame::shared(Some(tick.seq), &ServerMessage::Tick(Tick::clone(tick))),
            Update::Details(details) => {
                let redacted = self.redacting.then(|| ServerMessage::Details(redacted_details(details)));
                Frame::with_redacted(None, &ServerMessage::Details(Details::clone(details)), redacted.as_ref())
            }
        }
    }

    fn snapshot(&self, visibility: Visibility) -> Frame {
        let cache = match visibility {
            Visibility::Full => &self.full,
            Visibility::Redacted => &self.redacted,
        };
        let mut cached = lock(cache);
        let now = self.telemetry.version();
        if let Some((_, frame)) = cached.as_ref().filter(|(version, _)| *version == now) {
            return frame.clone();
        }
        let (version, mut snapshot) = self.telemetry.snapshot();
        let seq = Some(snapshot.seq);
        let frame = match visibility {
            Visibility::Full => Frame::with_redacted(seq, &ServerMessage::Snapshot(snapshot), None),
            Visibility::Redacted => {
                redact_snapshot(&mut snapshot);
                Frame::shared(seq, &ServerMessage::Snapshot(snapshot))
            }
        };
        *cached = Some((version, frame.clone()));
        frame
    }

    /// A snapshot for every viewer, in place of ticks the relay missed.
    fn snapshot_for_all(&self) -> Frame {
        let (_, snapshot) = self.telemetry.snapshot();
        let seq = Some(snapshot.seq);
        let redacted = self.redacting.then(|| {
            let mut redacted = snapshot.clone();
            redact_snapshot(&mut redacted);
            ServerMessage::Snapshot(redacted)
        });
        Frame::with_redacted(seq, &ServerMessage::Snapshot(snapshot), redacted.as_ref())
    }
}

fn redacted_details(details: &Details) -> Details {
    let mut redacted = details.clone();
    redact_all(&mut redacted.processes);
    hide_paths_in(&mut redacted.workload_problems);
    redacted
}

fn redact_snapshot(snapshot: &mut Snapshot) {
    redact_all(&mut snapshot.processes);
    hide_paths_in(&mut snapshot.workload_problems);
}

/// Where sockets live is nothing an anonymous viewer needs (an admin reads it in the log).
fn hide_paths_in(problems: &mut [String]) {
    for problem in problems {
        *problem = shared::status::hide_paths(problem);
    }
}

#[cfg(test)]
mod tests {
    use shared::health::DeviceHealth;
    use shared::processes::GpuProcess;
    use shared::{DeviceSample, MemoryPoint};

    use super::*;

    fn hub(devices: u32) -> Arc<Telemetry> {
        use telemetry::GpuSource as _;
        let sim = telemetry::simulator::Simulator::new(devices, 100);
        Arc::new(Telemetry::new(sim.host(), sim.devices()))
    }

    fn sample(index: u32, t: u64, used: u64) -> DeviceSample {
        DeviceSample { index, timestamp_ms: t, memory_used: Some(used), ..Default::default() }
    }

    async fn next(rx: &mut broadcast::Receiver<Frame>) -> Frame {
        tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await.unwrap().unwrap()
    }

    fn ptr(frame: &Frame, visibility: Visibility) -> *const u8 {
        frame.text_for(visibility).unwrap().as_str().as_ptr()
    }

    #[tokio::test]
    async fn ticks_are_encoded_once_and_shared_by_every_socket() {
        let hub = hub(2);
        let live = LiveFrames::relay(&hub, false);
        let (mut a, mut b) = (live.subscribe(), live.subscribe());
        hub.publish(vec![sample(0, 10, 1), sample(1, 10, 2)], 10);
        hub.publish(vec![sample(0, 20, 3), sample(1, 20, 4)], 20);
        let (a1, b1) = (next(&mut a).await, next(&mut b).await);
        assert_eq!((a1.seq, b1.seq), (Some(1), Some(1)));
        assert_eq!(ptr(&a1, Visibility::Full), ptr(&b1, Visibility::Full), "one serialization shared");
        assert_eq!(ptr(&a1, Visibility::Full), ptr(&a1, Visibility::Redacted), "ticks name nobody");
        assert_eq!(next(&mut a).await.seq, Some(2));
    }

    #[tokio::test]
    async fn snapshot_carries_history_and_is_cached_per_version() {
        let hub = hub(1);
        let live = LiveFrames::relay(&hub, false);
        hub.publish(vec![sample(0, 10, 5)], 10);
        let first = live.snapshot(Visibility::Full);
        assert_eq!(ptr(&first, Visibility::Full), ptr(&live.snapshot(Visibility::Full), Visibility::Full));
        let text = first.text_for(Visibility::Full).unwrap();
        let ServerMessage::Snapshot(Snapshot { seq, history, .. }) = serde_json::from_str(text.as_str()).unwrap()
        else {
            panic!("not a snapshot")
        };
        assert_eq!(seq, 1);
        assert_eq!(history[0].points, vec![MemoryPoint { timestamp_ms: 10, memory_used: 5 }]);
        hub.publish(vec![sample(0, 20, 6)], 20);
        assert_eq!(live.snapshot(Visibility::Full).seq, Some(2));
        let before = live.snapshot(Visibility::Full);
        hub.publish_details(Details { health: vec![DeviceHealth::default()], ..Default::default() });
        assert_ne!(ptr(&before, Visibility::Full), ptr(&live.snapshot(Visibility::Full), Visibility::Full));
    }

    fn with_a_process(hub: &Telemetry) {
        hub.publish(vec![sample(0, 10, 5)], 10);
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
        hub.publish_details(Details {
            health: vec![],
            processes: vec![process],
            workload_problems: vec![],
            scheduled: vec![],
        });
    }

    fn names_someone(text: &str) -> bool {
        ["ana", "python3", "s3cret", "c0ffee"].iter().any(|word| text.contains(word))
    }

    #[tokio::test]
    async fn anonymous_viewers_get_redacted_details_and_snapshots_encoded_once() {
        let hub = hub(1);
        let live = LiveFrames::relay(&hub, true);
        let mut rx = live.subscribe();
        with_a_process(&hub);
        assert_eq!(next(&mut rx).await.seq, Some(1));
        let details = next(&mut rx).await;
        assert!(names_someone(details.text_for(Visibility::Full).unwrap()), "signed-in viewers see who runs what");
        let redacted = details.text_for(Visibility::Redacted).unwrap();
        assert!(!names_someone(redacted) && redacted.contains("4242"), "{redacted}");

        let (full, anonymous) = (live.snapshot(Visibility::Full), live.snapshot(Visibility::Redacted));
        assert!(names_someone(full.text_for(Visibility::Full).unwrap()));
        assert!(full.text_for(Visibility::Redacted).is_none());
        let text = anonymous.text_for(Visibility::Redacted).unwrap();
        assert!(!names_someone(text) && text.contains("\"redacted\":true"), "{text}");
        let again = live.snapshot(Visibility::Redacted);
        assert_eq!(ptr(&again, Visibility::Redacted), ptr(&anonymous, Visibility::Redacted), "cached per version");
    }

    #[tokio::test]
    async fn a_server_without_anonymous_viewers_encodes_details_once_and_gives_them_nothing() {
        let hub = hub(1);
        let live = LiveFrames::relay(&hub, false);
        let mut rx = live.subscribe();
        with_a_process(&hub);
        let _tick = next(&mut rx).await;
        assert!(next(&mut rx).await.text_for(Visibility::Redacted).is_none());
    }
}
