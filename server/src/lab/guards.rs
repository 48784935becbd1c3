//! Shared-server manners: what the lab checks before it touches a GPU.
//!
//! The checks are pure functions over a [`DeviceProbe`] reading, so CI tests
//! them with [`SimulatedProbe`]; on hardware [`NvmlProbe`] reads NVML.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::UsedGpuMemory;
use shared::units::format_bytes;

use super::plan::{CONTEXT_OVERHEAD, Footprint};
use crate::telemetry::Telemetry;

/// A device's memory as NVML sees it, all processes included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub used: u64,
    pub free: u64,
}

/// The host's memory as `/proc/meminfo` says, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    pub total: u64,
    /// `MemAvailable`: what can be allocated without swapping (page cache that can be dropped included).
    pub available: u64,
}

/// What [`SimulatedProbe`] says the host has unless a test sets it: an H200 node's 2 TiB.
const SIMULATED_HOST: HostMemory = HostMemory { total: 2 << 40, available: 1900 << 30 };

/// A process with a CUDA context on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeProcess {
    pub pid: u32,
    pub used_bytes: Option<u64>,
}

/// Theoretical peaks drawn as reference lines, bytes per second.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkPeaks {
    /// PCIe: generation × width, one direction.
    pub pcie: Option<f64>,
    /// E.g. "PCIe Gen5 x16".
    pub pcie_label: Option<String>,
    /// Device memory: bus width × max memory clock × 2 (double data rate).
    pub hbm: Option<f64>,
}

/// Reads the facts the guards and the experiments need. Blocking: call off the async runtime.
pub trait DeviceProbe: Send + Sync {
    fn memory(&self, device: u32) -> Option<DeviceMemory>;
    /// Processes computing on `device`, as NVML lists them (host PIDs).
    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, String>;
    fn peaks(&self, device: u32) -> LinkPeaks;
    /// The host's memory (the runs' pinned and pageable buffers live there); `/proc/meminfo` unless simulated.
    fn host_memory(&self) -> Result<HostMemory, String> {
        read_meminfo()
    }
    /// A failure the next run on `device` must end with (the simulator's fault injection).
    fn injected_failure(&self, device: u32) -> Option<String> {
        let _ = device;
        None
    }
}

/// The real probe: NVML, loaded at run time.
pub struct NvmlProbe {
    nvml: Nvml,
}

impl std::fmt::Debug for NvmlProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlProbe")
    }
}

impl NvmlProbe {
    pub fn open() -> Result<Self, String> {
        Nvml::init().map(|nvml| Self { nvml }).map_err(|e| format!("NVML did not load: {e}"))
    }

    /// The driver version, e.g. "580.159.04".
    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    /// The CUDA version the driver supports, e.g. "13.0".
    pub fn cuda_driver_version(&self) -> Option<String> {
        self.nvml.sys_cuda_driver_version().ok().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
    }

    /// Name and UUID of a device.
    pub fn identity(&self, device: u32) -> Option<(String, String)> {
        let d = self.nvml.device_by_index(device).ok()?;
        Some((d.name().ok()?, d.uuid().unwrap_or_default()))
    }

    pub fn device_count(&self) -> u32 {
        self.nvml.device_count().unwrap_or(0)
    }
}

impl DeviceProbe for NvmlProbe {
    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        let m = self.nvml.device_by_index(device).ok()?.memory_info().ok()?;
        Some(DeviceMemory { used: m.used, free: m.free })
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, String> {
        let d = self.nvml.device_by_index(device).map_err(|e| e.to_string())?;
        let list = d.running_compute_processes().map_err(|e| format!("NVML cannot list processes: {e}"))?;
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

    fn peaks(&self, device: u32) -> LinkPeaks {
        let Ok(d) = self.nvml.device_by_index(device) else { return LinkPeaks::default() };
        let pcie = match (d.max_pcie_link_gen(), d.max_pcie_link_width()) {
            (Ok(generation), Ok(width)) => pcie_peak(generation, width).map(|b| (b, generation, width)),
            _ => None,
        };
        let hbm = match (d.memory_bus_width(), d.max_clock_info(Clock::Memory)) {
            (Ok(bits), Ok(mhz)) => Some(f64::from(bits) / 8.0 * f64::from(mhz) * 1e6 * 2.0),
            _ => None,
        };
        LinkPeaks { pcie: pcie.map(|p| p.0), pcie_label: pcie.map(|(_, g, w)| format!("PCIe Gen{g} x{w}")), hbm }
    }
}

/// The host's memory from `/proc/meminfo`.
pub fn read_meminfo() -> Result<HostMemory, String> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("cannot read /proc/meminfo: {e}"))?;
    parse_meminfo(&text).ok_or_else(|| "/proc/meminfo has no MemTotal or MemAvailable line".to_owned())
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

