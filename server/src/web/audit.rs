//! `GET /api/audit`: the audit log for admins, newest first, with filters.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use shared::auth::{AuditEntry, AuditQuery, Role};

use super::auth::Caller;
use super::{ApiError, AppState};
use crate::audit::Action;

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
    let audit = state.audit.clone();
    tokio::task::spawn_blocking(move || audit.list(&query))
        .await
        .map_err(|e| ApiError::internal(format!("audit task failed: {e}")))?
        .map(Json)
        .map_err(|e| ApiError::internal(format!("reading the audit log failed: {e}")))
}
