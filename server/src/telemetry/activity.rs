//! The GPM loop's plumbing: a thread of its own that closes one activity window per
//! GPU every [`ACTIVITY_PERIOD`], and the hub's board of the newest window per GPU that
//! the fast loop attaches to its samples. One GPM sample costs ~0.2 ms and one metrics
//! computation ~1 ms per GPU (REFERENCE.md): far too much for the fast path.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shared::DeviceSample;
use shared::activity::Activity;

use super::now_ms;

/// Length of one GPM window: two samples this far apart.
pub const ACTIVITY_PERIOD: Duration = Duration::from_secs(1);

/// A window older than this is not shown: the GPM loop stopped or fell far behind.
const STALE_AFTER_MS: u64 = 5_000;

/// Called with each closed window, per GPU index.
pub type ActivitySink = Box<dyn Fn(Vec<(u32, Activity)>) + Send + Sync>;

/// Runs `step` every [`ACTIVITY_PERIOD`] and hands its windows to `sink` until `stop` is set.
pub fn run_loop(mut step: impl FnMut(u64) -> Vec<(u32, Activity)>, sink: &ActivitySink, stop: &AtomicBool) {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match catch_unwind(AssertUnwindSafe(|| step(now_ms()))) {
            Ok(windows) if !windows.is_empty() => sink(windows),
            Ok(_) => {}
            Err(_) => tracing::error!("the GPM loop panicked; retrying next period"),
        }
        next += ACTIVITY_PERIOD;
        // Sleep in short steps so a stop request is seen quickly.
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next {
                next = next.max(now - ACTIVITY_PERIOD / 2);
                break;
            }
            std::thread::sleep((next - now).min(Duration::from_millis(100)));
        }
    }
}

/// Starts [`run_loop`] on a thread named `gpudash-gpm`.
pub fn spawn_loop(
    step: impl FnMut(u64) -> Vec<(u32, Activity)> + Send + 'static,
    sink: ActivitySink,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("gpudash-gpm".into())
        .spawn(move || run_loop(step, &sink, &stop))
        .map_err(|e| tracing::warn!("cannot start the GPM loop: {e}"))
        .ok()
}

/// The newest window of every GPU, as the GPM loop hands them over.
#[derive(Debug, Default)]
pub struct ActivityBoard {
    latest: HashMap<u32, Activity>,
}

impl ActivityBoard {
    pub fn update(&mut self, windows: Vec<(u32, Activity)>) {
        self.latest.extend(windows);
    }

    /// Gives each answering sample its GPU's newest window, unless that is stale.
    pub fn attach(&self, samples: &mut [DeviceSample]) {
        for s in samples.iter_mut().filter(|s| s.lost.is_none()) {
            s.activity = self
                .latest
                .get(&s.index)
                .filter(|a| s.timestamp_ms.saturating_sub(a.timestamp_ms) <= STALE_AFTER_MS)
                .cloned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_get_fresh_windows_only() {
        let mut board = ActivityBoard::default();
        board.update(vec![(0, Activity { timestamp_ms: 10_000, sm_active: Some(50.0), ..Activity::default() })]);
        let mut samples = [
            DeviceSample { index: 0, timestamp_ms: 11_000, ..Default::default() },
            DeviceSample { index: 1, timestamp_ms: 11_000, ..Default::default() },
        ];
        board.attach(&mut samples);
        assert_eq!(samples[0].activity.as_ref().and_then(|a| a.sm_active), Some(50.0));
        assert_eq!(samples[1].activity, None);
        samples[0].timestamp_ms = 16_000;
        board.attach(&mut samples);
        assert_eq!(samples[0].activity, None, "stale");
    }

    #[test]
    fn the_loop_stops_on_request() {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink: ActivitySink = Box::new(move |w| {
            let _ = tx.send(w.len());
        });
        let thread = spawn_loop(|t| vec![(0, Activity::unavailable(t, "test"))], sink, stop.clone()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
        stop.store(true, Ordering::Relaxed);
        thread.join().unwrap();
    }
}
