//! The GPU lab's wire types: experiment parameters, runs, results and the
//! events pushed over `/ws` while experiments queue and run.
//!
//! Every parameter struct deserializes from `{}` to its defaults, so a client
//! may send only what it changes. Bytes are `u64`, times ms since the epoch,
//! durations `f64` milliseconds unless a field says otherwise.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::tagged::{leading_tag, rest};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The six experiments.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum ExperimentKind {
    Memory,
    Transfer,
    Streams,
    Precision,
    Latency,
    /// Copies between GPUs; occupies every GPU it involves, needs two.
    P2p,
}

impl ExperimentKind {
    pub const ALL: [Self; 6] = [Self::Memory, Self::Transfer, Self::Streams, Self::Precision, Self::Latency, Self::P2p];

    /// The name used in URLs, JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Transfer => "transfer",
            Self::Streams => "streams",
            Self::Precision => "precision",
            Self::Latency => "latency",
            Self::P2p => "p2p",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name.trim().to_ascii_lowercase())
    }

    /// The parameters this experiment runs with when the client sends none.
    pub fn default_params(self) -> ExperimentParams {
        match self {
            Self::Memory => ExperimentParams::Memory(MemoryParams::default()),
            Self::Transfer => ExperimentParams::Transfer(TransferParams::default()),
            Self::Streams => ExperimentParams::Streams(StreamsParams::default()),
            Self::Precision => ExperimentParams::Precision(PrecisionParams::default()),
            Self::Latency => ExperimentParams::Latency(LatencyParams::default()),
            Self::P2p => ExperimentParams::P2p(P2pParams::default()),
        }
    }
}

/// What to run, tagged by `"kind"`: `{"kind":"transfer","sizes":[4096,1048576]}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExperimentParams {
    Memory(MemoryParams),
    Transfer(TransferParams),
    Streams(StreamsParams),
    Precision(PrecisionParams),
    Latency(LatencyParams),
    P2p(P2pParams),
}

impl ExperimentParams {
    pub fn kind(&self) -> ExperimentKind {
        match self {
            Self::Memory(_) => ExperimentKind::Memory,
            Self::Transfer(_) => ExperimentKind::Transfer,
            Self::Streams(_) => ExperimentKind::Streams,
            Self::Precision(_) => ExperimentKind::Precision,
            Self::Latency(_) => ExperimentKind::Latency,
            Self::P2p(_) => ExperimentKind::P2p,
        }
    }
}

/// The caching allocator made visible.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryParams {
    /// Size of each block, bytes (1 MiB to 16 GiB). Default 256 MiB.
    pub block_bytes: u64,
    /// Blocks to allocate (1 to 64). Default 8.
    pub blocks: u32,
    /// Free every k-th block before allocating again (1 frees all, 2 every other). Default 2.
    pub free_every: u32,
    /// Timed pool-served vs fresh allocations (1 to 100). Default 10.
    pub repetitions: u32,
}

impl Default for MemoryParams {
    fn default() -> Self {
        Self { block_bytes: 256 * MIB, blocks: 8, free_every: 2, repetitions: 10 }
    }
}

/// One way of copying memory.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CopyKind {
    H2dPageable,
    H2dPinned,
    D2hPageable,
    D2hPinned,
    /// Device to device; its bandwidth counts bytes read plus bytes written.
    D2d,
}

impl CopyKind {
    pub const ALL: [Self; 5] = [Self::H2dPageable, Self::H2dPinned, Self::D2hPageable, Self::D2hPinned, Self::D2d];

    pub fn name(self) -> &'static str {
        match self {
            Self::H2dPageable => "h2d_pageable",
            Self::H2dPinned => "h2d_pinned",
            Self::D2hPageable => "d2h_pageable",
            Self::D2hPinned => "d2h_pinned",
            Self::D2d => "d2d",
        }
    }
}

/// Host↔device and device↔device bandwidth over a sweep of sizes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TransferParams {
    /// Copy sizes in bytes, each 4 KiB to 1 GiB, at most 32 of them.
    /// Default: powers of 4 from 4 KiB to 1 GiB.
    pub sizes: Vec<u64>,
    /// Which copies to time. Default: all five.
    pub copies: Vec<CopyKind>,
    /// Untimed copies before timing each size (0 to 100). Default 3.
    pub warmup: u32,
    /// Timed copies per size (1 to 1000). Default 10.
    pub repetitions: u32,
}

