//! `GET /api/jobs`, `GET /api/jobs.csv` and `GET /api/jobs/{id}`: jobs with their figures and
//! verdicts (`team::jobs`, rules in `shared::jobs`). Anonymous viewers of a server with tokens
//! see each job's runtime, GPUs and figures, but not whose it is or what it is called.

use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use shared::jobs::{CSV_HEADER, Job, JobReport, JobsQuery, JobsResponse, QUERY_PARAMETERS};
use shared::usage::HIDDEN_USER;
use store::jobs::JobStoreError;

use super::Visibility;
use super::api::visibility;
use super::auth::Caller;
use super::error::{blocking, query_parameters};
use super::{ApiError, AppState};

impl From<JobStoreError> for ApiError {
    fn from(e: JobStoreError) -> Self {
        ApiError::internal(format!("jobs query failed: {e}"))
    }
}

pub async fn list(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<JobsResponse>, ApiError> {
    let (jobs, more) = answer(&state, caller.as_deref(), params).await?;
    Ok(Json(JobsResponse {
        jobs,
        more,
        simulated: state.telemetry.host().simulated,
        persistent: state.jobs.persistent(),
    }))
}

pub async fn csv(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (jobs, _) = answer(&state, caller.as_deref(), params).await?;
    let mut text = String::from(CSV_HEADER);
    text.push('\n');
    for job in &jobs {
        text.push_str(&shared::jobs::csv_row(job));
        text.push('\n');
    }
    let headers = [
        (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
        (header::CONTENT_DISPOSITION, "attachment; filename=\"gpudash-jobs.csv\""),
    ];
    Ok((headers, text).into_response())
}

pub async fn get(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
) -> Result<Json<JobReport>, ApiError> {
    let id: u64 = id.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
        ApiError::bad_request(format!("'{}' is not a job id; ids are whole numbers from 1", shown(&id)))
    })?;
    let job = blocking(state.jobs.clone(), move |jobs| jobs.get(id)).await?;
    let Some(job) = job else { return Err(ApiError::not_found(format!("there is no job {id}"))) };
    let hide = visibility(&state, caller.as_deref()) == Visibility::Redacted;
    Ok(Json(state.jobs.report(if hide { redact(job) } else { job })))
}

async fn answer(
    state: &AppState,
    caller: Option<&Caller>,
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<(Vec<JobReport>, bool), ApiError> {
    let params = query_parameters(params, QUERY_PARAMETERS)?;
    let query = JobsQuery::parse(|name| params.get(name).cloned()).map_err(ApiError::bad_request)?;
    let hide = visibility(state, caller) == Visibility::Redacted;
    if hide && query.owner.is_some() {
        return Err(ApiError::bad_request(
            "owner cannot be asked by a viewer who may not see owners; sign in, or leave owner out".to_owned(),
        ));
    }
    let (jobs, more) = blocking(state.jobs.clone(), move |jobs| jobs.list(&query)).await?;
    let jobs = jobs.into_iter().map(|j| state.jobs.report(if hide { redact(j) } else { j })).collect();
    Ok((jobs, more))
}

/// A job without whose it is or what it runs: its owner hidden, its name its runtime's.
fn redact(mut job: Job) -> Job {
    job.owner = HIDDEN_USER.to_owned();
    job.name = job.runtime.name().to_owned();
    job.key = String::new();
    job.pids.clear();
    job
}

/// At most 40 characters of what a caller sent, for an error message.
fn shown(text: &str) -> String {
    shared::text::shown(&text.chars().take(40).collect::<String>())
}
