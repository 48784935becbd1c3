//! Readings asked for on demand rather than sampled: a GPU's memory and its compute
//! processes at the moment the lab decides whether a run may start.
//!
//! The NVML source answers over its own handle, so the server opens NVML once; the
//! lab reaches it through [`super::Telemetry::device_query`].

/// A device's memory as the driver sees it, all processes included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub used: u64,
    pub free: u64,
}

/// A process with a compute context on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeProcess {
    /// The host PID (inside a container, not the one the process sees).
    pub pid: u32,
    pub used_bytes: Option<u64>,
}

/// Why a GPU could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The GPU did not answer at all (lost, or no such index).
    #[error("{0}")]
    Device(String),
    /// The GPU answered but would not list its processes.
    #[error("NVML cannot list processes: {0}")]
    Processes(String),
}

/// Live readings of the GPUs, on demand. Blocking (NVML): call off the async runtime.
pub trait DeviceQuery: Send + Sync + std::fmt::Debug {
    /// Used and free memory of GPU `index` now, or `None` when it does not say.
    fn memory(&self, index: u32) -> Option<DeviceMemory>;
    /// Processes computing on GPU `index` now, as the driver lists them (host PIDs).
    fn compute_processes(&self, index: u32) -> Result<Vec<ComputeProcess>, QueryError>;
}