impl Default for TransferParams {
    fn default() -> Self {
        Self {
            sizes: (0..10).map(|i| (4 * KIB) << (2 * i)).collect(),
            copies: CopyKind::ALL.to_vec(),
            warmup: 3,
            repetitions: 10,
        }
    }
}

/// Copy/compute overlap and concurrent kernels.
///
/// The defaults make each phase long (copy ~5 ms, GEMM ~22 ms on an H200) so launch and
/// join costs stay under the overlap check's +2%; phases under 10 ms are judged more loosely.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsParams {
    /// Pinned host-to-device copy, bytes (1 MiB to 4 GiB). Default 256 MiB.
    pub copy_bytes: u64,
    /// The compute kernel is an fp32 GEMM of this order (256 to 16384). Default 8192.
    pub gemm_size: u32,
    /// Independent kernels launched on 1 stream, then on as many streams (2 to 32). Default 8.
    pub kernels: u32,
    /// How long each independent kernel spins, µs (10 to 100000). Default 500.
    pub kernel_us: u32,
    /// Untimed rounds first (0 to 20). Default 2.
    pub warmup: u32,
    /// Timed rounds (1 to 100). Default 5.
    pub repetitions: u32,
}

impl Default for StreamsParams {
    fn default() -> Self {
        Self { copy_bytes: 256 * MIB, gemm_size: 8192, kernels: 8, kernel_us: 500, warmup: 2, repetitions: 5 }
    }
}

/// A GEMM element type.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    Fp32,
    /// fp32 storage, tensor cores with TF32 inputs.
    Tf32,
    Fp16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Self; 4] = [Self::Fp32, Self::Tf32, Self::Fp16, Self::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Tf32 => "tf32",
            Self::Fp16 => "fp16",
            Self::Bf16 => "bf16",
        }
    }

    /// Largest accepted error against the host reference, as
    /// `max |gpu - host| / sqrt(k)` with inputs uniform in [-1, 1].
    pub fn tolerance(self) -> f64 {
        match self {
            Self::Fp32 => 1e-4,
            Self::Tf32 | Self::Fp16 => 4e-3,
            Self::Bf16 => 2e-2,
        }
    }
}

/// cuBLAS GEMM throughput and correctness per element type.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PrecisionParams {
    /// Square matrix orders (64 to 16384), at most 8. Default 1024, 4096, 8192.
    pub sizes: Vec<u32>,
    /// Default: all four.
    pub dtypes: Vec<Dtype>,
    /// Untimed GEMMs first (0 to 50). Default 3.
    pub warmup: u32,
    /// Timed GEMMs (1 to 200). Default 10.
    pub repetitions: u32,
}

impl Default for PrecisionParams {
    fn default() -> Self {
        Self { sizes: vec![1024, 4096, 8192], dtypes: Dtype::ALL.to_vec(), warmup: 3, repetitions: 10 }
    }
}

/// Launch, event and synchronize latency with an empty kernel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyParams {
    /// Untimed calls first (0 to 10000). Default 100.
    pub warmup: u32,
    /// Timed calls of each kind (10 to 100000). Default 2000.
    pub repetitions: u32,
}

impl Default for LatencyParams {
    fn default() -> Self {
        Self { warmup: 100, repetitions: 2000 }
    }
}

/// Two GPUs (NVML indexes) copied between, both directions.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct GpuPair {
    pub a: u32,
    pub b: u32,
}

/// Bandwidth and latency between GPUs, with peer access enabled and disabled
/// (then the driver stages each copy through pinned host memory), like
/// cuda-samples' p2pBandwidthLatencyTest.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct P2pParams {
    /// Bytes of each bandwidth copy (1 MiB to 4 GiB). Default 256 MiB.
    pub size: u64,
    /// Untimed copies before timing each pair and mode (0 to 20). Default 3.
    pub warmup: u32,
    /// Timed copies per pair and mode (1 to 100). Default 10. Latency takes 10× as many 4-byte copies.
    pub repetitions: u32,
    /// Pairs to measure, each in both directions. Empty (the default): every pair of the server's GPUs.
    /// The server fills in the pairs it will measure, so a stored run lists them.
    pub pairs: Vec<GpuPair>,
}

impl Default for P2pParams {
    fn default() -> Self {
        Self { size: 256 * MIB, warmup: 3, repetitions: 10, pairs: Vec::new() }
    }
}

impl P2pParams {
    /// Every GPU the pairs involve, ascending.
    pub fn devices(&self) -> Vec<u32> {
        let mut devices: Vec<u32> = self.pairs.iter().flat_map(|p| [p.a, p.b]).collect();
        devices.sort_unstable();
        devices.dedup();
        devices
    }
}

