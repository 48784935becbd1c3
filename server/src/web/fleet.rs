//! `GET /api/fleet`: every GPU host the configured Prometheus scrapes (docs/FLEET.md).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use shared::fleet::{FleetFilter, FleetResponse};

use super::api::visibility;
use super::auth::Caller;
use super::{ApiError, AppState};
use crate::telemetry::Visibility;

/// 503 without `--fleet-prometheus`; otherwise 200, with `error` set when Prometheus
/// cannot answer (the page shows it; the local dashboard is unaffected).
pub async fn fleet(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    filter: Result<Query<FleetFilter>, QueryRejection>,
) -> Result<Json<FleetResponse>, ApiError> {
    let Query(filter) = filter.map_err(|e| {
        ApiError::bad_request(format!("bad query string: {e}; use host, model, user (substrings) and free=true"))
    })?;
    let hide_people = visibility(&state, caller.as_deref()) == Visibility::Redacted;
    if hide_people && filter.user.is_some() {
        return Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "filtering the fleet by user needs a signed-in viewer: log in on the page, or send \
                      Authorization: Bearer <token>"
                .to_owned(),
        });
    }
    let Some(fleet) = &state.fleet else {
        return Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the fleet view is off on this server: start gpudash with --fleet-prometheus \
                      http://PROMETHEUS:9090 (see docs/FLEET.md)"
                .to_owned(),
        });
    };
    let snapshot = fleet.snapshot().await;
    let mut fleet = crate::fleet::filtered(&snapshot, &filter);
    if hide_people {
        fleet.hide_people();
    }
    Ok(Json(fleet))
}
