//! The Lab worker process: a child of the gpudash binary (started with [`WORKER_VAR`] set, answered in
//! `main.rs` first thing) that runs one GPU's experiments for the dashboard, over frames on its
//! stdin and stdout ([`super::protocol`]).
//!
//! A reader thread takes every frame off stdin: `Cancel` sets the run's cancel flag at once, answers
//! go to the probe call waiting for them, everything else to the main thread, which runs it. Frames
//! out go through one lock. What the worker prints for people goes to stderr, which it shares with
//! the dashboard: its stdout is moved to a descriptor of its own at start, and fd 1 then points at
//! stderr, so a library that prints cannot corrupt a frame.
#![allow(clippy::print_stderr)]

use std::fs::File;
use std::os::fd::AsFd as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use shared::activity::Activity;
use shared::readings::{ComputeProcess, DeviceMemory, QueryError};

use super::protocol::{Answer, Engine, FromWorker, Question, Start, ToWorker, read_frame, write_frame};
use crate::cuda;
use crate::executor::{Executor, ExperimentError, RunContext, panic_message};
use crate::guards::{DeviceProbe, HostMemory, LinkPeaks, MeminfoError};
use crate::simulated::SimulatedExecutor;

/// Set in the worker's environment by the dashboard: this process serves the Lab and exits.
pub const WORKER_VAR: &str = "GPUDASH_LAB_WORKER";
/// `abort` in the worker's environment: it aborts halfway through its first run (tests of a crash);
/// `chatter`: it talks without end from its first run on (tests of the dashboard's time limit).
pub const FAULT_VAR: &str = "GPUDASH_LAB_WORKER_FAULT";

/// Whether this process was started as a Lab worker.
pub fn is_worker() -> bool {
    std::env::var_os(WORKER_VAR).is_some()
}

/// The pipe to the dashboard, shared by the main thread, the probe and the reader thread.
struct Link {
    out: Mutex<File>,
    cancel: AtomicBool,
    /// The answers to probe questions; holding it is what serializes the askers.
    answers: Mutex<Receiver<Answer>>,
}

impl Link {
    fn send(&self, message: &FromWorker) -> bool {
        let mut out = base::sync::lock(&self.out);
        match write_frame(&mut *out, message) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("gpudash lab worker: cannot write to the dashboard: {e}");
                false
            }
        }
    }
}

/// Serves the dashboard until it sends `Release` or closes stdin; the exit code.
pub fn serve() -> ExitCode {
    // Not dumpable: no other process of the worker's user (nobody) may read its memory or ptrace it.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    let out = match frames_out() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("gpudash lab worker: cannot set up its output: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (answers_tx, answers_rx) = mpsc::channel();
    let link = Arc::new(Link { out: Mutex::new(out), cancel: AtomicBool::new(false), answers: Mutex::new(answers_rx) });
    let (commands_tx, commands) = mpsc::channel();
    let reader = {
        let link = link.clone();
        std::thread::Builder::new()
            .name("lab-worker-in".into())
            .spawn(move || read_input(&link, &commands_tx, &answers_tx))
    };
    if let Err(e) = reader {
        eprintln!("gpudash lab worker: cannot start its reader thread: {e}");
        return ExitCode::FAILURE;
    }
    let fault = std::env::var(FAULT_VAR).unwrap_or_default();
    let abort_midway = fault.trim() == "abort";
    let chatter = fault.trim() == "chatter";
    let mut executor: Option<(u32, Box<dyn Executor>)> = None;
    // Ends when the reader does (stdin closed): the dashboard is gone or done with this worker.
    for command in commands {
        match command {
            ToWorker::Start(start) => executor = Some((start.device, executor_for(start))),
            ToWorker::Run { params, limit, remaining, topology } => {
                let outcome = match executor.as_mut() {
                    Some((device, executor)) => {
                        let run = RunOrder {
                            device: *device,
                            params: &params,
                            limit,
                            remaining,
                            topology: topology.as_ref(),
                        };
                        if chatter {
                            chatter_forever(&link);
                        }
                        run_one(&link, executor.as_mut(), &run, abort_midway)
                    }
                    None => {
                        Err(ExperimentError::Worker("the Lab worker was asked to run before it was started".into()))
                    }
                };
                link.send(&FromWorker::Done(Box::new(outcome)));
            }
            ToWorker::Pool => {
                link.send(&FromWorker::Pool(executor.as_mut().and_then(|(_, e)| guarded(|| e.pool()).ok().flatten())));
            }
            ToWorker::EmptyCache => {
                let done = executor.as_mut().map_or(Ok(()), |(_, e)| guarded(|| e.empty_cache()).and_then(|r| r));
                link.send(&FromWorker::EmptyCache(done));
            }
            ToWorker::Release => break,
            // The reader keeps these from the main thread.
            ToWorker::Cancel | ToWorker::Answer(_) => {}
        }
    }
    if let Some((_, mut executor)) = executor {
        let _ = guarded(|| executor.release());
    }
    ExitCode::SUCCESS
}

