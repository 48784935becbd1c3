//! Simulated GPUs for CI and demos: jobs start, fill memory, run hot and end.
//!
//! Everything it reports is flagged `simulated` in the API and on the page;
//! it never runs beside real devices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use shared::health::{XidEvent, xid_meaning};
use shared::{Clocks, ComputeCapability, Details, DeviceInfo, DeviceSample, HostInfo, PcieLink};

mod activity;
mod faults;
mod gpu;
mod models;

use self::faults::effects::{Effects, THERMAL_SHUTDOWN, THERMAL_SLOWDOWN};
pub use self::faults::{Fault, FaultError, ScriptedJob, Window};
use self::models::MODELS;
use super::{ActivitySink, GpuSource, XidSink};

const MIB: u64 = 1 << 20;

/// What a simulated GPU is doing.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle {
        until_ms: u64,
    },
    /// A training job: memory climbs to `target` then breathes around it.
    Job {
        target: u64,
        load: f64,
        until_ms: u64,
    },
}

/// The process a simulated job runs as.
#[derive(Debug, Clone)]
struct SimJob {
    pid: u32,
    user: &'static str,
    command: String,
    started_ms: u64,
    /// The container, pod or Slurm job it runs in (its Unix user is then root, but for Slurm).
    workload: Option<shared::workload::Workload>,
    /// What its kernels keep busy: an index into [`models::PROFILES`].
    profile: usize,
}

#[derive(Debug)]
struct SimGpu {
    model: usize,
    phase: Phase,
    job: Option<SimJob>,
    memory_used: f64,
    util: f64,
    temperature: f64,
    energy_mj: f64,
    last_ms: Option<u64>,
    power_mw: u32,
    /// A notebook that holds memory and never computes (see [`Simulator::with_idle_holder`]).
    holder: Option<SimJob>,
    /// What its `job` faults' processes run now, if any: their util and power, temperature and
    /// SM activity follow it.
    scripted: Option<Scripted>,
}

/// The load of a GPU's scripted jobs at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scripted {
    /// Their SM shares summed, percent (at most 100).
    util: f64,
    /// Every one of them is a spin loop: util without SM activity.
    spin: bool,
}

#[derive(Debug)]
struct SimState {
    gpus: Vec<SimGpu>,
    rng: fastrand::Rng,
    first_ms: Option<u64>,
    next_pid: u32,
    /// The faults (indices into `Simulator::faults`) whose XID has been raised.
    xids_raised: Vec<usize>,
}

/// `count` simulated GPUs of a mix of models.
#[derive(Debug)]
pub struct Simulator {
    state: Arc<Mutex<SimState>>,
    /// XIDs raised by faults, waiting for the XID watcher.
    xids: Arc<Mutex<Vec<XidEvent>>>,
    interval_ms: u64,
    faults: Vec<Fault>,
    /// Reads the host processes `pid:INDEX:PID` faults list.
    proc: super::procfs::ProcReader,
}

/// Memory NVML's v2 figures read on a GPU nobody uses (they leave the driver's reserve out):
/// a few MiB, well under `shared::usability::IN_USE_MEMORY_SHARE` of any model's total.
const IDLE_MEMORY: f64 = 4.0 * MIB as f64;
/// What a host process listed by a `pid:INDEX:PID` fault holds on its GPU.
pub const HOST_PROCESS_MEMORY: u64 = 1 << 30;
/// What the idle notebook of [`Simulator::with_idle_holder`] holds.
pub const HOLDER_MEMORY: u64 = 6 << 30;

impl Simulator {
    pub fn new(count: u32, interval_ms: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(0x6770_7564_6173_6800 ^ u64::from(count));
        let gpus = (0..count)
            .map(|i| SimGpu {
                // Mostly H200s, as on the team servers this is built for, with others mixed in.
                model: if i % 4 == 3 { (i as usize / 4) % (MODELS.len() - 1) + 1 } else { 0 },
                // Half the GPUs start a job at once, so a demo shows movement from the first second.
                phase: Phase::Idle { until_ms: if i % 2 == 0 { 0 } else { rng.u64(20_000..60_000) } },
                job: None,
                memory_used: IDLE_MEMORY,
                util: 0.0,
                temperature: 32.0 + rng.f64() * 4.0,
                energy_mj: 1e9 * rng.f64(),
                last_ms: None,
                power_mw: 0,
                holder: None,
                scripted: None,
            })
            .collect();
        let state = SimState { gpus, rng, first_ms: None, next_pid: 41_000, xids_raised: Vec::new() };
        Self {
            state: Arc::new(Mutex::new(state)),
            xids: Arc::default(),
            interval_ms,
            faults: Vec::new(),
            proc: super::procfs::ProcReader::new("/proc"),
        }
    }

