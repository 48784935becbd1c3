//! How a lab is set up: its limits ([`LabConfig`]), what a server adds ([`LabOptions`]), and
//! everything it is built from ([`LabSetup`]): GPUs, host facts, probe, run store and executors.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shared::DeviceInfo;
use shared::topology::Topology;

use super::cuda;
use super::executor::Executor;
use super::guards::{DeviceProbe, GpuReadings, HardwareProbe, SimulatedProbe};
use super::{isolated, simulated};
use base::clock::now_ms;
use store::runs::{MemoryRunStore, RunStore, SqliteRunStore};

/// How the lab behaves on a shared server.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Hard limit on one run.
    pub time_limit: Duration,
    /// The lab releases its CUDA context (and pool) after this long without work.
    pub idle_release: Duration,
    /// Device memory every run leaves free for others.
    pub memory_margin: u64,
    /// Finished runs kept in the runs database (and in memory without one); older ones are deleted.
    pub runs_kept: usize,
    /// Host memory every run leaves available (`MemAvailable`) for the rest of the host.
    pub host_margin: u64,
    /// Most runs one user may have queued or running at once.
    pub queue_per_user: usize,
}

/// What `--lab-runs-kept` accepts.
pub const RUNS_KEPT: std::ops::RangeInclusive<usize> = 10..=1_000_000;

/// What `--lab-queue-per-user` accepts.
pub const QUEUE_PER_USER: std::ops::RangeInclusive<usize> = 1..=1000;

impl Default for LabConfig {
    fn default() -> Self {
        Self {
            time_limit: Duration::from_secs(120),
            idle_release: Duration::from_secs(60),
            memory_margin: 1 << 30,
            runs_kept: 10_000,
            host_margin: 1 << 30,
            queue_per_user: 8,
        }
    }
}

/// How a server's lab is set up besides its GPUs.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    pub config: LabConfig,
    /// The SQLite database runs are kept in (the history database); `None` keeps them in memory.
    pub runs_db: Option<PathBuf>,
    /// The gpudash binary the runs go to, one worker process per GPU (`lab/isolated/`): the server
    /// sets its own. `None` runs them on threads of this process, as a test binary serving in-process
    /// must (it cannot start itself as gpudash).
    pub worker: Option<PathBuf>,
    /// Who the workers run as when the dashboard is root (`--lab-user`, looked up at start).
    pub worker_user: Option<isolated::RunAs>,
    /// How many workers abort halfway through their first run ([`isolated::FAULT_VAR`]; tests).
    pub worker_aborts: usize,
    /// How many workers, after those, talk without end from their first run on, deaf to cancel and
    /// their time limit ([`isolated::FAULT_VAR`]; tests).
    pub worker_chatters: usize,
}

/// Test hooks of a lab on simulated GPUs; ignored on real ones. The default is what
/// `--simulate` serves: a fresh probe and 20 ms steps.
#[derive(Debug, Clone, Default)]
pub struct SimulatedLab {
    /// The probe to read (tests make GPUs look busy on it).
    pub probe: Option<Arc<SimulatedProbe>>,
    /// How long each experiment step sleeps (default 20 ms).
    pub step: Option<Duration>,
}

impl LabOptions {
    /// These options with what the server knows: its history database (unless runs go elsewhere already).
    #[must_use]
    pub fn with_server(mut self, history_db: Option<&std::path::Path>) -> Self {
        if self.runs_db.is_none() {
            self.runs_db = history_db.map(std::path::Path::to_path_buf);
        }
        self
    }
}

/// The runs table in `db`, or memory when there is none or it cannot be opened (said in the log);
/// either keeps the newest `kept` finished runs.
fn run_store(db: Option<&std::path::Path>, kept: usize) -> Arc<dyn RunStore> {
    // In memory (no history database) at most a thousand: runs carry their figures.
    let in_memory = || Arc::new(MemoryRunStore::new(kept.min(1000)));
    let Some(path) = db else { return in_memory() };
    match SqliteRunStore::open(path, now_ms(), kept) {
        Ok(store) => Arc::new(store),
        Err(e) => {
            tracing::error!("{e}; lab runs are kept in memory only and are lost at a restart");
            in_memory()
        }
    }
}

/// A GPU as the lab knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabGpu {
    /// NVML index.
    pub index: u32,
    pub name: String,
    /// NVML's "GPU-…" UUID, used to find the same GPU in CUDA's numbering.
    pub uuid: String,
}

/// Facts stored with every run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabHost {
    pub hostname: String,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
}

/// Makes the executor of one GPU, on that GPU's worker thread.
pub type ExecutorFactory = Arc<dyn Fn(u32) -> Box<dyn Executor> + Send + Sync>;

/// Why a lab cannot run experiments; said by `GET /api/lab` and every refused request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The telemetry's own words on the driver (e.g. "NVIDIA driver not available: …").
    #[error("{0}")]
    Driver(String),
    #[error("the GPUs cannot be read (no NVML)")]
    NoNvml,
    #[error("no GPU")]
    NoGpu,
    #[error(transparent)]
    Cuda(#[from] cuda::MissingLibraries),
}

/// What the server knows about its GPUs, in plain values: what [`LabSetup::for_server`] builds a lab
/// from (`crate::wiring::lab` reads it from the telemetry hub).
pub struct ServerGpus {
    pub host: LabHost,
    /// The GPUs are the simulator's.
    pub simulated: bool,
    /// Why the GPUs cannot be read, in the telemetry's own words on the driver.
    pub gpu_error: Option<String>,
    pub devices: Vec<DeviceInfo>,
    /// How the GPUs connect; `None` where the source cannot say.
    pub topology: Option<Topology>,
    /// Live readings (memory, processes, GPM windows); `None` where nothing can be asked (no NVML).
    pub readings: Option<Arc<dyn GpuReadings>>,
}

