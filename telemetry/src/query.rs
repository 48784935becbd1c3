//! Readings asked for on demand rather than sampled: a GPU's memory and its compute
//! processes at the moment the lab decides whether a run may start.
//!
//! The NVML source answers over its own handle, so the server opens NVML once; the
//! lab reaches it through [`super::Telemetry::device_query`].

pub use shared::readings::{ComputeProcess, DeviceMemory, QueryError};

/// Live readings of the GPUs, on demand. Blocking (NVML): call off the async runtime.
pub trait DeviceQuery: Send + Sync + std::fmt::Debug {
    /// Used and free memory of GPU `index` now, or `None` when it does not say.
    fn memory(&self, index: u32) -> Option<DeviceMemory>;
    /// Processes computing on GPU `index` now, as the driver lists them (host PIDs).
    fn compute_processes(&self, index: u32) -> Result<Vec<ComputeProcess>, QueryError>;
}
