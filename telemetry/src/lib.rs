//! Where samples are born: a [`GpuSource`] (NVML or the simulator) read by a
//! sampler thread, published through the [`Telemetry`] hub.

pub mod activity;
mod history;
mod hub;
pub mod identity;
pub mod idle;
pub mod nvml;
pub mod procfs;
mod sampler;
pub mod simulator;
pub mod topology;

pub use activity::ActivitySink;
pub use history::MemoryRing;
pub use hub::{Telemetry, Update, Version};
pub use idle::IdleRule;
pub use sampler::Sampler;
pub use shared::readings::{ComputeProcess, DeviceMemory, GpuReadings, QueryError};

use shared::health::XidEvent;
use shared::{Details, DeviceInfo, DeviceSample, HostInfo};

/// Called with each XID error as the driver reports it.
pub type XidSink = Box<dyn Fn(XidEvent) + Send + Sync>;

/// Anything that can report the GPUs of this host.
///
/// Implementations do blocking work (NVML calls) and are only ever called
/// from the sampler's threads, never from the async runtime: `sample` from
/// the fast loop, `details` from the slow one, concurrently.
pub trait GpuSource: Send + Sync + 'static {
    /// Host facts, read once at start.
    fn host(&self) -> HostInfo;
    /// Static facts of every device, read once at start.
    fn devices(&self) -> Vec<DeviceInfo>;
    /// The fast loop: one reading of every device's gauges, stamped with `timestamp_ms`.
    fn sample(&self, timestamp_ms: u64) -> Vec<DeviceSample>;
    /// The slow loop: health counters, PCIe traffic, energy and processes.
    fn details(&self, timestamp_ms: u64) -> Details;
    /// Starts watching for XID errors on a thread of its own, until `stop` is set.
    /// Sources that cannot report XIDs return `None`.
    fn watch_xids(
        &self,
        sink: XidSink,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let _ = (sink, stop);
        None
    }
    /// Starts the GPM loop on a thread of its own, until `stop` is set: every
    /// [`activity::ACTIVITY_PERIOD`] it closes one window per GPU (what the SMs really did)
    /// and hands it to `sink`. Sources without activity figures return `None`.
    fn watch_activity(
        &self,
        sink: ActivitySink,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let _ = (sink, stop);
        None
    }
    /// How often the slow loop reads details when sampling every `interval`: never faster than
    /// [`sampler::DETAILS_PERIOD`] on hardware, where a read blocks for tens of ms.
    fn details_period(&self, interval: std::time::Duration) -> std::time::Duration {
        sampler::DETAILS_PERIOD.max(interval)
    }
    /// How the GPUs connect (NVLink, PCIe, peer-to-peer status), read once at start. Blocking.
    fn topology(&self) -> Option<shared::topology::Topology> {
        None
    }
    /// Live readings on demand (the lab's guards), sharing the source's hardware handle;
    /// `None` where the source has no hardware to ask (the simulator, no driver).
    fn device_query(&self) -> Option<std::sync::Arc<dyn GpuReadings>> {
        None
    }
}

/// Milliseconds since the Unix epoch, the time unit of every sample (kept in `base::clock`).
pub use base::clock::now_ms;

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
                history: false,
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
    fn sample(&self, _timestamp_ms: u64) -> Vec<DeviceSample> {
        Vec::new()
    }
    fn details(&self, _timestamp_ms: u64) -> Details {
        Details::default()
    }
}
