//! The sampler thread: reads the [`GpuSource`] at a fixed rate, off the async runtime.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{GpuSource, Telemetry, now_ms};
use crate::store::Recorder;

/// A running sampler thread; stopping (or dropping) it ends the thread.
#[derive(Debug)]
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `source` every `interval` into `hub`, and into history when a recorder is given.
    pub fn spawn(
        source: Box<dyn GpuSource>,
        hub: Arc<Telemetry>,
        recorder: Option<Recorder>,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("gpudash-sampler".into())
            .spawn(move || run(source, &hub, recorder, interval, &stopped))?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }

    /// Asks the thread to finish and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(
    mut source: Box<dyn GpuSource>,
    hub: &Telemetry,
    recorder: Option<Recorder>,
    interval: Duration,
    stopped: &mpsc::Receiver<()>,
) {
    let mut next = Instant::now();
    loop {
        let timestamp_ms = now_ms();
        // A bug in a source must not end live telemetry: log it and try again next period.
        match catch_unwind(AssertUnwindSafe(|| source.sample(timestamp_ms))) {
            Ok(samples) => {
                if let Some(recorder) = &recorder {
                    recorder.record(&samples);
                }
                hub.publish(samples, timestamp_ms);
            }
            Err(_) => {
                tracing::error!("the GPU source panicked while sampling; retrying next period")
            }
        }
        next += interval;
        let now = Instant::now();
        if next < now {
            // Sampling took longer than the period: skip the missed periods instead of bursting.
            tracing::debug!(behind = ?(now - next), "sampler fell behind");
            next = now;
        }
        match stopped.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            // Dropping the recorder on return flushes pending history.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use shared::{DeviceInfo, DeviceSample, HostInfo};

    use super::*;
    use crate::telemetry::simulator::Simulator;

    struct Flaky {
        inner: Simulator,
        calls: u32,
    }

    impl GpuSource for Flaky {
        fn host(&self) -> HostInfo {
            self.inner.host()
        }
        fn devices(&self) -> Vec<DeviceInfo> {
            self.inner.devices()
        }
        fn sample(&mut self, timestamp_ms: u64) -> Vec<DeviceSample> {
            self.calls += 1;
            assert!(self.calls % 2 == 0, "injected fault");
            self.inner.sample(timestamp_ms)
        }
    }

    #[test]
    fn keeps_sampling_after_a_source_panics_and_stops_on_request() {
        let inner = Simulator::new(1, 100);
        let hub = Arc::new(Telemetry::new(inner.host(), inner.devices()));
        let sampler =
            Sampler::spawn(Box::new(Flaky { inner, calls: 0 }), hub.clone(), None, Duration::from_millis(100)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while hub.last_tick().0 < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        sampler.stop();
        let (seq, _) = hub.last_tick();
        assert!(seq >= 2, "only {seq} ticks despite every other call succeeding");
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(hub.last_tick().0, seq, "ticks after stop");
    }
}
