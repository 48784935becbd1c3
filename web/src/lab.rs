//! The GPU lab's HTTP API: status, experiments, runs (submit, list, get,
//! cancel, chart.svg, results.csv) and the per-GPU empty_cache button.

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use shared::lab::{ExperimentInfo, LabStatus, Run, RunCheck, RunRequest, RunStatus, RunSummary, TrimOutcome};

use shared::auth::Role;

use super::Visibility;
use super::api::visibility;
use super::auth::Caller;
use super::error::blocking;
use super::{ApiError, AppState};
use lab::LabError;
use store::runs::RunFilter;
use team::audit::{Action, Outcome};
use team::export::{svg, table};

/// Most runs one list returns.
const MAX_LIST: usize = 500;

impl From<LabError> for ApiError {
    fn from(e: LabError) -> Self {
        // The store's words (SQLite's messages, paths) stay in the log: clients get a generic message.
        if let LabError::Internal(detail) = &e {
            return ApiError::internal(format!("lab: {detail}"));
        }
        let status = match &e {
            LabError::Unavailable(_) | LabError::KindUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            LabError::NoDevice(_) | LabError::NoRun(_) => StatusCode::NOT_FOUND,
            LabError::Invalid(_) => StatusCode::BAD_REQUEST,
            LabError::Refused(_) | LabError::Conflict(_) => StatusCode::CONFLICT,
            LabError::QueueFull(_) => StatusCode::TOO_MANY_REQUESTS,
            LabError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self { status, message: e.to_string() }
    }
}

/// `GET /api/lab`: availability, the lab's hold on each GPU, and the queue (its first runs, and counts).
pub async fn status(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Json<LabStatus> {
    let mut status = state.lab.status();
    if visibility(&state, caller.as_deref()) == Visibility::Redacted {
        status.queue.iter_mut().for_each(|entry| entry.run.hide_requester());
    }
    Json(status)
}

/// `GET /api/lab/experiments`: every experiment with its default parameters, and why it cannot run here if
/// it cannot (off the runtime: asking may load NCCL).
pub async fn experiments(State(state): State<AppState>) -> Result<Json<Vec<ExperimentInfo>>, ApiError> {
    let list = blocking(state.lab.clone(), |lab| Ok::<_, LabError>(lab.experiments())).await?;
    Ok(Json(list))
}

/// The body of `POST /api/runs` and `POST /api/runs/check`.
fn run_request(body: &[u8]) -> Result<RunRequest, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError {
        status: StatusCode::BAD_REQUEST,
        message: format!(
            "invalid run request ({e}); send {{\"device\":0,\"params\":{{\"kind\":\"transfer\"}},\"force\":false}}"
        ),
    })
}

/// `POST /api/runs`: validates, guards and queues a run; 202 with the queued run.
pub async fn submit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(&state, Role::Operator, Action::ExperimentStart, "lab")?;
    let who = caller.identity.user.clone();
    let request = run_request(&body)?;
    let target = format!("GPU {}", request.device);
    // In words, not the params' Debug: "a p2p experiment on GPUs 0, 1".
    let named = lab::experiments::of(&request.params).map(|e| e.named_devices(&request.params)).unwrap_or_default();
    let what = if named.is_empty() {
        format!("a {} experiment on {target}", request.params.kind().name())
    } else {
        let list: Vec<String> = named.iter().map(u32::to_string).collect();
        format!("a {} experiment on GPUs {}", request.params.kind().name(), list.join(", "))
    };
    let admin = caller.identity.role >= Role::Admin;
    match blocking(state.lab.clone(), move |lab| lab.submit_by(request, &who, admin)).await {
        Ok(run) => {
            caller.audit(&state, Action::ExperimentStart, &format!("run {}", run.summary.id), Outcome::Ok, &what);
            Ok((StatusCode::ACCEPTED, Json(run)).into_response())
        }
        Err(e) => {
            caller.audit(&state, Action::ExperimentStart, &target, Outcome::Failed, &e.message);
            Err(e)
        }
    }
}

/// `POST /api/runs/check`: what `POST /api/runs` would answer for the same body, without queueing a run:
/// 200 with the GPUs it would occupy and its plan, or the submit's own error (a busy GPU's 409 names its
/// processes). The page asks it before a run on several GPUs or a forced one, to show the refusal instead
/// of a question, or to ask naming who the run would disturb. Changes nothing, so it is not audited.
pub async fn check(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Json<RunCheck>, ApiError> {
    caller.require(&state, Role::Operator, Action::ExperimentStart, "lab")?;
    let who = caller.identity.user.clone();
    let request = run_request(&body)?;
    let admin = caller.identity.role >= Role::Admin;
    Ok(Json(blocking(state.lab.clone(), move |lab| lab.check_by(request, &who, admin)).await?))
}

/// Query of `GET /api/runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    device: Option<u32>,
    kind: Option<String>,
    status: Option<RunStatus>,
    before: Option<u64>,
    limit: Option<usize>,
}

