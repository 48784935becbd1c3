//! `GET /api/usage` and `GET /api/usage.csv`: usage sums over a range, grouped by user, GPU or
//! day (see `team::usage`). Anonymous viewers of a server with tokens get every user merged.

use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use shared::usage::{UsageQuery, UsageResponse, UsageRow};

use super::Visibility;
use super::api::visibility;
use super::auth::Caller;
use super::error::{blocking, query_parameters};
use super::{ApiError, AppState};
use store::usage::UsageStoreError;

const PARAMETERS: &str = "from, to, group, utc_offset";

impl From<UsageStoreError> for ApiError {
    fn from(e: UsageStoreError) -> Self {
        ApiError::internal(format!("usage query failed: {e}"))
    }
}

pub async fn usage(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<UsageResponse>, ApiError> {
    let (query, rows) = answer(&state, caller.as_deref(), params).await?;
    Ok(Json(UsageResponse {
        from: query.from,
        to: query.to,
        group: query.group,
        utc_offset: query.utc_offset,
        simulated: state.telemetry.host().simulated,
        persistent: state.usage.persistent(),
        rows,
    }))
}

pub async fn usage_csv(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (query, rows) = answer(&state, caller.as_deref(), params).await?;
    let name = format!("attachment; filename=\"gpudash-usage-{}-{}.csv\"", query.from, query.to);
    let headers = [(header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()), (header::CONTENT_DISPOSITION, name)];
    Ok((headers, team::usage::csv(&rows, query)).into_response())
}

async fn answer(
    state: &AppState,
    caller: Option<&Caller>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<(UsageQuery, Vec<UsageRow>), ApiError> {
    let params = query_parameters(params, PARAMETERS)?;
    let get = |name: &str| params.get(name).map(String::as_str);
    let query = UsageQuery::parse(get("from"), get("to"), get("group"), get("utc_offset"))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let buckets =
        blocking(state.usage.clone(), move |store| store.days(query.from, query.to, query.utc_offset)).await?;
    let hide_users = visibility(state, caller) == Visibility::Redacted;
    Ok((query, team::usage::rows(&buckets, query, hide_users)))
}
