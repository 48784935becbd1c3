//! Shared-server manners: what the lab checks before it touches a GPU.
//!
//! The checks are pure functions over a [`DeviceProbe`] reading, so CI tests
//! them with [`SimulatedProbe`]; on hardware [`HardwareProbe`] asks telemetry,
//! which reads the GPUs over the one NVML handle the server has.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use shared::units::format_bytes;
use shared::{DeviceInfo, PcieLink};

use super::plan::{CONTEXT_OVERHEAD, Footprint};
use crate::telemetry::simulator::Fault;
pub use crate::telemetry::{ComputeProcess, DeviceMemory, QueryError};
use crate::telemetry::{DeviceQuery, Telemetry};

/// The host's memory as `/proc/meminfo` says, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// What [`SimulatedProbe`] says the host has unless a test sets it: an H200 node's 2 TiB.
const SIMULATED_HOST: HostMemory = HostMemory { total: 2 << 40, available: 1900 << 30 };

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
}

/// The probe on real GPUs: memory and processes asked of telemetry as the guards need them
/// (on the caller's thread, never the async runtime's), peaks from the devices' static facts.
#[derive(Debug)]
pub struct HardwareProbe {
    query: Arc<dyn DeviceQuery>,
    peaks: HashMap<u32, LinkPeaks>,
    telemetry: Option<Arc<Telemetry>>,
}

impl HardwareProbe {
    pub fn new(query: Arc<dyn DeviceQuery>, devices: &[DeviceInfo]) -> Self {
        Self { query, peaks: devices.iter().map(|d| (d.index, LinkPeaks::of(d))).collect(), telemetry: None }
    }

    /// Reads the GPM windows from `telemetry`'s samples.
    #[must_use]
    pub fn with_telemetry(mut self, telemetry: Arc<Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }
}

/// `device`'s newest GPM window in `telemetry`'s latest samples.
fn latest_activity(telemetry: Option<&Arc<Telemetry>>, device: u32) -> Option<shared::activity::Activity> {
    telemetry?.latest().into_iter().find(|s| s.index == device)?.activity
}

impl DeviceProbe for HardwareProbe {
    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        self.query.memory(device)
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        self.query.compute_processes(device)
    }

    fn peaks(&self, device: u32) -> LinkPeaks {
        self.peaks.get(&device).cloned().unwrap_or_default()
    }

    fn activity(&self, device: u32) -> Option<shared::activity::Activity> {
        latest_activity(self.telemetry.as_ref(), device)
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

/// The simulator's probe: memory from the telemetry hub, processes as a test sets them (or, for
/// `--simulate`, as the simulator lists them: [`SimulatedProbe::following_simulator`]), peer access
/// as the simulated topology says, peaks of an H200 on PCIe Gen5 x16.
#[derive(Debug, Default)]
pub struct SimulatedProbe {
    telemetry: OnceLock<Arc<Telemetry>>,
    /// Busy GPUs are those the simulator's processes compute on, as NVML's list makes them on hardware.
    follows_simulator: bool,
    processes: Mutex<HashMap<u32, Vec<ComputeProcess>>>,
    failures: Mutex<HashMap<u32, String>>,
    /// GPUs whose runs observe wrong results.
    wrong: Mutex<HashSet<u32>>,
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

    /// Takes the simulator's processes (the telemetry's latest list) as the GPUs' compute processes, so the
    /// busy-GPU refusal applies under `--simulate` as on hardware; a GPU a test set processes for keeps those.
    #[must_use]
    pub fn following_simulator(mut self) -> Self {
        self.follows_simulator = true;
        self
    }

    /// Reads memory from `telemetry` from now on (the first call wins).
    pub fn attach(&self, telemetry: Arc<Telemetry>) {
        let _ = self.telemetry.set(telemetry);
    }

    /// A probe injecting the lab's part of `faults` (`--simulate-fault`): `wrong-result:INDEX`.
    pub fn with_faults(faults: &[Fault]) -> Self {
        let probe = Self::default();
        for device in faults.iter().filter_map(Fault::wrong_result_device) {
            probe.give_wrong_results(device);
        }
        probe
    }

    /// Makes every later run on `device` observe wrong results, as a faulty GPU would.
    pub fn give_wrong_results(&self, device: u32) {
        self.wrong.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(device);
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

    fn activity(&self, device: u32) -> Option<shared::activity::Activity> {
        latest_activity(self.telemetry.get(), device)
    }

    fn wrong_results(&self, device: u32) -> bool {
        self.wrong.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&device)
    }

    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        let Some(telemetry) = self.telemetry.get() else {
            return Some(DeviceMemory { used: 0, free: 140 << 30 });
        };
        let sample = telemetry.latest().into_iter().find(|s| s.index == device)?;
        Some(DeviceMemory { used: sample.memory_used?, free: sample.memory_free? })
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        let map = self.processes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(set) = map.get(&device) {
            return Ok(set.clone());
        }
        match self.telemetry.get().filter(|_| self.follows_simulator) {
            Some(telemetry) => Ok(simulator_processes(telemetry, device)),
            None => Ok(Vec::new()),
        }
    }

    fn peer_access(&self, a: u32, b: u32) -> Option<bool> {
        let topology = self.telemetry.get()?.topology()?;
        Some(topology.pair(a, b)?.p2p_read == "OK")
    }

    fn host_memory(&self) -> Result<HostMemory, MeminfoError> {
        Ok(self.host.lock().unwrap_or_else(std::sync::PoisonError::into_inner).unwrap_or(SIMULATED_HOST))
    }

    fn peaks(&self, _device: u32) -> LinkPeaks {
        LinkPeaks::new(Some(PcieLink { generation: 5, width: 16 }), Some(6016), Some(3201))
    }
}

