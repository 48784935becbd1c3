//! The dashboard's side of a Lab worker: [`WorkerExecutor`] starts the worker at the first run on its
//! GPU, hands it every run, answers its probe's questions from the dashboard's own probe, and ends it
//! at `release()`. A worker that dies, sends garbage or outlives its run's deadline (plus
//! [`GRACE`] after `Cancel`) is killed and reaped; the run ends with the reason and the next run
//! starts a fresh worker.

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use base::clock::Deadline;

use shared::lab::{ExperimentParams, RunResult};

use super::Launch;
use super::child::{FAULT_VAR, WORKER_VAR};
use super::protocol::{FrameError, FromWorker, Start, ToWorker, read_frame};
use super::user;
use super::writer::FrameWriter;
use crate::executor::{Executor, ExperimentError, PoolUsage, RunContext};

/// How long a worker has to stop after `Cancel` (or the time limit) before it is killed.
pub const GRACE: Duration = Duration::from_secs(5);
/// How long a worker has to answer `Pool` or `EmptyCache`.
const ANSWER_WAIT: Duration = Duration::from_secs(30);
/// How long a worker has to exit after `Release`.
const EXIT_WAIT: Duration = Duration::from_secs(5);
/// How often a run's wait looks at its cancel flag and deadline.
const TICK: Duration = Duration::from_millis(50);

/// A frame from the worker, or why its output ended.
type Frame = Result<FromWorker, FrameError>;

/// Runs one GPU's experiments in a worker process (see the module's doc).
pub struct WorkerExecutor {
    launch: Launch,
    start: Start,
    simulated: bool,
    worker: Option<Worker>,
}

/// A running worker: the child, the writer of its stdin, and the frames its reader thread takes off
/// its stdout.
struct Worker {
    child: Child,
    input: Option<FrameWriter>,
    frames: Receiver<Frame>,
    reader: Option<JoinHandle<()>>,
}

impl WorkerExecutor {
    pub fn new(launch: Launch, start: Start) -> Self {
        let simulated = matches!(start.engine, super::protocol::Engine::Simulated { .. });
        Self { launch, start, simulated, worker: None }
    }

    /// The live worker, started (and told its GPU) if there is none or the last one has exited.
    fn worker(&mut self) -> Result<&mut Worker, ExperimentError> {
        if let Some(worker) = &mut self.worker
            && !matches!(worker.child.try_wait(), Ok(None))
        {
            tracing::warn!("the Lab worker of GPU {} had exited; starting a new one", self.start.device);
            self.stop_worker(Duration::ZERO);
        }
        if self.worker.is_none() {
            let cannot = |e: std::io::Error| {
                ExperimentError::Worker(format!("cannot start the Lab worker ({}): {e}", self.launch.binary.display()))
            };
            let mut worker = self.spawn().map_err(cannot)?;
            if worker.send(&ToWorker::Start(self.start.clone())).is_err() {
                self.worker = Some(worker);
                return Err(self.lost("as it started"));
            }
            self.worker = Some(worker);
        }
        self.worker.as_mut().ok_or_else(|| ExperimentError::Worker("no Lab worker".into()))
    }

