//! The lab's API: start it, submit, cancel and look up runs, trim a pool, shut down.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::lab::{
    ExperimentInfo, LabEvent, LabStatus, Run, RunCheck, RunEnvironment, RunPlan, RunRequest, RunStatus, RunSummary,
    TrimOutcome,
};
use tokio::sync::{broadcast, oneshot};

use super::state::{Shared, millis};
use super::{LabError, LabSetup, experiments, gang, guards, worker};
use base::clock::now_ms;
use store::runs::RunFilter;

/// The lab: submit, cancel, look up runs, trim pools; one worker thread per GPU.
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
        let availability = setup.executors.as_ref().map(|_| ()).map_err(Clone::clone);
        let shared = Arc::new(Shared::new(
            setup.config,
            availability,
            setup.simulated,
            setup.host,
            setup.devices,
            setup.probe,
            setup.store,
            setup.topology,
        ));
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

    /// What the lab does, as it happens: queue changes, progress, ended runs, trimmed pools.
    /// A subscriber that falls behind gets `Lagged`; [`Lab::status`] then replaces what it missed.
    pub fn subscribe(&self) -> broadcast::Receiver<LabEvent> {
        self.shared.subscribe()
    }

    /// The experiments with their defaults, for the page's forms; each says why it cannot run here, if it
    /// cannot (the lab's own reason, or the kind's: collectives without NCCL). Blocking (it may load NCCL):
    /// call from `spawn_blocking`.
    pub fn experiments(&self) -> Vec<ExperimentInfo> {
        let shared = &self.shared;
        let lab = shared.availability.as_ref().err().map(|e| format!("the GPU lab is unavailable: {e}"));
        experiments::ALL
            .iter()
            .map(|experiment| {
                let (title, description) = experiment.describe();
                let unavailable =
                    lab.clone().or_else(|| experiment.unavailable(shared.simulated, shared.probe.as_ref()));
                ExperimentInfo {
                    kind: experiment.kind(),
                    title: title.to_owned(),
                    description: description.to_owned(),
                    snippet: experiment.snippet().to_owned(),
                    defaults: experiment.defaults(),
                    fields: experiment.fields(),
                    multi_gpu: experiment.multi_gpu(),
                    min_gpus: experiment.min_gpus(),
                    unavailable,
                }
            })
            .collect()
    }

    /// Validates, guards and queues a run by someone who is not an admin. Blocking (NVML): call from
    /// `spawn_blocking`.
    pub fn submit(&self, request: RunRequest, requested_by: &str) -> Result<Run, LabError> {
        self.submit_by(request, requested_by, false)
    }

    /// Validates, guards and queues a run; `admin` when the requester is one (only an admin's force
    /// runs on a GPU the scheduler gave to a pod). Blocking (NVML): call from `spawn_blocking`.
    pub fn submit_by(&self, request: RunRequest, requested_by: &str, admin: bool) -> Result<Run, LabError> {
        let shared = &self.shared;
        let forced_by_admin = request.force && admin;
        let (request, devices, run_plan) = self.prepare(request, admin)?;
        let admission = base::sync::lock(&shared.admission);
        self.check_queue_limit(requested_by)?;
        let id = shared.store.next_id().map_err(|e| LabError::Internal(e.to_string()))?;
        let mut run = self.new_run(id, request, devices, run_plan, requested_by);
        run.forced_by_admin = forced_by_admin;
        shared.save(&run);
        self.enqueue(&run)?;
        drop(admission);
        tracing::info!(
            id,
            device = run.summary.device,
            kind = run.summary.kind.name(),
            by = requested_by,
            "lab run queued"
        );
        shared.emit(LabEvent::Run(run.summary.clone()));
        shared.emit_status();
        Ok(run)
    }

    /// What [`Lab::submit_by`] would do with `request`, without queueing it (`POST /api/runs/check`): the GPUs
    /// it would occupy and its plan, or the refusal the submit would give. Blocking (NVML).
    pub fn check_by(&self, request: RunRequest, requested_by: &str, admin: bool) -> Result<RunCheck, LabError> {
        let (_, devices, plan) = self.prepare(request, admin)?;
        self.check_queue_limit(requested_by)?;
        Ok(RunCheck { devices, plan })
    }

    /// Everything a submit checks before it queues: the request as it will run (p2p's pairs and
    /// collectives' GPUs filled in), the GPUs it occupies, and its plan after the guards.
    fn prepare(&self, mut request: RunRequest, admin: bool) -> Result<(RunRequest, Vec<u32>, RunPlan), LabError> {
        let shared = &self.shared;
        // Parameters that do not read are the request's fault whatever the lab's state: 400 first.
        let experiment = experiments::of(&request.params).map_err(|e| LabError::Invalid(e.to_string()))?;
        experiment.normalize(&mut request.params).map_err(|e| LabError::Invalid(e.0))?;
        shared.availability.clone().map_err(LabError::Unavailable)?;
        if !shared.devices.iter().any(|d| d.index == request.device) {
            return Err(LabError::NoDevice(request.device));
        }
        let devices = self.involved(&mut request)?;
        experiment.validate(&request.params).map_err(|e| LabError::Invalid(e.0))?;
        if let Some(reason) = experiment.unavailable(shared.simulated, shared.probe.as_ref()) {
            let kind = request.params.kind().name();
            return Err(LabError::KindUnavailable(format!("{kind} cannot run here: {reason}")));
        }
        let run_plan = self.plan(&request, &devices, request.force && admin)?;
        Ok((request, devices, run_plan))
    }

    /// The queued run `id` as `request` asks, with its plan and the facts stored with it.
    fn new_run(&self, id: u64, request: RunRequest, devices: Vec<u32>, plan: RunPlan, requested_by: &str) -> Run {
        let shared = &self.shared;
        let info = shared.devices.iter().find(|d| d.index == request.device);
        Run {
            summary: RunSummary {
                id,
                device: request.device,
                devices,
                kind: request.params.kind.clone(),
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
            forced_by_admin: false,
            plan,
            environment: RunEnvironment {
                gpu_name: info.map(|d| d.name.clone()).unwrap_or_default(),
                gpu_uuid: info.map(|d| d.uuid.clone()).unwrap_or_default(),
                driver_version: shared.host.driver_version.clone(),
                cuda_driver_version: shared.host.cuda_driver_version.clone(),
                gpudash_version: env!("CARGO_PKG_VERSION").to_owned(),
                hostname: shared.host.hostname.clone(),
            },
            progress: None,
            result: None,
            previous_id: None,
            takeaway: None,
        }
    }

    /// Queues `run` on its GPU's worker and holds the others it occupies, all under the book's lock, so
    /// every worker sees multi-GPU runs in the same order (see `gang`).
    fn enqueue(&self, run: &Run) -> Result<(), LabError> {
        let (id, device, devices) = (run.summary.id, run.summary.device, &run.summary.devices);
        let mut book = self.shared.book();
        let others: Vec<u32> = devices.iter().copied().filter(|&d| d != device).collect();
        let gate = (!others.is_empty()).then(|| Arc::new(gang::Gate::new(others.len())));
        book.push(run.clone(), gate.clone());
        let sent = self.with_worker(device, |w| w.send_run(id))
            && others.iter().all(|&d| self.with_worker(d, |w| w.send_hold(id)));
        if !sent {
            book.remove(id);
            if let Some(gate) = gate {
                gate.end();
            }
            return Err(LabError::Internal(format!("a lab worker of GPU {devices:?} has stopped")));
        }
        Ok(())
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

    /// The GPUs a run occupies: its own, or for a multi-GPU kind those its experiment says (p2p: every GPU
    /// of its pairs, filled in when the request names none; one GPU cannot run p2p: 409).
    fn involved(&self, request: &mut RunRequest) -> Result<Vec<u32>, LabError> {
        let gpus: Vec<u32> = self.shared.devices.iter().map(|d| d.index).collect();
        let experiment = experiments::of(&request.params).map_err(|e| LabError::Invalid(e.to_string()))?;
        experiment.involved(&mut request.params, request.device, &gpus)
    }

    /// The memory and process checks on every GPU the run occupies and the host-memory check, said before
    /// the run is queued; the worker checks again at start.
    fn plan(&self, request: &RunRequest, devices: &[u32], forced_by_admin: bool) -> Result<RunPlan, LabError> {
        let shared = &self.shared;
        let footprint = experiments::footprint(&request.params).map_err(|e| LabError::Invalid(e.0))?;
        let margin = shared.config.memory_margin;
        let own = std::process::id();
        let mut notes = Vec::new();
        let (mut need, mut memory) = (0, None);
        for &device in devices {
            notes.extend(
                guards::check_scheduled(device, shared.probe.scheduled(device), forced_by_admin).map_err(refused)?,
            );
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
        run.takeaway = run.result.as_ref().and_then(|r| experiments::find(&run.summary.kind).ok()?.takeaway(r));
        Ok(run)
    }

    fn previous(&self, run: &Run) -> Option<u64> {
        let filter = RunFilter {
            device: Some(run.summary.device),
            kind: Some(run.summary.kind.clone()),
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
        let workers = base::sync::lock(&self.workers);
        workers.iter().find(|w| w.device == device).is_some_and(f)
    }

    /// Cancels every run, releases every GPU and joins the workers. Blocking.
    pub fn shutdown(&self) {
        self.shared.book().cancel_all();
        let workers = std::mem::take(&mut *base::sync::lock(&self.workers));
        for w in workers {
            w.stop();
        }
    }
}

fn refused(r: guards::Refusal) -> LabError {
    LabError::Refused(r.0)
}
