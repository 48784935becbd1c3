//! The GPU lab: memory, transfer, stream, precision, latency and p2p
//! experiments run on the server's GPUs from the browser or `gpudash bench`.
//!
//! A request is validated and guarded ([`plan`], [`guards`]), queued in the
//! [`queue::QueueBook`] every viewer sees, and run by its GPU's worker thread
//! ([`worker`]) through an [`executor::Executor`]: cudarc on hardware,
//! [`simulated::SimulatedExecutor`] in CI. Runs are kept in a [`RunStore`];
//! events go out pre-serialized on a broadcast channel the WebSocket forwards.

pub mod cuda;
pub mod executor;
pub mod gang;
pub mod guards;
pub mod p2p;
pub mod plan;
pub mod queue;
pub mod report;
pub mod simulated;
pub mod stats;
pub mod svg;
pub mod table;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use shared::ServerMessage;
use shared::lab::{
    ExperimentInfo, ExperimentKind, ExperimentParams, LabDevice, LabEvent, LabStatus, Run, RunEnvironment, RunPlan,
    RunRequest, RunStatus, RunSummary, TrimOutcome,
};
use shared::topology::Topology;
use tokio::sync::{broadcast, oneshot};

use self::executor::Executor;
use self::guards::{DeviceProbe, NvmlProbe, SimulatedProbe};
use self::queue::QueueBook;
use crate::store::runs::{MemoryRunStore, RunFilter, RunStore, SqliteRunStore};
use crate::telemetry::{Telemetry, Visibility, encode, now_ms};

/// Events a slow socket may fall behind before it gets a fresh status.
const EVENT_BACKLOG: usize = 256;

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
    /// Simulated GPUs only: the probe to read (tests make GPUs look busy on it).
    pub simulated_probe: Option<Arc<SimulatedProbe>>,
    /// Simulated GPUs only: how long each experiment step sleeps (default 20 ms).
    pub simulated_step: Option<Duration>,
    /// The SQLite database runs are kept in (the history database); `None` keeps them in memory.
    pub runs_db: Option<PathBuf>,
    /// How the GPUs connect, as the telemetry source read it at start (`GET /api/topology`).
    pub topology: Option<Topology>,
}