/// stdout's pipe on a descriptor of its own, for frames; fd 1 then writes to stderr.
fn frames_out() -> std::io::Result<File> {
    let frames = std::io::stdout().as_fd().try_clone_to_owned()?;
    rustix::stdio::dup2_stdout(std::io::stderr())?;
    Ok(File::from(frames))
}

/// Reads stdin's frames until it closes or breaks: `Cancel` and `Run` touch the cancel flag here, in
/// the order they came, answers go to the waiting probe call, the rest to the main thread.
fn read_input(link: &Link, commands: &Sender<ToWorker>, answers: &Sender<Answer>) {
    let mut input = std::io::stdin().lock();
    loop {
        match read_frame::<ToWorker>(&mut input) {
            Ok(Some(ToWorker::Cancel)) => link.cancel.store(true, Ordering::Relaxed),
            Ok(Some(ToWorker::Answer(answer))) => {
                let _ = answers.send(answer);
            }
            Ok(Some(command)) => {
                if matches!(command, ToWorker::Run { .. }) {
                    link.cancel.store(false, Ordering::Relaxed);
                }
                if commands.send(command).is_err() {
                    return;
                }
            }
            Ok(None) => break,
            Err(e) => {
                eprintln!("gpudash lab worker: the dashboard's input broke ({e}); stopping");
                break;
            }
        }
    }
    // The dashboard is gone: stop the run; the probe's questions go unanswered from here.
    link.cancel.store(true, Ordering::Relaxed);
}

fn executor_for(start: Start) -> Box<dyn Executor> {
    match start.engine {
        Engine::Simulated { step } => Box::new(SimulatedExecutor::new(step)),
        Engine::Cuda => {
            if let Some(path) = start.nccl_library {
                cuda::nccl::choose_library(path);
            }
            Box::new(cuda::CudaExecutor::new(start.device, start.uuid).with_gpus(start.gpus))
        }
    }
}

/// One `Run` message's contents.
struct RunOrder<'a> {
    device: u32,
    params: &'a shared::lab::ExperimentParams,
    limit: std::time::Duration,
    remaining: std::time::Duration,
    topology: Option<&'a shared::topology::Topology>,
}

fn run_one(
    link: &Arc<Link>,
    executor: &mut dyn Executor,
    run: &RunOrder<'_>,
    abort_midway: bool,
) -> Result<shared::lab::RunResult, ExperimentError> {
    let abort = |why: &str| {
        eprintln!("gpudash lab worker: {FAULT_VAR}=abort: aborting {why}");
        // The abort is on purpose: it leaves no core file behind.
        let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
        std::process::abort();
    };
    let progress = |fraction: f64, message: &str| {
        if abort_midway && fraction >= 0.5 {
            abort("halfway through the run");
        }
        link.send(&FromWorker::Progress { fraction, message: message.to_owned() });
    };
    let probe = RemoteProbe { link: link.clone() };
    let ctx = RunContext::new(run.device, &probe, &link.cancel, run.remaining, &progress).with_topology(run.topology);
    let outcome = guarded(|| executor.run(run.params, &ctx)).and_then(|r| r);
    if abort_midway {
        abort("at the end of a run that reported no progress past halfway");
    }
    match outcome {
        Err(ExperimentError::TimedOut(_)) => Err(ExperimentError::TimedOut(run.limit)),
        other => other,
    }
}

