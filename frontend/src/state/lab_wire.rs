//! Lighter readings of two lab answers. The page needs neither a run's
//! parameters nor typed experiment defaults (the forms are built from the JSON),
//! and leaving them out keeps their deserializers (and `Run`'s flattened
//! summary) out of the wasm.

use serde::Deserialize;
use serde_json::Value;
use shared::lab::{ExperimentKind, RunEnvironment, RunPlan, RunResult, RunStatus, RunSummary};

/// A run as the Lab view shows it: `shared::lab::Run` without `params` and `force`
/// (`GET /api/runs/{id}`, and the 202 of `POST /api/runs`).
#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct RunDoc {
    pub id: u64,
    pub device: u32,
    #[serde(default)]
    pub devices: Vec<u32>,
    pub kind: ExperimentKind,
    pub status: RunStatus,
    pub requested_by: String,
    pub submitted_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub simulated: bool,
    pub passed: Option<bool>,
    pub error: Option<String>,
    pub plan: RunPlan,
    pub environment: RunEnvironment,
    pub result: Option<RunResult>,
    pub previous_id: Option<u64>,
}

impl RunDoc {
    /// The run as lists and the queue show it.
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            id: self.id,
            device: self.device,
            devices: self.devices.clone(),
            kind: self.kind,
            status: self.status,
            requested_by: self.requested_by.clone(),
            submitted_ms: self.submitted_ms,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            simulated: self.simulated,
            passed: self.passed,
            error: self.error.clone(),
        }
    }
}

/// An experiment of `GET /api/lab/experiments`, its defaults kept as JSON for the form.
#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct ExperimentDoc {
    pub kind: ExperimentKind,
    pub title: String,
    pub description: String,
    pub defaults: Value,
}

#[cfg(test)]
mod tests {
    use shared::lab::{ExperimentInfo, Run};

    use super::*;

    #[test]
    fn the_servers_run_and_experiments_read_as_docs() {
        let summary = RunSummary {
            id: 4,
            device: 1,
            devices: vec![1],
            kind: ExperimentKind::Latency,
            status: RunStatus::Succeeded,
            requested_by: "ana".into(),
            submitted_ms: 1,
            started_ms: Some(2),
            finished_ms: Some(3),
            simulated: true,
            passed: Some(true),
            error: None,
        };
        let run = Run {
            summary: summary.clone(),
            params: ExperimentKind::Latency.default_params(),
            force: false,
            plan: RunPlan { notes: vec!["fits".into()], ..RunPlan::default() },
            environment: RunEnvironment::default(),
            progress: None,
            result: None,
            previous_id: Some(2),
        };
        let doc: RunDoc = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
        assert_eq!(doc.summary(), summary);
        assert_eq!(doc.plan.notes, ["fits"]);
        assert_eq!(doc.previous_id, Some(2));

        let info = ExperimentInfo {
            kind: ExperimentKind::Memory,
            title: "Memory".into(),
            description: "pools".into(),
            defaults: ExperimentKind::Memory.default_params(),
        };
        let doc: ExperimentDoc = serde_json::from_str(&serde_json::to_string(&info).unwrap()).unwrap();
        assert_eq!(doc.defaults["blocks"], 8);
    }
}
