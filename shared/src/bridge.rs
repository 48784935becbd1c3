//! The PyTorch bridge: what an attached training process reports about its
//! caching allocator and its `gpudash.span` timings, and what the server
//! answers (remote `empty_cache` requests).

use serde::{Deserialize, Serialize};

use crate::allocator::{AllocatorView, MapRequestState, OomRecord};

/// The highlights of `torch.cuda.memory_stats(device)`, bytes unless named otherwise.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct TorchMemory {
    /// CUDA device index as the process sees it (after CUDA_VISIBLE_DEVICES).
    pub device: u32,
    /// The device's UUID, so the server can match it to its own GPU whatever the process sees.
    #[serde(default)]
    pub uuid: Option<String>,
    /// `memory_allocated()`: bytes in live tensors.
    pub allocated: u64,
    pub allocated_peak: u64,
    /// `memory_reserved()`: bytes the caching allocator holds from the driver.
    pub reserved: u64,
    pub reserved_peak: u64,
    /// Bytes in active blocks (allocated plus rounding).
    pub active: u64,
    /// Reserved but not allocated, split into whole cached blocks and fragments of used ones.
    pub inactive_split: u64,
    /// Times the allocator freed its cache and retried a failed allocation.
    pub alloc_retries: u64,
    /// Out-of-memory errors raised.
    pub ooms: u64,
}

/// One finished `gpudash.span` / `@gpudash.monitor` call.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Span {
    pub name: String,
    pub device: u32,
    /// When the call began, ms since the epoch (host clock).
    pub start_ms: u64,
    /// Elapsed GPU time between CUDA events recorded around the call, ms.
    pub elapsed_ms: f64,
    /// `memory_allocated()` after minus before, bytes (negative when the call freed memory).
    pub memory_delta: i64,
    /// Peak `memory_allocated()` during the call, bytes; with `peak_bound` an upper bound (the
    /// process's peak so far, which the call did not raise: the client never resets it unasked).
    pub memory_peak: u64,
    /// `memory_peak` is an upper bound ("≤"), not the call's own peak.
    #[serde(default)]
    pub peak_bound: bool,
}

/// What a remote `empty_cache` did, as the client reports it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CommandResult {
    pub id: u64,
    pub ok: bool,
    /// Reserved bytes before minus after, summed over the process's devices.
    pub released_bytes: u64,
}

/// Body of `POST /api/bridge/report`, sent by `gpudash.attach()` every interval.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// Protocol version; this is 1.
    pub version: u32,
    pub pid: u32,
    pub host: String,
    /// e.g. "python train.py --epochs 3".
    pub process_name: String,
    pub torch_version: String,
    pub cuda_version: Option<String>,
    /// The client will act on remote empty_cache requests.
    pub allow_remote_empty_cache: bool,
    /// The client sends allocator maps (`attach(..., share_allocator_map=True)`) and takes one on request.
    #[serde(default)]
    pub share_allocator_map: bool,
    /// Seconds between reports.
    pub interval_s: f64,
    pub devices: Vec<TorchMemory>,
    #[serde(default)]
    pub spans: Vec<Span>,
    #[serde(default)]
    pub command_results: Vec<CommandResult>,
}

/// A request the server hands to the client with its next answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Command {
    EmptyCache {
        id: u64,
    },
    /// Send an allocator map now (`POST /api/bridge/allocator` with reason "requested").
    AllocatorMap {
        id: u64,
    },
}

/// Answer to a report.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReportAnswer {
    pub commands: Vec<Command>,
}

/// Per-name summary of a process's spans.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SpanSummary {
    pub name: String,
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub last_memory_delta: i64,
    pub max_memory_peak: u64,
    /// The highest peak is an upper bound ("≤").
    #[serde(default)]
    pub max_memory_peak_bound: bool,
}

/// One device of an attached process, beside what NVML says the process holds there.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AttachedDevice {
    #[serde(flatten)]
    pub torch: TorchMemory,
    /// The server's GPU index matched by UUID (else the process's own index).
    pub gpu: u32,
    /// NVML's figure for this PID on this GPU: reserved + the CUDA context + other allocations.
    pub nvml_used: Option<u64>,
    /// `nvml_used - reserved`: what the CUDA context and non-PyTorch allocations cost.
    pub overhead: Option<u64>,
}

/// State of the last remote empty_cache of a process.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct EmptyCacheState {
    pub id: u64,
    pub requested_ms: u64,
    pub done_ms: Option<u64>,
    pub released_bytes: Option<u64>,
    /// Not delivered: the process's latest report withdrew its consent (`allow_remote_empty_cache`).
    #[serde(default)]
    pub refused: bool,
}

/// An attached PyTorch process as `GET /api/bridge` lists it (a summary) or `GET /api/bridge/{id}` details it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AttachedProcess {
    /// The server's handle for this process (for `POST /api/bridge/{id}/empty_cache`).
    pub id: u64,
    pub pid: u32,
    pub host: String,
    pub process_name: String,
    pub torch_version: String,
    pub cuda_version: Option<String>,
    pub allow_remote_empty_cache: bool,
    pub first_seen_ms: u64,
    pub last_seen_ms: u64,
    /// No report for three intervals: kept, but marked (and dropped once silent for the server's expiry time).
    pub stale: bool,
    /// NVML lists this PID: false usually means the process runs in another PID namespace (a container).
    pub pid_matched: bool,
    /// The user NVML's process table shows for the PID.
    pub user: Option<String>,
    pub devices: Vec<AttachedDevice>,
    /// Per span name (a bounded number of names per process).
    pub spans: Vec<SpanSummary>,
    /// The newest spans, oldest first (for annotations on the memory chart): a few in
    /// `GET /api/bridge`, more in `GET /api/bridge/{id}`.
    pub recent_spans: Vec<Span>,
    pub empty_cache: Option<EmptyCacheState>,
    /// The process sends allocator maps.
    #[serde(default)]
    pub share_allocator_map: bool,
    /// Its latest allocator map: in `GET /api/bridge` each device's totals only (no segments, no
    /// histogram: the list is reloaded every 2 s), whole in `GET /api/bridge/{id}`.
    #[serde(default)]
    pub allocator: Option<AllocatorView>,
    /// The last "Refresh map" request.
    #[serde(default)]
    pub map_request: Option<MapRequestState>,
    /// Its out-of-memory errors, newest last (a few).
    #[serde(default)]
    pub ooms: Vec<OomRecord>,
}