/// `GET /api/runs?device=0&kind=transfer&status=succeeded&before=42&limit=50`: newest first.
pub async fn list(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<RunSummary>>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError {
        status: StatusCode::BAD_REQUEST,
        message: format!("{e}; accepted: device, kind, status, before, limit"),
    })?;
    let kind = match q.kind.as_deref() {
        None => None,
        Some(name) => Some(
            lab::experiments::parse(name)
                .map_err(|e| ApiError { status: StatusCode::BAD_REQUEST, message: e.to_string() })?,
        ),
    };
    let filter = RunFilter {
        device: q.device,
        kind,
        status: q.status,
        before: q.before,
        limit: q.limit.unwrap_or(100).clamp(1, MAX_LIST),
    };
    let mut runs = blocking(state.lab.clone(), move |lab| lab.list(&filter)).await?;
    if visibility(&state, caller.as_deref()) == Visibility::Redacted {
        runs.iter_mut().for_each(RunSummary::hide_requester);
    }
    Ok(Json(runs))
}

/// `GET /api/runs/{id}`: the run with its result and `previous_id`.
pub async fn get(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<u64>,
) -> Result<Json<Run>, ApiError> {
    let mut run = blocking(state.lab.clone(), move |lab| lab.get(id)).await?;
    if visibility(&state, caller.as_deref()) == Visibility::Redacted {
        run.summary.hide_requester();
    }
    Ok(Json(run))
}

/// `POST /api/runs/{id}/cancel`.
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Json<RunSummary>, ApiError> {
    let target = format!("run {id}");
    caller.require(&state, Role::Operator, Action::ExperimentCancel, &target)?;
    let run = blocking(state.lab.clone(), move |lab| lab.get(id)).await?;
    if run.summary.requested_by != caller.identity.user {
        caller.require_to(&state, Role::Admin, Action::ExperimentCancel, "cancelling someone else's run", &target)?;
    }
    let result = blocking(state.lab.clone(), move |lab| lab.cancel(id)).await;
    let (outcome, detail) = match &result {
        Ok(_) => (Outcome::Ok, format!("requested by {}", run.summary.requested_by)),
        Err(e) => (Outcome::Failed, e.message.clone()),
    };
    caller.audit(&state, Action::ExperimentCancel, &target, outcome, &detail);
    result.map(Json)
}

/// `GET /api/runs/{id}/chart.svg`: drawn on the server, the previous run on the same GPU overlaid.
pub async fn chart(State(state): State<AppState>, Path(id): Path<u64>) -> Result<Response, ApiError> {
    let svg = blocking(state.lab.clone(), move |lab| {
        let run = lab.get(id)?;
        let previous = run.previous_id.and_then(|p| lab.get(p).ok());
        Ok::<_, LabError>(svg::chart(&run, previous.as_ref()))
    })
    .await?;
    let mut response = svg.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("image/svg+xml"));
    Ok(response)
}

/// `GET /api/runs/{id}/results.csv`.
pub async fn csv(State(state): State<AppState>, Path(id): Path<u64>) -> Result<Response, ApiError> {
    let text = blocking(state.lab.clone(), move |lab| Ok::<_, LabError>(table::csv(&lab.get(id)?))).await?;
    let mut response = text.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"gpudash-run-{id}.csv\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}

/// `POST /api/lab/devices/{index}/empty_cache`: trims the lab's pool on that GPU.
pub async fn empty_cache(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(index): Path<u32>,
) -> Result<Json<TrimOutcome>, ApiError> {
    let target = format!("GPU {index}");
    caller.require(&state, Role::Operator, Action::EmptyCache, &target)?;
    let result = state.lab.empty_cache(index).await.map_err(ApiError::from);
    match &result {
        Ok(trim) => caller.audit(
            &state,
            Action::EmptyCache,
            &target,
            Outcome::Ok,
            &format!("released {} bytes", trim.released_bytes),
        ),
        Err(e) => caller.audit(&state, Action::EmptyCache, &target, Outcome::Failed, &e.message),
    }
    result.map(Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's words (SQLite's messages, paths) are logged, never sent.
    #[test]
    fn internal_lab_errors_reach_clients_without_their_detail() {
        let error = ApiError::from(LabError::Internal("disk I/O error in /var/lib/gpudash/history.db".into()));
        assert_eq!(error.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(error.message, "internal error; see the server log");
        let refused = ApiError::from(LabError::Refused("GPU 0 is busy".into()));
        assert_eq!((refused.status, refused.message.as_str()), (StatusCode::CONFLICT, "refused: GPU 0 is busy"));
    }
}
