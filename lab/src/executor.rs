//! The seam between the lab's engine and the hardware: an [`Executor`] runs
//! experiments on one GPU. [`crate::cuda::CudaExecutor`] runs them through CUDA;
//! [`crate::simulated::SimulatedExecutor`] stands in for it in CI.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base::clock::Deadline;

use shared::lab::{ExperimentParams, RunResult};
use shared::topology::Topology;

use super::guards::DeviceProbe;

/// Why an experiment stopped without a result. It crosses the Lab worker's pipe, so it serializes.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ExperimentError {
    #[error("cancelled")]
    Cancelled,
    #[error("stopped at the time limit of {0:?}")]
    TimedOut(Duration),
    /// CUDA, cuBLAS or NVRTC failed; the message names the call.
    #[error("{0}")]
    Cuda(String),
    /// The parameters do not read as the kind's, or the lab has no such kind (a run queued by another
    /// version of gpudash).
    #[error("{0}")]
    Invalid(String),
    /// The experiment itself panicked (a bug, or a missing library).
    #[error("the experiment crashed: {0}")]
    Panicked(String),
    /// A guard that passed at submission failed when the run's turn came (the GPU or host got busier).
    #[error("refused at start: {0}")]
    RefusedAtStart(String),
    /// The Lab's worker process crashed, exited, hung or sent garbage (`lab/isolated/`): what
    /// happened, e.g. "the Lab worker died during the run (killed by signal 6, SIGABRT)".
    #[error("{0}; the dashboard kept running")]
    Worker(String),
}

/// The lab's memory pool on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PoolUsage {
    /// Bytes the pool holds from the driver.
    pub reserved: u64,
    /// Bytes of it handed out.
    pub used: u64,
}

/// Runs experiments on one GPU. Lives on that GPU's worker thread only.
pub trait Executor {
    /// True for the simulated executor: its figures are made up.
    fn simulated(&self) -> bool;
    /// Runs one (validated) experiment. Long loops call [`RunContext::check`] often.
    fn run(&mut self, params: &ExperimentParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError>;
    /// The pool's usage, or `None` while no context is open.
    fn pool(&mut self) -> Option<PoolUsage>;
    /// Hands the pool's cached, unused memory back to the driver (PyTorch's `empty_cache`).
    fn empty_cache(&mut self) -> Result<(), ExperimentError>;
    /// Releases the context and everything in it, so the lab holds no GPU memory.
    fn release(&mut self);
    /// Whether the idle release has anything to free: a context, or a worker process.
    fn holds_resources(&mut self) -> bool {
        self.pool().is_some()
    }
}

/// What a running experiment can see and must respect.
pub struct RunContext<'a> {
    pub device: u32,
    pub probe: &'a dyn DeviceProbe,
    cancel: &'a AtomicBool,
    /// The run's time limit, on the real clock its GPU work runs on.
    deadline: Deadline,
    limit: Duration,
    progress: &'a (dyn Fn(f64, &str) + 'a),
    /// How the GPUs connect (NVML's topology, or the simulator's), for reference lines; `None` where unknown.
    pub topology: Option<&'a Topology>,
}

impl<'a> RunContext<'a> {
    pub fn new(
        device: u32,
        probe: &'a dyn DeviceProbe,
        cancel: &'a AtomicBool,
        limit: Duration,
        progress: &'a (dyn Fn(f64, &str) + 'a),
    ) -> Self {
        Self { device, probe, cancel, deadline: Deadline::after(limit), limit, progress, topology: None }
    }

    /// This context, telling the run how the GPUs connect.
    #[must_use]
    pub fn with_topology(mut self, topology: Option<&'a Topology>) -> Self {
        self.topology = topology;
        self
    }

    /// Err when the run was cancelled or passed its time limit: the experiment stops there.
    pub fn check(&self) -> Result<(), ExperimentError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(ExperimentError::Cancelled);
        }
        if self.deadline.passed() {
            return Err(ExperimentError::TimedOut(self.limit));
        }
        Ok(())
    }

    /// The run's time limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// What is left of the time limit.
    pub fn remaining(&self) -> Duration {
        self.deadline.left()
    }

    /// Reports how far the run is (0.0 to 1.0) and what it does now.
    pub fn progress(&self, fraction: f64, message: &str) {
        (self.progress)(fraction.clamp(0.0, 1.0), message);
    }
}

/// The message of a caught panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "unknown panic".to_owned())
}