/// Body of `POST /api/runs`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// NVML index of the GPU.
    pub device: u32,
    pub params: ExperimentParams,
    /// Run even where other processes are computing on the GPU.
    #[serde(default)]
    pub force: bool,
}

/// Where a run is in its life.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl RunStatus {
    /// True once the run can no longer change.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

/// A run as listed (`GET /api/runs`, the queue, WebSocket events): everything but the result.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub id: u64,
    /// The GPU the run was asked for, whose queue it is listed in.
    pub device: u32,
    /// Every GPU the run occupies while it runs: `[device]`, or for `p2p` all GPUs of its pairs.
    #[serde(default)]
    pub devices: Vec<u32>,
    pub kind: ExperimentKind,
    pub status: RunStatus,
    /// Who asked for it: the caller's token user, or "anonymous".
    pub requested_by: String,
    pub submitted_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// True when the figures come from the simulated executor, not a GPU.
    pub simulated: bool,
    /// All correctness checks passed; `None` before the run ends or when it has no checks.
    pub passed: Option<bool>,
    /// Why it failed, was refused, cancelled or timed out.
    pub error: Option<String>,
}

/// Facts about the GPU and software a run was made on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct RunEnvironment {
    pub gpu_name: String,
    pub gpu_uuid: String,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub gpudash_version: String,
    pub hostname: String,
}

/// What a run will take, said before it starts.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct RunPlan {
    /// Device memory the experiment will ask for at its peak.
    pub device_bytes: u64,
    /// Page-locked host memory it will allocate.
    pub pinned_host_bytes: u64,
    /// Ordinary host memory it will allocate.
    pub host_bytes: u64,
    /// Free device memory when checked (NVML), and the margin kept free for others.
    pub free_bytes: Option<u64>,
    pub margin_bytes: u64,
    /// Hard time limit, ms.
    pub time_limit_ms: u64,
    /// Human-readable lines, e.g. "needs 2.00 GiB of device memory; 139 GiB free, 1.00 GiB kept free".
    pub notes: Vec<String>,
}

/// A run in full (`GET /api/runs/{id}`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Run {
    #[serde(flatten)]
    pub summary: RunSummary,
    pub params: ExperimentParams,
    pub force: bool,
    pub plan: RunPlan,
    pub environment: RunEnvironment,
    /// Latest progress while running (0.0 to 1.0) and what it is doing.
    pub progress: Option<Progress>,
    pub result: Option<RunResult>,
    /// The newest earlier successful run of the same experiment on the same GPU, for overlays.
    pub previous_id: Option<u64>,
}

/// How far a run has got.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Progress {
    pub fraction: f64,
    pub message: String,
}

/// Median, minimum and maximum over `n` timed repetitions (after warm-up).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: u32,
}

/// A named figure, e.g. "alloc served from pool" in µs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub stats: Stats,
}

/// A point of a curve.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: Stats,
}

/// A curve of a chart, e.g. "h2d_pinned" GB/s against bytes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

/// A horizontal line drawn for comparison, e.g. the PCIe link's peak.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReferenceLine {
    pub name: String,
    pub value: f64,
}

/// How the result is best drawn.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChartSpec {
    /// Curves of `series` with `references` as horizontal lines.
    Lines { x_label: String, y_label: String, log_x: bool, log_y: bool },
    /// Bars of `figures` (median with a min–max whisker).
    Bars { y_label: String },
    /// A per-stream timeline from `timeline`.
    Gantt,
    /// One heatmap per entry of `matrices` (p2p): rows are the source GPU, columns the destination.
    Heatmap { row_label: String, col_label: String },
}

/// A correctness check and its outcome.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// E.g. "max error/sqrt(k) 3.1e-4 ≤ tolerance 4e-3".
    pub detail: String,
}

/// One step of the memory experiment: the pool and the device after it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MemoryStep {
    pub label: String,
    /// Bytes handed out by the pool (PyTorch's "allocated").
    pub allocated: u64,
    /// Bytes the pool holds from the driver (PyTorch's "reserved").
    pub reserved: u64,
    /// The device's used memory as NVML reports it, all processes included.
    pub nvml_used: Option<u64>,
}

