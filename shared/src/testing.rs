//! Test builders for the wire types that tests across the workspace make by hand.
//!
//! Each builder names every field once, here: a new field is added in this file and no
//! test elsewhere breaks. A test changes only what it is about, with struct update syntax
//! (`GpuProcess { user: Some("ana".into()), ..testing::process(0, 7) }`). Compiled for this
//! crate's tests and, through the `testing` feature, for other crates' dev-dependencies only:
//! release code never sees it.

use crate::processes::{GpuProcess, ProcessKind};
use crate::telemetry::{Clocks, DeviceInfo};

/// GPU `index` as hardware reports it, with only the facts every device has: an 80 GiB
/// "NVIDIA H200" named `GPU-{index}`, no optional facts (clocks, PCIe link, bus width,
/// NVLink, temperature thresholds) known, not simulated.
pub fn device(index: u32) -> DeviceInfo {
    DeviceInfo {
        index,
        name: "NVIDIA H200".to_owned(),
        uuid: format!("GPU-{index}"),
        pci_bus_id: format!("00000000:{:02X}:00.0", index + 1),
        compute_capability: None,
        memory_total: 80 << 30,
        simulated: false,
        max_clocks: Clocks::default(),
        pcie_max: None,
        memory_bus_width: None,
        nvlink_links: 0,
        slowdown_temp_c: None,
        shutdown_temp_c: None,
    }
}

/// Compute process `pid` on GPU `device` as NVML lists it before anything else is known:
/// no memory or SM figures, no owner, name, command, start or workload, not redacted, not idle.
pub fn process(device: u32, pid: u32) -> GpuProcess {
    GpuProcess {
        device,
        pid,
        kind: ProcessKind::Compute,
        used_memory: None,
        sm_util: None,
        sm_util_seen_ms: None,
        user: None,
        name: None,
        command: None,
        started_ms: None,
        group: None,
        workload: None,
        owner: None,
        redacted: false,
        idle: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_know_only_what_they_say() {
        let gpu = device(2);
        assert_eq!((gpu.index, gpu.uuid.as_str(), gpu.memory_total), (2, "GPU-2", 80 << 30));
        assert_eq!(gpu.pci_bus_id, "00000000:03:00.0");
        assert!(!gpu.simulated && gpu.slowdown_temp_c.is_none() && gpu.pcie_max.is_none());
        let p = process(1, 42);
        assert_eq!((p.device, p.pid, p.kind), (1, 42, ProcessKind::Compute));
        assert_eq!((p.user_name(), p.used_memory, p.redacted), (crate::processes::UNKNOWN_USER, None, false));
    }
}