    /// One GPM window per answering GPU, from what each simulated GPU is doing now.
    pub fn activity(&self, now_ms: u64) -> Vec<(u32, shared::activity::Activity)> {
        activity::windows(&self.state().gpus, now_ms)
    }

    /// Adds a fault to inject.
    #[must_use]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SimState> {
        base::sync::lock(&self.state)
    }

    /// Why `device` is lost at `now_ms`, if a fault says so.
    fn lost(&self, device: u32, first_ms: u64, now_ms: u64) -> Option<String> {
        self.faults.iter().find_map(|fault| fault.lost_reason(device, first_ms, now_ms))
    }

    /// Raises each XID fault's XID once, when its moment has come (`raised` lists those done).
    fn raise_xids(&self, raised: &mut Vec<usize>, first_ms: u64, now_ms: u64) {
        for (n, fault) in self.faults.iter().enumerate() {
            if let Some((device, code)) = fault.xid_due(first_ms, now_ms).filter(|_| !raised.contains(&n)) {
                raised.push(n);
                self.push_xid(device, code, now_ms);
            }
        }
    }

    /// The host processes `pid:INDEX:PID` faults list on GPU `device` that have not exited,
    /// as NVML would list them: real PID, user, command and start time, a made-up footprint.
    fn host_processes(&self, device: u32) -> Vec<shared::processes::GpuProcess> {
        let pids = self.faults.iter().filter_map(Fault::host_process).filter(|&(d, _)| d == device);
        pids.filter(|&(_, pid)| self.proc.running(pid).is_some())
            .map(|(device, pid)| {
                let info = self.proc.read(pid);
                shared::processes::GpuProcess {
                    device,
                    pid,
                    kind: shared::processes::ProcessKind::Compute,
                    used_memory: Some(HOST_PROCESS_MEMORY),
                    sm_util: None,
                    sm_util_seen_ms: None,
                    user: info.user,
                    name: info.name,
                    command: info.command,
                    started_ms: info.started_ms,
                    group: info.group,
                    workload: None,
                    owner: None,
                    redacted: false,
                    idle: None,
                }
            })
            .collect()
    }

    /// The processes of GPU `device`'s job faults running at `now_ms`; `None` when it has no job faults.
    fn scripted_jobs(&self, device: u32, first_ms: u64, now_ms: u64) -> Option<Vec<shared::processes::GpuProcess>> {
        let mut any = false;
        let mut processes = Vec::new();
        for (n, fault) in (0u32..).zip(&self.faults) {
            let Fault::Job { device: d, job, window } = fault else { continue };
            if *d != device {
                continue;
            }
            any = true;
            if window.holds(first_ms, now_ms) {
                processes.push(shared::processes::GpuProcess {
                    device,
                    pid: 60_000 + n,
                    kind: shared::processes::ProcessKind::Compute,
                    used_memory: Some(job.gib << 30),
                    sm_util: job.sm_util,
                    sm_util_seen_ms: job.sm_util.map(|_| now_ms),
                    user: Some(job.unix_user().to_owned()),
                    name: Some("python3".to_owned()),
                    command: Some(format!("python3 scripted_job_{n}.py (simulated)")),
                    started_ms: Some(window.start(first_ms)),
                    group: Some(60_000 + n),
                    workload: Some(job.workload.as_deref().cloned().unwrap_or_default()),
                    owner: None,
                    redacted: false,
                    idle: None,
                });
            }
        }
        any.then_some(processes)
    }

    /// The load of GPU `device`'s scripted jobs running at `now_ms`; `None` when none runs.
    fn scripted_load(&self, device: u32, first_ms: u64, now_ms: u64) -> Option<Scripted> {
        let running: Vec<&ScriptedJob> = self
            .faults
            .iter()
            .filter_map(|fault| match fault {
                Fault::Job { device: d, job, window } if *d == device && window.holds(first_ms, now_ms) => Some(job),
                _ => None,
            })
            .collect();
        let util = running.iter().filter_map(|job| job.sm_util).sum::<u32>().min(100);
        (!running.is_empty()).then(|| Scripted {
            util: f64::from(util),
            spin: running.iter().all(|job| job.spin || job.sm_util.is_none()),
        })
    }

    /// Queues an XID for the XID watcher, as the driver's event set would report it.
    fn push_xid(&self, device: u32, code: u64, timestamp_ms: u64) {
        let xid = XidEvent { device, timestamp_ms, code, meaning: xid_meaning(code).to_owned() };
        base::sync::lock(&self.xids).push(xid);
    }
}