/// A bar of the streams timeline, times relative to the phase's start.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TimelineSpan {
    /// E.g. "copy+compute serial", "8 kernels on 8 streams".
    pub phase: String,
    /// Stream number within the phase, from 0.
    pub stream: u32,
    pub label: String,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// A GPU × GPU table of medians, drawn as a heatmap.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Matrix {
    /// E.g. "unidirectional, peer access enabled".
    pub name: String,
    /// "GB/s" or "µs".
    pub unit: String,
    /// NVML indexes of the rows and of the columns, in order.
    pub devices: Vec<u32>,
    /// `cells[row][col]`: from GPU `devices[row]` to GPU `devices[col]`; `null` on the diagonal, for pairs
    /// not measured, and with peer access enabled where the GPUs cannot access each other.
    pub cells: Vec<Vec<Option<f64>>>,
    /// True when higher is better (bandwidth), false for latency: the heatmap's colour direction.
    pub higher_is_better: bool,
}

/// Everything an experiment measured.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunResult {
    pub chart: ChartSpec,
    /// Unit of the series' y values (e.g. "GB/s", "TFLOP/s", "GiB").
    pub unit: String,
    pub series: Vec<Series>,
    pub references: Vec<ReferenceLine>,
    pub figures: Vec<Figure>,
    pub checks: Vec<Check>,
    /// The memory experiment's steps (empty for the others).
    pub memory_steps: Vec<MemoryStep>,
    /// The streams experiment's timeline (empty for the others).
    pub timeline: Vec<TimelineSpan>,
    /// The p2p experiment's heatmaps (empty for the others).
    #[serde(default)]
    pub matrices: Vec<Matrix>,
    /// Remarks for the page, e.g. that host buffers were written before timing.
    pub notes: Vec<String>,
}

impl RunResult {
    /// True when every check passed; `None` without checks.
    pub fn passed(&self) -> Option<bool> {
        (!self.checks.is_empty()).then(|| self.checks.iter().all(|c| c.passed))
    }
}

/// A run waiting or running, as the queue shows it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QueueEntry {
    pub run: RunSummary,
    /// 0 for the running one, then 1, 2, … in order per GPU.
    pub position: u32,
    pub progress: Option<Progress>,
}

/// The lab's state on one GPU.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabDevice {
    pub index: u32,
    /// True while the lab holds a CUDA context (and its pool) on the GPU.
    pub context_open: bool,
    /// Bytes the lab's pool holds from the driver, and how many of them are in use.
    pub pool_reserved: u64,
    pub pool_used: u64,
    /// Runs queued or running that occupy this GPU, whether [`LabStatus::queue`] lists them or not.
    pub pending: u32,
}

/// Most waiting runs one [`LabStatus`] lists: the rest are only counted ([`LabStatus::unlisted`]), so a
/// status event stays small however long the queue (`GET /api/runs?status=queued` lists every run).
pub const QUEUE_LISTED: usize = 20;

/// Body of `GET /api/lab`, and the WebSocket's `lab` snapshot.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabStatus {
    /// False when experiments cannot run here; `reason` says why.
    pub available: bool,
    pub reason: Option<String>,
    pub simulated: bool,
    pub devices: Vec<LabDevice>,
    /// Every running run and the first [`QUEUE_LISTED`] waiting ones (the next to start on each GPU
    /// first), in order per GPU.
    pub queue: Vec<QueueEntry>,
    /// Runs queued or running on all GPUs, listed in `queue` or not.
    pub queue_total: u32,
    /// Most runs one user may have queued or running at once (`--lab-queue-per-user`).
    pub queue_per_user: u32,
    /// Hard limit on one run, ms; idle time after which the lab releases the GPU, ms.
    pub time_limit_ms: u64,
    pub idle_release_ms: u64,
}

impl LabStatus {
    /// Runs queued that `queue` does not list ("… and 980 more").
    pub fn unlisted(&self) -> u32 {
        self.queue_total.saturating_sub(u32::try_from(self.queue.len()).unwrap_or(u32::MAX))
    }
}

/// Body of `POST /api/lab/devices/{index}/empty_cache`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct TrimOutcome {
    pub device: u32,
    pub reserved_before: u64,
    pub reserved_after: u64,
    /// Bytes handed back to the driver.
    pub released_bytes: u64,
}

/// An experiment described for the page's forms (`GET /api/lab/experiments`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExperimentInfo {
    pub kind: ExperimentKind,
    pub title: String,
    pub description: String,
    pub defaults: ExperimentParams,
}

/// What the lab pushes over `/ws` inside `{"type":"lab", ...}`, tagged by `"event"`
/// right after: `{"type":"lab","event":"run",…}`. (Decoded tag first: see [`crate::tagged`].)
/// What an anonymous visitor of a dashboard with tokens sees instead of who asked for a run.
pub const HIDDEN_REQUESTER: &str = "sign in to see";

