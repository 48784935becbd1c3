//! JSON endpoints: devices and health.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use shared::{Device, DevicesResponse};

use super::{ApiError, AppState};
use crate::telemetry::now_ms;

/// `GET /api/devices`: static facts and the newest reading of every GPU.
pub async fn devices(State(state): State<AppState>) -> Json<DevicesResponse> {
    let telemetry = &state.telemetry;
    let latest = telemetry.latest();
    let devices = telemetry
        .devices()
        .iter()
        .map(|info| Device { info: info.clone(), latest: latest.iter().find(|s| s.index == info.index).cloned() })
        .collect();
    Json(DevicesResponse { host: telemetry.host().clone(), devices })
}

#[derive(Serialize)]
struct Health {
    status: &'static str,
    simulated: bool,
    devices: usize,
    last_sample_age_ms: Option<u64>,
}

/// `GET /healthz`: 200 while samples keep coming, 503 when the sampler stalled.
pub async fn healthz(State(state): State<AppState>) -> Response {
    let telemetry = &state.telemetry;
    let age = telemetry.last_tick().1.map(|t| now_ms().saturating_sub(t));
    // Three missed periods, and never less than five seconds, before calling it stalled.
    let stale_after = (3 * telemetry.host().interval_ms).max(5_000);
    let healthy = age.is_some_and(|age| age <= stale_after);
    let body = Health {
        status: if healthy { "ok" } else { "stalled" },
        simulated: telemetry.host().simulated,
        devices: telemetry.devices().len(),
        last_sample_age_ms: age,
    };
    let status = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}

/// Any other `/api/...` path.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint '{}'; the API has /api/devices, /api/history, /healthz and /ws",
        uri.path()
    ))
}
