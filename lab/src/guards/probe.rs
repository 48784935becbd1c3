//! What the lab reads about the GPUs and the host: the [`DeviceProbe`] the guards and the experiments
//! ask, over [`GpuReadings`] the server's telemetry gives it (`crate::wiring::lab` implements them; the
//! lab names no telemetry), and the host's memory from `/proc/meminfo`.

use std::collections::HashMap;
use std::sync::Arc;

use shared::{DeviceInfo, PcieLink};

pub use shared::readings::{ComputeProcess, DeviceMemory, GpuReadings, QueryError};

/// The host's memory as `/proc/meminfo` says, bytes.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    pub total: u64,
    /// `MemAvailable`: what can be allocated without swapping (page cache that can be dropped included).
    pub available: u64,
}

/// Why the host's memory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MeminfoError {
    #[error("cannot read /proc/meminfo: {0}")]
    Read(#[from] std::io::Error),
    /// Kernels before 3.14 have no `MemAvailable`.
    #[error("/proc/meminfo has no MemTotal or MemAvailable line")]
    Incomplete,
}

/// Theoretical peaks drawn as reference lines, bytes per second.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Default)]
pub struct LinkPeaks {
    /// PCIe: generation × width, one direction.
    pub pcie: Option<f64>,
    /// E.g. "PCIe Gen5 x16".
    pub pcie_label: Option<String>,
    /// Device memory: bus width × max memory clock × 2 (double data rate).
    pub hbm: Option<f64>,
}

impl LinkPeaks {
    /// The peaks of a PCIe link (its maximum generation and width) and of device memory
    /// (`bus_bits` wide at `memory_mhz`, double data rate).
    pub fn new(pcie: Option<PcieLink>, bus_bits: Option<u32>, memory_mhz: Option<u32>) -> Self {
        let pcie = pcie.and_then(|link| Some((link.bandwidth_bytes_per_s()?, link)));
        Self {
            pcie: pcie.map(|(bytes, _)| bytes),
            pcie_label: pcie.map(|(_, link)| format!("PCIe Gen{} x{}", link.generation, link.width)),
            hbm: bus_bits.zip(memory_mhz).map(|(bits, mhz)| f64::from(bits) / 8.0 * f64::from(mhz) * 1e6 * 2.0),
        }
    }

    /// The peaks of a device from the facts telemetry read at start.
    pub fn of(device: &DeviceInfo) -> Self {
        Self::new(device.pcie_max, device.memory_bus_width, device.max_clocks.memory_mhz)
    }
}

/// Reads the facts the guards and the experiments need. Blocking: call off the async runtime.
pub trait DeviceProbe: Send + Sync {
    fn memory(&self, device: u32) -> Option<DeviceMemory>;
    /// Processes computing on `device`, as NVML lists them (host PIDs).
    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError>;
    fn peaks(&self, device: u32) -> LinkPeaks;
    /// The host's memory (the runs' pinned and pageable buffers live there); `/proc/meminfo` unless simulated.
    fn host_memory(&self) -> Result<HostMemory, MeminfoError> {
        read_meminfo()
    }
    /// A failure the next run on `device` must end with (the simulator's fault injection).
    fn injected_failure(&self, device: u32) -> Option<String> {
        let _ = device;
        None
    }
    /// `device`'s newest GPM window (telemetry's), for what a run drove the SMs and tensor cores to.
    fn activity(&self, device: u32) -> Option<shared::activity::Activity> {
        let _ = device;
        None
    }
    /// Whether `a` and `b` can access each other's memory (`cuDeviceCanAccessPeer`); `None` where the probe
    /// cannot say (the CUDA executor asks the driver itself).
    fn peer_access(&self, a: u32, b: u32) -> Option<bool> {
        let _ = (a, b);
        None
    }
    /// Whether runs on `device` must observe wrong results (the simulator's `wrong-result` fault), so
    /// their correctness checks can be seen to fail.
    fn wrong_results(&self, device: u32) -> bool {
        let _ = device;
        false
    }
    /// Whether this host must look as if it had no NCCL (a simulated host without it, so the page's
    /// disabled collectives can be seen); false: the library loader decides.
    fn without_nccl(&self) -> bool {
        false
    }
    /// The pod the scheduler gave `device` to, if any: the lab keeps off it unless an admin forces.
    fn scheduled(&self, device: u32) -> Option<shared::workload::ScheduledGpu> {
        let _ = device;
        None
    }
}

/// The probe on real GPUs: memory, processes and GPM windows read through `readings` as the guards
/// need them (on the caller's thread, never the async runtime's), peaks from the devices' static facts.
#[derive(Debug)]
pub struct HardwareProbe {
    readings: Arc<dyn GpuReadings>,
    peaks: HashMap<u32, LinkPeaks>,
}

impl HardwareProbe {
    pub fn new(readings: Arc<dyn GpuReadings>, devices: &[DeviceInfo]) -> Self {
        Self { readings, peaks: devices.iter().map(|d| (d.index, LinkPeaks::of(d))).collect() }
    }
}

impl DeviceProbe for HardwareProbe {
    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        self.readings.memory(device)
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        self.readings.compute_processes(device)
    }

    fn peaks(&self, device: u32) -> LinkPeaks {
        self.peaks.get(&device).cloned().unwrap_or_default()
    }

    fn activity(&self, device: u32) -> Option<shared::activity::Activity> {
        self.readings.activity(device)
    }

    fn scheduled(&self, device: u32) -> Option<shared::workload::ScheduledGpu> {
        self.readings.scheduled(device)
    }
}

/// The host's memory from `/proc/meminfo`.
pub fn read_meminfo() -> Result<HostMemory, MeminfoError> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo")?).ok_or(MeminfoError::Incomplete)
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`'s text (in kB there).
pub fn parse_meminfo(text: &str) -> Option<HostMemory> {
    let field = |name: &str| {
        let line = text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?;
        let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
        kib.checked_mul(1024)
    };
    Some(HostMemory { total: field("MemTotal")?, available: field("MemAvailable")? })
}