impl GpuSource for Simulator {
    fn host(&self) -> HostInfo {
        HostInfo {
            hostname: super::hostname(),
            driver_version: Some("580.159.04 (simulated)".to_owned()),
            cuda_driver_version: Some("13.0".to_owned()),
            simulated: true,
            gpu_error: None,
            interval_ms: self.interval_ms,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            history: false,
        }
    }

    fn topology(&self) -> Option<shared::topology::Topology> {
        Some(super::topology::simulated(&self.devices()))
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        (0u32..)
            .zip(&self.state().gpus)
            .map(|(index, gpu)| {
                let model = &MODELS[gpu.model];
                DeviceInfo {
                    index,
                    name: format!("{} (simulated)", model.name),
                    uuid: format!("GPU-5140da5b-0000-4000-8000-{index:012x}"),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
                    compute_capability: Some(ComputeCapability {
                        major: model.capability.0,
                        minor: model.capability.1,
                    }),
                    memory_total: model.memory_total,
                    simulated: true,
                    max_clocks: Clocks {
                        graphics_mhz: Some(model.max_sm_clock_mhz),
                        sm_mhz: Some(model.max_sm_clock_mhz),
                        memory_mhz: Some(model.mem_clock_mhz),
                    },
                    pcie_max: Some(PcieLink { generation: model.pcie_gen, width: 16 }),
                    memory_bus_width: Some(model.bus_width),
                    nvlink_links: model.nvlinks,
                    slowdown_temp_c: Some(THERMAL_SLOWDOWN as u32),
                    shutdown_temp_c: Some(THERMAL_SHUTDOWN as u32),
                }
            })
            .collect()
    }

    fn sample(&self, timestamp_ms: u64) -> Vec<DeviceSample> {
        let mut state = self.state();
        let first_ms = *state.first_ms.get_or_insert(timestamp_ms);
        self.raise_xids(&mut state.xids_raised, first_ms, timestamp_ms);
        let SimState { gpus, rng, next_pid, .. } = &mut *state;
        (0u32..)
            .zip(gpus.iter_mut())
            .map(|(index, gpu)| {
                if let Some(reason) = self.lost(index, first_ms, timestamp_ms) {
                    if gpu.last_ms.is_some() {
                        // The moment it goes: the driver would log XID 79.
                        gpu.fall_off(rng);
                        self.push_xid(index, 79, timestamp_ms);
                    }
                    return DeviceSample { index, timestamp_ms, lost: Some(reason), ..DeviceSample::default() };
                }
                let effects = Effects::at(&self.faults, index, first_ms, timestamp_ms);
                let scripted = self.scripted_load(index, first_ms, timestamp_ms);
                if gpu.scripted.is_some() && scripted.is_none() {
                    // Its scripted processes exited: nothing runs at once.
                    gpu.util = 0.0;
                }
                gpu.scripted = scripted;
                let mut sample = gpu.step(index, timestamp_ms, rng, next_pid, effects);
                if let Some(jobs) = self.scripted_jobs(index, first_ms, timestamp_ms) {
                    follow_jobs(&mut sample, &jobs);
                }
                sample
            })
            .collect()
    }

    fn details(&self, timestamp_ms: u64) -> Details {
        let mut state = self.state();
        let first_ms = *state.first_ms.get_or_insert(timestamp_ms);
        let SimState { gpus, rng, .. } = &mut *state;
        let mut details = Details::default();
        for (index, gpu) in (0u32..).zip(gpus.iter()) {
            if self.lost(index, first_ms, timestamp_ms).is_some() {
                continue;
            }
            let effects = Effects::at(&self.faults, index, first_ms, timestamp_ms);
            details.health.push(gpu.health(index, timestamp_ms, rng, effects));
            let scripted = self.scripted_jobs(index, first_ms, timestamp_ms);
            match scripted {
                Some(processes) => details.processes.extend(processes),
                // An unseen job's process is not listed: the GPU's figures alone say it is in use.
                None if effects.unseen => {}
                None => details.processes.extend(gpu.processes(index)),
            }
            details.processes.extend(self.host_processes(index));
        }
        details
    }

    fn details_period(&self, interval: std::time::Duration) -> std::time::Duration {
        // Scripted jobs are for exact accounting tests: read processes as often as gauges
        // (the simulator's details cost nothing), so a job's end is seen within one interval.
        if self.faults.iter().any(|f| matches!(f, Fault::Job { .. })) {
            interval
        } else {
            super::sampler::DETAILS_PERIOD.max(interval)
        }
    }

    fn watch_activity(&self, sink: ActivitySink, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
        let state = self.state.clone();
        let step = move |now_ms| activity::windows(&base::sync::lock(&state).gpus, now_ms);
        super::activity::spawn_loop(step, sink, stop)
    }

