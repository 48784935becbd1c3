//! Shared-server manners: what the lab checks before it touches a GPU.
//!
//! The checks are pure functions over a [`DeviceProbe`] reading, so CI tests
//! them with [`SimulatedProbe`]; on hardware [`HardwareProbe`] reads the GPUs
//! through the [`GpuReadings`] the server's telemetry gives it (`crate::wiring::lab`),
//! over the one NVML handle the server has.

mod probe;
mod simulated;

use shared::units::format_bytes;

pub use self::probe::{
    ComputeProcess, DeviceMemory, DeviceProbe, GpuReadings, HardwareProbe, HostMemory, LinkPeaks, MeminfoError,
    QueryError, parse_meminfo, read_meminfo,
};
pub use self::simulated::SimulatedProbe;
use super::plan::{CONTEXT_OVERHEAD, Footprint};

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

/// Refuses a GPU the scheduler gave to a pod (the kubelet's answer), whether or not the pod computes
/// on it yet, unless an admin forced the run: an operator's force covers other processes, not
/// another team's allocation.
pub fn check_scheduled(
    device: u32,
    scheduled: Option<shared::workload::ScheduledGpu>,
    forced_by_admin: bool,
) -> Result<Option<String>, Refusal> {
    let Some(scheduled) = scheduled else { return Ok(None) };
    let line = format!("Kubernetes gave GPU {device} to {}", scheduled.holder());
    if forced_by_admin {
        Ok(Some(format!("{line}; running anyway (forced by an admin)")))
    } else {
        Err(Refusal(format!(
            "{line}; the lab keeps off GPUs the scheduler gave to others unless an admin forces the run"
        )))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use shared::{DeviceInfo, PcieLink};

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_gpu_given_to_a_pod_is_refused_unless_an_admin_forces() {
        use shared::workload::{Pod, ScheduledGpu};
        assert_eq!(check_scheduled(3, None, false), Ok(None));
        let pod = Pod {
            namespace: Some("mallory".into()),
            name: Some("trainer".into()),
            container: Some("main".into()),
            ..Pod::default()
        };
        let given = ScheduledGpu { index: 3, pod };
        let refused = check_scheduled(3, Some(given.clone()), false).unwrap_err().0;
        assert_eq!(
            refused,
            "Kubernetes gave GPU 3 to pod mallory/trainer (container main); the lab keeps off GPUs the scheduler \
             gave to others unless an admin forces the run"
        );
        let forced = check_scheduled(3, Some(given), true).unwrap().unwrap();
        assert!(forced.ends_with("running anyway (forced by an admin)"), "{forced}");
    }

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
}
