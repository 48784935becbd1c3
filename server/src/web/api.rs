//! JSON endpoints: devices and health.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use shared::processes::{GpuProcess, UserUsage, usage_by_user};
use shared::{Device, DevicesResponse};

use super::{ApiError, AppState};
use crate::telemetry::now_ms;

/// `GET /api/devices`: static facts and the newest reading of every GPU.
pub async fn devices(State(state): State<AppState>) -> Json<DevicesResponse> {
    let telemetry = &state.telemetry;
    let latest = telemetry.latest();
    let details = telemetry.details();
    let devices = telemetry
        .devices()
        .iter()
        .map(|info| Device {
            info: info.clone(),
            latest: latest.iter().find(|s| s.index == info.index).cloned(),
            health: details.health.iter().find(|h| h.index == info.index).cloned(),
            processes: details.processes.iter().filter(|p| p.device == info.index).cloned().collect(),
        })
        .collect();
    Json(DevicesResponse { host: telemetry.host().clone(), devices })
}

/// Body of `GET /api/processes`.
#[derive(Serialize)]
pub struct ProcessesResponse {
    pub simulated: bool,
    pub processes: Vec<GpuProcess>,
    /// Per user: GPUs and memory held, biggest first.
    pub users: Vec<UserUsage>,
    /// GPUs no process holds, by index.
    pub free_devices: Vec<u32>,
}

/// `GET /api/processes`: every GPU process, and who uses what.
pub async fn processes(State(state): State<AppState>) -> Json<ProcessesResponse> {
    let telemetry = &state.telemetry;
    let processes = telemetry.details().processes;
    let lost: Vec<u32> = telemetry.latest().iter().filter(|s| s.lost.is_some()).map(|s| s.index).collect();
    let free_devices = telemetry
        .devices()
        .iter()
        .map(|d| d.index)
        .filter(|i| !lost.contains(i) && !processes.iter().any(|p| p.device == *i))
        .collect();
    Json(ProcessesResponse {
        simulated: telemetry.host().simulated,
        users: usage_by_user(&processes),
        processes,
        free_devices,
    })
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
        "no endpoint '{}'; the API has /api/devices, /api/processes, /api/history, /metrics, /healthz and /ws",
        uri.path()
    ))
}
