//! The simulator's probe: what tests and `--simulate` make the GPUs and the host look like.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use shared::PcieLink;
use shared::topology::Topology;

use super::probe::{
    ComputeProcess, DeviceMemory, DeviceProbe, GpuReadings, HostMemory, LinkPeaks, MeminfoError, QueryError,
};

/// What [`SimulatedProbe`] says the host has unless a test sets it: an H200 node's 2 TiB.
const SIMULATED_HOST: HostMemory = HostMemory { total: 2 << 40, available: 1900 << 30 };

/// The simulator's probe: memory from the server's readings (the simulator's samples), processes as a
/// test sets them (or, for `--simulate`, as the simulator lists them: [`SimulatedProbe::following_simulator`]),
/// peer access as the simulated topology says, peaks of an H200 on PCIe Gen5 x16.
#[derive(Debug, Default)]
pub struct SimulatedProbe {
    readings: OnceLock<Arc<dyn GpuReadings>>,
    topology: OnceLock<Topology>,
    /// Busy GPUs are those the simulator's processes compute on, as NVML's list makes them on hardware.
    follows_simulator: bool,
    processes: Mutex<HashMap<u32, Vec<ComputeProcess>>>,
    failures: Mutex<HashMap<u32, String>>,
    /// GPUs whose runs observe wrong results.
    wrong: Mutex<HashSet<u32>>,
    host: Mutex<Option<HostMemory>>,
    /// The simulated host has no NCCL: collectives are listed but disabled.
    no_nccl: bool,
}

impl SimulatedProbe {
    /// Takes the simulator's processes (the readings' list) as the GPUs' compute processes, so the
    /// busy-GPU refusal applies under `--simulate` as on hardware; a GPU a test set processes for keeps those.
    #[must_use]
    pub fn following_simulator(mut self) -> Self {
        self.follows_simulator = true;
        self
    }

    /// A host without NCCL: the collectives experiment is listed but disabled, with the loader's reason
    /// (marked simulated), as on a real host without libnccl.so.2.
    #[must_use]
    pub fn without_nccl(mut self) -> Self {
        self.no_nccl = true;
        self
    }

    /// Reads memory, processes and GPM windows from `readings`, and peer access from `topology`, from now
    /// on (the first call wins).
    pub fn attach(&self, readings: Arc<dyn GpuReadings>, topology: Option<Topology>) {
        let _ = self.readings.set(readings);
        if let Some(topology) = topology {
            let _ = self.topology.set(topology);
        }
    }

    /// A probe whose runs on `devices` observe wrong results (`--simulate-fault wrong-result:INDEX`).
    pub fn with_wrong_results(devices: impl IntoIterator<Item = u32>) -> Self {
        let probe = Self::default();
        for device in devices {
            probe.give_wrong_results(device);
        }
        probe
    }

    /// Makes every later run on `device` observe wrong results, as a faulty GPU would.
    pub fn give_wrong_results(&self, device: u32) {
        base::sync::lock(&self.wrong).insert(device);
    }

    /// Makes the next run on `device` fail with `error` (e.g. a CUDA out-of-memory), as a
    /// real GPU would, with the pool holding memory at that moment.
    pub fn fail_next_run(&self, device: u32, error: &str) {
        base::sync::lock(&self.failures).insert(device, error.to_owned());
    }

    /// Pretends the host has `memory` (tests of the host-memory guard); a 2 TiB host until then.
    pub fn set_host_memory(&self, memory: HostMemory) {
        *base::sync::lock(&self.host) = Some(memory);
    }

    /// Pretends `processes` compute on `device` (tests of the busy-GPU guard).
    pub fn set_processes(&self, device: u32, processes: Vec<ComputeProcess>) {
        base::sync::lock(&self.processes).insert(device, processes);
    }
}

impl DeviceProbe for SimulatedProbe {
    fn injected_failure(&self, device: u32) -> Option<String> {
        base::sync::lock(&self.failures).remove(&device)
    }

    fn activity(&self, device: u32) -> Option<shared::activity::Activity> {
        self.readings.get()?.activity(device)
    }

    fn scheduled(&self, device: u32) -> Option<shared::workload::ScheduledGpu> {
        self.readings.get()?.scheduled(device)
    }

    fn wrong_results(&self, device: u32) -> bool {
        base::sync::lock(&self.wrong).contains(&device)
    }

    fn without_nccl(&self) -> bool {
        self.no_nccl
    }

    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        match self.readings.get() {
            Some(readings) => readings.memory(device),
            None => Some(DeviceMemory { used: 0, free: 140 << 30 }),
        }
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        let map = base::sync::lock(&self.processes);
        if let Some(set) = map.get(&device) {
            return Ok(set.clone());
        }
        match self.readings.get().filter(|_| self.follows_simulator) {
            Some(readings) => readings.compute_processes(device),
            None => Ok(Vec::new()),
        }
    }

    fn peer_access(&self, a: u32, b: u32) -> Option<bool> {
        Some(self.topology.get()?.pair(a, b)?.p2p_read == "OK")
    }

    fn host_memory(&self) -> Result<HostMemory, MeminfoError> {
        Ok(base::sync::lock(&self.host).unwrap_or(SIMULATED_HOST))
    }

    fn peaks(&self, _device: u32) -> LinkPeaks {
        LinkPeaks::new(Some(PcieLink { generation: 5, width: 16 }), Some(6016), Some(3201))
    }
}
