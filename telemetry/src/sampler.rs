//! The sampler's threads, off the async runtime: a fast loop for gauges, a
//! slow loop for health, PCIe traffic, energy and processes, the GPM loop
//! (SM and tensor activity), and the source's own XID watcher.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use base::clock::Stopwatch;

use super::identity::Identities;
use super::{ActivitySink, GpuSource, Telemetry, now_ms};
use store::Recorder;

/// Period of the slow loop. NVML's PCIe counters block for 20 ms per
/// direction and GPU, and total energy costs ~4 ms: never on the fast path.
pub const DETAILS_PERIOD: Duration = Duration::from_secs(2);

/// The running sampler threads; stopping (or dropping) them ends them all.
#[derive(Debug)]
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    stop_details: Option<mpsc::Sender<()>>,
    stop_xids: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `source` every `interval` into `hub`, and into history when a recorder is
    /// given; `identities` names each process's workload and owner in the slow loop.
    pub fn spawn(
        source: Box<dyn GpuSource>,
        hub: Arc<Telemetry>,
        recorder: Option<Recorder>,
        identities: Option<Identities>,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let source: Arc<dyn GpuSource> = Arc::from(source);
        let (stop, stopped) = mpsc::channel();
        let (stop_details, details_stopped) = mpsc::channel();
        let stop_xids = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();

        let (fast_source, fast_hub) = (source.clone(), hub.clone());
        threads.push(std::thread::Builder::new().name("gpudash-sampler".into()).spawn(move || {
            every(interval, &stopped, |timestamp_ms| {
                let mut samples = fast_source.sample(timestamp_ms);
                // The GPM loop's newest window rides along: a lock and a copy, no NVML call.
                fast_hub.attach_activity(&mut samples);
                if let Some(recorder) = &recorder {
                    recorder.record(&samples);
                }
                fast_hub.publish(samples, timestamp_ms);
            });
            // Dropping the recorder here flushes pending history.
        })?);

        let (slow_source, slow_hub) = (source.clone(), hub.clone());
        let details_period = source.details_period(interval);
        threads.push(std::thread::Builder::new().name("gpudash-details".into()).spawn(move || {
            every(details_period, &details_stopped, |timestamp_ms| {
                let mut details = slow_source.details(timestamp_ms);
                if let Some(identities) = &identities {
                    identities.attach(&mut details);
                }
                slow_hub.publish_details(details);
            });
        })?);

        let activity_hub = hub.clone();
        // Full rate always. Slowing to 5 s windows while no page watched (`hub.watchers()`) was measured
        // on the H200 and broke what the lab shows of a run (GPM during an 18 s GEMM run read 20%
        // instead of >90%) and /metrics' alignment with a load (docs/runs/gpu/session12-gpm-5s.log);
        // a lab run must count as a watcher before the slower rate can come back.
        let watchers = super::activity::Watchers::always();
        let sink = ActivitySink::new(Box::new(move |windows| activity_hub.publish_activity(windows)), watchers);
        if let Some(gpm) = source.watch_activity(sink, stop_xids.clone()) {
            threads.push(gpm);
        }
        let xid_hub = hub;
        if let Some(watcher) = source.watch_xids(Box::new(move |event| xid_hub.record_xid(event)), stop_xids.clone()) {
            threads.push(watcher);
        }
        Ok(Self { stop: Some(stop), stop_details: Some(stop_details), stop_xids, threads })
    }

    /// Asks the threads to finish and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        drop(self.stop.take());
        drop(self.stop_details.take());
        self.stop_xids.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Calls `work` at a fixed rate until `stopped` fires or its sender is dropped. The rate is real
/// time (the GPUs' readings are taken in it), so the ticks fall on the system's monotonic clock.
fn every(period: Duration, stopped: &mpsc::Receiver<()>, mut work: impl FnMut(u64)) {
    let mut next = Stopwatch::now();
    loop {
        // A bug in a source must not end telemetry: log it and try again next period.
        if catch_unwind(AssertUnwindSafe(|| work(now_ms()))).is_err() {
            tracing::error!("the GPU source panicked while sampling; retrying next period");
        }
        next += period;
        let now = Stopwatch::now();
        if next < now {
            // The work took longer than the period: skip the missed periods instead of bursting.
            tracing::debug!(behind = ?(now - next), "sampler fell behind");
            next = now;
        }
        match stopped.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use shared::{Details, DeviceInfo, DeviceSample, HostInfo};

    use super::*;
    use crate::simulator::Simulator;

    struct Flaky {
        inner: Simulator,
        calls: AtomicU32,
    }

    impl GpuSource for Flaky {
        fn host(&self) -> HostInfo {
            self.inner.host()
        }
        fn devices(&self) -> Vec<DeviceInfo> {
            self.inner.devices()
        }
        fn sample(&self, timestamp_ms: u64) -> Vec<DeviceSample> {
            let calls = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
            assert!(calls.is_multiple_of(2), "injected fault");
            self.inner.sample(timestamp_ms)
        }
        fn details(&self, timestamp_ms: u64) -> Details {
            self.inner.details(timestamp_ms)
        }
    }

    #[test]
    fn keeps_sampling_after_a_source_panics_and_stops_on_request() {
        let inner = Simulator::new(1, 100);
        let hub = Arc::new(Telemetry::new(inner.host(), inner.devices()));
        let flaky = Flaky { inner, calls: AtomicU32::new(0) };
        let sampler = Sampler::spawn(Box::new(flaky), hub.clone(), None, None, Duration::from_millis(100)).unwrap();
        let deadline = base::clock::Deadline::after(Duration::from_secs(5));
        while hub.last_tick().0 < 2 && !deadline.passed() {
            std::thread::sleep(Duration::from_millis(20));
        }
        sampler.stop();
        let (seq, _) = hub.last_tick();
        assert!(seq >= 2, "only {seq} ticks despite every other call succeeding");
        assert!(!hub.details().health.is_empty(), "the slow loop ran");
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(hub.last_tick().0, seq, "ticks after stop");
    }
}
