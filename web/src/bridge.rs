//! The PyTorch bridge's HTTP side: reports in, attached processes out, and
//! the remote empty_cache button.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use shared::allocator::AllocatorReport;
use shared::auth::Role;
use shared::bridge::{AttachedProcess, Report, ReportAnswer};

use super::auth::Caller;
use super::error::blocking;
use super::{ApiError, AppState};
use team::audit::{Action, Outcome};
use team::bridge::{Accepted, BridgeError, Notice, Reporter};
use telemetry::now_ms;

impl From<BridgeError> for ApiError {
    fn from(e: BridgeError) -> Self {
        let status = match e {
            BridgeError::Invalid(_) => StatusCode::BAD_REQUEST,
            BridgeError::NoProcess(_) => StatusCode::NOT_FOUND,
            BridgeError::NotAllowed(_)
            | BridgeError::Stale(_)
            | BridgeError::MapNotShared(_)
            | BridgeError::NotAttached { .. } => StatusCode::CONFLICT,
            BridgeError::NotOwner { .. } | BridgeError::NotPidOwner { .. } => StatusCode::FORBIDDEN,
            BridgeError::TooManyForUser { .. } | BridgeError::TooMany | BridgeError::TooFast(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
        };
        ApiError { status, message: e.to_string() }
    }
}

/// Who reports, and whom the reported PID belongs to on this host (looked up off the runtime: NSS may be LDAP).
async fn reporter_and_owner(caller: &Caller, pid: u32) -> Result<(Reporter, Option<String>), ApiError> {
    let by = Reporter { user: caller.identity.user.clone(), admin: caller.identity.role >= Role::Admin };
    let owner = blocking(pid, |&pid| Ok::<_, ApiError>(team::bridge::pid_owner(pid))).await?;
    Ok((by, owner))
}

/// Audits a refused report for someone else's process (the audit log aggregates a flood of them).
fn audit_refusal(state: &AppState, caller: &Caller, action: Action, e: &BridgeError, pid: u32, host: &str) {
    if matches!(e, BridgeError::NotOwner { audit: true, .. } | BridgeError::NotPidOwner { .. }) {
        let target = format!("PyTorch process {pid} on {host}");
        caller.audit(state, action, &target, Outcome::Denied, &e.to_string());
    }
}

/// `POST /api/bridge/report`: one report from `gpudash.attach()`; answers with pending commands.
/// Reporting changes what the team sees, so it takes the operator role when tokens are configured;
/// a process belongs to the Unix user it runs as (or, when this host does not show its PID, to the
/// user whose report attached it): anyone else but an admin is refused.
pub async fn report(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Json<ReportAnswer>, ApiError> {
    caller
        .identity
        .require(Role::Operator, Action::BridgeReport.doing())
        .map_err(|refused| ApiError { status: StatusCode::FORBIDDEN, message: refused.to_string() })?;
    let report: Report = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid report ({e}); see POST /api/bridge/report in docs/API.md for the format"
        ))
    })?;
    let (pid, host) = (report.pid, report.host.clone());
    let (by, owner) = reporter_and_owner(&caller, pid).await?;
    match state.bridge.report(&by, owner.as_deref(), report, now_ms()) {
        Ok(accepted) => {
            audit_notices(&state, &caller, &accepted, pid, &host);
            Ok(Json(accepted.answer))
        }
        Err(e) => {
            audit_refusal(&state, &caller, Action::BridgeReport, &e, pid, &host);
            Err(e.into())
        }
    }
}

/// Audits what a report changed: an attach, a consent change, a command handed over or done.
fn audit_notices(state: &AppState, caller: &Caller, accepted: &Accepted, pid: u32, host: &str) {
    let target = format!("PyTorch process {} (pid {pid} on {host})", accepted.id);
    for notice in &accepted.notices {
        let (action, outcome, detail) = match notice {
            Notice::Attached { process_name, allow_remote_empty_cache } => (
                Action::BridgeAttach,
                Outcome::Ok,
                format!("{process_name} (allow_remote_empty_cache: {allow_remote_empty_cache})"),
            ),
            Notice::ConsentChanged { allow } => {
                (Action::BridgeConsent, Outcome::Ok, format!("allow_remote_empty_cache: {allow}"))
            }
            Notice::Delivered { command } => {
                (Action::BridgeEmptyCache, Outcome::Ok, format!("command {command} delivered"))
            }
            Notice::Withheld { command } => (
                Action::BridgeEmptyCache,
                Outcome::Denied,
                format!("command {command} not delivered: the process withdrew its consent"),
            ),
            Notice::Done { command, ok, released_bytes } => (
                Action::BridgeEmptyCache,
                if *ok { Outcome::Ok } else { Outcome::Failed },
                format!("command {command} done: released {released_bytes} bytes"),
            ),
        };
        caller.audit(state, action, &target, outcome, &detail);
    }
}