    fn spawn(&self) -> std::io::Result<Worker> {
        let mut command = Command::new(&self.launch.binary);
        // The dashboard's environment may hold secrets (GPUDASH_TOKENS, fleet credentials, webhook
        // URLs): the worker gets only what CUDA, NCCL and its log need.
        command.env_clear().envs(std::env::vars_os().filter(|(name, _)| worker_env(name)));
        command
            .env(WORKER_VAR, "1")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(fault) = self.launch.take_fault() {
            command.env(FAULT_VAR, fault);
        }
        user::apply(&mut command, self.launch.user.as_ref());
        let mut child = command.spawn()?;
        let (input, output) = (child.stdin.take(), child.stdout.take());
        let name = format!("lab-worker{}-in", self.start.device);
        let input = match input.map(|input| FrameWriter::spawn(input, name)).transpose() {
            Ok(input) => input,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        // Bounded: a worker that floods frames between runs blocks on its own pipe, not the
        // dashboard's memory.
        let (tx, frames) = mpsc::sync_channel(FRAMES_QUEUED);
        let reader = output.map(|mut output| {
            std::thread::Builder::new().name(format!("lab-worker{}-out", self.start.device)).spawn(move || {
                loop {
                    match read_frame::<FromWorker>(&mut output) {
                        Ok(Some(frame)) => {
                            if tx.send(Ok(frame)).is_err() {
                                return;
                            }
                        }
                        Ok(None) => return,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
            })
        });
        let reader = match reader.transpose() {
            Ok(reader) => reader,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        tracing::debug!(pid = child.id(), device = self.start.device, "Lab worker started");
        Ok(Worker { child, input, frames, reader })
    }

    /// Ends the worker (closing its stdin, then killing it after `within`) and says how it ended.
    fn stop_worker(&mut self, within: Duration) -> Option<Ended> {
        self.worker.take().map(|worker| worker.end(within))
    }

    /// The worker's output ended or broke `when`: it is reaped (killed if still there), and the
    /// error says what happened.
    fn lost(&mut self, when: &str) -> ExperimentError {
        let ended = self.stop_worker(Duration::from_secs(2));
        let why = match ended {
            Some(Ended { status: Some(status), killed: false }) => describe(status),
            Some(Ended { killed: true, .. }) => "it closed its output and was stopped".to_owned(),
            _ => "it could not be waited for".to_owned(),
        };
        ExperimentError::Worker(format!("the Lab worker died {when} ({why})"))
    }

    /// The worker broke the protocol (`what`); a worker that crashed mid-frame (it exits on its own,
    /// its stdin still open) counts as dead.
    fn broken(&mut self, what: &str) -> ExperimentError {
        let exited = self.worker.as_mut().and_then(|w| w.exit_within(Duration::from_millis(500)));
        self.stop_worker(Duration::ZERO);
        match exited {
            Some(status) => {
                ExperimentError::Worker(format!("the Lab worker died during the run ({})", describe(status)))
            }
            None => ExperimentError::Worker(format!("the Lab worker {what}; it was stopped")),
        }
    }

    /// Asks the live worker `question` and waits for the answer `pick` takes; `None` when there is no
    /// worker, or it failed to answer (then it is stopped).
    fn ask<T>(&mut self, question: &ToWorker, pick: impl Fn(FromWorker) -> Option<T>) -> Option<T> {
        let worker = self.worker.as_mut()?;
        if worker.send(question).is_ok() {
            let deadline = Deadline::after(ANSWER_WAIT);
            while let Ok(Ok(frame)) = worker.frames.recv_timeout(deadline.left()) {
                if let Some(answer) = pick(frame) {
                    return Some(answer);
                }
            }
        }
        tracing::warn!("the Lab worker of GPU {} did not answer {question:?}; stopping it", self.start.device);
        self.stop_worker(Duration::ZERO);
        None
    }

    fn run_in_worker(&mut self, params: &ExperimentParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        let run = ToWorker::Run {
            params: params.clone(),
            limit: ctx.limit(),
            remaining: ctx.remaining(),
            topology: ctx.topology.cloned(),
        };
        let worker = self.worker()?;
        if worker.send(&run).is_err() {
            return Err(self.lost("as the run started"));
        }
        // Cancel (or the time limit) seen, with when the worker is killed if it has not stopped.
        let mut stopping: Option<(Deadline, ExperimentError)> = None;
        loop {
            // Cancel and the time limit are looked at on every pass: a worker that talks often (progress,
            // probe questions) must not keep them from being seen.
            match (&stopping, ctx.check()) {
                (None, Err(why)) => {
                    if let Some(worker) = self.worker.as_mut() {
                        let _ = worker.send(&ToWorker::Cancel);
                    }
                    stopping = Some((Deadline::after(GRACE), why));
                }
                (Some((by, why)), _) if by.passed() => {
                    let why = why.clone();
                    tracing::warn!(
                        "the Lab worker of GPU {} did not stop within {GRACE:?} of being told ({why}); killing it",
                        self.start.device
                    );
                    self.stop_worker(Duration::ZERO);
                    return Err(why);
                }
                _ => {}
            }
            let Some(worker) = self.worker.as_mut() else { return Err(self.lost("during the run")) };
            match worker.frames.recv_timeout(TICK) {
                Ok(Ok(FromWorker::Progress { fraction, message })) => ctx.progress(fraction, &message),
                Ok(Ok(FromWorker::Ask(question))) => {
                    if worker.send(&ToWorker::Answer(question.answer(ctx.probe))).is_err() {
                        return Err(self.lost("during the run"));
                    }
                }
                Ok(Ok(FromWorker::Done(outcome))) => return *outcome,
                Ok(Ok(other)) => return Err(self.broken(&format!("sent {other:?} during a run"))),
                Ok(Err(FrameError::Io(e))) => return Err(self.lost(&format!("during the run (reading it: {e})"))),
                Ok(Err(e)) => return Err(self.broken(&format!("sent garbage ({e})"))),
                Err(RecvTimeoutError::Disconnected) => return Err(self.lost("during the run")),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

impl Worker {
    fn send(&mut self, message: &ToWorker) -> Result<(), FrameError> {
        self.input.as_ref().ok_or(FrameError::Truncated)?.send(message)
    }

    /// The exit status, if the worker exits within `within` (polled; nothing is closed or sent).
    fn exit_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Deadline::after(within);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if !deadline.passed() => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Closes stdin, waits up to `within` for the exit, kills it after that, and reaps it.
    fn end(mut self, within: Duration) -> Ended {
        let writer = self.input.take().map(FrameWriter::close);
        let ended = match self.exit_within(within) {
            Some(status) => Ended { status: Some(status), killed: false },
            None => {
                let _ = self.child.kill();
                Ended { status: self.child.wait().ok(), killed: true }
            }
        };
        // The child is gone, so its stdin and stdout are closed and both threads have returned.
        for thread in [writer, self.reader.take()].into_iter().flatten() {
            let _ = thread.join();
        }
        ended
    }
}

/// How a worker ended.
struct Ended {
    status: Option<ExitStatus>,
    /// The dashboard killed it.
    killed: bool,
}

/// An exit status in words: "killed by signal 6, SIGABRT", "it exited with status 1".
pub fn describe(status: ExitStatus) -> String {
    match (status.signal(), status.code()) {
        (Some(signal), _) => format!("killed by signal {signal}{}", signal_name(signal)),
        (None, Some(0)) => "it exited".to_owned(),
        (None, Some(code)) => format!("it exited with status {code}"),
        (None, None) => status.to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => ", SIGABRT",
        libc::SIGSEGV => ", SIGSEGV",
        libc::SIGBUS => ", SIGBUS",
        libc::SIGILL => ", SIGILL",
        libc::SIGFPE => ", SIGFPE",
        libc::SIGKILL => ", SIGKILL",
        libc::SIGTERM => ", SIGTERM",
        libc::SIGINT => ", SIGINT",
        _ => "",
    }
}

impl Executor for WorkerExecutor {
    fn simulated(&self) -> bool {
        self.simulated
    }

    fn run(&mut self, params: &ExperimentParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        self.run_in_worker(params, ctx)
    }

    fn pool(&mut self) -> Option<PoolUsage> {
        self.ask(&ToWorker::Pool, |frame| match frame {
            FromWorker::Pool(pool) => Some(pool),
            _ => None,
        })
        .flatten()
    }

    fn empty_cache(&mut self) -> Result<(), ExperimentError> {
        if self.worker.is_none() {
            return Ok(());
        }
        self.ask(&ToWorker::EmptyCache, |frame| match frame {
            FromWorker::EmptyCache(done) => Some(done),
            _ => None,
        })
        .unwrap_or_else(|| Err(ExperimentError::Worker("the Lab worker did not answer empty_cache".into())))
    }

    fn release(&mut self) {
        if let Some(worker) = &mut self.worker {
            let _ = worker.send(&ToWorker::Release);
        }
        if let Some(ended) = self.stop_worker(EXIT_WAIT) {
            let how = ended.status.map_or_else(|| "not reaped".to_owned(), describe);
            tracing::debug!(device = self.start.device, killed = ended.killed, "Lab worker ended: {how}");
        }
    }

    fn holds_resources(&mut self) -> bool {
        self.worker.is_some()
    }
}

impl Drop for WorkerExecutor {
    fn drop(&mut self) {
        self.release();
    }
}

/// Frames the reader keeps for the Lab thread at most; past it the reader waits (and so does the worker).
const FRAMES_QUEUED: usize = 64;

/// Whether the worker inherits environment variable `name`: the loader's and CUDA's, NCCL's, the
/// locale, the log filter, backtraces and the temporary folder; nothing else of the dashboard's.
fn worker_env(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else { return false };
    matches!(name, "PATH" | "LD_LIBRARY_PATH" | "TMPDIR" | "LANG" | "LC_ALL" | "GPUDASH_LOG" | "RUST_BACKTRACE")
        || ["CUDA_", "NVIDIA_", "NCCL_", "CUBLAS_", "CUBLASLT_"].iter().any(|prefix| name.starts_with(prefix))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn the_worker_inherits_no_secret_of_the_dashboards_environment() {
        for kept in ["PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "NVIDIA_VISIBLE_DEVICES"] {
            assert!(worker_env(kept.as_ref()), "{kept}");
        }
        for secret in
            ["GPUDASH_TOKENS", "GPUDASH_FLEET_PROMETHEUS_PASSWORD", "GPUDASH_ALERTS_FILE", "HOME", "AWS_SECRET"]
        {
            assert!(!worker_env(secret.as_ref()), "{secret}");
        }
    }

    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::guards::SimulatedProbe;
    use crate::isolated::protocol::Engine;

    /// A stand-in worker: a shell script in `dir`.
    fn executor(dir: &std::path::Path, name: &str, script: &str) -> WorkerExecutor {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let start = Start { device: 0, uuid: None, gpus: Vec::new(), engine: Engine::Cuda, nccl_library: None };
        WorkerExecutor::new(Launch::new(path, None, 0), start)
    }

    fn run(executor: &mut WorkerExecutor, limit: Duration) -> Result<RunResult, ExperimentError> {
        let (probe, cancel) = (SimulatedProbe::default(), AtomicBool::new(false));
        let progress = |_: f64, _: &str| {};
        let ctx = RunContext::new(0, &probe, &cancel, limit, &progress);
        let params = serde_json::from_str(r#"{"kind":"latency"}"#).unwrap();
        executor.run(&params, &ctx)
    }

    /// The dashboard's side against workers that crash, echo garbage, or hang past the deadline:
    /// each run ends with the reason, the worker is reaped, and none is left.
    #[test]
    fn a_worker_that_dies_talks_garbage_or_hangs_is_stopped_and_the_run_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let mut crashing = executor(dir.path(), "crash", "kill -SEGV $$");
        let why = run(&mut crashing, Duration::from_secs(10)).unwrap_err().to_string();
        assert!(why.starts_with("the Lab worker died") && why.contains("killed by signal 11, SIGSEGV"), "{why}");
        assert!(why.ends_with("; the dashboard kept running"), "{why}");
        assert!(!crashing.holds_resources(), "the dead worker is gone");

        // `cat` sends the dashboard's own frames back: not messages a worker sends.
        let mut echoing = executor(dir.path(), "echo", "exec cat");
        let why = run(&mut echoing, Duration::from_secs(10)).unwrap_err().to_string();
        assert!(why.contains("the Lab worker sent garbage (a frame that is not a message"), "{why}");
        assert!(!echoing.holds_resources());

        let mut hanging = executor(dir.path(), "hang", "exec sleep 60");
        let started = base::clock::Stopwatch::start();
        let outcome = run(&mut hanging, Duration::from_millis(200));
        assert_eq!(outcome, Err(ExperimentError::TimedOut(Duration::from_millis(200))));
        assert!(started.elapsed() >= GRACE, "the worker had its grace after Cancel");
        assert!(!hanging.holds_resources(), "the hung worker was killed");
        assert_eq!(hanging.pool(), None);
        assert_eq!(hanging.empty_cache(), Ok(()), "no worker: nothing to trim");
    }

    #[test]
    fn exit_statuses_are_said_in_words() {
        assert_eq!(describe(ExitStatus::from_raw(libc::SIGABRT)), "killed by signal 6, SIGABRT");
        assert_eq!(describe(ExitStatus::from_raw(libc::SIGKILL)), "killed by signal 9, SIGKILL");
        assert_eq!(describe(ExitStatus::from_raw(1 << 8)), "it exited with status 1");
        assert_eq!(describe(ExitStatus::from_raw(0)), "it exited");
    }
}
