//! Lighter readings of the lab's answers for the page (see [`RunDoc`] for the
//! measured saving).

use serde::Deserialize;

use crate::lab::{ExperimentKind, RunEnvironment, RunPlan, RunResult, RunStatus, RunSummary};

/// A run as the page reads it: [`Run`](crate::lab::Run)'s JSON (`GET /api/runs/{id}`,
/// and the 202 of `POST /api/runs`) without `params`, `force` and `progress`, and
/// with the summary's fields listed instead of `#[serde(flatten)]`.
///
/// A copy of `Run` to save wasm bytes, measured: the release wasm reading `Run` and
/// `ExperimentInfo` directly is 2,526,930 bytes (711,805 gzipped) against 2,486,748
/// (700,282) with this and the page's `ExperimentDoc`: 40,182 bytes, 11.5 KB gzipped,
/// saved (flatten buffers every field through serde's `Content`, and typed
/// parameters bring every experiment's deserializer).
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
    /// What the result means for a PyTorch program, in the experiment's words ([`Run::takeaway`](crate::lab::Run)).
    #[serde(default)]
    pub takeaway: Option<String>,
}

impl RunDoc {
    /// The run as lists and the queue show it.
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            id: self.id,
            device: self.device,
            devices: self.devices.clone(),
            kind: self.kind.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::{ExperimentParams, Run};

    #[test]
    fn the_servers_run_reads_as_a_doc() {
        let summary = RunSummary {
            id: 4,
            device: 1,
            devices: vec![1],
            kind: ExperimentKind::named("latency"),
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
            params: ExperimentParams::defaults(ExperimentKind::named("latency")),
            force: false,
            forced_by_admin: false,
            plan: RunPlan { notes: vec!["fits".into()], ..RunPlan::default() },
            environment: RunEnvironment::default(),
            progress: None,
            result: None,
            previous_id: Some(2),
            takeaway: None,
        };
        let doc: RunDoc = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
        assert_eq!(doc.summary(), summary);
        assert_eq!(doc.plan.notes, ["fits"]);
        assert_eq!(doc.previous_id, Some(2));
    }
}