/// Everything a lab is built from: pass edges in, so tests choose each.
pub struct LabSetup {
    pub config: LabConfig,
    pub host: LabHost,
    pub devices: Vec<LabGpu>,
    pub probe: Arc<dyn DeviceProbe>,
    pub store: Arc<dyn RunStore>,
    /// The executors, or why there are none (e.g. "libcuda.so not found").
    pub executors: Result<ExecutorFactory, Unavailable>,
    pub simulated: bool,
    /// How the GPUs connect; `None` where the source cannot say.
    pub topology: Option<Topology>,
}

impl LabSetup {
    /// The lab for what the server shows: simulated GPUs get the simulated executor (fast enough for
    /// tests), real ones the CUDA executor when its libraries load.
    pub fn for_server(server: ServerGpus, options: &LabOptions, simulated_lab: &SimulatedLab) -> Self {
        let config = options.config.clone();
        let ServerGpus { host, simulated, gpu_error, devices: infos, topology, readings } = server;
        let devices: Vec<LabGpu> =
            infos.iter().map(|d| LabGpu { index: d.index, name: d.name.clone(), uuid: d.uuid.clone() }).collect();
        if simulated {
            let probe = simulated_lab.probe.clone().unwrap_or_default();
            if let Some(readings) = readings {
                probe.attach(readings, topology.clone());
            }
            let step = simulated_lab.step.unwrap_or(Duration::from_millis(20));
            let kept = config.runs_kept;
            let worker = worker_executors(options, &devices, isolated::Engine::Simulated { step });
            let mut setup = Self::simulated(config, host, devices, probe, step);
            if let Some(worker) = worker {
                setup.executors = Ok(worker);
            }
            setup.store = run_store(options.runs_db.as_deref(), kept);
            setup.topology = topology;
            return setup;
        }
        let store = run_store(options.runs_db.as_deref(), config.runs_kept);
        let unavailable = |reason: Unavailable, probe: Arc<dyn DeviceProbe>| Self {
            config: config.clone(),
            host: host.clone(),
            devices: devices.clone(),
            probe,
            store: store.clone(),
            executors: Err(reason),
            simulated: false,
            topology: topology.clone(),
        };
        // The server's own NVML handle: the lab opens none of its own.
        let Some(readings) = readings else {
            let reason = gpu_error.map_or(Unavailable::NoNvml, Unavailable::Driver);
            return unavailable(reason, Arc::new(SimulatedProbe::default()));
        };
        let probe: Arc<dyn DeviceProbe> = Arc::new(HardwareProbe::new(readings, &infos));
        if devices.is_empty() {
            return unavailable(gpu_error.map_or(Unavailable::NoGpu, Unavailable::Driver), probe);
        }
        match cuda::availability() {
            Ok(()) => Self {
                config,
                host,
                executors: Ok(worker_executors(options, &devices, isolated::Engine::Cuda)
                    .unwrap_or_else(|| cuda_executors(&devices))),
                devices,
                probe,
                store,
                simulated: false,
                topology,
            },
            Err(missing) => unavailable(Unavailable::Cuda(missing), probe),
        }
    }

    /// The simulated executor on `devices`; each of its steps sleeps `step` so progress and cancel show.
    pub fn simulated(
        config: LabConfig,
        host: LabHost,
        devices: Vec<LabGpu>,
        probe: Arc<dyn DeviceProbe>,
        step: Duration,
    ) -> Self {
        Self {
            config,
            host,
            devices,
            probe,
            store: Arc::new(MemoryRunStore::default()),
            executors: Ok(Arc::new(move |_| Box::new(simulated::SimulatedExecutor::new(step)) as Box<dyn Executor>)),
            simulated: true,
            topology: None,
        }
    }
}

/// Executors that hand each GPU's runs to a worker process running `engine`, when `options` name the
/// worker's binary.
fn worker_executors(options: &LabOptions, devices: &[LabGpu], engine: isolated::Engine) -> Option<ExecutorFactory> {
    let binary = options.worker.clone()?;
    let launch = isolated::Launch::new(binary, options.worker_user.clone(), options.worker_aborts)
        .with_chatters(options.worker_chatters);
    let gpus = devices.iter().map(|d| (d.index, d.uuid.clone())).collect();
    Some(Arc::new(isolated::executors(launch, gpus, engine)))
}

/// CUDA executors for `devices`, each matched to its CUDA ordinal by UUID; each knows
/// every GPU's UUID too, for the p2p experiment.
pub fn cuda_executors(devices: &[LabGpu]) -> ExecutorFactory {
    cuda_executors_with_fault(devices, None)
}

/// [`cuda_executors`] injecting `fault` into every run (`gpudash bench` with `GPUDASH_BENCH_FAULT`).
pub fn cuda_executors_with_fault(devices: &[LabGpu], fault: Option<cuda::Fault>) -> ExecutorFactory {
    let uuids: Vec<(u32, String)> = devices.iter().map(|d| (d.index, d.uuid.clone())).collect();
    Arc::new(move |device| {
        let uuid = uuids.iter().find(|(i, _)| *i == device).map(|(_, u)| u.clone());
        let executor = cuda::CudaExecutor::new(device, uuid).with_gpus(uuids.clone()).with_fault(fault);
        Box::new(executor) as Box<dyn Executor>
    })
}