/// One direction of a PCIe link, bytes per second, after line encoding.
pub fn pcie_peak(generation: u32, width: u32) -> Option<f64> {
    let per_lane_gbit = match generation {
        1 => 2.5 * 0.8,
        2 => 5.0 * 0.8,
        3 => 8.0 * 128.0 / 130.0,
        4 => 16.0 * 128.0 / 130.0,
        5 => 32.0 * 128.0 / 130.0,
        6 => 64.0 * 242.0 / 256.0,
        _ => return None,
    };
    Some(per_lane_gbit * 1e9 / 8.0 * f64::from(width))
}

/// The simulator's probe: memory from the telemetry hub, processes as a test sets them,
/// peaks of an H200 on PCIe Gen5 x16.
#[derive(Debug, Default)]
pub struct SimulatedProbe {
    telemetry: OnceLock<Arc<Telemetry>>,
    processes: Mutex<HashMap<u32, Vec<ComputeProcess>>>,
    failures: Mutex<HashMap<u32, String>>,
    host: Mutex<Option<HostMemory>>,
}

impl SimulatedProbe {
    pub fn new(telemetry: Option<Arc<Telemetry>>) -> Self {
        let probe = Self::default();
        if let Some(t) = telemetry {
            probe.attach(t);
        }
        probe
    }

    /// Reads memory from `telemetry` from now on (the first call wins).
    pub fn attach(&self, telemetry: Arc<Telemetry>) {
        let _ = self.telemetry.set(telemetry);
    }

    /// Makes the next run on `device` fail with `error` (e.g. a CUDA out-of-memory), as a
    /// real GPU would, with the pool holding memory at that moment.
    pub fn fail_next_run(&self, device: u32, error: &str) {
        self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(device, error.to_owned());
    }

    /// Pretends the host has `memory` (tests of the host-memory guard); a 2 TiB host until then.
    pub fn set_host_memory(&self, memory: HostMemory) {
        *self.host.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(memory);
    }

    /// Pretends `processes` compute on `device` (tests of the busy-GPU guard).
    pub fn set_processes(&self, device: u32, processes: Vec<ComputeProcess>) {
        self.processes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(device, processes);
    }
}

impl DeviceProbe for SimulatedProbe {
    fn injected_failure(&self, device: u32) -> Option<String> {
        self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&device)
    }

    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        let Some(telemetry) = self.telemetry.get() else {
            return Some(DeviceMemory { used: 0, free: 140 << 30 });
        };
        let sample = telemetry.latest().into_iter().find(|s| s.index == device)?;
        Some(DeviceMemory { used: sample.memory_used?, free: sample.memory_free? })
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, String> {
        let map = self.processes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(map.get(&device).cloned().unwrap_or_default())
    }

    fn host_memory(&self) -> Result<HostMemory, String> {
        Ok(self.host.lock().unwrap_or_else(std::sync::PoisonError::into_inner).unwrap_or(SIMULATED_HOST))
    }

    fn peaks(&self, _device: u32) -> LinkPeaks {
        LinkPeaks {
            pcie: pcie_peak(5, 16),
            pcie_label: Some("PCIe Gen5 x16".to_owned()),
            hbm: Some(6016.0 / 8.0 * 3201e6 * 2.0),
        }
    }
}

/// Why the lab will not start a run on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// Device memory the run needs, counting the context when the lab has none open yet.
pub fn device_need(footprint: &Footprint, context_open: bool) -> u64 {
    footprint.device + if context_open { 0 } else { CONTEXT_OVERHEAD }
}

