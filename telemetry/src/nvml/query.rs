//! The lab's on-demand readings ([`shared::readings::GpuReadings`]) over the source's NVML handle.

use std::sync::Arc;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use shared::readings::{ComputeProcess, DeviceMemory, GpuReadings, QueryError};

/// Asks NVML directly, each call on the caller's thread (the lab's workers or a blocking task).
pub struct NvmlQuery {
    nvml: Arc<Nvml>,
}

impl NvmlQuery {
    pub(super) fn new(nvml: Arc<Nvml>) -> Self {
        Self { nvml }
    }

    /// NVML's own version, e.g. "12.580.95.05" (`gpudash doctor` reports it beside the driver's).
    pub fn nvml_version(&self) -> Option<String> {
        self.nvml.sys_nvml_version().ok()
    }
}

impl std::fmt::Debug for NvmlQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlQuery")
    }
}

impl GpuReadings for NvmlQuery {
    fn memory(&self, index: u32) -> Option<DeviceMemory> {
        let m = self.nvml.device_by_index(index).ok()?.memory_info().ok()?;
        Some(DeviceMemory { used: m.used, free: m.free })
    }

    fn compute_processes(&self, index: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        let device = self.nvml.device_by_index(index).map_err(|e| QueryError::Device(e.to_string()))?;
        let list = device.running_compute_processes().map_err(|e| QueryError::Processes(e.to_string()))?;
        Ok(list
            .into_iter()
            .map(|p| ComputeProcess {
                pid: p.pid,
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect())
    }
}
