//! The lab's inputs from telemetry: the lab names only `shared`, `store` and `clock`, so this is where
//! the server's GPUs, host, topology, live readings and the simulator's faulty GPUs become its plain
//! inputs ([`ServerGpus`], [`GpuReadings`], GPU indexes).

use std::sync::Arc;

use lab::guards::{ComputeProcess, DeviceMemory, GpuReadings, QueryError};
use lab::{LabHost, LabOptions, LabSetup, ServerGpus, SimulatedLab};
use telemetry::Telemetry;
use telemetry::simulator::Fault;

/// The lab for what `telemetry` shows (see [`LabSetup::for_server`]). Blocking: call off the runtime.
pub fn lab_setup(telemetry: &Arc<Telemetry>, options: &LabOptions, simulated_lab: &SimulatedLab) -> LabSetup {
    LabSetup::for_server(server_gpus(telemetry), options, simulated_lab)
}

/// What `telemetry` knows about the server's GPUs, as the lab takes it.
pub fn server_gpus(telemetry: &Arc<Telemetry>) -> ServerGpus {
    let info = telemetry.host();
    let readings: Option<Arc<dyn GpuReadings>> = if info.simulated {
        Some(Arc::new(SimulatorReadings { telemetry: telemetry.clone() }))
    } else {
        // Telemetry's own NVML handle: the lab opens none of its own.
        telemetry.device_query().map(|query| nvml_readings(query, Some(telemetry.clone())))
    };
    ServerGpus {
        host: LabHost {
            hostname: info.hostname.clone(),
            driver_version: info.driver_version.clone(),
            cuda_driver_version: info.cuda_driver_version.clone(),
        },
        simulated: info.simulated,
        gpu_error: info.gpu_error.clone(),
        devices: telemetry.devices().to_vec(),
        topology: telemetry.topology().cloned(),
        readings,
    }
}

/// The GPUs whose lab runs must observe wrong results (`--simulate-fault wrong-result:INDEX`).
pub fn faulty_gpus(faults: &[Fault]) -> Vec<u32> {
    faults.iter().filter_map(Fault::wrong_result_device).collect()
}

/// Readings on real GPUs: memory and processes asked of NVML through `query`, GPM windows from
/// `telemetry`'s latest samples (none without it, as in `gpudash bench`).
pub fn nvml_readings(query: Arc<dyn GpuReadings>, telemetry: Option<Arc<Telemetry>>) -> Arc<dyn GpuReadings> {
    Arc::new(NvmlReadings { query, telemetry })
}

#[derive(Debug)]
struct NvmlReadings {
    query: Arc<dyn GpuReadings>,
    telemetry: Option<Arc<Telemetry>>,
}

/// The pod the kubelet says `device` was given to, in `telemetry`'s latest details.
fn scheduled_pod(telemetry: &Telemetry, device: u32) -> Option<shared::workload::ScheduledGpu> {
    telemetry.details().scheduled.into_iter().find(|s| s.index == device)
}

/// `device`'s newest GPM window in `telemetry`'s latest samples.
fn latest_activity(telemetry: &Telemetry, device: u32) -> Option<shared::activity::Activity> {
    telemetry.latest().into_iter().find(|s| s.index == device)?.activity
}

impl GpuReadings for NvmlReadings {
    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        self.query.memory(device)
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        self.query.compute_processes(device)
    }

    fn activity(&self, device: u32) -> Option<shared::activity::Activity> {
        latest_activity(self.telemetry.as_deref()?, device)
    }

    fn scheduled(&self, device: u32) -> Option<shared::workload::ScheduledGpu> {
        scheduled_pod(self.telemetry.as_deref()?, device)
    }
}

/// Readings of the simulator's GPUs: memory from the latest samples, processes as the simulator lists them.
#[derive(Debug)]
struct SimulatorReadings {
    telemetry: Arc<Telemetry>,
}

impl GpuReadings for SimulatorReadings {
    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        let sample = self.telemetry.latest().into_iter().find(|s| s.index == device)?;
        Some(DeviceMemory { used: sample.memory_used?, free: sample.memory_free? })
    }

    /// The compute processes the simulator lists on `device`, plus gpudash itself: the simulator never
    /// lists the lab, where NVML would once it holds a context, and an unlisted lab would make
    /// `guards::check_processes` take one of the others for it.
    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        let details = self.telemetry.details();
        let compute = details
            .processes
            .iter()
            .filter(|p| p.device == device && p.kind != shared::processes::ProcessKind::Graphics)
            .map(|p| ComputeProcess { pid: p.pid, used_bytes: p.used_memory });
        Ok(compute.chain(std::iter::once(ComputeProcess { pid: std::process::id(), used_bytes: None })).collect())
    }

    fn activity(&self, device: u32) -> Option<shared::activity::Activity> {
        latest_activity(&self.telemetry, device)
    }

    fn scheduled(&self, device: u32) -> Option<shared::workload::ScheduledGpu> {
        scheduled_pod(&self.telemetry, device)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use lab::guards::{DeviceProbe, HardwareProbe, LinkPeaks, check_processes};

    #[test]
    fn the_hardware_probe_asks_telemetry_and_says_why_it_cannot_list() {
        #[derive(Debug)]
        struct Gone;
        impl GpuReadings for Gone {
            fn memory(&self, _: u32) -> Option<DeviceMemory> {
                None
            }
            fn compute_processes(&self, _: u32) -> Result<Vec<ComputeProcess>, QueryError> {
                Err(QueryError::Processes("Insufficient Permissions".into()))
            }
        }
        let device = shared::testing::device(1);
        let probe = HardwareProbe::new(nvml_readings(Arc::new(Gone), None), std::slice::from_ref(&device));
        assert_eq!(probe.memory(1), None);
        let err = check_processes(1, probe.compute_processes(1), 7, false, false).unwrap_err().0;
        assert_eq!(err, "NVML cannot list processes: Insufficient Permissions; pass force to run without the check");
        assert_eq!(probe.peaks(1), LinkPeaks::of(&device));
        assert_eq!(probe.peaks(5), LinkPeaks::default(), "an unknown GPU has no peaks");
    }

    #[test]
    fn only_wrong_result_faults_name_faulty_gpus() {
        let faults: Vec<Fault> = ["pid:0:4242", "wrong-result:2"].iter().map(|text| text.parse().unwrap()).collect();
        assert_eq!(faulty_gpus(&faults), vec![2], "{faults:?}");
    }
}