/// Refuses when the run would leave less than `margin` free. Memory the lab's own
/// pool caches but does not use counts as free: the run gets it first.
pub fn check_memory(
    device: u32,
    need: u64,
    memory: Option<DeviceMemory>,
    pool_idle: u64,
    margin: u64,
) -> Result<String, Refusal> {
    let Some(memory) = memory else {
        return Err(Refusal(format!("cannot read GPU {device}'s free memory, so the lab will not allocate on it")));
    };
    let available = memory.free.saturating_add(pool_idle);
    let line = format!(
        "needs {} of device memory; GPU {device} has {} free{}, and the lab keeps {} free for others",
        format_bytes(need),
        format_bytes(memory.free),
        if pool_idle > 0 { format!(" (+{} cached by the lab)", format_bytes(pool_idle)) } else { String::new() },
        format_bytes(margin),
    );
    if need.saturating_add(margin) > available {
        return Err(Refusal(format!("{line}: ask for less (smaller sizes or fewer blocks)")));
    }
    Ok(line)
}

/// Refuses when the run's host buffers (`footprint`'s page-locked and ordinary memory), on top of what the
/// lab's other running runs planned (`others`), would leave less than `margin` of the host's `MemAvailable`.
/// `None` for a run without host buffers.
///
/// `others` may already be allocated, and so already missing from `MemAvailable`: counting it again errs
/// towards refusing, because page-locked memory cannot be swapped out and running short of it takes the
/// whole host down, where a refused run only has to wait.
pub fn check_host_memory(
    footprint: &Footprint,
    memory: Result<HostMemory, String>,
    others: u64,
    margin: u64,
) -> Result<Option<String>, Refusal> {
    let need = footprint.host_total();
    if need == 0 {
        return Ok(None);
    }
    let memory = memory.map_err(|e| Refusal(format!("{e}, so the lab will not allocate host memory")))?;
    let line = format!(
        "needs {} of page-locked and {} of ordinary host memory; the host has {} available (MemAvailable){}, \
         and the lab keeps {} free",
        format_bytes(footprint.pinned_host),
        format_bytes(footprint.host),
        format_bytes(memory.available),
        if others > 0 {
            format!(", of which other lab runs running now planned {}", format_bytes(others))
        } else {
            String::new()
        },
        format_bytes(margin),
    );
    if need.saturating_add(others).saturating_add(margin) > memory.available {
        return Err(Refusal(format!(
            "{line}: ask for less host memory (smaller sizes, or a smaller copy_bytes) or wait for other runs to end"
        )));
    }
    Ok(Some(line))
}

