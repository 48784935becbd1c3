//! `GET /api/history`: a device's metric over a time range, downsampled; and
//! `GET /api/history/all`: every metric of every GPU over one range, in one answer.

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use shared::history::{HistoryAllResponse, HistoryLine, HistoryRange, HistoryResponse, Metric, Resolution};

use super::error::blocking;
use super::{ApiError, AppState};
use store::{HistoryQuery, QueryError, Store};
use telemetry::now_ms;

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
    let store = history_store(&state)?;
    let answer = blocking(store, {
        let query = query.clone();
        move |store| store.history(&query, now_ms())
    })
    .await?;
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
    let params = Params::new(params, PARAMETERS)?;
    let devices = state.telemetry.devices();
    let device =
        params.number("device")?.ok_or_else(|| ApiError::bad_request("'device' is required, e.g. device=0"))?;
    if !devices.iter().any(|d| u64::from(d.index) == device) {
        return Err(ApiError::not_found(format!(
            "no GPU with index {device}; this server has {}",
            if devices.is_empty() { "none".to_owned() } else { format!("indexes 0 to {}", devices.len() - 1) }
        )));
    }
    let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
    let metric = match params.0.get("metric") {
        Some(name) => Metric::from_name(name).ok_or_else(|| {
            ApiError::bad_request(format!("unknown metric '{name}'; the metrics are {}", names.join(", ")))
        })?,
        None => return Err(ApiError::bad_request(format!("'metric' is required, one of {}", names.join(", ")))),
    };
    let (from, to) = params.span(now)?;
    let points = params.points()?;
    let query = HistoryQuery { device: u32::try_from(device).unwrap_or(u32::MAX), metric, from, to, points };
    query.validate().map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(query)
}

/// A history request's query string, once its names are known to be ones it may use.
struct Params<'a>(&'a HashMap<String, String>);

impl<'a> Params<'a> {
    /// `params`, or a 400 naming the first parameter not in `allowed` ("a, b, c").
    fn new(params: &'a HashMap<String, String>, allowed: &str) -> Result<Self, ApiError> {
        super::error::known_names(params, allowed)?;
        Ok(Self(params))
    }

    /// The whole number `name`, if given.
    fn number(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.0
            .get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "'{name}' must be a whole number ≥ 0 (ms since epoch for times), not '{v}'"
                    ))
                })
            })
            .transpose()
    }

    /// `(from, to)`: `to` defaults to `now`; `from` to an hour before `to`, or `range` before it
    /// where the request may name a range. Whether the span makes sense is `HistoryQuery::validate`'s.
    fn span(&self, now: u64) -> Result<(u64, u64), ApiError> {
        let keys = || HistoryRange::ALL.map(HistoryRange::key).join(", ");
        let range = self
            .0
            .get("range")
            .map(|key| {
                HistoryRange::from_key(key)
                    .ok_or_else(|| ApiError::bad_request(format!("unknown range '{key}'; the ranges are {}", keys())))
            })
            .transpose()?;
        if range.is_some() && self.0.contains_key("from") {
            return Err(ApiError::bad_request("give 'range' or 'from', not both"));
        }
        let to = self.number("to")?.unwrap_or(now);
        let from = match range {
            Some(range) => to.saturating_sub(range.millis()),
            None => self.number("from")?.unwrap_or(to.saturating_sub(DEFAULT_RANGE_MS)),
        };
        Ok((from, to))
    }

    /// `points`, or the default.
    fn points(&self) -> Result<u32, ApiError> {
        Ok(self.number("points")?.map_or(DEFAULT_POINTS, |p| u32::try_from(p).unwrap_or(u32::MAX)))
    }
}

const ALL_PARAMETERS: &str = "range, from, to, points";
/// Most buckets per line of `/api/history/all`: 9 metrics × 8 GPUs × 2000 is already
/// 144,000 points in one answer.
const MAX_ALL_POINTS: u32 = 2000;

/// `GET /api/history/all?range=1h&points=800` (or `from`/`to` instead of `range`).
pub async fn history_all(
    State(state): State<AppState>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<HistoryAllResponse>, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))?;
    let (from, to, points) = parse_all(&params, now_ms())?;
    let store = history_store(&state)?;
    let devices: Vec<u32> = state.telemetry.devices().iter().map(|d| d.index).collect();
    let lines = blocking(store, move |store| store.history_all(&devices, (from, to, points), now_ms())).await?;
    let bucket_ms = store::bucket_width(from, to, points);
    let minutes = lines.iter().any(|(_, _, a)| a.resolution == Resolution::Minute);
    Ok(Json(HistoryAllResponse {
        from,
        to,
        bucket_ms,
        resolution: if minutes { Resolution::Minute } else { Resolution::Raw },
        simulated: state.telemetry.host().simulated,
        lines: lines.into_iter().map(|(device, metric, a)| HistoryLine { device, metric, points: a.points }).collect(),
    }))
}

/// `(from, to, points)` of an `/api/history/all` query, or what is wrong with it.
fn parse_all(params: &HashMap<String, String>, now: u64) -> Result<(u64, u64, u32), ApiError> {
    let params = Params::new(params, ALL_PARAMETERS)?;
    let (from, to) = params.span(now)?;
    let points = params.points()?;
    if !(1..=MAX_ALL_POINTS).contains(&points) {
        return Err(ApiError::bad_request(format!(
            "'points' must be from 1 to {MAX_ALL_POINTS} (per GPU and metric), not {points}"
        )));
    }
    let query = HistoryQuery { device: 0, metric: Metric::GpuUtil, from, to, points };
    query.validate().map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((from, to, points))
}

/// The history database, or a 503 that says history is off.
fn history_store(state: &AppState) -> Result<Store, ApiError> {
    state.store.clone().ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "history is off on this server (started with --no-history)".to_owned(),
    })
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Invalid(message) => ApiError::bad_request(message),
            QueryError::Sqlite(e) => ApiError::internal(format!("history query failed: {e}")),
        }
    }
}
