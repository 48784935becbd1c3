//! The GPM loop's plumbing: a thread of its own that closes one activity window per
//! GPU every [`ACTIVITY_PERIOD`] while a page watches (every [`UNWATCHED_PERIOD`] while
//! none does), and the hub's board of the newest window per GPU that the fast loop
//! attaches to its samples. One GPM sample costs ~0.2 ms and one metrics computation
//! ~1 ms per GPU on an H200 (docs/runs/gpu/session11-h200.log): far too much for the fast path.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use base::clock::Stopwatch;

use shared::DeviceSample;
use shared::activity::Activity;

use super::now_ms;

/// Length of one GPM window while a page watches: two samples this far apart.
pub const ACTIVITY_PERIOD: Duration = Duration::from_secs(1);

/// Length of one window while no page watches. The idle rule, usage and `/metrics` still get SM
/// activity (dcgm-exporter collects every 30 s by default), at a fifth of the GPM loop's cost.
pub const UNWATCHED_PERIOD: Duration = Duration::from_secs(5);

/// A window older than this is not shown: the GPM loop stopped or fell far behind.
const STALE_AFTER_MS: u64 = 12_000;

/// Hands the GPM loop's closed windows (per GPU index) to the hub.
pub type Publish = Box<dyn Fn(Vec<(u32, Activity)>) + Send + Sync>;

/// Where the GPM loop hands each closed window, and whom it asks whether a page watches.
pub struct ActivitySink {
    publish: Publish,
    watchers: Watchers,
}

impl ActivitySink {
    pub fn new(publish: Publish, watchers: Watchers) -> Self {
        Self { publish, watchers }
    }

    /// The window length to keep now: [`ACTIVITY_PERIOD`] while a page watches, else [`UNWATCHED_PERIOD`].
    pub fn period(&self) -> Duration {
        if self.watchers.any() { ACTIVITY_PERIOD } else { UNWATCHED_PERIOD }
    }
}

/// How many pages watch the live stream (open WebSockets). A source whose readings cost nothing
/// (the simulator) counts as always watched.
#[derive(Debug, Clone, Default)]
pub struct Watchers {
    count: Arc<AtomicUsize>,
    always: bool,
}

impl Watchers {
    /// Watchers that always count as watching.
    pub fn always() -> Self {
        Self { count: Arc::default(), always: true }
    }

    /// Counts one watcher until the returned guard is dropped.
    pub fn watch(&self) -> Watching {
        self.count.fetch_add(1, Ordering::Relaxed);
        Watching(self.count.clone())
    }

    pub fn any(&self) -> bool {
        self.always || self.count.load(Ordering::Relaxed) > 0
    }
}

/// One page watching; dropping it (the socket closed) stops counting it.
#[derive(Debug)]
pub struct Watching(Arc<AtomicUsize>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs `step` once per window ([`ActivitySink::period`]) and hands its windows to `sink` until
/// `stop` is set. A page that opens mid-window shortens the window to [`ACTIVITY_PERIOD`] at once.
pub fn run_loop(mut step: impl FnMut(u64) -> Vec<(u32, Activity)>, sink: &ActivitySink, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        // A window is a measured span: real time.
        let opened = Stopwatch::start();
        match catch_unwind(AssertUnwindSafe(|| step(now_ms()))) {
            Ok(windows) if !windows.is_empty() => (sink.publish)(windows),
            Ok(_) => {}
            Err(_) => tracing::error!("the GPM loop panicked; retrying next period"),
        }
        // Sleep in quarter-second steps so a stop request, or a page opening, is seen quickly (each
        // wake-up costs CPU too, so not 100 ms steps).
        while !stop.load(Ordering::Relaxed) {
            let (period, open) = (sink.period(), opened.elapsed());
            if open >= period {
                break;
            }
            std::thread::sleep((period - open).min(Duration::from_millis(250)));
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
        samples[0].timestamp_ms = 10_000 + STALE_AFTER_MS + 1;
        board.attach(&mut samples);
        assert_eq!(samples[0].activity, None, "stale");
    }

    #[test]
    fn the_loop_stops_on_request() {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = ActivitySink::new(
            Box::new(move |w| {
                let _ = tx.send(w.len());
            }),
            Watchers::always(),
        );
        let thread = spawn_loop(|t| vec![(0, Activity::unavailable(t, "test"))], sink, stop.clone()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
        stop.store(true, Ordering::Relaxed);
        thread.join().unwrap();
    }

    /// Unwatched, a window lasts [`UNWATCHED_PERIOD`]; a page opening closes it after
    /// [`ACTIVITY_PERIOD`], and windows stay that short while it watches.
    #[test]
    fn windows_are_short_only_while_a_page_watches() {
        let stop = Arc::new(AtomicBool::new(false));
        let watchers = Watchers::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = ActivitySink::new(
            Box::new(move |_| {
                let _ = tx.send(Stopwatch::now());
            }),
            watchers.clone(),
        );
        assert_eq!(sink.period(), UNWATCHED_PERIOD);
        let thread = spawn_loop(|t| vec![(0, Activity::unavailable(t, "test"))], sink, stop.clone()).unwrap();
        let first = rx.recv_timeout(Duration::from_secs(5)).expect("the first window");
        assert!(rx.recv_timeout(Duration::from_millis(1500)).is_err(), "unwatched, no window before 5 s");
        let watching = watchers.watch();
        let second = rx.recv_timeout(Duration::from_secs(5)).expect("a page opened: a window within a second");
        assert!(second - first < UNWATCHED_PERIOD, "{:?}", second - first);
        let third = rx.recv_timeout(Duration::from_secs(5)).expect("watched: 1 s windows");
        assert!(third - second < Duration::from_millis(2500), "{:?}", third - second);
        drop(watching);
        assert!(!watchers.any());
        stop.store(true, Ordering::Relaxed);
        thread.join().unwrap();
    }
}