/// Refuses when processes other than this one compute on the GPU, unless forced.
///
/// NVML lists host PIDs: inside a container our own PID does not appear. When the
/// lab holds a context on the GPU and its PID is not listed, one entry is taken to be
/// the lab itself.
pub fn check_processes(
    device: u32,
    processes: Result<Vec<ComputeProcess>, String>,
    own_pid: u32,
    lab_context_open: bool,
    force: bool,
) -> Result<Option<String>, Refusal> {
    let processes = match processes {
        Ok(p) => p,
        Err(e) if force => return Ok(Some(format!("forced: could not check other processes ({e})"))),
        Err(e) => return Err(Refusal(format!("{e}; pass force to run without the check"))),
    };
    let listed_self = processes.iter().any(|p| p.pid == own_pid);
    let mut others: Vec<ComputeProcess> = processes.into_iter().filter(|p| p.pid != own_pid).collect();
    if lab_context_open && !listed_self && !others.is_empty() {
        others.remove(0);
    }
    if others.is_empty() {
        return Ok(None);
    }
    let list = others
        .iter()
        .map(|p| match p.used_bytes {
            Some(b) => format!("pid {} ({})", p.pid, format_bytes(b)),
            None => format!("pid {}", p.pid),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let line = format!("GPU {device} has {} other process(es) computing: {list}", others.len());
    if force {
        Ok(Some(format!("{line}; running anyway (forced), so figures may be lower")))
    } else {
        Err(Refusal(format!("{line}; the lab does not disturb them unless you force the run")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn memory_guard_keeps_the_margin() {
        let mem = Some(DeviceMemory { used: 0, free: 10 * GIB });
        assert!(check_memory(0, 8 * GIB, mem, 0, GIB).is_ok());
        let err = check_memory(0, 9 * GIB + 1, mem, 0, GIB).unwrap_err().0;
        assert!(
            err.contains("needs 9.00 GiB") && err.contains("10.0 GiB free") && err.contains("1.00 GiB free for others"),
            "{err}"
        );
        // What the lab's pool caches is ours to reuse.
        assert!(check_memory(0, 9 * GIB + 1, mem, GIB, GIB).is_ok());
        assert!(check_memory(0, 1, None, 0, GIB).is_err());
    }

    #[test]
    fn host_memory_guard_counts_the_other_running_runs_and_the_margin() {
        let pinned = Footprint { device: 0, pinned_host: 4 * GIB, host: 0 };
        let host = |available| Ok(HostMemory { total: 32 * GIB, available });
        let note = check_host_memory(&pinned, host(6 * GIB), 0, GIB).unwrap().unwrap();
        assert!(note.contains("needs 4.00 GiB of page-locked") && note.contains("6.00 GiB available"), "{note}");
        // A second such run while the first runs: 4 + 4 + 1 > 6.
        let err = check_host_memory(&pinned, host(6 * GIB), 4 * GIB, GIB).unwrap_err().0;
        assert!(err.contains("other lab runs running now planned 4.00 GiB") && err.contains("smaller"), "{err}");
        assert!(check_host_memory(&pinned, host(5 * GIB - 1), 0, GIB).is_err(), "the margin is kept");
        assert!(check_host_memory(&pinned, Err("cannot read /proc/meminfo".into()), 0, GIB).is_err());
        // No host buffers: nothing to check, even on a host that cannot say.
        assert_eq!(check_host_memory(&Footprint::default(), Err("no /proc".into()), 0, GIB), Ok(None));
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       24641536 kB\nMemFree:          812344 kB\nMemAvailable:   10485760 kB\n";
        assert_eq!(parse_meminfo(text), Some(HostMemory { total: 24_641_536 * 1024, available: 10 * GIB }));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None, "old kernels without MemAvailable");
        if std::path::Path::new("/proc/meminfo").exists() {
            let host = read_meminfo().unwrap();
            assert!(host.available > 0 && host.available <= host.total, "{host:?}");
        }
    }

    #[test]
    fn busy_gpus_are_refused_unless_forced() {
        let busy = || Ok(vec![ComputeProcess { pid: 42, used_bytes: Some(20 * GIB) }]);
        let err = check_processes(1, busy(), 7, false, false).unwrap_err().0;
        assert!(err.contains("pid 42 (20.0 GiB)") && err.contains("force"), "{err}");
        assert!(check_processes(1, busy(), 7, false, true).unwrap().unwrap().contains("forced"));
        assert_eq!(check_processes(1, Ok(vec![]), 7, false, false), Ok(None));
    }

    #[test]
    fn the_lab_does_not_count_itself() {
        let me = || Ok(vec![ComputeProcess { pid: 7, used_bytes: None }]);
        assert_eq!(check_processes(0, me(), 7, true, false), Ok(None));
        // In a container NVML shows our host PID, which we cannot know.
        let hidden = || Ok(vec![ComputeProcess { pid: 90_001, used_bytes: None }]);
        assert_eq!(check_processes(0, hidden(), 7, true, false), Ok(None));
        assert!(check_processes(0, hidden(), 7, false, false).is_err());
    }

    #[test]
    fn pcie_peaks_match_the_spec() {
        let gen5 = pcie_peak(5, 16).unwrap();
        assert!((gen5 / 1e9 - 63.0).abs() < 0.1, "{gen5}");
        assert!((pcie_peak(4, 16).unwrap() / 1e9 - 31.5).abs() < 0.1);
        assert_eq!(pcie_peak(9, 16), None);
    }
}
