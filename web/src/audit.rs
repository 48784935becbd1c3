//! `GET /api/audit`: the audit log for admins, newest first, with filters.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use shared::auth::{AuditEntry, AuditQuery, Role};

use super::auth::Caller;
use super::error::blocking;
use super::{ApiError, AppState};
use store::audit::AuditStoreError;
use team::audit::Action;

impl From<AuditStoreError> for ApiError {
    fn from(e: AuditStoreError) -> Self {
        ApiError::internal(format!("reading the audit log failed: {e}"))
    }
}

/// `GET /api/audit?limit=&before=&user=&action=&outcome=&from=&to=`: admins only.
pub async fn audit_log(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::bad_request(format!("{}; accepted: {}", e.body_text(), AuditQuery::PARAMETERS)))?;
    caller.require(&state, Role::Admin, Action::AuditRead, "audit")?;
    query.validate().map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(blocking(state.audit.clone(), move |audit| audit.list(&query)).await?))
}
