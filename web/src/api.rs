//! JSON endpoints: devices and health.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use shared::activity::{GpuState, gpu_state};
use shared::auth::Role;
use shared::processes::{GpuProcess, UserUsage, redact_all, usage_by_user};
use shared::reservations::{free_unreserved, intruders};
use shared::severity::Condition;
use shared::status::{degraded_reasons, status_of};
use shared::usability::{UnhealthyDevice, unhealthy_devices};
use shared::{Device, DevicesResponse};

use super::Visibility;
use super::auth::Caller;
use super::{ApiError, AppState};
use telemetry::now_ms;

/// What `caller` may see of who runs what (see [`team::auth::Auth::shows_people_to`]);
/// `None` is a request the access layer let through unidentified (an open `/metrics`).
pub fn visibility(state: &AppState, caller: Option<&Caller>) -> Visibility {
    if state.auth.shows_people_to(caller.map(|c| &c.identity)) { Visibility::Full } else { Visibility::Redacted }
}

/// The current processes, redacted unless `visibility` is full.
pub fn processes_for(state: &AppState, visibility: Visibility) -> Vec<GpuProcess> {
    let mut processes = state.telemetry.details().processes;
    if visibility == Visibility::Redacted {
        redact_all(&mut processes);
    }
    processes
}

/// `GET /api/devices`: static facts and the newest reading of every GPU.
pub async fn devices(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Json<DevicesResponse> {
    let telemetry = &state.telemetry;
    let latest = telemetry.latest();
    let details = telemetry.details();
    let processes = processes_for(&state, visibility(&state, caller.as_deref()));
    let devices = telemetry
        .devices()
        .iter()
        .map(|info| Device {
            info: info.clone(),
            latest: latest.iter().find(|s| s.index == info.index).cloned(),
            health: details.health.iter().find(|h| h.index == info.index).cloned(),
            processes: processes.iter().filter(|p| p.device == info.index).cloned().collect(),
        })
        .collect();
    // Where the server keeps its files (in a driver's error) is for admins only.
    let admin = caller.as_deref().map_or_else(
        || state.auth.anonymous().is_some_and(|a| a.role >= Role::Admin),
        |c| c.identity.role >= Role::Admin,
    );
    let host = if admin { telemetry.host().clone() } else { telemetry.host().without_paths() };
    Json(DevicesResponse { host, devices })
}

/// Body of `GET /api/processes`.
#[derive(Serialize)]
pub struct ProcessesResponse {
    pub simulated: bool,
    pub processes: Vec<GpuProcess>,
    /// Per user: GPUs and memory held, biggest first; empty for a viewer who may not see who.
    pub users: Vec<UserUsage>,
    /// GPUs free by `shared::usability::is_free`: healthy, held by no process (visible or, by its
    /// memory and utilization, unseen) and no reservation now.
    pub free_devices: Vec<u32>,
    /// GPUs with a critical fault (lost, a recent hardware XID, an uncorrectable ECC error...),
    /// with it in words: never free, whoever holds them.
    pub unhealthy_devices: Vec<UnhealthyDevice>,
    /// PIDs of processes running on a GPU reserved by someone else now (advisory), ascending.
    pub intruders: Vec<u32>,
    /// Every answering GPU: free, busy, held by processes that are all idle, or in use by someone
    /// no process of which is visible (`in_use_unseen`, with its figures in `reason`).
    pub states: Vec<DeviceState>,
}

/// One GPU's state in `/api/processes`.
#[derive(Serialize)]
pub struct DeviceState {
    pub index: u32,
    pub state: GpuState,
    /// Why a GPU with no visible process is in use: "21.7 GiB used, util 100% with no process visible".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /api/processes`: every GPU process, and who uses what.
pub async fn processes(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Json<ProcessesResponse> {
    let telemetry = &state.telemetry;
    let processes = processes_for(&state, visibility(&state, caller.as_deref()));
    let latest = telemetry.latest();
    let health = telemetry.details().health;
    let latest_of = |index: u32| latest.iter().find(|s| s.index == index);
    let states = telemetry
        .devices()
        .iter()
        .filter_map(|d| {
            let latest = latest_of(d.index);
            let state = gpu_state(d.index, latest, &processes);
            if state == GpuState::Lost {
                return None;
            }
            let reason = (state == GpuState::InUseUnseen).then(|| latest.and_then(shared::in_use::unseen)).flatten();
            Some(DeviceState { index: d.index, state, reason })
        })
        .collect();
    let conditions: Vec<(u32, Condition)> = telemetry
        .devices()
        .iter()
        .map(|d| (d.index, Condition::of(d, latest_of(d.index), health.iter().find(|h| h.index == d.index))))
        .collect();
    let conditions = || conditions.iter().map(|(index, c)| (*index, c));
    let now = now_ms();
    let reserved = state.reservations.active(now);
    let free_devices = free_unreserved(conditions(), &processes, &reserved, now);
    let unhealthy_devices = unhealthy_devices(conditions());
    // Told from the full list: a redacted process has no user to compare with the holder's.
    let full = state.telemetry.details().processes;
    let mut intruders: Vec<u32> = reserved.iter().flat_map(|r| intruders(r, &full, now)).collect();
    intruders.sort_unstable();
    intruders.dedup();
    Json(ProcessesResponse {
        simulated: telemetry.host().simulated,
        users: usage_by_user(&processes),
        processes,
        free_devices,
        unhealthy_devices,
        intruders,
        states,
    })
}

#[derive(Serialize)]
struct Health {
    /// "ok", "degraded" (see `reasons`) or "stalled".
    status: &'static str,
    /// Why the status is not "ok", one sentence each (no file paths: `/healthz` is public).
    reasons: Vec<String>,
    simulated: bool,
    devices: usize,
    last_sample_age_ms: Option<u64>,
}

/// `GET /healthz`: 200 while samples keep coming ("ok", or "degraded" with the reasons when no
/// driver was found or a GPU is lost: the server itself is alive), 503 when the sampler stalled.
pub async fn healthz(State(state): State<AppState>) -> Response {
    let telemetry = &state.telemetry;
    let age = telemetry.last_tick().1.map(|t| now_ms().saturating_sub(t));
    // Three missed periods, and never less than five seconds, before calling it stalled.
    let stale_after = (3 * telemetry.host().interval_ms).max(5_000);
    let healthy = age.is_some_and(|age| age <= stale_after);
    let mut reasons = degraded_reasons(telemetry.host(), &telemetry.latest(), &telemetry.details().workload_problems);
    if !healthy {
        reasons.insert(0, format!("no sample for over {} ms", stale_after));
    }
    let body = Health {
        status: if healthy { status_of(&reasons).as_str() } else { "stalled" },
        reasons,
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
        "no endpoint '{}'; the API has /api/devices, /api/processes, /api/history, /api/history/all, /metrics, /healthz and /ws",
        uri.path()
    ))
}
