//! `use_lab()`: the GPU lab as the page sees it. Loads `GET /api/lab` and the recent runs at start
//! and after every (re)connection (the socket sends no lab state on connect), the experiments when
//! the Lab is first shown, and sends the lab's requests.

use leptos::{logging, prelude::*, task::spawn_local};
use serde_json::{Value, json};
use shared::{
    lab::{LabStatus, RunCheck, RunSummary, TrimOutcome},
    lab_view::RunDoc,
};

use super::{
    api::{ApiFailure, get_json, post_json},
    session::Session,
    telemetry::Telemetry,
};
use crate::state::{
    lab::{LabState, RECENT_RUNS},
    lab_form::ExperimentDoc,
};

/// The lab's state and the run the Lab view shows.
#[derive(Debug, Clone, Copy)]
pub struct Lab {
    pub state: RwSignal<LabState>,
    /// From `GET /api/lab/experiments`, in the server's order.
    pub experiments: RwSignal<Vec<ExperimentDoc>>,
    /// The run whose result the Lab view shows.
    pub selected: RwSignal<Option<u64>>,
    /// Why the lab's state could not be loaded.
    pub load_error: RwSignal<Option<String>>,
    session: Session,
}

/// Reloads the lab whenever a snapshot arrives on the socket `telemetry` owns.
pub fn use_lab(state: RwSignal<LabState>, telemetry: Telemetry, session: Session) -> Lab {
    let lab = Lab {
        state,
        experiments: RwSignal::new(Vec::new()),
        selected: RwSignal::new(None),
        load_error: RwSignal::new(None),
        session,
    };
    Effect::new(move |_| {
        if telemetry.snapshots.get() > 0 {
            spawn_local(lab.reload());
        }
    });
    lab
}

impl Lab {
    /// Status and queue, and the recent runs.
    async fn reload(self) {
        let available = match get_json::<LabStatus>("/api/lab").await {
            Ok(status) => {
                let available = status.available;
                self.state.update(|s| s.set_status(status));
                self.load_error.set(None);
                available
            }
            Err(failure) => return self.failed("the lab's status", &failure),
        };
        if !available {
            return;
        }
        match get_json::<Vec<RunSummary>>(&format!("/api/runs?limit={RECENT_RUNS}")).await {
            Ok(runs) => self.state.update(|s| s.set_recent(runs)),
            Err(failure) => self.failed("the recent runs", &failure),
        }
    }

    /// The experiments, once, when the Lab is first shown (its forms and the runs' "In PyTorch" read them): listed even
    /// when the lab is unavailable, each with why it cannot run here.
    pub async fn load_experiments(self) {
        if self.experiments.with_untracked(Vec::is_empty) {
            match get_json::<Vec<ExperimentDoc>>("/api/lab/experiments").await {
                Ok(experiments) => drop(self.experiments.try_set(experiments)),
                Err(failure) => self.failed("the experiments", &failure),
            }
        }
    }

    fn failed(self, what: &str, failure: &ApiFailure) {
        logging::warn!("gpudash: loading {what}: {}", failure.message);
        self.load_error.set(Some(format!("Could not load {what}: {}", failure.message)));
        self.session.unauthorized(failure);
    }

    /// `POST /api/runs`: the queued run (with its plan), which the view then shows.
    pub async fn submit(self, device: u32, params: Value, force: bool) -> Result<RunDoc, ApiFailure> {
        let body = json!({ "device": device, "params": params, "force": force });
        let run: RunDoc = post_json("/api/runs", Some(&body)).await?;
        self.state.update(|s| s.upsert(run.summary()));
        self.selected.set(Some(run.id));
        Ok(run)
    }

    /// `POST /api/runs/check`: what a submit of the same request would do (the GPUs it takes and its
    /// plan), or the refusal it would get, without queueing anything.
    pub async fn check(self, device: u32, params: Value, force: bool) -> Result<RunCheck, ApiFailure> {
        let body = json!({ "device": device, "params": params, "force": force });
        post_json("/api/runs/check", Some(&body)).await
    }

    /// `POST /api/runs/{id}/cancel`.
    pub async fn cancel(self, id: u64) -> Result<(), ApiFailure> {
        let run: RunSummary = post_json(&format!("/api/runs/{id}/cancel"), None).await?;
        self.state.update(|s| s.upsert(run));
        Ok(())
    }

    /// `POST /api/lab/devices/{device}/empty_cache`.
    pub async fn empty_cache(self, device: u32) -> Result<TrimOutcome, ApiFailure> {
        let trim: TrimOutcome = post_json(&format!("/api/lab/devices/{device}/empty_cache"), None).await?;
        self.state.update(|s| s.apply(shared::lab::LabEvent::Trimmed(trim)));
        Ok(trim)
    }
}

/// `GET /api/runs/{id}`.
pub async fn fetch_run(id: u64) -> Result<RunDoc, ApiFailure> {
    get_json(&format!("/api/runs/{id}")).await
}
