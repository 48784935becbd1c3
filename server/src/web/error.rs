//! Errors a request can end with: a status and a message a user can act on.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A failed request, sent as `{"error": "..."}` with its status.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn not_found(message: impl Into<String>) -> Self {
        Self { status: StatusCode::NOT_FOUND, message: message.into() }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into() }
    }

    /// A server-side failure: logged in full, reported without internals.
    pub fn internal(detail: impl Into<String>) -> Self {
        tracing::error!("{}", detail.into());
        Self { status: StatusCode::INTERNAL_SERVER_ERROR, message: "internal error; see the server log".to_owned() }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(Body { error: &self.message })).into_response()
    }
}
