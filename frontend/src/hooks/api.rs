//! The page's HTTP calls to the gpudash API (the socket lives in [`super::telemetry`]).
//!
//! Every call goes to the page's own server, so the browser sends the session
//! cookie with it; a refusal comes back as the server's own message.

use serde::{Deserialize, de::DeserializeOwned};
use shared::history::{HistoryAllResponse, HistoryRange};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Headers, RequestInit, Response};

/// A call that did not succeed: the HTTP status (0 when no answer came) and what the server said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiFailure {
    pub status: u16,
    pub message: String,
}

impl ApiFailure {
    fn local(message: impl Into<String>) -> Self {
        Self { status: 0, message: message.into() }
    }

    /// The API wants a token (or the session ended): the page should offer the login.
    pub fn is_unauthorized(&self) -> bool {
        self.status == 401
    }
}

/// `GET /api/history/all`: every metric of every GPU over `range` ending at `to_ms`,
/// at most `points` buckets a line; the failure carries the server's own message.
pub async fn fetch_history_all(range: HistoryRange, to_ms: u64, points: u32) -> Result<HistoryAllResponse, ApiFailure> {
    get_json(&format!("/api/history/all?range={}&to={to_ms}&points={points}", range.key())).await
}

/// `GET url`, its JSON answer.
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, ApiFailure> {
    let body = call("GET", url, None).await?;
    parse(url, &body)
}

/// `POST url` with a JSON body (or none), its JSON answer.
pub async fn post_json<T: DeserializeOwned>(url: &str, body: Option<&serde_json::Value>) -> Result<T, ApiFailure> {
    let text = body.map(serde_json::Value::to_string);
    let answer = call("POST", url, text.as_deref()).await?;
    parse(url, &answer)
}

/// `PUT url` with a JSON body, its JSON answer.
pub async fn put_json<T: DeserializeOwned>(url: &str, body: &serde_json::Value) -> Result<T, ApiFailure> {
    let answer = call("PUT", url, Some(&body.to_string())).await?;
    parse(url, &answer)
}

/// `POST url` answered 204, or 200 with a JSON body.
pub async fn post_maybe_json<T: DeserializeOwned>(url: &str) -> Result<Option<T>, ApiFailure> {
    let answer = call("POST", url, None).await?;
    if answer.trim().is_empty() {
        return Ok(None);
    }
    parse(url, &answer).map(Some)
}

/// `DELETE url` (answered 204).
pub async fn delete(url: &str) -> Result<(), ApiFailure> {
    call("DELETE", url, None).await.map(drop)
}

fn parse<T: DeserializeOwned>(url: &str, body: &str) -> Result<T, ApiFailure> {
    serde_json::from_str(body).map_err(|e| ApiFailure::local(format!("unreadable answer from {url}: {e}")))
}

/// Sends a request to the page's server: the body of a 2xx answer, or the failure.
async fn call(method: &str, url: &str, body: Option<&str>) -> Result<String, ApiFailure> {
    let window = web_sys::window().ok_or_else(|| ApiFailure::local("no window"))?;
    let init = RequestInit::new();
    init.set_method(method);
    if let Some(body) = body {
        let headers = Headers::new().map_err(|e| js_error(&e))?;
        headers.set("Content-Type", "application/json").map_err(|e| js_error(&e))?;
        init.set_headers(&headers);
        init.set_body(&JsValue::from_str(body));
    }
    let response: Response = JsFuture::from(window.fetch_with_str_and_init(url, &init))
        .await
        .map_err(|e| js_error(&e))?
        .dyn_into()
        .map_err(|e| js_error(&e))?;
    let text = JsFuture::from(response.text().map_err(|e| js_error(&e))?).await.map_err(|e| js_error(&e))?;
    let text = text.as_string().unwrap_or_default();
    if response.ok() {
        return Ok(text);
    }
    let mut refused = failure(response.status(), &text);
    refused.message = crate::components::format::server_text(&refused.message);
    Err(refused)
}

/// The server's `{"error": "..."}` message, or the bare status when it sent none.
fn failure(status: u16, body: &str) -> ApiFailure {
    #[derive(Deserialize)]
    struct ApiError {
        error: String,
    }
    let message = serde_json::from_str::<ApiError>(body).map_or_else(|_| format!("HTTP {status}"), |e| e.error);
    ApiFailure { status, message }
}

fn js_error(value: &JsValue) -> ApiFailure {
    ApiFailure::local(value.as_string().unwrap_or_else(|| format!("{value:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_the_servers_message() {
        let f = failure(403, r#"{"error":"running an experiment needs the operator role; 'vera' has viewer"}"#);
        assert_eq!(f.status, 403);
        assert!(f.message.starts_with("running an experiment needs the operator role"));
        assert_eq!(failure(502, "<html>bad gateway</html>").message, "HTTP 502");
        assert!(failure(401, r#"{"error":"x"}"#).is_unauthorized());
    }
}
