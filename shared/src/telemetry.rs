//! What the server knows about the host and each GPU: static facts and samples.

use serde::{Deserialize, Serialize};

/// Facts about the machine gpudash runs on and where its figures come from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HostInfo {
    pub hostname: String,
    /// NVIDIA driver version, e.g. "580.159.04".
    pub driver_version: Option<String>,
    /// Highest CUDA version the driver supports, e.g. "13.0".
    pub cuda_driver_version: Option<String>,
    /// True when every figure comes from the built-in simulator, not hardware.
    pub simulated: bool,
    /// Why no GPU can be shown (e.g. the NVML loader's message), when that is so.
    pub gpu_error: Option<String>,
    /// Sampling period in milliseconds.
    pub interval_ms: u64,
    /// gpudash version that serves this.
    pub version: String,
    /// The history database file, or `None` when history is off.
    #[serde(default)]
    pub history_path: Option<String>,
}

/// CUDA compute capability, e.g. 9.0 for Hopper.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

/// What does not change while the server runs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// NVML index (the order `nvidia-smi` uses).
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub pci_bus_id: String,
    pub compute_capability: Option<ComputeCapability>,
    /// Framebuffer memory in bytes.
    pub memory_total: u64,
    /// True for a device of the simulator.
    pub simulated: bool,
}

/// One reading of a device's gauges.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct DeviceSample {
    pub index: u32,
    /// When the reading was taken, ms since the Unix epoch.
    pub timestamp_ms: u64,
    pub memory_used: Option<u64>,
    pub memory_free: Option<u64>,
    /// Percent of time a kernel ran over the driver's last sample period.
    pub gpu_util: Option<u32>,
    /// Percent of time device memory was read or written.
    pub mem_util: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_draw_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
}

/// A point of the memory-used chart.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPoint {
    pub timestamp_ms: u64,
    pub memory_used: u64,
}

/// A device's static facts and its latest reading.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Device {
    #[serde(flatten)]
    pub info: DeviceInfo,
    pub latest: Option<DeviceSample>,
}

/// Body of `GET /api/devices`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DevicesResponse {
    pub host: HostInfo,
    pub devices: Vec<Device>,
}

impl DeviceSample {
    /// Memory used as a fraction of `total`, when both are known.
    pub fn memory_fraction(&self, total: u64) -> Option<f64> {
        let used = self.memory_used?;
        (total > 0).then(|| used as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fields_serialize_as_null_and_read_back() {
        let s = DeviceSample { index: 3, timestamp_ms: 1, ..Default::default() };
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"gpu_util\":null"), "{json}");
        assert_eq!(serde_json::from_str::<DeviceSample>(&json).unwrap(), s);
    }

    #[test]
    fn memory_fraction_needs_used_and_total() {
        let s = DeviceSample { memory_used: Some(25), ..Default::default() };
        assert_eq!(s.memory_fraction(100), Some(0.25));
        assert_eq!(s.memory_fraction(0), None);
        assert_eq!(DeviceSample::default().memory_fraction(100), None);
    }
}