/// Command lines, user names and spans are not for anonymous visitors once tokens exist
/// (`viewers = "open"` shows them the GPU figures only).
fn require_signed_in(state: &AppState, caller: &Caller) -> Result<(), ApiError> {
    if state.auth.enabled() && caller.identity.anonymous {
        return Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "PyTorch processes (command lines, users, spans) need a signed-in viewer: log in with a token; \
                      anonymous visitors see GPU figures only"
                .to_owned(),
        });
    }
    Ok(())
}

/// `GET /api/bridge`: attached processes, allocated vs reserved vs NVML, span summaries, a few recent spans,
/// each allocator map's totals (the page reloads it every 2 s: segments come per process, from the detail).
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<AttachedProcess>>, ApiError> {
    require_signed_in(&state, &caller)?;
    let details = state.telemetry.details();
    Ok(Json(state.bridge.list(state.telemetry.devices(), &details.processes, now_ms())))
}

/// `GET /api/bridge/{id}`: one attached process with more of its recent spans and its whole allocator map.
pub async fn detail(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Json<AttachedProcess>, ApiError> {
    require_signed_in(&state, &caller)?;
    let details = state.telemetry.details();
    Ok(Json(state.bridge.detail(id, state.telemetry.devices(), &details.processes, now_ms())?))
}

/// `POST /api/bridge/{id}/empty_cache`: asks the process to call `torch.cuda.empty_cache()`.
pub async fn empty_cache(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Response, ApiError> {
    let target = format!("PyTorch process {id}");
    caller.require(&state, Role::Operator, Action::BridgeEmptyCache, &target)?;
    match state.bridge.request_empty_cache(id, now_ms()) {
        Ok(pending) => {
            caller.audit(&state, Action::BridgeEmptyCache, &target, Outcome::Ok, "requested");
            Ok((StatusCode::ACCEPTED, Json(pending)).into_response())
        }
        Err(e) => {
            caller.audit(&state, Action::BridgeEmptyCache, &target, Outcome::Failed, &e.to_string());
            Err(e.into())
        }
    }
}

/// Largest allocator report: 512 segments of one device take about 90 KiB of JSON.
pub const MAX_MAP_BODY: usize = 256 * 1024;

/// `POST /api/bridge/allocator`: an allocator map from `attach(..., share_allocator_map=True)`, periodic,
/// asked for, or taken at an out-of-memory error. The process must have reported first; the same owner rule holds.
pub async fn allocator(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: axum::body::Body,
) -> Result<StatusCode, ApiError> {
    caller
        .identity
        .require(Role::Operator, Action::BridgeReport.doing())
        .map_err(|refused| ApiError { status: StatusCode::FORBIDDEN, message: refused.to_string() })?;
    // Read here, not by the router's 64 KiB limit: a map may be larger than a report.
    let body = axum::body::to_bytes(body, MAX_MAP_BODY).await.map_err(|_| ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!(
            "the allocator report is over the limit of {} KiB; the client lists at most {} segments and folds the rest",
            MAX_MAP_BODY / 1024,
            shared::allocator::MAX_SEGMENTS
        ),
    })?;
    let report: AllocatorReport = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid allocator report ({e}); see POST /api/bridge/allocator in docs/API.md for the format"
        ))
    })?;
    let (pid, host) = (report.pid, report.host.clone());
    let (by, owner) = reporter_and_owner(&caller, pid).await?;
    let accepted = state.bridge.allocator_report(&by, owner.as_deref(), report, now_ms()).map_err(|e| {
        audit_refusal(&state, &caller, Action::BridgeAllocatorMap, &e, pid, &host);
        ApiError::from(e)
    })?;
    if let Some(oom) = accepted.oom {
        let target = format!("PyTorch process {} (pid {pid} on {host})", accepted.id);
        let detail = format!("out-of-memory error on device {}: {}", oom.device, oom.figures());
        caller.audit(&state, Action::BridgeAllocatorMap, &target, Outcome::Failed, &detail);
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/bridge/{id}/allocator_map`: asks the process for an allocator map now ("Refresh map").
pub async fn request_map(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Response, ApiError> {
    let target = format!("PyTorch process {id}");
    caller.require(&state, Role::Operator, Action::BridgeAllocatorMap, &target)?;
    match state.bridge.request_map(id, now_ms()) {
        Ok(pending) => {
            caller.audit(&state, Action::BridgeAllocatorMap, &target, Outcome::Ok, "map requested");
            Ok((StatusCode::ACCEPTED, Json(pending)).into_response())
        }
        Err(e) => {
            caller.audit(&state, Action::BridgeAllocatorMap, &target, Outcome::Failed, &e.to_string());
            Err(e.into())
        }
    }
}
