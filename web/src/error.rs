//! Errors a request can end with: a status and a message a user can act on.

use std::collections::HashMap;

use axum::Json;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
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

/// The query string's parameters, or a 400: a query string that does not parse, or a name not
/// in `allowed` ("a, b, c").
pub fn query_parameters(
    params: Result<Query<HashMap<String, String>>, QueryRejection>,
    allowed: &str,
) -> Result<HashMap<String, String>, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))?;
    known_names(&params, allowed)?;
    Ok(params)
}

/// A 400 naming the first parameter of `params` not in `allowed` ("a, b, c"), shown at most
/// 40 characters long.
pub fn known_names(params: &HashMap<String, String>, allowed: &str) -> Result<(), ApiError> {
    match params.keys().find(|k| !allowed.split(", ").any(|p| p == k.as_str())) {
        Some(unknown) => Err(ApiError::bad_request(format!(
            "unknown parameter '{}'; the parameters are {allowed}",
            shared::text::shown(&unknown.chars().take(40).collect::<String>())
        ))),
        None => Ok(()),
    }
}

/// Runs a blocking call on `handle` (a store, the lab, `/proc`, a PID to look up) off the async
/// runtime: the handlers' one way to do blocking work. Its error becomes the [`ApiError`] it maps
/// to; a panic, a logged 500 naming the call site.
pub async fn blocking<H, T, E>(handle: H, f: impl FnOnce(&H) -> Result<T, E> + Send + 'static) -> Result<T, ApiError>
where
    H: Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
    ApiError: From<E>,
{
    let call = std::any::type_name_of_val(&f);
    base::sync::off_runtime(move || f(&handle))
        .await
        .map_err(|e| ApiError::internal(format!("{call} failed: {e}")))?
        .map_err(ApiError::from)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn blocking_passes_answers_maps_errors_and_turns_a_panic_into_a_500() {
        assert_eq!(blocking(2, |n| Ok::<_, ApiError>(n * 21)).await.ok(), Some(42));
        let refused = blocking((), |()| Err::<(), _>(ApiError::bad_request("no"))).await.unwrap_err();
        assert_eq!((refused.status, refused.message.as_str()), (StatusCode::BAD_REQUEST, "no"));
        let panicked = blocking((), |()| -> Result<(), ApiError> { panic!("a store bug") }).await.unwrap_err();
        assert_eq!(panicked.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(panicked.message, "internal error; see the server log", "internals stay in the log");
    }
}
