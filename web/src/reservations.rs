//! The reservations API: `GET /api/reservations` (anyone who may view), `POST` (operators;
//! audited), `DELETE /api/reservations/{id}` (the holder or an admin; audited). Advisory only.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use shared::auth::Role;
use shared::reservations::{Reservation, ReservationRequest, ReservationsResponse};

use super::Visibility;
use super::api::visibility;
use super::auth::Caller;
use super::error::blocking;
use super::{ApiError, AppState};
use team::audit::{Action, Outcome};
use team::reservations::{ReservationError, Reservations};
use telemetry::now_ms;

impl From<ReservationError> for ApiError {
    fn from(e: ReservationError) -> Self {
        let status = match &e {
            ReservationError::Invalid(_) => StatusCode::BAD_REQUEST,
            ReservationError::Conflict(_) | ReservationError::Over(_) | ReservationError::TooMany { .. } => {
                StatusCode::CONFLICT
            }
            ReservationError::NotFound(_) => StatusCode::NOT_FOUND,
            ReservationError::NotYours { .. } => StatusCode::FORBIDDEN,
            ReservationError::Store(_) => return ApiError::internal(format!("reservations: {e}")),
        };
        ApiError { status, message: e.to_string() }
    }
}

/// Who books: the caller's name. With no tokens (a workstation) that is the OS user gpudash runs as
/// (`auth::local_user_name`), so the holder's own processes are told apart from intruders.
pub fn holder_name(caller: &Caller) -> String {
    caller.identity.user.clone()
}

/// Query of `GET /api/reservations`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    all: Option<String>,
}

/// `GET /api/reservations[?all=1]`: those to come and in force (with `all`, past and released
/// ones too), each with the intruders on its GPUs now.
pub async fn list(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ReservationsResponse>, ApiError> {
    let Query(q) = query
        .map_err(|e| ApiError::bad_request(format!("{}; accepted: all=1 (past and released too)", e.body_text())))?;
    let all = match q.all.as_deref().map(str::trim) {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => return Err(ApiError::bad_request(format!("'all' = '{other}' must be 1 or 0"))),
    };
    let now = now_ms();
    let list = if all {
        blocking(state.reservations.clone(), |r| Ok::<_, ReservationError>(r.all()?)).await?
    } else {
        state.reservations.current(now)
    };
    let processes = state.telemetry.details().processes;
    let mut reservations = Reservations::with_intruders(list, &processes, now);
    if visibility(&state, caller.as_deref()) == Visibility::Redacted {
        reservations.iter_mut().for_each(Reservation::redact);
    }
    Ok(Json(ReservationsResponse { reservations, now_ms: now }))
}

/// `POST /api/reservations` `{"devices":[1],"start_ms":…,"end_ms":…,"note":"…"}` → 201 with the reservation.
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(&state, Role::Operator, Action::ReservationCreate, "reservations")?;
    let request: ReservationRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid reservation ({e}); send {{\"devices\":[1],\"start_ms\":1767225600000,\"end_ms\":1767240000000,\"note\":\"fine-tuning\"}}"
        ))
    })?;
    let user = holder_name(&caller);
    let devices = state.telemetry.devices().len();
    let target = format!("GPUs {:?}", request.devices);
    let who = user.clone();
    let now = now_ms();
    match blocking(state.reservations.clone(), move |r| r.create(request, &who, devices, now)).await {
        Ok(reservation) => {
            let target = format!("reservation {}", reservation.id);
            let detail = format!(
                "GPUs {:?} for {user} from {} to {}: {}",
                reservation.devices,
                shared::reservations::utc_minute(reservation.start_ms),
                shared::reservations::utc_minute(reservation.end_ms),
                reservation.note
            );
            caller.audit(&state, Action::ReservationCreate, &target, Outcome::Ok, &detail);
            Ok((StatusCode::CREATED, Json(reservation)).into_response())
        }
        Err(e) => {
            if e.status == StatusCode::CONFLICT {
                caller.audit(&state, Action::ReservationCreate, &target, Outcome::Failed, &e.message);
            }
            Err(e)
        }
    }
}

/// `DELETE /api/reservations/{id}` → 200 with the released reservation.
pub async fn release(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(text): Path<String>,
) -> Result<Json<Reservation>, ApiError> {
    let target = format!("reservation {text}");
    caller.require(&state, Role::Operator, Action::ReservationRelease, &target)?;
    let id: u64 = text
        .parse()
        .map_err(|_| ApiError::bad_request(format!("'{text}' is not a reservation id; use a whole number")))?;
    let by = holder_name(&caller);
    let admin = caller.identity.role >= Role::Admin;
    let now = now_ms();
    match blocking(state.reservations.clone(), move |r| r.release(id, &by, admin, now)).await {
        Ok(released) => {
            let detail = format!("GPUs {:?} held by {}", released.devices, released.user);
            caller.audit(&state, Action::ReservationRelease, &target, Outcome::Ok, &detail);
            Ok(Json(released))
        }
        Err(e) => {
            if e.status == StatusCode::FORBIDDEN {
                caller.audit(&state, Action::ReservationRelease, &target, Outcome::Denied, &e.message);
            }
            Err(e)
        }
    }
}
