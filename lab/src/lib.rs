//! The GPU lab: memory, transfer, stream, precision, latency and p2p
//! experiments run on the server's GPUs from the browser or `gpudash bench`.
//!
//! Each kind of experiment is one unit in [`experiments`] (its form's fields, its PyTorch
//! words, validation, footprint, simulation, report shaping, the call into its CUDA run),
//! behind one trait.
//! A request is validated and guarded (`plan`, [`guards`]), queued in the
//! `queue::QueueBook` every viewer sees, and run by its GPU's worker thread
//! (`worker`) through an `executor::Executor`: CUDA ([`cuda`]) on hardware,
//! `simulated::SimulatedExecutor` in CI; the server hands either to a worker process per GPU
//! ([`isolated`]), so CUDA's memory, crashes and privileges stay out of the dashboard. Runs are kept in a
//! [`RunStore`](store::runs::RunStore); events go out as plain
//! [`LabEvent`](shared::lab::LabEvent)s on a broadcast channel, which `web/`
//! encodes for the WebSocket.
//!
//! The parts: `setup` (what a lab is built from), `state` (what the workers
//! and the API share) and `api` ([`Lab`]).

mod activity;
mod api;
mod checks;
// lab/clippy.toml forbids cudarc's handles and calls everywhere else in the crate.
#[cfg(feature = "cuda")]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "the one module that talks to CUDA")]
pub mod cuda;
/// Without the `cuda` feature: the same names, each saying CUDA is not built in.
#[cfg(not(feature = "cuda"))]
#[path = "no_cuda.rs"]
pub mod cuda;
mod executor;
pub mod experiments;
mod gang;
pub mod guards;
pub mod isolated;
mod plan;
mod queue;
mod report;
mod setup;
mod simulated;
mod simulation;
mod state;
mod stats;
#[cfg(test)]
mod tests;
pub mod values;
mod worker;

pub use self::api::Lab;
pub use self::setup::{
    ExecutorFactory, LabConfig, LabGpu, LabHost, LabOptions, LabSetup, QUEUE_PER_USER, RUNS_KEPT, ServerGpus,
    SimulatedLab, Unavailable, cuda_executors, cuda_executors_with_fault,
};
pub(crate) use self::state::Shared;
// Where `lab/cuda/` finds the latency and p2p shaping (its imports predate `experiments/`).
pub use self::experiments::latency::report as latency;
pub use self::experiments::p2p::report as p2p;

/// Why a lab request failed; each maps to an HTTP status in `web::lab`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabError {
    #[error("the GPU lab is unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    /// The lab runs, but not this kind here (collectives without NCCL): what is missing and how to fix it.
    #[error("{0}")]
    KindUnavailable(String),
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
