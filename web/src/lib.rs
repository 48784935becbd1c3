//! Where samples leave the server: HTTP routes, the WebSocket and the embedded page.

mod alerts;
mod api;
mod assets;
pub use assets::{ASSETS, Asset};
mod audit;
pub mod auth;
mod bridge;
mod error;
mod fleet;
mod frames;
mod history;
mod job_notices;
mod jobs;
mod lab;
mod live;
pub mod local_user;
mod metrics;
mod metrics_device;
mod metrics_gpm;
mod metrics_jobs;
mod metrics_usage;
mod reservations;
pub mod serve;
mod signals;
pub mod site;
mod sock_diag;
pub mod tls;
mod topology;
mod usage;
mod ws;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use tokio::sync::watch;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use frames::{AlertFrames, Frame, LabFrames, Visibility, encode};
pub use live::LiveFrames;

use store::Store;
use telemetry::Telemetry;

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The time sockets limit their messages by.
    pub clock: base::clock::Clock,
    pub telemetry: Arc<Telemetry>,
    /// The hub's ticks, details and snapshots encoded for sockets, once each.
    pub live_frames: LiveFrames,
    /// History database; `None` with `--no-history`.
    pub store: Option<Store>,
    /// Flips to `true` when the server shuts down, so sockets close cleanly.
    pub shutdown: watch::Receiver<bool>,
    /// The GPU lab (experiments, queue, runs).
    pub lab: Arc<::lab::Lab>,
    /// The lab's events encoded for sockets, once each.
    pub lab_frames: LabFrames,
    /// Alerts: rules, stored alerts, silences, subscriptions.
    pub alerts: team::alerts::Alerts,
    /// The alerts' events encoded for sockets, once each.
    pub alert_frames: AlertFrames,
    /// Tokens, sessions and the anonymous policy.
    pub auth: Arc<team::auth::Auth>,
    pub audit: team::audit::Audit,
    /// Attached PyTorch processes.
    pub bridge: Arc<team::bridge::Registry>,
    /// Served over TLS by gpudash itself (HSTS; the expected Origin is https).
    pub tls: bool,
    /// The names, public URLs and trusted proxies requests are checked against.
    pub site: Arc<site::Site>,
    /// Listening beyond loopback with no tokens (`--allow-anonymous`): the page warns.
    pub exposed_without_auth: bool,
    /// `--allow-anonymous`: without tokens, proxied or non-loopback requests are still served.
    pub allow_anonymous: bool,
    /// `--allow-signals`: `POST /api/processes/{pid}/signal` is on.
    pub allow_signals: bool,
    /// `--read-only`: every action that [`team::audit::Action::changes`] is refused (403), whatever the role.
    pub read_only: bool,
    /// The fleet view's Prometheus (`--fleet-prometheus`); `None` turns `/api/fleet` off.
    pub fleet: Option<Arc<team::fleet::Fleet>>,
    /// Usage sums per user, GPU and minute (the history database, or in memory).
    pub usage: store::usage::UsageStore,
    /// Advisory GPU reservations.
    pub reservations: team::reservations::Reservations,
    /// The jobs: the running ones as they stand, the rest in the history database.
    pub jobs: team::jobs::Jobs,
    /// The job notices and digests, and each owner's choice of them.
    pub notices: team::jobs::notify::Notifier,
}

/// The page's Content-Security-Policy: its own scripts and wasm, nothing from elsewhere, never framed.
const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Largest request body: run requests and logins are a few hundred bytes.
const MAX_BODY: usize = 64 * 1024;

