//! `GET /api/fleet`: every GPU host the configured Prometheus scrapes (docs/FLEET.md).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use shared::fleet::{FleetFilter, FleetResponse};

use super::{ApiError, AppState};

/// 503 without `--fleet-prometheus`; otherwise 200, with `error` set when Prometheus
/// cannot answer (the page shows it; the local dashboard is unaffected).
pub async fn fleet(
    State(state): State<AppState>,
    filter: Result<Query<FleetFilter>, QueryRejection>,
) -> Result<Json<FleetResponse>, ApiError> {
    let Query(filter) = filter.map_err(|e| {
        ApiError::bad_request(format!("bad query string: {e}; use host, model, user (substrings) and free=true"))
    })?;
    let Some(fleet) = &state.fleet else {
        return Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the fleet view is off on this server: start gpudash with --fleet-prometheus \
                      http://PROMETHEUS:9090 (see docs/FLEET.md)"
                .to_owned(),
        });
    };
    let snapshot = fleet.snapshot().await;
    Ok(Json(crate::fleet::filtered(&snapshot, &filter)))
}