impl LabOptions {
    /// These options with what the server knows: its history database (unless runs go elsewhere already)
    /// and the GPUs' topology.
    #[must_use]
    pub fn with_server(mut self, history_db: Option<&std::path::Path>, topology: Option<Topology>) -> Self {
        if self.runs_db.is_none() {
            self.runs_db = history_db.map(std::path::Path::to_path_buf);
        }
        self.topology = topology.or(self.topology);
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

/// Why a lab request failed; each maps to an HTTP status in `web::lab`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabError {
    #[error("the GPU lab is unavailable: {0}")]
    Unavailable(String),
    #[error("no GPU {0}; GET /api/lab lists the GPUs")]
    NoDevice(u32),
    #[error("invalid parameters: {0}")]
    Invalid(String),
    #[error("refused: {0}")]
    Refused(String),
    #[error("no run {0}")]
    NoRun(u64),
    #[error("{0}")]
    Conflict(String),
    /// The user has as many runs queued or running as `--lab-queue-per-user` allows.
    #[error("{0}")]
    QueueFull(String),
    #[error("{0}")]
    Internal(String),
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

/// Everything a lab is built from: pass edges in, so tests choose each.
pub struct LabSetup {
    pub config: LabConfig,
    pub host: LabHost,
    pub devices: Vec<LabGpu>,
    pub probe: Arc<dyn DeviceProbe>,
    pub store: Arc<dyn RunStore>,
    /// The executors, or why there are none (e.g. "libcuda.so not found").
    pub executors: Result<ExecutorFactory, String>,
    pub simulated: bool,
    /// How the GPUs connect; `None` where the source cannot say.
    pub topology: Option<Topology>,
}

impl LabSetup {
    /// The lab for what the telemetry shows: simulated GPUs get the simulated executor
    /// (fast enough for tests), real ones cudarc when its libraries load.
    pub fn for_telemetry(telemetry: &Arc<Telemetry>, options: &LabOptions) -> Self {
        let config = options.config.clone();
        let info = telemetry.host();
        let simulated = info.simulated;
        let host = LabHost {
            hostname: info.hostname.clone(),
            driver_version: info.driver_version.clone(),
            cuda_driver_version: info.cuda_driver_version.clone(),
        };
        let gpu_error = info.gpu_error.clone();
        let devices: Vec<LabGpu> = telemetry
            .devices()
            .iter()
            .map(|d| LabGpu { index: d.index, name: d.name.clone(), uuid: d.uuid.clone() })
            .collect();
        if simulated {
            let probe = options.simulated_probe.clone().unwrap_or_default();
            probe.attach(telemetry.clone());
            let step = options.simulated_step.unwrap_or(Duration::from_millis(20));
            let kept = config.runs_kept;
            let mut setup = Self::simulated(config, host, devices, probe, step);
            setup.store = run_store(options.runs_db.as_deref(), kept);
            setup.topology.clone_from(&options.topology);
            return setup;
        }
        let store = run_store(options.runs_db.as_deref(), config.runs_kept);
        let unavailable = |reason: String, probe: Arc<dyn DeviceProbe>| Self {
            config: config.clone(),
            host: host.clone(),
            devices: devices.clone(),
            probe,
            store: store.clone(),
            executors: Err(reason),
            simulated: false,
            topology: options.topology.clone(),
        };
        let probe: Arc<dyn DeviceProbe> = match NvmlProbe::open() {
            Ok(p) => Arc::new(p),
            Err(e) => return unavailable(e, Arc::new(SimulatedProbe::new(None))),
        };
        if devices.is_empty() {
            return unavailable(gpu_error.unwrap_or_else(|| "no GPU".into()), probe);
        }
        match cuda::availability() {
            Ok(()) => Self {
                config,
                host,
                executors: Ok(cuda_executors(&devices)),
                devices,
                probe,
                store,
                simulated: false,
                topology: options.topology.clone(),
            },
            Err(reason) => unavailable(reason, probe),
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

/// cudarc executors for `devices`, each matched to its CUDA ordinal by UUID; each knows
/// every GPU's UUID too, for the p2p experiment.
pub fn cuda_executors(devices: &[LabGpu]) -> ExecutorFactory {
    let uuids: Vec<(u32, String)> = devices.iter().map(|d| (d.index, d.uuid.clone())).collect();
    Arc::new(move |device| {
        let uuid = uuids.iter().find(|(i, _)| *i == device).map(|(_, u)| u.clone());
        Box::new(cuda::CudaExecutor::new(device, uuid).with_gpus(uuids.clone())) as Box<dyn Executor>
    })
}

/// State the workers and the handlers share.
pub(crate) struct Shared {
    config: LabConfig,
    availability: Result<(), String>,
    simulated: bool,
    host: LabHost,
    devices: Vec<LabGpu>,
    probe: Arc<dyn DeviceProbe>,
    store: Arc<dyn RunStore>,
    topology: Option<Topology>,
    book: Mutex<QueueBook>,
    /// Held from the per-user count to the push, so simultaneous submits cannot pass the limit together.
    admission: Mutex<()>,
    pools: Mutex<Vec<LabDevice>>,
    events: broadcast::Sender<LabFrame>,
}

/// A lab event serialized for sockets: as is, and without the people it names
/// ([`LabEvent::hide_people`]) for anonymous visitors when tokens exist. Each is
/// encoded once per event; events that name nobody share one buffer.
#[derive(Debug, Clone)]
pub struct LabFrame {
    full: Utf8Bytes,
    redacted: Utf8Bytes,
}

impl LabFrame {
    fn new(event: LabEvent) -> Self {
        let mut hidden = event.clone();
        let full = encode(&ServerMessage::Lab(event));
        let redacted = if hidden.hide_people() { encode(&ServerMessage::Lab(hidden)) } else { full.clone() };
        Self { full, redacted }
    }

    /// The bytes a viewer with `visibility` gets.
    pub fn text_for(&self, visibility: Visibility) -> Utf8Bytes {
        match visibility {
            Visibility::Full => self.full.clone(),
            Visibility::Redacted => self.redacted.clone(),
        }
    }
}

impl Shared {
    fn book(&self) -> MutexGuard<'_, QueueBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pools(&self) -> MutexGuard<'_, Vec<LabDevice>> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The status with a bounded queue ([`shared::lab::QUEUE_LISTED`] waiting runs at most).
    pub(crate) fn status(&self) -> LabStatus {
        let book = self.book();
        let queue = book.listed(shared::lab::QUEUE_LISTED);
        let queue_total = count(book.total());
        let pending: Vec<u32> = self.devices.iter().map(|d| count(book.pending_on(d.index))).collect();
        drop(book);
        let mut devices = self.pools().clone();
        for (device, pending) in devices.iter_mut().zip(pending) {
            device.pending = pending;
        }
        LabStatus {
            available: self.availability.is_ok(),
            reason: self.availability.clone().err(),
            simulated: self.simulated,
            devices,
            queue,
            queue_total,
            queue_per_user: count(self.config.queue_per_user),
            time_limit_ms: millis(self.config.time_limit),
            idle_release_ms: millis(self.config.idle_release),
        }
    }

    /// The host-memory guard for `run` against the runs running now; `book` is held so the check and
    /// marking the run running are one step.
    pub(crate) fn check_host(&self, book: &QueueBook, run: &Run) -> Result<Option<String>, guards::Refusal> {
        let others = book.host_bytes_running(Some(run.summary.id));
        guards::check_host_memory(
            &plan::footprint(&run.params),
            self.probe.host_memory(),
            others,
            self.config.host_margin,
        )
    }

    pub(crate) fn emit(&self, event: LabEvent) {
        // Nobody listening is normal.
        let _ = self.events.send(LabFrame::new(event));
    }

    pub(crate) fn emit_status(&self) {
        self.emit(LabEvent::Status(self.status()));
    }

    pub(crate) fn save(&self, run: &Run) {
        if let Err(e) = self.store.save(run) {
            tracing::error!(run = run.summary.id, "{e}");
        }
    }

    pub(crate) fn set_pool(&self, device: u32, pool: Option<executor::PoolUsage>) {
        if let Some(d) = self.pools().iter_mut().find(|d| d.index == device) {
            d.context_open = pool.is_some();
            d.pool_reserved = pool.map_or(0, |p| p.reserved);
            d.pool_used = pool.map_or(0, |p| p.used);
        }
    }

    /// Lines naming each pair's link as `nvidia-smi topo -m` would, for p2p results.
    pub(crate) fn link_notes(&self, params: &ExperimentParams) -> Vec<String> {
        let (ExperimentParams::P2p(p), Some(topology)) = (params, &self.topology) else { return Vec::new() };
        p.pairs
            .iter()
            .filter_map(|pair| topology.pair(pair.a, pair.b))
            .map(|t| {
                format!(
                    "GPU {} ↔ {}: {} ({}); P2P read {}, write {}, atomics {}, over NVLink {} (NVML){}",
                    t.a,
                    t.b,
                    t.link,
                    shared::topology::link_meaning(&t.link),
                    t.p2p_read,
                    t.p2p_write,
                    t.p2p_atomics,
                    t.p2p_nvlink,
                    if topology.simulated { ", simulated" } else { "" }
                )
            })
            .collect()
    }

    pub(crate) fn pool_of(&self, device: u32) -> Option<LabDevice> {
        self.pools().iter().find(|d| d.index == device).cloned()
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The lab: submit, cancel, look up runs, trim pools; one worker thread per GPU.
pub struct Lab {
    shared: Arc<Shared>,
    workers: Mutex<Vec<worker::Worker>>,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab").field("available", &self.shared.availability).finish_non_exhaustive()
    }
}

impl Lab {
    /// Starts one worker thread per GPU (none when the lab is unavailable).
    pub fn start(setup: LabSetup) -> Self {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let pools = setup
            .devices
            .iter()
            .map(|d| LabDevice { index: d.index, context_open: false, pool_reserved: 0, pool_used: 0, pending: 0 })
            .collect();
        let availability = setup.executors.as_ref().map(|_| ()).map_err(Clone::clone);
        let shared = Arc::new(Shared {
            config: setup.config,
            availability,
            simulated: setup.simulated,
            host: setup.host,
            devices: setup.devices,
            probe: setup.probe,
            store: setup.store,
            topology: setup.topology,
            book: Mutex::default(),
            admission: Mutex::default(),
            pools: Mutex::new(pools),
            events,
        });
        let mut workers = Vec::new();
        if let Ok(factory) = setup.executors {
            for device in &shared.devices {
                match worker::Worker::spawn(device.index, shared.clone(), factory.clone()) {
                    Ok(w) => workers.push(w),
                    Err(e) => tracing::error!(device = device.index, "cannot start the lab's worker thread: {e}"),
                }
            }
        }
        if let Err(reason) = &shared.availability {
            tracing::info!("GPU lab unavailable: {reason}");
        }
        Self { shared, workers: Mutex::new(workers) }
    }

    pub fn status(&self) -> LabStatus {
        self.shared.status()
    }

    /// How the GPUs connect, read at start; `None` where the source cannot say (no NVML).
    pub fn topology(&self) -> Option<&Topology> {
        self.shared.topology.as_ref()
    }

    /// Lab events, each a serialized `ServerMessage::Lab`.
    pub fn subscribe(&self) -> broadcast::Receiver<LabFrame> {
        self.shared.events.subscribe()
    }

    /// The current status as a WebSocket frame, to resynchronise a client that fell behind.
    pub fn status_frame(&self, visibility: Visibility) -> Utf8Bytes {
        LabFrame::new(LabEvent::Status(self.status())).text_for(visibility)
    }

    /// The experiments with their defaults, for the page's forms.
    pub fn experiments() -> Vec<ExperimentInfo> {
        ExperimentKind::ALL
            .into_iter()
            .map(|kind| {
                let (title, description) = describe(kind);
                ExperimentInfo {
                    kind,
                    title: title.to_owned(),
                    description: description.to_owned(),
                    defaults: kind.default_params(),
                }
            })
            .collect()
    }

    /// Validates, guards and queues a run. Blocking (NVML): call from `spawn_blocking`.
    pub fn submit(&self, mut request: RunRequest, requested_by: &str) -> Result<Run, LabError> {
        let shared = &self.shared;
        shared.availability.clone().map_err(LabError::Unavailable)?;
        let info =
            shared.devices.iter().find(|d| d.index == request.device).ok_or(LabError::NoDevice(request.device))?;
        let devices = self.involved(&mut request)?;
        plan::validate(&request.params).map_err(|e| LabError::Invalid(e.0))?;
        let run_plan = self.plan(&request, &devices)?;
        let admission = shared.admission.lock().unwrap_or_else(PoisonError::into_inner);
        self.check_queue_limit(requested_by)?;
        let id = shared.store.next_id().map_err(|e| LabError::Internal(e.to_string()))?;
        let run = Run {
            summary: RunSummary {
                id,
                device: request.device,
                devices: devices.clone(),
                kind: request.params.kind(),
                status: RunStatus::Queued,
                requested_by: requested_by.to_owned(),
                submitted_ms: now_ms(),
                started_ms: None,
                finished_ms: None,
                simulated: shared.simulated,
                passed: None,
                error: None,
            },
            params: request.params,
            force: request.force,
            plan: run_plan,
            environment: RunEnvironment {
                gpu_name: info.name.clone(),
                gpu_uuid: info.uuid.clone(),
                driver_version: shared.host.driver_version.clone(),
                cuda_driver_version: shared.host.cuda_driver_version.clone(),
                gpudash_version: env!("CARGO_PKG_VERSION").to_owned(),
                hostname: shared.host.hostname.clone(),
            },
            progress: None,
            result: None,
            previous_id: None,
        };
        shared.save(&run);
        // Queued on its GPU's worker and held on the others' all under the book's lock, so every worker
        // sees multi-GPU runs in the same order (see `gang`).
        let mut book = shared.book();
        let others: Vec<u32> = devices.iter().copied().filter(|&d| d != request.device).collect();
        let gate = (!others.is_empty()).then(|| Arc::new(gang::Gate::new(others.len())));
        book.push(run.clone(), gate.clone());
        let sent = self.with_worker(request.device, |w| w.send_run(id))
            && others.iter().all(|&d| self.with_worker(d, |w| w.send_hold(id)));
        if !sent {
            book.remove(id);
            if let Some(gate) = gate {
                gate.end();
            }
            return Err(LabError::Internal(format!("a lab worker of GPU {devices:?} has stopped")));
        }
        drop(book);
        drop(admission);
        tracing::info!(
            id,
            device = request.device,
            kind = run.summary.kind.name(),
            by = requested_by,
            "lab run queued"
        );
        shared.emit(LabEvent::Run(run.summary.clone()));
        shared.emit_status();
        Ok(run)
    }

    /// 429 once `user` has `--lab-queue-per-user` runs queued or running; admins too (they can raise the limit).
    fn check_queue_limit(&self, user: &str) -> Result<(), LabError> {
        let limit = self.shared.config.queue_per_user;
        let queued = self.shared.book().count_by(user);
        if queued >= limit {
            return Err(LabError::QueueFull(format!(
                "'{user}' already has {queued} lab runs queued or running, the most one user may have \
                 (--lab-queue-per-user {limit}); wait for one to end or cancel one"
            )));
        }
        Ok(())
    }

    /// The GPUs a run occupies: its own, or for p2p every GPU of its pairs (filled in when the request
    /// names none). One GPU cannot run p2p: 409.
    fn involved(&self, request: &mut RunRequest) -> Result<Vec<u32>, LabError> {
        let ExperimentParams::P2p(p) = &mut request.params else { return Ok(vec![request.device]) };
        let gpus: Vec<u32> = self.shared.devices.iter().map(|d| d.index).collect();
        p2p::resolve_pairs(p, &gpus)
            .map_err(|e| if gpus.len() < 2 { LabError::Conflict(e) } else { LabError::Invalid(e) })?;
        let devices = p.devices();
        if !devices.contains(&request.device) {
            return Err(LabError::Invalid(format!(
                "'device' must be one of the GPUs in 'pairs' ({devices:?}), got '{}'",
                request.device
            )));
        }
        Ok(devices)
    }

    /// The memory and process checks on every GPU the run occupies and the host-memory check, said before
    /// the run is queued; the worker checks again at start.
    fn plan(&self, request: &RunRequest, devices: &[u32]) -> Result<RunPlan, LabError> {
        let shared = &self.shared;
        let footprint = plan::footprint(&request.params);
        let margin = shared.config.memory_margin;
        let own = std::process::id();
        let mut notes = Vec::new();
        let (mut need, mut memory) = (0, None);
        for &device in devices {
            let pool = shared.pool_of(device);
            let context_open = pool.as_ref().is_some_and(|p| p.context_open);
            let idle = pool.map_or(0, |p| p.pool_reserved.saturating_sub(p.pool_used));
            let device_need = guards::device_need(&footprint, context_open);
            let device_memory = shared.probe.memory(device);
            notes.push(guards::check_memory(device, device_need, device_memory, idle, margin).map_err(refused)?);
            let processes = shared.probe.compute_processes(device);
            notes
                .extend(guards::check_processes(device, processes, own, context_open, request.force).map_err(refused)?);
            if device == request.device {
                (need, memory) = (device_need, device_memory);
            }
        }
        if devices.len() > 1 {
            let list: Vec<String> = devices.iter().map(u32::to_string).collect();
            notes.push(format!(
                "occupies GPUs {} while it runs: it starts when each is free, and their other runs wait for it",
                list.join(", ")
            ));
        }
        let others = shared.book().host_bytes_running(None);
        let host = shared.probe.host_memory();
        notes.extend(guards::check_host_memory(&footprint, host, others, shared.config.host_margin).map_err(refused)?);
        let limit = millis(shared.config.time_limit);
        notes.push(format!("stops at the time limit of {} s", limit / 1000));
        Ok(RunPlan {
            device_bytes: need,
            pinned_host_bytes: footprint.pinned_host,
            host_bytes: footprint.host,
            free_bytes: memory.map(|m| m.free),
            margin_bytes: margin,
            time_limit_ms: limit,
            notes,
        })
    }

    /// Cancels a queued run at once, or asks a running one to stop at its next check.
    pub fn cancel(&self, id: u64) -> Result<RunSummary, LabError> {
        let shared = &self.shared;
        let mut book = shared.book();
        let Some(active) = book.get(id) else {
            drop(book);
            return match shared.store.get(id).map_err(|e| LabError::Internal(e.to_string()))? {
                Some(run) => {
                    Err(LabError::Conflict(format!("run {id} already ended (\"{}\")", run.summary.status.as_str())))
                }
                None => Err(LabError::NoRun(id)),
            };
        };
        active.cancel.store(true, Ordering::Relaxed);
        if active.run.summary.status == RunStatus::Running {
            return Ok(active.run.summary.clone());
        }
        let mut run = book.remove(id).map(|a| a.run).ok_or(LabError::NoRun(id))?;
        drop(book);
        run.summary.status = RunStatus::Cancelled;
        run.summary.finished_ms = Some(now_ms());
        run.summary.error = Some("cancelled before it started".into());
        shared.save(&run);
        shared.emit(LabEvent::Run(run.summary.clone()));
        shared.emit_status();
        Ok(run.summary)
    }

    /// A run with its result, live progress while it runs, and its predecessor for overlays.
    pub fn get(&self, id: u64) -> Result<Run, LabError> {
        let shared = &self.shared;
        let live = shared.book().get(id).map(|a| a.run.clone());
        let mut run = match live {
            Some(run) => run,
            None => shared.store.get(id).map_err(|e| LabError::Internal(e.to_string()))?.ok_or(LabError::NoRun(id))?,
        };
        run.previous_id = self.previous(&run);
        Ok(run)
    }

    fn previous(&self, run: &Run) -> Option<u64> {
        let filter = RunFilter {
            device: Some(run.summary.device),
            kind: Some(run.summary.kind),
            status: Some(RunStatus::Succeeded),
            before: Some(run.summary.id),
            limit: 1,
        };
        self.shared.store.list(&filter).ok()?.first().map(|r| r.id)
    }

    /// Runs, newest first.
    pub fn list(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, LabError> {
        self.shared.store.list(filter).map_err(|e| LabError::Internal(e.to_string()))
    }

    /// Trims the lab's pool on `device`, between runs only.
    pub async fn empty_cache(&self, device: u32) -> Result<TrimOutcome, LabError> {
        let shared = &self.shared;
        shared.availability.clone().map_err(LabError::Unavailable)?;
        if !shared.devices.iter().any(|d| d.index == device) {
            return Err(LabError::NoDevice(device));
        }
        if shared.book().pending_on(device) > 0 {
            return Err(LabError::Conflict(format!(
                "GPU {device} has lab runs queued or running; empty the cache once they end"
            )));
        }
        let (reply, answer) = oneshot::channel();
        if !self.with_worker(device, |w| w.send_trim(reply)) {
            return Err(LabError::Internal(format!("GPU {device}'s lab worker has stopped")));
        }
        match tokio::time::timeout(Duration::from_secs(20), answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(LabError::Internal("the lab worker stopped while trimming".into())),
            Err(_) => Err(LabError::Internal("trimming took longer than 20 s".into())),
        }
    }

    fn with_worker(&self, device: u32, f: impl FnOnce(&worker::Worker) -> bool) -> bool {
        let workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.iter().find(|w| w.device == device).is_some_and(f)
    }

    /// Cancels every run, releases every GPU and joins the workers. Blocking.
    pub fn shutdown(&self) {
        self.shared.book().cancel_all();
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for w in workers {
            w.stop();
        }
    }
}

fn refused(r: guards::Refusal) -> LabError {
    LabError::Refused(r.0)
}

/// Title and one-paragraph description of an experiment.
pub fn describe(kind: ExperimentKind) -> (&'static str, &'static str) {
    match kind {
        ExperimentKind::Memory => (
            "Memory: the caching allocator",
            "Allocates blocks from the driver's stream-ordered pool, frees some, and shows allocated (pool used) \
             vs reserved (pool reserved) vs the device's NVML used at every step; then trims the pool \
             (empty_cache). Also times an allocation served from the pool against a fresh one.",
        ),
        ExperimentKind::Transfer => (
            "Transfer: host and device bandwidth",
            "H2D and D2H copies from pageable and pinned host memory, and D2D, from 4 KiB to 1 GiB, against the \
             PCIe link's and HBM's peaks. Host buffers are written before they are timed.",
        ),
        ExperimentKind::Streams => (
            "Streams: overlap and concurrency",
            "A pinned copy and an fp32 GEMM serial on one stream vs overlapped on two; N independent kernels on \
             one stream vs N streams; a per-stream timeline from CUDA events.",
        ),
        ExperimentKind::Precision => (
            "Precision: GEMM throughput per type",
            "cuBLAS GEMM in fp32, tf32, fp16 and bf16 on random data; TFLOP/s, and each result checked against a \
             tile computed on the host.",
        ),
        ExperimentKind::Latency => (
            "Latency: launch, record, synchronize",
            "The cost of launching an empty NVRTC-compiled kernel, recording an event and synchronizing a stream.",
        ),
        ExperimentKind::P2p => (
            "P2P: bandwidth and latency between GPUs",
            "Copies between every pair of GPUs, one way and both ways at once, and 4-byte copies for latency, with \
             peer access enabled and disabled (staged through host memory), like cuda-samples' \
             p2pBandwidthLatencyTest; drawn as heatmaps. Occupies every GPU it involves; needs two.",
        ),
    }
}
