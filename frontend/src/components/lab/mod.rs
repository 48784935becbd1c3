//! The Lab view's parts: the experiment forms, the shared queue, a run's
//! result (chart, figures, checks, notes) and the recent runs.

pub mod chart;
pub mod forms;
pub mod queue;
pub mod run_view;
pub mod runs;
pub mod topology;

use shared::lab::RunStatus;

/// How a run's state reads: "queued", "timed out".
pub fn status_label(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Queued => "queued",
        RunStatus::Running => "running",
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "cancelled",
        RunStatus::TimedOut => "timed out",
    }
}

/// The CSS class of a run's state: `status-timed_out` etc.
pub fn status_class(status: RunStatus) -> String {
    let name = serde_json::to_value(status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    format!("run-status status-{name}")
}
