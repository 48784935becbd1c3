//! `GET /api/history`: a device's metric over a time range, downsampled.

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use shared::history::{HistoryResponse, Metric};

use super::{ApiError, AppState};
use crate::store::{HistoryQuery, QueryError};
use crate::telemetry::now_ms;

const PARAMETERS: &str = "device, metric, from, to, points";
const DEFAULT_RANGE_MS: u64 = 3_600_000;
const DEFAULT_POINTS: u32 = 1000;

pub async fn history(
    State(state): State<AppState>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))?;
    // Bad input is bad input whether or not history is on: validate first.
    let query = parse(&params, &state, now_ms())?;
    let Some(store) = state.store.clone() else {
        return Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "history is off on this server (started with --no-history)".to_owned(),
        });
    };
    let answer = tokio::task::spawn_blocking({
        let query = query.clone();
        move || store.history(&query, now_ms())
    })
    .await
    .map_err(|e| ApiError::internal(format!("history query task failed: {e}")))?
    .map_err(|e| match e {
        QueryError::Invalid(message) => ApiError::bad_request(message),
        QueryError::Sqlite(e) => ApiError::internal(format!("history query failed: {e}")),
    })?;
    Ok(Json(HistoryResponse {
        device: query.device,
        metric: query.metric,
        unit: query.metric.unit().to_owned(),
        from: query.from,
        to: query.to,
        bucket_ms: answer.bucket_ms,
        resolution: answer.resolution,
        simulated: state.telemetry.host().simulated,
        points: answer.points,
    }))
}

fn parse(params: &HashMap<String, String>, state: &AppState, now: u64) -> Result<HistoryQuery, ApiError> {
    if let Some(unknown) = params.keys().find(|k| !PARAMETERS.split(", ").any(|p| p == k.as_str())) {
        return Err(ApiError::bad_request(format!("unknown parameter '{unknown}'; the parameters are {PARAMETERS}")));
    }
    let number = |name: &str| -> Result<Option<u64>, ApiError> {
        params
            .get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "'{name}' must be a whole number ≥ 0 (ms since epoch for times), not '{v}'"
                    ))
                })
            })
            .transpose()
    };
    let devices = state.telemetry.devices();
    let device = number("device")?.ok_or_else(|| ApiError::bad_request("'device' is required, e.g. device=0"))?;
    if !devices.iter().any(|d| u64::from(d.index) == device) {
        return Err(ApiError::not_found(format!(
            "no GPU with index {device}; this server has {}",
            if devices.is_empty() { "none".to_owned() } else { format!("indexes 0 to {}", devices.len() - 1) }
        )));
    }
    let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
    let metric = match params.get("metric") {
        Some(name) => Metric::from_name(name).ok_or_else(|| {
            ApiError::bad_request(format!("unknown metric '{name}'; the metrics are {}", names.join(", ")))
        })?,
        None => return Err(ApiError::bad_request(format!("'metric' is required, one of {}", names.join(", ")))),
    };
    let to = number("to")?.unwrap_or(now);
    let from = number("from")?.unwrap_or(to.saturating_sub(DEFAULT_RANGE_MS));
    let points = match number("points")? {
        None => DEFAULT_POINTS,
        Some(p) => u32::try_from(p).unwrap_or(u32::MAX),
    };
    let query = HistoryQuery { device: u32::try_from(device).unwrap_or(u32::MAX), metric, from, to, points };
    query.validate().map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(query)
}
