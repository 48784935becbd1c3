//! Where samples are born: a [`GpuSource`] (NVML or the simulator) read by a
//! sampler thread, published through the [`Telemetry`] hub.

mod history;
mod hub;
pub mod nvml;
mod sampler;
pub mod simulator;

pub use history::MemoryRing;
pub use hub::{Frame, Telemetry, encode};
pub use sampler::Sampler;

use shared::{DeviceInfo, DeviceSample, HostInfo};

/// Anything that can report the GPUs of this host.
///
/// Implementations do blocking work (NVML calls) and are only ever called
/// from the sampler thread, never from the async runtime.
pub trait GpuSource: Send + 'static {
    /// Host facts, read once at start.
    fn host(&self) -> HostInfo;
    /// Static facts of every device, read once at start.
    fn devices(&self) -> Vec<DeviceInfo>;
    /// One reading of every device, stamped with `timestamp_ms`.
    fn sample(&mut self, timestamp_ms: u64) -> Vec<DeviceSample>;
}

/// Milliseconds since the Unix epoch, the time unit of every sample.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Hostname for display, or "unknown" when the OS gives none that is valid UTF-8.
pub fn hostname() -> String {
    gethostname::gethostname().into_string().unwrap_or_else(|_| "unknown".to_owned())
}

/// Stands in for NVML when it cannot load: no devices, and the reason.
#[derive(Debug)]
pub struct NoGpus {
    host: HostInfo,
}

impl NoGpus {
    pub fn new(reason: String, interval_ms: u64) -> Self {
        Self {
            host: HostInfo {
                hostname: hostname(),
                driver_version: None,
                cuda_driver_version: None,
                simulated: false,
                gpu_error: Some(reason),
                interval_ms,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                history_path: None,
            },
        }
    }
}

impl GpuSource for NoGpus {
    fn host(&self) -> HostInfo {
        self.host.clone()
    }
    fn devices(&self) -> Vec<DeviceInfo> {
        Vec::new()
    }
    fn sample(&mut self, _timestamp_ms: u64) -> Vec<DeviceSample> {
        Vec::new()
    }
}
