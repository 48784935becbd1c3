//! What the driver says about a GPU when asked on demand (not sampled): its memory and the
//! processes computing on it. Telemetry answers with these (`DeviceQuery`, over NVML) and the lab's
//! guards read them (`GpuReadings`, `DeviceProbe`): one definition for both sides of that wiring.
//! They cross the Lab worker's pipe too (its probe asks the dashboard), so they serialize.

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
