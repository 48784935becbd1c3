//! What the driver says about a GPU when asked on demand (not sampled): its memory and the
//! processes computing on it, and the one trait that asks ([`GpuReadings`]): telemetry answers it
//! over NVML, the server's wiring adds the hub's GPM window and the kubelet's pod, and the lab's
//! guards read it through their `DeviceProbe`. The values cross the Lab worker's pipe too (its probe
//! asks the dashboard), so they serialize.

use serde::{Deserialize, Serialize};

/// A device's memory as the driver sees it, all processes included.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub used: u64,
    pub free: u64,
}

/// A process with a compute context on a GPU.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeProcess {
    /// The host PID (inside a container, not the one the process sees).
    pub pid: u32,
    pub used_bytes: Option<u64>,
}

/// Why a GPU could not be asked.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The GPU did not answer at all (lost, or no such index).
    #[error("{0}")]
    Device(String),
    /// The GPU answered but would not list its processes.
    #[error("NVML cannot list processes: {0}")]
    Processes(String),
}

/// A GPU's memory and processes now, asked on demand. Blocking (NVML on hardware): call off the
/// async runtime.
pub trait GpuReadings: Send + Sync + std::fmt::Debug {
    /// Used and free memory of `device` now, or `None` when it does not say.
    fn memory(&self, device: u32) -> Option<DeviceMemory>;
    /// Processes computing on `device` now, as the driver lists them (host PIDs).
    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError>;
    /// `device`'s newest GPM window, for what a run drove the SMs and tensor cores to.
    fn activity(&self, device: u32) -> Option<crate::activity::Activity> {
        let _ = device;
        None
    }
    /// The pod the scheduler gave `device` to (the kubelet's answer), if any.
    fn scheduled(&self, device: u32) -> Option<crate::workload::ScheduledGpu> {
        let _ = device;
        None
    }
}
