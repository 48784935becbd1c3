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
    /// True when the server records history (`/api/history` answers). The
    /// database's path stays in the server's log: it is nothing a viewer needs.
    #[serde(default)]
    pub history: bool,
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
    /// Highest clocks the device supports, MHz.
    #[serde(default)]
    pub max_clocks: Clocks,
    /// Highest PCIe link the device supports.
    #[serde(default)]
    pub pcie_max: Option<PcieLink>,
    /// Memory bus width in bits (HBM peak = width / 8 × 2 × memory clock).
    #[serde(default)]
    pub memory_bus_width: Option<u32>,
    /// Number of NVLink links the device has (0 when none).
    #[serde(default)]
    pub nvlink_links: u32,
    /// Temperature at which the GPU starts slowing its clocks to cool down, °C (NVML's slowdown threshold).
    #[serde(default)]
    pub slowdown_temp_c: Option<u32>,
    /// Temperature at which the GPU shuts down to protect itself, °C (NVML's shutdown threshold).
    #[serde(default)]
    pub shutdown_temp_c: Option<u32>,
}

/// Graphics, SM and memory clocks in MHz.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Clocks {
    pub graphics_mhz: Option<u32>,
    pub sm_mhz: Option<u32>,
    pub memory_mhz: Option<u32>,
}

/// A PCIe link's generation and lane count.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieLink {
    pub generation: u32,
    pub width: u32,
}

impl PcieLink {
    /// Usable bandwidth per direction in bytes/s, after line encoding
    /// (8b/10b for gen 1–2, 128b/130b for gen 3–5, 242b/256b for gen 6).
    pub fn bandwidth_bytes_per_s(self) -> Option<f64> {
        let (gigatransfers, efficiency) = match self.generation {
            1 => (2.5, 0.8),
            2 => (5.0, 0.8),
            3 => (8.0, 128.0 / 130.0),
            4 => (16.0, 128.0 / 130.0),
            5 => (32.0, 128.0 / 130.0),
            6 => (64.0, 242.0 / 256.0),
            _ => return None,
        };
        Some(gigatransfers * 1e9 * efficiency / 8.0 * f64::from(self.width))
    }
}

/// Why clocks can be held down, as the names nvidia-smi -q uses, snake_cased
/// (the values of [`DeviceSample::clock_events`]).
pub const CLOCK_EVENT_NAMES: [&str; 9] = [
    "idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
];

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
    #[serde(default)]
    pub graphics_clock_mhz: Option<u32>,
    /// Performance state, 0 (fastest) to 15.
    #[serde(default)]
    pub pstate: Option<u32>,
    /// Why clocks are held down right now, by name (e.g. "sw_power_cap"); empty when none.
    #[serde(default)]
    pub clock_events: Option<Vec<String>>,
    /// The power cap in force (may be below `power_limit_mw` when something else caps it).
    #[serde(default)]
    pub enforced_power_limit_mw: Option<u32>,
    /// Fan speeds in percent, one per fan; `None` when the board has no fans NVML can read.
    #[serde(default)]
    pub fan_speeds: Option<Vec<u32>>,
    #[serde(default)]
    pub encoder_util: Option<u32>,
    #[serde(default)]
    pub decoder_util: Option<u32>,
    /// The PCIe link as it runs now (it trains down when idle).
    #[serde(default)]
    pub pcie_link: Option<PcieLink>,
    /// Set when the GPU stopped answering (fell off the bus, lost); every other field is then `None`.
    #[serde(default)]
    pub lost: Option<String>,
    /// What the SMs did over the latest GPM window (its own loop, about a second long);
    /// `None` before the first window ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<crate::activity::Activity>,
}

/// A point of the memory-used chart.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPoint {
    pub timestamp_ms: u64,
    pub memory_used: u64,
}

/// A device's static facts, its latest reading, its health and who uses it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Device {
    #[serde(flatten)]
    pub info: DeviceInfo,
    pub latest: Option<DeviceSample>,
    #[serde(default)]
    pub health: Option<crate::health::DeviceHealth>,
    #[serde(default)]
    pub processes: Vec<crate::processes::GpuProcess>,
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
    fn pcie_bandwidth_accounts_for_line_encoding() {
        let gen5 = PcieLink { generation: 5, width: 16 }.bandwidth_bytes_per_s().unwrap();
        assert!((gen5 / 1e9 - 63.0).abs() < 0.1, "{gen5}");
        let gen2 = PcieLink { generation: 2, width: 8 }.bandwidth_bytes_per_s().unwrap();
        assert!((gen2 / 1e9 - 4.0).abs() < 1e-9, "{gen2}");
        assert_eq!(PcieLink { generation: 9, width: 16 }.bandwidth_bytes_per_s(), None);
    }

    #[test]
    fn memory_fraction_needs_used_and_total() {
        let s = DeviceSample { memory_used: Some(25), ..Default::default() };
        assert_eq!(s.memory_fraction(100), Some(0.25));
        assert_eq!(s.memory_fraction(0), None);
        assert_eq!(DeviceSample::default().memory_fraction(100), None);
    }
}