/// The `chatter` fault: progress every 5 ms, for ever, deaf to cancel and to the time limit, as a
/// hung but talkative worker would be; only the dashboard's kill ends it.
fn chatter_forever(link: &Link) -> ! {
    eprintln!("gpudash lab worker: {FAULT_VAR}=chatter: talking until killed");
    loop {
        link.send(&FromWorker::Progress { fraction: 0.1, message: "chattering (a test fault)".to_owned() });
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Runs `f`, turning a panic into an error.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, ExperimentError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| ExperimentError::Panicked(panic_message(p.as_ref())))
}

/// The dashboard's probe, asked over the pipe. Unanswered (the dashboard gone), it says what a probe
/// that cannot read says: nothing known.
struct RemoteProbe {
    link: Arc<Link>,
}

impl RemoteProbe {
    fn ask(&self, question: Question) -> Option<Answer> {
        let answers = base::sync::lock(&self.link.answers);
        if !self.link.send(&FromWorker::Ask(question)) {
            return None;
        }
        answers.recv().ok()
    }
}

impl DeviceProbe for RemoteProbe {
    fn memory(&self, device: u32) -> Option<DeviceMemory> {
        match self.ask(Question::Memory(device)) {
            Some(Answer::Memory(memory)) => memory,
            _ => None,
        }
    }

    fn compute_processes(&self, device: u32) -> Result<Vec<ComputeProcess>, QueryError> {
        match self.ask(Question::ComputeProcesses(device)) {
            Some(Answer::ComputeProcesses(processes)) => processes,
            _ => Err(QueryError::Device("the dashboard did not answer the Lab worker".into())),
        }
    }

    fn peaks(&self, device: u32) -> LinkPeaks {
        match self.ask(Question::Peaks(device)) {
            Some(Answer::Peaks(peaks)) => peaks,
            _ => LinkPeaks::default(),
        }
    }

    fn host_memory(&self) -> Result<HostMemory, MeminfoError> {
        match self.ask(Question::HostMemory) {
            Some(Answer::HostMemory(Ok(memory))) => Ok(memory),
            Some(Answer::HostMemory(Err(None))) => Err(MeminfoError::Incomplete),
            Some(Answer::HostMemory(Err(Some(why)))) => Err(MeminfoError::Read(std::io::Error::other(why))),
            _ => Err(MeminfoError::Read(std::io::Error::other("the dashboard did not answer the Lab worker"))),
        }
    }

    fn injected_failure(&self, device: u32) -> Option<String> {
        match self.ask(Question::InjectedFailure(device)) {
            Some(Answer::InjectedFailure(failure)) => failure,
            _ => None,
        }
    }

    fn activity(&self, device: u32) -> Option<Activity> {
        match self.ask(Question::Activity(device)) {
            Some(Answer::Activity(activity)) => activity.map(|a| *a),
            _ => None,
        }
    }

    fn peer_access(&self, a: u32, b: u32) -> Option<bool> {
        match self.ask(Question::PeerAccess(a, b)) {
            Some(Answer::PeerAccess(access)) => access,
            _ => None,
        }
    }

    fn wrong_results(&self, device: u32) -> bool {
        matches!(self.ask(Question::WrongResults(device)), Some(Answer::Flag(true)))
    }

    fn without_nccl(&self) -> bool {
        matches!(self.ask(Question::WithoutNccl), Some(Answer::Flag(true)))
    }
}
