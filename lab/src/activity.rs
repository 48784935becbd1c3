//! What the GPU's SMs and tensor cores did while a run ran: telemetry's GPM windows
//! (one a second, `telemetry/activity.rs`) watched from beside the run and summarized
//! into its result, so a GEMM's run shows the tensor activity it really drove.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shared::activity::Activity;
use shared::lab::{Figure, RunResult};

use super::guards::DeviceProbe;
use super::stats;
use base::clock::now_ms;

/// How often the watcher asks for the newest window (a window closes once a second).
const POLL: Duration = Duration::from_millis(250);

/// Runs `f` on this thread while a scoped thread collects `device`'s GPM windows; returns `f`'s
/// output and the windows whose middle lies inside the run.
pub fn watch<T>(probe: &dyn DeviceProbe, device: u32, f: impl FnOnce() -> T) -> (T, Vec<Activity>) {
    let started = now_ms();
    let done = AtomicBool::new(false);
    let (out, mut windows) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut seen: Vec<Activity> = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                if let Some(window) = probe.activity(device)
                    && seen.last().is_none_or(|last| window.timestamp_ms > last.timestamp_ms)
                {
                    seen.push(window);
                }
                if finished {
                    return seen;
                }
                std::thread::park_timeout(POLL);
            }
        });
        let finish = Finish(&done, watcher.thread().clone());
        let out = f();
        drop(finish);
        (out, watcher.join().unwrap_or_default())
    });
    let ended = now_ms();
    windows.retain(|w| (started..=ended).contains(&w.timestamp_ms.saturating_sub(w.window_ms / 2)));
    (out, windows)
}

/// Tells the watcher to stop when dropped, so it stops even if the run unwinds.
struct Finish<'a>(&'a AtomicBool, std::thread::Thread);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
        self.1.unpark();
    }
}

/// Adds the run's GPM figures (SM and tensor activity, %) and a note saying what they are; with no
/// figures, a note saying why. Nothing when no window fell inside the run. The figures summarize the
/// windows in which the SMs were busy at all (≥ 1%): a run also spends seconds on the host (inputs,
/// checks), and a median over those idle windows would read 0% for a GEMM that drove 96%.
pub fn summarize(result: &mut RunResult, windows: &[Activity], simulated: bool) {
    let Some(last) = windows.last() else { return };
    let label = if simulated { " (simulated)" } else { "" };
    let busy: Vec<&Activity> =
        windows.iter().filter(|w| w.sm_active.is_some_and(|sm| sm >= shared::activity::IDLE_SM_PERCENT)).collect();
    let busy_windows = busy.len();
    let counted: Vec<&Activity> = if busy.is_empty() { windows.iter().collect() } else { busy };
    let series = |pick: fn(&Activity) -> Option<f64>| counted.iter().filter_map(|w| pick(w)).collect::<Vec<_>>();
    let (sm, tensor) = (series(|w| w.sm_active), series(|w| w.tensor_active));
    if sm.is_empty() && tensor.is_empty() {
        let reason = last.unavailable.as_deref().unwrap_or("the GPU reported no activity figures");
        result.notes.push(format!("SM and tensor activity during the run: n/a ({reason})."));
        return;
    }
    let mut parts = Vec::new();
    for (what, values) in [("SM activity", &sm), ("tensor activity", &tensor)] {
        let Some(stats) = stats::summarize(values) else { continue };
        parts.push(format!("{what} median {:.1}%, peak {:.1}%", stats.median, stats.max));
        result.figures.push(Figure { name: format!("{what} during the run (GPM)"), unit: "%".into(), stats });
    }
    result.notes.push(format!(
        "During the run, {} GPM window{} of ~{:.1} s{label}, {busy_windows} with the SMs busy (≥ 1%); over {}: \
         {}. GPU util counts time any kernel ran; these count how busy the SMs and the tensor cores were.",
        windows.len(),
        if windows.len() == 1 { "" } else { "s" },
        last.window_ms as f64 / 1e3,
        if busy_windows > 0 { "those" } else { "all of them" },
        parts.join("; ")
    ));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::guards::{ComputeProcess, DeviceMemory, LinkPeaks, QueryError};
    use shared::lab::ChartSpec;

    /// A probe whose window moves on each time it is asked.
    struct Ticking(Mutex<u64>);

    impl DeviceProbe for Ticking {
        fn memory(&self, _: u32) -> Option<DeviceMemory> {
            None
        }
        fn compute_processes(&self, _: u32) -> Result<Vec<ComputeProcess>, QueryError> {
            Ok(Vec::new())
        }
        fn peaks(&self, _: u32) -> LinkPeaks {
            LinkPeaks::default()
        }
        fn activity(&self, _: u32) -> Option<Activity> {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            Some(Activity {
                timestamp_ms: now_ms() + 40,
                window_ms: 80,
                sm_active: Some(90.0 + *n as f64 % 3.0),
                tensor_active: Some(80.0),
                ..Activity::default()
            })
        }
    }

    #[test]
    fn windows_seen_during_the_run_become_figures_and_a_note() {
        let probe = Ticking(Mutex::new(0));
        let (out, windows) = watch(&probe, 0, || {
            std::thread::sleep(Duration::from_millis(600)); // the "run": long enough for a few polls
            7
        });
        assert_eq!(out, 7);
        assert!(windows.len() >= 2, "{windows:?}");
        assert!(windows.windows(2).all(|w| w[0].timestamp_ms < w[1].timestamp_ms));
        let mut result = crate::report::empty(ChartSpec::Gantt, "ms");
        summarize(&mut result, &windows, false);
        let names: Vec<_> = result.figures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["SM activity during the run (GPM)", "tensor activity during the run (GPM)"]);
        assert_eq!(result.figures[1].stats.median, 80.0);
        assert!(result.notes[0].contains("tensor activity median 80.0%") && !result.notes[0].contains("simulated"));
    }

    #[test]
    fn windows_spent_on_the_host_do_not_dilute_the_figures() {
        let window = |t: u64, sm: f64, tensor: f64| Activity {
            timestamp_ms: t,
            window_ms: 1000,
            sm_active: Some(sm),
            tensor_active: Some(tensor),
            ..Activity::default()
        };
        // Inputs made on the host, two windows of GEMMs, the check on the host.
        let windows =
            [window(1000, 0.0, 0.0), window(2000, 96.0, 93.0), window(3000, 97.0, 94.0), window(4000, 0.2, 0.0)];
        let mut result = crate::report::empty(ChartSpec::Gantt, "ms");
        summarize(&mut result, &windows, false);
        assert_eq!(result.figures[1].stats.median, 93.5);
        assert!(result.notes[0].contains("4 GPM windows") && result.notes[0].contains("2 with the SMs busy"));
        let mut idle = crate::report::empty(ChartSpec::Gantt, "ms");
        summarize(&mut idle, &windows[..1], true);
        assert_eq!(idle.figures[0].stats.median, 0.0);
        assert!(idle.notes[0].contains("0 with the SMs busy") && idle.notes[0].contains("all of them"));
    }

    #[test]
    fn without_figures_the_note_says_why_and_without_windows_nothing_is_added() {
        let mut result = crate::report::empty(ChartSpec::Gantt, "ms");
        summarize(&mut result, &[], true);
        assert!(result.notes.is_empty() && result.figures.is_empty());
        let refused = Activity::unavailable(5_000, "MIG is on");
        summarize(&mut result, &[refused], true);
        assert!(result.figures.is_empty());
        assert_eq!(result.notes, ["SM and tensor activity during the run: n/a (MIG is on)."]);
    }
}