impl RunSummary {
    /// Leaves out who asked for the run (for an anonymous visitor when tokens exist).
    pub fn hide_requester(&mut self) {
        HIDDEN_REQUESTER.clone_into(&mut self.requested_by);
    }
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LabEvent {
    /// The whole lab state: sent on connect, after a client fell behind, and whenever the queue changes.
    Status(LabStatus),
    /// A run changed state (queued, started, finished). Fetch `/api/runs/{id}` for its result.
    Run(RunSummary),
    /// A running run moved on.
    Progress { id: u64, device: u32, progress: Progress },
    /// The lab's pool on a GPU was trimmed (empty_cache, or released after idling).
    Trimmed(TrimOutcome),
}

impl LabEvent {
    /// Leaves out who asked for the runs it names; false when it names nobody.
    pub fn hide_people(&mut self) -> bool {
        match self {
            LabEvent::Status(status) => {
                status.queue.iter_mut().for_each(|entry| entry.run.hide_requester());
                !status.queue.is_empty()
            }
            LabEvent::Run(summary) => {
                summary.hide_requester();
                true
            }
            LabEvent::Progress { .. } | LabEvent::Trimmed(_) => false,
        }
    }
}

impl<'de> Deserialize<'de> for LabEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Event {
            Status,
            Run,
            Progress,
            Trimmed,
        }
        #[derive(Deserialize)]
        struct ProgressFields {
            id: u64,
            device: u32,
            progress: Progress,
        }
        struct TagFirst;
        impl<'de> Visitor<'de> for TagFirst {
            type Value = LabEvent;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a lab event: an object whose first key is \"event\"")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LabEvent, A::Error> {
                let event = leading_tag(&mut map, "event")?;
                let rest = rest(map);
                Ok(match event {
                    Event::Status => LabEvent::Status(LabStatus::deserialize(rest)?),
                    Event::Run => LabEvent::Run(RunSummary::deserialize(rest)?),
                    Event::Progress => {
                        let ProgressFields { id, device, progress } = ProgressFields::deserialize(rest)?;
                        LabEvent::Progress { id, device, progress }
                    }
                    Event::Trimmed => LabEvent::Trimmed(TrimOutcome::deserialize(rest)?),
                })
            }
        }
        deserializer.deserialize_map(TagFirst)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn params_default_from_an_empty_object() {
        let p: ExperimentParams = serde_json::from_str(r#"{"kind":"transfer"}"#).unwrap();
        let ExperimentParams::Transfer(t) = p else { panic!("not transfer") };
        assert_eq!(t.sizes.first(), Some(&(4 * KIB)));
        assert_eq!(t.sizes.last(), Some(&(1 << 30)));
        assert_eq!(t.copies.len(), 5);
    }

    #[test]
    fn unknown_fields_and_kinds_are_rejected() {
        assert!(serde_json::from_str::<ExperimentParams>(r#"{"kind":"memory","blokcs":3}"#).is_err());
        assert!(serde_json::from_str::<ExperimentParams>(r#"{"kind":"fft"}"#).is_err());
    }

    #[test]
    fn kinds_parse_by_name() {
        for kind in ExperimentKind::ALL {
            assert_eq!(ExperimentKind::parse(kind.name()), Some(kind));
            assert_eq!(kind.default_params().kind(), kind);
        }
        assert_eq!(ExperimentKind::parse("fft"), None);
    }

    #[test]
    fn p2p_pairs_name_their_gpus() {
        let p: ExperimentParams =
            serde_json::from_str(r#"{"kind":"p2p","pairs":[{"a":2,"b":0},{"a":0,"b":1}]}"#).unwrap();
        let ExperimentParams::P2p(p) = p else { panic!("not p2p") };
        assert_eq!(p.devices(), vec![0, 1, 2]);
        assert_eq!(p.size, 256 * MIB);
        let chart = serde_json::to_string(&ChartSpec::Heatmap { row_label: "from".into(), col_label: "to".into() });
        assert_eq!(chart.unwrap(), r#"{"type":"heatmap","row_label":"from","col_label":"to"}"#);
    }

    #[test]
    fn lab_events_are_tagged() {
        let e = LabEvent::Progress { id: 3, device: 0, progress: Progress { fraction: 0.5, message: "x".into() } };
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.starts_with(r#"{"event":"progress","id":3"#), "{json}");
        assert_eq!(serde_json::from_str::<LabEvent>(&json).unwrap(), e);
    }
}