/// Plain HTTP requests get this long; WebSockets live on after their upgrade.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors made below the handlers (the body limit, the timeout, a wrong method) come as
/// plain text or an empty body: say them in JSON like every other error.
async fn json_errors(response: Response) -> Response {
    let message = match response.status() {
        StatusCode::PAYLOAD_TOO_LARGE => format!("the request body is over the limit of {} KiB", MAX_BODY / 1024),
        StatusCode::REQUEST_TIMEOUT => format!("the request took longer than {} s", REQUEST_TIMEOUT.as_secs()),
        StatusCode::METHOD_NOT_ALLOWED => {
            "this method is not allowed on this path; the Allow header lists those that are".to_owned()
        }
        _ => return response,
    };
    let json =
        response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let mut fresh = ApiError { status: parts.status, message }.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    for (name, value) in fresh.headers_mut().drain() {
        if let Some(name) = name {
            parts.headers.insert(name, value);
        }
    }
    Response::from_parts(parts, fresh.into_body())
}

/// All routes of the dashboard.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/api/devices", get(api::devices))
        .route("/api/processes", get(api::processes))
        .route("/api/processes/{pid}/signal", post(signals::signal))
        .route("/api/history", get(history::history))
        .route("/api/history/all", get(history::history_all))
        .route("/healthz", get(api::healthz))
        .route("/metrics", get(metrics::metrics))
        .route("/api/topology", get(topology::topology))
        .route("/api/fleet", get(fleet::fleet))
        .route("/api/fleet/host/{instance}", get(fleet::host))
        .route("/api/fleet/owners", get(fleet::owners))
        .route("/api/lab", get(lab::status))
        .route("/api/lab/experiments", get(lab::experiments))
        .route("/api/lab/devices/{index}/empty_cache", post(lab::empty_cache))
        .route("/api/runs", get(lab::list).post(lab::submit))
        .route("/api/runs/check", post(lab::check))
        .route("/api/runs/{id}", get(lab::get))
        .route("/api/runs/{id}/cancel", post(lab::cancel))
        .route("/api/runs/{id}/chart.svg", get(lab::chart))
        .route("/api/runs/{id}/results.csv", get(lab::csv))
        .route("/ws", get(ws::upgrade))
        .route("/api/bridge", get(bridge::list))
        .route("/api/bridge/report", post(bridge::report))
        .route("/api/bridge/allocator", post(bridge::allocator))
        .route("/api/bridge/{id}", get(bridge::detail))
        .route("/api/bridge/{id}/empty_cache", post(bridge::empty_cache))
        .route("/api/bridge/{id}/allocator_map", post(bridge::request_map))
        .route("/api/login", post(auth::login))
        .route("/api/logout", post(auth::logout))
        .route("/api/me", get(auth::whoami))
        .route(team::auth::oidc::LOGIN_PATH, get(auth::oidc::login))
        .route(team::auth::oidc::CALLBACK_PATH, get(auth::oidc::callback))
        .route("/api/audit", get(audit::audit_log))
        .route("/api/alerts", get(alerts::list))
        .route("/api/alerts/silences", post(alerts::silence))
        .route("/api/alerts/silences/{id}", delete(alerts::unsilence))
        .route("/api/alerts/subscriptions", get(alerts::subscriptions).post(alerts::subscribe))
        .route("/api/alerts/subscriptions/{id}", delete(alerts::unsubscribe))
        .route("/api/usage", get(usage::usage))
        .route("/api/usage.csv", get(usage::usage_csv))
        .route("/api/jobs", get(jobs::list))
        .route("/api/jobs.csv", get(jobs::csv))
        .route("/api/jobs/notices", get(job_notices::get).put(job_notices::put))
        .route("/api/jobs/digest", post(job_notices::digest))
        .route("/api/jobs/{id}", get(jobs::get))
        .route("/api/reservations", get(reservations::list).post(reservations::create))
        .route("/api/reservations/{id}", delete(reservations::release))
        .route("/api", get(api::not_found))
        .route("/api/{*rest}", get(api::not_found))
        .fallback(assets::serve)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::access))
        .with_state(state)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
        .layer(axum::middleware::map_response(json_errors))
        .layer(SetResponseHeaderLayer::overriding(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")))
        .layer(SetResponseHeaderLayer::if_not_present(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)))
        .layer(SetResponseHeaderLayer::overriding(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")))
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        ))
        .layer(TraceLayer::new_for_http())
}
