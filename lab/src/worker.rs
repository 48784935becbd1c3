//! One thread per GPU: runs that GPU's queue in order, trims its pool on
//! request, releases the CUDA context after an idle period, and parks at the
//! hold of a multi-GPU run queued on another GPU until that run ends.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use shared::lab::{LabEvent, Progress, RunStatus, TrimOutcome};
use tokio::sync::oneshot;

use super::executor::{Executor, ExperimentError, RunContext, panic_message};
use super::{ExecutorFactory, LabError, Shared, activity, experiments, guards};
use base::clock::{Deadline, now_ms};

/// Progress events go out at most this often per run.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

enum Command {
    Run(u64),
    /// Another GPU's run occupies this one too (p2p): park until it ends.
    Hold(u64),
    Trim(oneshot::Sender<Result<TrimOutcome, LabError>>),
    Stop,
}

/// The handle of one GPU's worker thread.
pub(crate) struct Worker {
    pub device: u32,
    tx: mpsc::Sender<Command>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    pub fn spawn(device: u32, shared: Arc<Shared>, factory: ExecutorFactory) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("lab-gpu{device}"))
            .spawn(move || serve(device, &shared, &factory, &rx))?;
        Ok(Self { device, tx, thread: Some(thread) })
    }

    pub fn send_run(&self, id: u64) -> bool {
        self.tx.send(Command::Run(id)).is_ok()
    }

    pub fn send_hold(&self, id: u64) -> bool {
        self.tx.send(Command::Hold(id)).is_ok()
    }

    pub fn send_trim(&self, reply: oneshot::Sender<Result<TrimOutcome, LabError>>) -> bool {
        self.tx.send(Command::Trim(reply)).is_ok()
    }

    /// Stops after the current run (which was asked to cancel) and joins the thread.
    pub fn stop(mut self) {
        let _ = self.tx.send(Command::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(device: u32, shared: &Shared, factory: &ExecutorFactory, rx: &mpsc::Receiver<Command>) {
    let mut executor = factory(device);
    loop {
        match rx.recv_timeout(shared.config.idle_release) {
            Ok(Command::Run(id)) => run_one(device, shared, executor.as_mut(), id),
            Ok(Command::Hold(id)) => {
                let held = shared.book().get(id).and_then(|a| Some((a.gate.clone()?, a.cancel.clone())));
                if let Some((gate, cancel)) = held {
                    tracing::debug!(device, id, "GPU held for a multi-GPU run");
                    gate.park(&cancel);
                }
            }
            Ok(Command::Trim(reply)) => {
                let _ = reply.send(trim(device, shared, executor.as_mut()));
            }
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => {
                release(device, shared, executor.as_mut());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                if guarded(|| executor.holds_resources()).unwrap_or(false) {
                    tracing::info!(device, "lab idle: releasing the CUDA context and its pool");
                    release(device, shared, executor.as_mut());
                }
            }
        }
    }
}

/// Runs `f`, turning a panic (e.g. a library that vanished) into an error.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, ExperimentError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| ExperimentError::Panicked(panic_message(p.as_ref())))
}

fn release(device: u32, shared: &Shared, executor: &mut dyn Executor) {
    let before = guarded(|| executor.pool()).ok().flatten();
    let _ = guarded(|| executor.release());
    shared.set_pool(device, None);
    if let Some(pool) = before {
        shared.emit(LabEvent::Trimmed(TrimOutcome {
            device,
            reserved_before: pool.reserved,
            reserved_after: 0,
            released_bytes: pool.reserved,
        }));
        shared.emit_status();
    }
}

fn trim(device: u32, shared: &Shared, executor: &mut dyn Executor) -> Result<TrimOutcome, LabError> {
    let internal = |e: ExperimentError| LabError::Internal(format!("empty_cache on GPU {device} failed: {e}"));
    let before = guarded(|| executor.pool()).map_err(internal)?;
    let Some(before) = before else {
        return Ok(TrimOutcome { device, reserved_before: 0, reserved_after: 0, released_bytes: 0 });
    };
    guarded(|| executor.empty_cache()).map_err(internal)?.map_err(internal)?;
    let after = guarded(|| executor.pool()).map_err(internal)?.unwrap_or_default();
    shared.set_pool(device, Some(after));
    let outcome = TrimOutcome {
        device,
        reserved_before: before.reserved,
        reserved_after: after.reserved,
        released_bytes: before.reserved.saturating_sub(after.reserved),
    };
    shared.emit(LabEvent::Trimmed(outcome));
    shared.emit_status();
    Ok(outcome)
}

fn run_one(device: u32, shared: &Shared, executor: &mut dyn Executor, id: u64) {
    let active = shared.book().get(id).map(|a| (a.run.clone(), a.cancel.clone(), a.gate.clone()));
    let Some((run, cancel, gate)) = active else {
        return; // cancelled while queued
    };
    if cancel.load(Ordering::Relaxed) {
        return;
    }
    match gate {
        // Still queued until every other GPU it occupies is free and its worker parked.
        Some(gate) => {
            if gate.start(&cancel) {
                run_started(device, shared, executor, run, &cancel);
            }
            gate.end();
        }
        None => run_started(device, shared, executor, run, &cancel),
    }
}

/// Whether every GPU the run occupies can still take it (one may have filled up or got busy while it waited).
fn refusal_at_start(
    device: u32,
    shared: &Shared,
    executor: &mut dyn Executor,
    run: &shared::lab::Run,
) -> Option<String> {
    let footprint = match experiments::footprint(&run.params) {
        Ok(footprint) => footprint,
        Err(e) => return Some(e.0),
    };
    let devices = if run.summary.devices.is_empty() { vec![device] } else { run.summary.devices.clone() };
    for d in devices {
        let pool = if d == device {
            guarded(|| executor.pool()).ok().flatten()
        } else {
            shared
                .pool_of(d)
                .filter(|p| p.context_open)
                .map(|p| super::executor::PoolUsage { reserved: p.pool_reserved, used: p.pool_used })
        };
        let context_open = pool.is_some();
        let idle = pool.map_or(0, |p| p.reserved.saturating_sub(p.used));
        let need = guards::device_need(&footprint, context_open);
        let refusal = guards::check_scheduled(d, shared.probe.scheduled(d), run.forced_by_admin)
            .and_then(|_| guards::check_memory(d, need, shared.probe.memory(d), idle, shared.config.memory_margin))
            .and_then(|_| {
                let processes = shared.probe.compute_processes(d);
                guards::check_processes(d, processes, std::process::id(), context_open, run.force)
            })
            .err();
        if let Some(r) = refusal {
            return Some(r.0);
        }
    }
    None
}

fn run_started(
    device: u32,
    shared: &Shared,
    executor: &mut dyn Executor,
    mut run: shared::lab::Run,
    cancel: &std::sync::atomic::AtomicBool,
) {
    let id = run.summary.id;
    let refusal = refusal_at_start(device, shared, executor, &run);

    run.summary.started_ms = Some(now_ms());
    if let Some(refusal) = refusal {
        finish(shared, run, Err(ExperimentError::RefusedAtStart(refusal)), RunStatus::Failed);
        return;
    }
    run.summary.status = RunStatus::Running;
    // The host check and marking the run running under one lock: runs starting at once on two GPUs
    // cannot both count on the same free host memory.
    let host = {
        let mut book = shared.book();
        let host = shared.check_host(&book, &run);
        if let (Ok(_), Some(active)) = (&host, book.get_mut(id)) {
            active.run = run.clone();
        }
        host
    };
    if let Err(refusal) = host {
        finish(shared, run, Err(ExperimentError::RefusedAtStart(refusal.to_string())), RunStatus::Failed);
        return;
    }
    shared.save(&run);
    shared.emit(LabEvent::Run(run.summary.clone()));
    shared.emit_status();

    // At most one progress event per PROGRESS_EVERY of real time (the run's own).
    let next_progress = Mutex::new(None::<Deadline>);
    let on_progress = |fraction: f64, message: &str| {
        let progress = Progress { fraction, message: message.to_owned() };
        if let Some(active) = shared.book().get_mut(id) {
            active.run.progress = Some(progress.clone());
        }
        let mut next = base::sync::lock(&next_progress);
        if next.is_none_or(|by| by.passed()) || fraction >= 1.0 {
            *next = Some(Deadline::after(PROGRESS_EVERY));
            shared.emit(LabEvent::Progress { id, device, progress });
        }
    };
    let ctx = RunContext::new(device, shared.probe.as_ref(), cancel, shared.config.time_limit, &on_progress)
        .with_topology(shared.topology.as_ref());
    let params = run.params.clone();
    let simulated = executor.simulated();
    let (mut outcome, windows) =
        activity::watch(shared.probe.as_ref(), device, || guarded(|| executor.run(&params, &ctx)).and_then(|r| r));
    if let Ok(result) = &mut outcome {
        result.notes.extend(shared.link_notes(&params));
        activity::summarize(result, &windows, simulated);
    }
    if matches!(
        outcome,
        Err(ExperimentError::Panicked(_)
            | ExperimentError::Cuda(_)
            | ExperimentError::TimedOut(_)
            | ExperimentError::Worker(_))
    ) {
        // After a crash, a CUDA error (some are sticky and poison the context), a run stopped
        // mid-flight or a worker process lost, the executor's state is unknown: free its context and
        // pool (and its worker), start fresh next time.
        let _ = guarded(|| executor.release());
    }
    shared.set_pool(device, guarded(|| executor.pool()).ok().flatten());
    let status = match &outcome {
        Ok(_) => RunStatus::Succeeded,
        Err(ExperimentError::Cancelled) => RunStatus::Cancelled,
        Err(ExperimentError::TimedOut(_)) => RunStatus::TimedOut,
        Err(_) => RunStatus::Failed,
    };
    finish(shared, run, outcome, status);
}

fn finish(
    shared: &Shared,
    mut run: shared::lab::Run,
    outcome: Result<shared::lab::RunResult, ExperimentError>,
    status: RunStatus,
) {
    let id = run.summary.id;
    run.summary.status = status;
    run.summary.finished_ms = Some(now_ms());
    match outcome {
        Ok(result) => {
            run.summary.passed = result.passed();
            run.result = Some(result);
        }
        Err(error) => run.summary.error = Some(error.to_string()),
    }
    if let Some(active) = shared.book().get(id) {
        run.progress = active.run.progress.clone();
    }
    tracing::info!(id, status = ?run.summary.status, error = run.summary.error.as_deref(), "lab run ended");
    shared.save(&run);
    shared.book().remove(id);
    shared.emit(LabEvent::Run(run.summary));
    shared.emit_status();
}