/// The compute processes the simulator lists on `device`, plus gpudash itself: the simulator never
/// lists the lab, where NVML would once it holds a context, and an unlisted lab would make
/// [`check_processes`] take one of the others for it.
fn simulator_processes(telemetry: &Telemetry, device: u32) -> Vec<ComputeProcess> {
    let details = telemetry.details();
    let compute = details
        .processes
        .iter()
        .filter(|p| p.device == device && p.kind != shared::processes::ProcessKind::Graphics)
        .map(|p| ComputeProcess { pid: p.pid, used_bytes: p.used_memory });
    compute.chain(std::iter::once(ComputeProcess { pid: std::process::id(), used_bytes: None })).collect()
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
    memory: Result<HostMemory, MeminfoError>,
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
    processes: Result<Vec<ComputeProcess>, QueryError>,
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
        let unreadable = || Err(MeminfoError::Read(std::io::Error::from(std::io::ErrorKind::NotFound)));
        let err = check_host_memory(&pinned, unreadable(), 0, GIB).unwrap_err().0;
        assert!(
            err.starts_with("cannot read /proc/meminfo: ") && err.contains("will not allocate host memory"),
            "{err}"
        );
        // No host buffers: nothing to check, even on a host that cannot say.
        assert_eq!(check_host_memory(&Footprint::default(), unreadable(), 0, GIB), Ok(None));
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

    fn device(index: u32) -> DeviceInfo {
        DeviceInfo {
            memory_total: 141 * GIB,
            max_clocks: shared::Clocks { memory_mhz: Some(3201), ..shared::Clocks::default() },
            pcie_max: Some(PcieLink { generation: 5, width: 16 }),
            memory_bus_width: Some(6144),
            nvlink_links: 18,
            ..shared::testing::device(index)
        }
    }

    #[test]
    fn peaks_come_from_the_device_facts() {
        let h200 = device(0);
        let peaks = LinkPeaks::of(&h200);
        assert!((peaks.pcie.unwrap() / 1e9 - 63.0).abs() < 0.1, "{peaks:?}");
        assert_eq!(peaks.pcie_label.as_deref(), Some("PCIe Gen5 x16"));
        assert!((peaks.hbm.unwrap() / 1e12 - 4.917).abs() < 0.001, "{peaks:?}");
        // A generation the spec does not know, and a device that does not say: no lines rather than wrong ones.
        let unknown = LinkPeaks::new(Some(PcieLink { generation: 9, width: 16 }), None, Some(3201));
        assert_eq!(unknown, LinkPeaks::default());
    }

    #[test]
    fn the_hardware_probe_asks_telemetry_and_says_why_it_cannot_list() {
        #[derive(Debug)]
        struct Gone;
        impl DeviceQuery for Gone {
            fn memory(&self, _: u32) -> Option<DeviceMemory> {
                None
            }
            fn compute_processes(&self, _: u32) -> Result<Vec<ComputeProcess>, QueryError> {
                Err(QueryError::Processes("Insufficient Permissions".into()))
            }
        }
        let probe = HardwareProbe::new(Arc::new(Gone), &[device(1)]);
        assert_eq!(probe.memory(1), None);
        let err = check_processes(1, probe.compute_processes(1), 7, false, false).unwrap_err().0;
        assert_eq!(err, "NVML cannot list processes: Insufficient Permissions; pass force to run without the check");
        assert_eq!(probe.peaks(1), LinkPeaks::of(&device(1)));
        assert_eq!(probe.peaks(5), LinkPeaks::default(), "an unknown GPU has no peaks");
    }
}
