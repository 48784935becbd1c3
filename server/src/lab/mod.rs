//! The GPU lab: memory, transfer, stream, precision, latency and p2p
//! experiments run on the server's GPUs from the browser or `gpudash bench`.
//!
//! A request is validated and guarded ([`plan`], [`guards`]), queued in the
//! [`queue::QueueBook`] every viewer sees, and run by its GPU's worker thread
//! ([`worker`]) through an [`executor::Executor`]: CUDA ([`cuda`]) on hardware,
//! [`simulated::SimulatedExecutor`] in CI. Runs are kept in a
//! [`RunStore`](crate::store::runs::RunStore); events go out as plain
//! [`LabEvent`](shared::lab::LabEvent)s on a broadcast channel, which `web/`
//! encodes for the WebSocket.
//!
//! The parts: [`setup`] (what a lab is built from), `state` (what the workers
//! and the API share) and `api` ([`Lab`]).

mod activity;
mod api;
pub mod checks;
pub mod cuda;
pub mod executor;
pub mod gang;
pub mod guards;
pub mod latency;
pub mod p2p;
pub mod plan;
pub mod queue;
pub mod report;
pub mod setup;
pub mod simulated;
mod state;
pub mod stats;
pub mod svg;
pub mod table;
#[cfg(test)]
mod tests;
mod worker;

use shared::lab::ExperimentKind;

pub use self::api::Lab;
pub use self::setup::{
    ExecutorFactory, LabConfig, LabGpu, LabHost, LabOptions, LabSetup, QUEUE_PER_USER, RUNS_KEPT, SimulatedLab,
    Unavailable, cuda_executors, cuda_executors_with_fault,
};
pub(crate) use self::state::Shared;

/// Why a lab request failed; each maps to an HTTP status in `web::lab`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabError {
    #[error("the GPU lab is unavailable: {0}")]
    Unavailable(#[from] Unavailable),
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
            "H2D and D2H copies from pageable and pinned host memory, and D2D by the driver's memcpy and by an SM copy \
             kernel, from 4 KiB to 1 GiB, against the PCIe link's and HBM's peaks; sizes that fit in L2 are \
             marked. Host buffers are written before they are timed.",
        ),
        ExperimentKind::Streams => (
            "Streams: overlap and concurrency",
            "A pinned copy and an fp32 GEMM serial on one stream vs overlapped on two; N independent kernels on \
             one stream vs N streams; a per-stream timeline from CUDA events.",
        ),
        ExperimentKind::Precision => (
            "Precision: GEMM throughput per type",
            "cuBLAS GEMM in fp32, tf32, fp16 and bf16 on random data; TFLOP/s, and each result checked against \
             the host over whole rows and columns spread across the output.",
        ),
        ExperimentKind::Latency => (
            "Latency: launch, record, synchronize",
            "The cost of launching an empty NVRTC-compiled kernel, recording an event and synchronizing a stream \
             (host clock); empty kernels queued back to back (the launch rate) and in a CUDA graph (the GPU's \
             own time per kernel), both from CUDA events.",
        ),
        ExperimentKind::P2p => (
            "P2P: bandwidth and latency between GPUs",
            "Copies between every pair of GPUs, one way and both ways at once, and 4-byte copies for latency, with \
             peer access enabled and disabled (staged through host memory), like cuda-samples' \
             p2pBandwidthLatencyTest; drawn as heatmaps. Occupies every GPU it involves; needs two.",
        ),
    }
}
