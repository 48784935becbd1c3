//! `GET /api/fleet`: every GPU host the configured Prometheus scrapes (docs/FLEET.md).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use shared::fleet::{FleetFilter, FleetListing, FleetResponse};
use shared::fleet_owners::{DEFAULT_RANGE_S, FleetOwners, FleetOwnersQuery, parse_range};

use super::Visibility;
use super::api::visibility;
use super::auth::Caller;
use super::{ApiError, AppState};

/// 503 without `--fleet-prometheus`; otherwise 200, with `error` set when Prometheus
/// cannot answer (the page shows it; the local dashboard is unaffected).
pub async fn fleet(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    filter: Result<Query<FleetFilter>, QueryRejection>,
    listing: Result<Query<FleetListing>, QueryRejection>,
) -> Result<Json<FleetResponse>, ApiError> {
    let bad = |e: QueryRejection| {
        ApiError::bad_request(format!(
            "bad query string: {e}; use host, model, user (substrings), free=true and gpus=all or gpus=none"
        ))
    };
    let Query(filter) = filter.map_err(bad)?;
    let Query(listing) = listing.map_err(bad)?;
    let hide_people = visibility(&state, caller.as_deref()) == Visibility::Redacted;
    if hide_people && filter.user.is_some() {
        return Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "filtering the fleet by user needs a signed-in viewer: log in on the page, or send \
                      Authorization: Bearer <token>"
                .to_owned(),
        });
    }
    let fleet = configured(&state)?;
    let snapshot = fleet.snapshot().await;
    let mut answer = team::fleet::filtered(&snapshot, &filter, listing);
    // The GPUs it lists get the figures the refresh leaves out (none for hosts only).
    fleet.with_gauges(&mut answer).await;
    if hide_people {
        answer.hide_people();
    }
    Ok(Json(answer))
}

/// The fleet, or 503 without `--fleet-prometheus`.
fn configured(state: &AppState) -> Result<&team::fleet::Fleet, ApiError> {
    state.fleet.as_deref().ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "the fleet view is off on this server: start gpudash with --fleet-prometheus \
                  http://PROMETHEUS:9090 (see docs/FLEET.md)"
            .to_owned(),
    })
}

/// The longest `instance` label this endpoint takes (a host name is at most 253 bytes, plus a port).
const MAX_INSTANCE: usize = 300;

/// `GET /api/fleet/host/{instance}`: one host's GPUs with every figure (the page loads them when
/// the host is opened). 400 for an instance that cannot be a target's, 404 when Prometheus knows
/// no such target in the window; the same access as `/api/fleet`.
pub async fn host(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    instance: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Json<FleetResponse>, ApiError> {
    let Path(instance) = instance.map_err(|e| ApiError::bad_request(format!("bad host: {e}")))?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._:[]%".contains(c);
    if instance.is_empty() || instance.len() > MAX_INSTANCE || !instance.chars().all(allowed) {
        return Err(ApiError::bad_request(format!(
            "'{}' is not a scrape target's instance; use Prometheus's instance label, host:port \
             (letters, digits, '-', '.', '_', ':', '[', ']'; at most {MAX_INSTANCE} characters), \
             as /api/fleet lists it",
            shared::text::shown(&instance.chars().take(80).collect::<String>())
        )));
    }
    let fleet = configured(&state)?;
    let Some(mut answer) = fleet.host(&instance).await else {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "Prometheus knows no target '{instance}' in the last {} s; /api/fleet lists the hosts it knows",
                fleet.config().window.as_secs()
            ),
        });
    };
    if visibility(&state, caller.as_deref()) == Visibility::Redacted {
        answer.hide_people();
    }
    Ok(Json(answer))
}

/// `GET /api/fleet/owners?range=30d`: free GPUs now, idle holders and usage per owner over the
/// range, across every host (`team::fleet::owners`). 400 for a range that is not one, 503
/// without `--fleet-prometheus`; names hidden as on `/api/fleet`.
pub async fn owners(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    query: Result<Query<FleetOwnersQuery>, QueryRejection>,
) -> Result<Json<FleetOwners>, ApiError> {
    let Query(query) = query.map_err(|e| {
        ApiError::bad_request(format!("bad query string: {e}; use range=DURATION, e.g. range=24h or range=30d"))
    })?;
    let range_s = match query.range.as_deref() {
        None => DEFAULT_RANGE_S,
        Some(range) => parse_range(range).map_err(|e| ApiError::bad_request(e.to_string()))?,
    };
    let fleet = configured(&state)?;
    let mut answer = fleet.owners(range_s).await;
    if visibility(&state, caller.as_deref()) == Visibility::Redacted {
        answer.hide_people();
    }
    Ok(Json(answer))
}
