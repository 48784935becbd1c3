//! What a run is: its status, summary, plan and environment, and everything an
//! experiment measured (figures, curves, checks, heatmaps) with how to draw it.

use serde::{Deserialize, Serialize};

use super::{ExperimentKind, ExperimentParams};

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
    pub const ALL: [Self; 6] =
        [Self::Queued, Self::Running, Self::Succeeded, Self::Failed, Self::Cancelled, Self::TimedOut];

    /// The name in JSON, URLs and the runs table: "queued", "timed_out".
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::TimedOut => "timed_out",
        }
    }

    /// The status named `name` as [`RunStatus::as_str`] spells it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// How the status reads to a person: "queued", "timed out".
    pub fn label(self) -> &'static str {
        match self {
            Self::TimedOut => "timed out",
            other => other.as_str(),
        }
    }

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
    /// Every GPU the run occupies while it runs: `[device]`, or all GPUs of a `p2p` run's pairs or a
    /// `collectives` run's communicator.
    #[serde(default)]
    pub devices: Vec<u32>,
    pub kind: ExperimentKind,
    pub status: RunStatus,
    /// Who asked for it: the signed-in user's name (of the token or session), or "anonymous"
    /// (`gpudash bench`: "<login>@bench").
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
    /// Forced by an admin, which alone may run on a GPU the scheduler gave to a pod.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced_by_admin: bool,
    pub plan: RunPlan,
    pub environment: RunEnvironment,
    /// Latest progress while running (0.0 to 1.0) and what it is doing.
    pub progress: Option<Progress>,
    pub result: Option<RunResult>,
    /// The newest earlier successful run of the same experiment on the same GPU, for overlays.
    pub previous_id: Option<u64>,
    /// One line on what the result's figures mean for a PyTorch program, in the experiment's words
    /// (`GET /api/runs/{id}` fills it in from the figures); `None` without a result or the figures it needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeaway: Option<String>,
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
    /// The GPU's L2 cache, bytes (transfer runs; `None` for the others and for runs stored before it was
    /// recorded). A chart over bytes marks the sizes that fit in it.
    #[serde(default)]
    pub l2_bytes: Option<u64>,
}

impl RunResult {
    /// True when every check passed; `None` without checks.
    pub fn passed(&self) -> Option<bool> {
        (!self.checks.is_empty()).then(|| self.checks.iter().all(|c| c.passed))
    }
}

/// What an anonymous visitor of a dashboard with tokens sees instead of who asked for a run.
pub const HIDDEN_REQUESTER: &str = "sign in to see";

impl RunSummary {
    /// Leaves out who asked for the run (for an anonymous visitor when tokens exist).
    pub fn hide_requester(&mut self) {
        HIDDEN_REQUESTER.clone_into(&mut self.requested_by);
    }

    /// Every GPU the run occupies: [`RunSummary::devices`], or `[device]` for runs stored before it was kept.
    pub fn gpus(&self) -> Vec<u32> {
        if self.devices.is_empty() { vec![self.device] } else { self.devices.clone() }
    }

    /// "GPU 4", or "GPUs 0, 1, 4" for a run on several: how the page, the CLI and messages name where it runs.
    pub fn gpus_label(&self) -> String {
        gpus_label(&self.gpus())
    }
}

/// "GPU 4" for one GPU, "GPUs 0, 1, 4" for several (in the order given).
pub fn gpus_label(devices: &[u32]) -> String {
    match devices {
        [one] => format!("GPU {one}"),
        _ => {
            let list: Vec<String> = devices.iter().map(u32::to_string).collect();
            format!("GPUs {}", list.join(", "))
        }
    }
}

/// `POST /api/runs/check`: what `POST /api/runs` would do with the same request, without queueing it.
/// Refusals come back as the errors the submit would give (409 with the guard's words).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunCheck {
    /// Every GPU the run would occupy while it runs, ascending.
    pub devices: Vec<u32>,
    /// What it would take, with the guards' notes (forced runs say whose processes they run beside).
    pub plan: RunPlan,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_named_one_or_several() {
        assert_eq!(gpus_label(&[4]), "GPU 4");
        assert_eq!(gpus_label(&[0, 1, 4]), "GPUs 0, 1, 4");
        let mut run: RunSummary = serde_json::from_value(serde_json::json!({
            "id": 1, "device": 3, "kind": "latency", "status": "queued", "requested_by": "ana",
            "submitted_ms": 1, "started_ms": null, "finished_ms": null, "simulated": true
        }))
        .unwrap();
        assert_eq!(run.gpus(), vec![3], "a run stored before `devices` was kept runs on its device");
        assert_eq!(run.gpus_label(), "GPU 3");
        run.devices = vec![2, 3, 5];
        assert_eq!(run.gpus_label(), "GPUs 2, 3, 5");
    }

    #[test]
    fn run_status_names_are_serdes() {
        for status in RunStatus::ALL {
            assert_eq!(serde_json::to_value(status).unwrap(), serde_json::Value::from(status.as_str()));
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
            assert_eq!(status.label(), status.as_str().replace('_', " "));
        }
        assert_eq!(RunStatus::parse("done"), None);
    }

    #[test]
    fn results_stored_before_the_l2_size_still_load() {
        let old = r#"{"chart":{"type":"gantt"},"unit":"ms","series":[],"references":[],"figures":[],"checks":[],
            "memory_steps":[],"timeline":[],"notes":[]}"#;
        let result: RunResult = serde_json::from_str(old).unwrap();
        assert_eq!(result.l2_bytes, None);
        let json = serde_json::to_string(&RunResult { l2_bytes: Some(50 << 20), ..result }).unwrap();
        assert!(json.contains(r#""l2_bytes":52428800"#), "{json}");
    }
}
