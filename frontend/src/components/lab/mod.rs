//! The Lab view's parts: the experiment forms, the shared queue, a run's
//! result (chart, figures, checks, notes, the takeaway and the experiment in
//! PyTorch) and the recent runs.

pub mod chart;
pub mod forms;
pub mod pytorch;
pub mod queue;
pub mod run_view;
pub mod runs;
pub mod topology;

use shared::lab::RunStatus;

/// How a run's state reads: "queued", "timed out".
pub fn status_label(status: RunStatus) -> &'static str {
    status.label()
}

/// The CSS class of a run's state: `status-timed_out` etc.
pub fn status_class(status: RunStatus) -> String {
    format!("run-status status-{}", status.as_str())
}
