//! The page's HTTP calls to the gpudash API (the socket lives in [`super::telemetry`]).

use serde::Deserialize;
use shared::history::{HistoryResponse, Metric};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Response;

/// What a query asks `/api/history` for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryQuery {
    pub device: u32,
    pub metric: Metric,
    pub from_ms: u64,
    pub to_ms: u64,
    pub points: u32,
}

/// `GET /api/history`; the error is the server's own message when it sent one.
pub async fn fetch_history(query: HistoryQuery) -> Result<HistoryResponse, String> {
    let HistoryQuery { device, metric, from_ms, to_ms, points } = query;
    let url =
        format!("/api/history?device={device}&metric={}&from={from_ms}&to={to_ms}&points={points}", metric.name());
    let (ok, status, body) = get_text(&url).await?;
    if !ok {
        #[derive(Deserialize)]
        struct ApiError {
            error: String,
        }
        return Err(serde_json::from_str::<ApiError>(&body).map_or_else(|_| format!("HTTP {status}"), |e| e.error));
    }
    serde_json::from_str(&body).map_err(|e| format!("unreadable history answer: {e}"))
}

/// Fetches `url` from the page's server: whether the status was 2xx, the status, and the body.
async fn get_text(url: &str) -> Result<(bool, u16, String), String> {
    let window = web_sys::window().ok_or("no window")?;
    let response: Response = JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|e| js_error(&e))?
        .dyn_into()
        .map_err(|e| js_error(&e))?;
    let body = JsFuture::from(response.text().map_err(|e| js_error(&e))?).await.map_err(|e| js_error(&e))?;
    Ok((response.ok(), response.status(), body.as_string().unwrap_or_default()))
}

fn js_error(value: &JsValue) -> String {
    value.as_string().unwrap_or_else(|| format!("{value:?}"))
}
