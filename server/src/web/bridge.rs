//! The PyTorch bridge's HTTP side: reports in, attached processes out, and
//! the remote empty_cache button.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use shared::auth::Role;
use shared::bridge::{AttachedProcess, Report, ReportAnswer};

use super::auth::Caller;
use super::{ApiError, AppState};
use crate::audit::Outcome;
use crate::bridge::BridgeError;
use crate::telemetry::now_ms;

impl From<BridgeError> for ApiError {
    fn from(e: BridgeError) -> Self {
        let status = match e {
            BridgeError::Invalid(_) => StatusCode::BAD_REQUEST,
            BridgeError::NoProcess(_) => StatusCode::NOT_FOUND,
            BridgeError::NotAllowed(_) | BridgeError::Stale(_) => StatusCode::CONFLICT,
        };
        ApiError { status, message: e.to_string() }
    }
}

/// `POST /api/bridge/report`: one report from `gpudash.attach()`; answers with pending commands.
/// Reporting changes what the team sees, so it takes the operator role when tokens are configured.
pub async fn report(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Json<ReportAnswer>, ApiError> {
    caller
        .identity
        .require(Role::Operator, "reporting a PyTorch process")
        .map_err(|message| ApiError { status: StatusCode::FORBIDDEN, message })?;
    let report: Report = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("invalid report ({e}); see the bridge section of the README for the format"))
    })?;
    Ok(Json(state.bridge.report(report, now_ms())?))
}

/// `GET /api/bridge`: attached processes, allocated vs reserved vs NVML, spans.
pub async fn list(State(state): State<AppState>) -> Json<Vec<AttachedProcess>> {
    let details = state.telemetry.details();
    Json(state.bridge.list(state.telemetry.devices(), &details.processes, now_ms()))
}

/// `POST /api/bridge/{id}/empty_cache`: asks the process to call `torch.cuda.empty_cache()`.
pub async fn empty_cache(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Response, ApiError> {
    let target = format!("PyTorch process {id}");
    caller.require(&state, Role::Operator, "emptying a process's cache", &target)?;
    match state.bridge.request_empty_cache(id, now_ms()) {
        Ok(pending) => {
            caller.audit(&state, "bridge.empty_cache", &target, Outcome::Ok, "requested");
            Ok((StatusCode::ACCEPTED, Json(pending)).into_response())
        }
        Err(e) => {
            caller.audit(&state, "bridge.empty_cache", &target, Outcome::Failed, &e.to_string());
            Err(e.into())
        }
    }
}