    fn watch_xids(&self, sink: XidSink, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
        // Faults raise XIDs from `sample`; this thread hands them on as NVML's event set would.
        let queue = self.xids.clone();
        std::thread::Builder::new()
            .name("gpudash-xid".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let events = std::mem::take(&mut *base::sync::lock(&queue));
                    events.into_iter().for_each(&sink);
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            })
            .ok()
    }
}

/// A GPU running scripted jobs reads what they hold and run: its idle memory plus theirs, and their SM
/// shares summed as its util, so the gauges agree with the process list.
fn follow_jobs(sample: &mut DeviceSample, jobs: &[shared::processes::GpuProcess]) {
    if jobs.is_empty() {
        return;
    }
    if let (Some(used), Some(free)) = (sample.memory_used, sample.memory_free) {
        let total = used.saturating_add(free);
        let used = used.saturating_add(jobs.iter().filter_map(|p| p.used_memory).sum()).min(total);
        sample.memory_used = Some(used);
        sample.memory_free = Some(total - used);
    }
    if sample.gpu_util.is_some() {
        sample.gpu_util = Some(jobs.iter().filter_map(|p| p.sm_util).sum::<u32>().min(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_is_labelled_simulated() {
        let sim = Simulator::new(3, 1000);
        assert!(sim.host().simulated);
        let devices = sim.devices();
        assert_eq!(devices.len(), 3);
        assert!(devices.iter().all(|d| d.simulated && d.name.contains("(simulated)")));
        let uuids: std::collections::HashSet<_> = devices.iter().map(|d| &d.uuid).collect();
        assert_eq!(uuids.len(), 3, "UUIDs must be unique");
    }

    #[test]
    fn readings_move_and_stay_within_physical_bounds() {
        let sim = Simulator::new(8, 1000);
        let devices = sim.devices();
        let mut first = None;
        let mut changed = false;
        for tick in 0..600u64 {
            let samples = sim.sample(1_000_000 + tick * 1000);
            assert_eq!(samples.len(), 8);
            for (s, d) in samples.iter().zip(&devices) {
                let used = s.memory_used.unwrap();
                assert!(used <= d.memory_total);
                assert_eq!(used + s.memory_free.unwrap(), d.memory_total);
                assert!(s.gpu_util.unwrap() <= 100);
                assert!(s.power_draw_mw.unwrap() <= s.power_limit_mw.unwrap());
                assert!((25..=95).contains(&s.temperature_c.unwrap()));
            }
            let used: Vec<_> = samples.iter().map(|s| s.memory_used).collect();
            changed |= first.get_or_insert_with(|| used.clone()) != &used;
        }
        assert!(changed, "memory never moved in ten simulated minutes");
    }

    #[test]
    fn busy_gpus_list_their_job_and_health_reads_plausibly() {
        let sim = Simulator::new(2, 1000);
        for t in 0..5u64 {
            sim.sample(t * 1000);
        }
        let details = sim.details(5000);
        assert_eq!(details.health.len(), 2);
        assert_eq!(details.health[0].nvlinks.len(), 18);
        let job = details.processes.iter().find(|p| p.device == 0).expect("GPU 0 runs a job");
        assert!(job.user.is_some() && job.command.is_some() && job.used_memory.unwrap() > 1 << 30, "{job:?}");
        assert!(details.processes.iter().all(|p| p.device != 1), "GPU 1 is idle");
    }

    #[test]
    fn an_injected_loss_marks_only_that_gpu_and_raises_xid_79() {
        let sim = Simulator::new(3, 1000).with_fault("lost:1@2s".parse().unwrap());
        let before = sim.sample(10_000);
        assert!(before.iter().all(|s| s.lost.is_none()));
        let after = sim.sample(12_000);
        assert!(after[1].lost.as_deref().unwrap().contains("lost"), "{:?}", after[1]);
        assert!(after[1].memory_used.is_none());
        assert!(after[0].lost.is_none() && after[0].memory_used.is_some());
        assert!(after[2].lost.is_none());
        let details = sim.details(12_000);
        assert_eq!(details.health.iter().map(|h| h.index).collect::<Vec<_>>(), [0, 2]);
        let xids = std::mem::take(&mut *sim.xids.lock().unwrap());
        assert_eq!(xids.len(), 1);
        assert_eq!((xids[0].device, xids[0].code), (1, 79));
    }

    #[test]
    fn a_busy_gpu_shows_load_soon_after_start() {
        let sim = Simulator::new(2, 1000);
        let last = (0..5u64).map(|t| sim.sample(t * 1000)).next_back().unwrap();
        assert!(last[0].gpu_util.unwrap() > 40, "{:?}", last[0]);
        assert!(last[0].memory_used.unwrap() > 4 << 30, "{:?}", last[0]);
        assert_eq!(last[1].gpu_util, Some(0));
    }
}
