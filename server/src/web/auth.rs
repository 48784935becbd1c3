//! Access control at the edge: who the caller is (bearer token, session
//! cookie, or anonymous by policy), which paths need what, cross-site
//! checks, and the login/logout/me routes.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shared::auth::{LoginRequest, Me, Role};

use super::tls::PeerAddr;
use super::{ApiError, AppState};
use crate::audit::{Event, Outcome};
use crate::auth::{Identity, SESSION_LIFETIME, Unauthorized};

pub const SESSION_COOKIE: &str = "gpudash_session";

/// Paths anyone may load: the page itself, health, and the way to log in.
fn is_public(path: &str) -> bool {
    matches!(path, "/" | "/healthz" | "/api/login" | "/api/logout" | "/api/me") || path.starts_with("/assets/")
}

/// The caller as the handlers see it (inserted by [`access`]).
#[derive(Debug, Clone)]
pub struct Caller {
    pub identity: Identity,
    /// Client address, for the audit log.
    pub client: String,
}

impl Caller {
    /// Refuses with 403 (and audits the refusal) unless the caller has `role`.
    pub fn require(&self, state: &AppState, role: Role, action: &str, target: &str) -> Result<(), ApiError> {
        self.identity.require(role, action).map_err(|message| {
            self.audit(state, action_name(action), target, Outcome::Denied, &message);
            ApiError { status: StatusCode::FORBIDDEN, message }
        })
    }

    pub fn audit(&self, state: &AppState, action: &str, target: &str, outcome: Outcome, detail: &str) {
        state.audit.record(&Event { user: &self.identity.user, client: &self.client, action, target, outcome, detail });
    }
}

/// Short action names for the log, from the phrases used in messages.
fn action_name(action: &str) -> &str {
    match action {
        "running an experiment" => "experiment.start",
        "cancelling a run" | "cancelling someone else's run" => "experiment.cancel",
        "emptying the lab's cache" => "empty_cache",
        "emptying a process's cache" => "bridge.empty_cache",
        "reading the audit log" => "audit.read",
        other => other,
    }
}

/// Middleware: identifies the caller, applies the path policy and the cross-site checks.
pub async fn access(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let headers = request.headers();
    if let Err(refusal) = same_origin(headers, request.method(), &path, state.tls) {
        return refusal.into_response();
    }
    let client = request
        .extensions()
        .get::<ConnectInfo<PeerAddr>>()
        .map_or_else(|| "unknown".to_owned(), |ConnectInfo(PeerAddr(addr))| addr.ip().to_string());
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let session = cookie(headers, SESSION_COOKIE);
    let identity = state.auth.identify(bearer, session.as_deref());

    let allowed = match (&identity, path.as_str()) {
        (_, p) if is_public(p) => true,
        // Scrapers: open by policy, or any valid token (not a browser's anonymous access).
        (Ok(who), "/metrics") => state.auth.config().open_metrics || !who.anonymous,
        (Err(_), "/metrics") => state.auth.config().open_metrics && bearer.is_none(),
        (Ok(_), _) => true,
        (Err(_), _) => false,
    };
    if !allowed {
        let message = match identity {
            Err(e) => e.to_string(),
            Ok(_) => "/metrics needs a token here: send Authorization: Bearer <token>".to_owned(),
        };
        return ApiError { status: StatusCode::UNAUTHORIZED, message }.into_response();
    }
    if let Ok(identity) = identity {
        request.extensions_mut().insert(Caller { identity, client });
    }
    next.run(request).await
}

/// Refuses cross-site WebSocket upgrades and state-changing requests whose
/// browser-sent `Origin` is not this dashboard. Clients that send no Origin
/// (scripts, the load tool) pass and are judged by their token like any API client.
fn same_origin(headers: &HeaderMap, method: &Method, path: &str, tls: bool) -> Result<(), ApiError> {
    let checked = path == "/ws" || !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    if !checked {
        return Ok(());
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let ours = format!("{}://{host}", if tls { "https" } else { "http" });
    let theirs = origin.to_str().unwrap_or("");
    if host.is_empty() || !theirs.eq_ignore_ascii_case(&ours) {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "cross-site request refused: Origin '{theirs}' is not this dashboard ('{ours}'); behind a reverse proxy, forward the Host header"
            ),
        });
    }
    Ok(())
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('=').map(str::to_owned))
}

fn me(state: &AppState, identity: Option<&Identity>) -> Me {
    Me {
        user: identity.map(|i| i.user.clone()),
        role: identity.map(|i| i.role),
        anonymous: identity.is_none_or(|i| i.anonymous),
        auth_enabled: state.auth.enabled(),
        exposed_without_auth: state.exposed_without_auth,
    }
}

/// `GET /api/me`: who the page is talking as, and whether it should offer a login.
pub async fn whoami(State(state): State<AppState>, caller: Option<axum::Extension<Caller>>) -> Json<Me> {
    Json(me(&state, caller.as_ref().map(|c| &c.identity)))
}

/// `POST /api/login` `{"token": "..."}`: sets an HttpOnly, SameSite=Strict session cookie.
pub async fn login(
    State(state): State<AppState>,
    ConnectInfo(PeerAddr(peer)): ConnectInfo<PeerAddr>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let client = peer.ip().to_string();
    let request: LoginRequest = serde_json::from_slice(&body).map_err(|e| {
        if state.auth.enabled() {
            state.audit.record_denied("unknown", &client, "login", "session", "no token in the request");
        }
        ApiError::bad_request(format!("invalid login ({e}); send {{\"token\": \"...\"}}"))
    })?;
    if !state.auth.enabled() {
        return Err(ApiError::bad_request("this server has no tokens configured: everyone is already let in"));
    }
    let audit = |user: &str, outcome, detail: &str| {
        state.audit.record(&Event { user, client: &client, action: "login", target: "session", outcome, detail });
    };
    match state.auth.login(&request.token, peer.ip()) {
        Ok((identity, session)) => {
            audit(&identity.user, Outcome::Ok, identity.role.name());
            let cookie = format!(
                "{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
                SESSION_LIFETIME.as_secs(),
                if state.tls { "; Secure" } else { "" }
            );
            let mut response = Json(me(&state, Some(&identity))).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            Ok(response)
        }
        Err(message) => {
            // Aggregated: a flood of wrong tokens cannot flood the log.
            state.audit.record_denied("unknown", &client, "login", "session", &message);
            Err(ApiError { status: StatusCode::UNAUTHORIZED, message })
        }
    }
}

/// `POST /api/logout`: ends the session and clears the cookie.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(session) = cookie(&headers, SESSION_COOKIE) {
        state.auth.logout(&session);
    }
    let clear = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

impl From<Unauthorized> for ApiError {
    fn from(e: Unauthorized) -> Self {
        ApiError { status: StatusCode::UNAUTHORIZED, message: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn cross_site_websockets_and_posts_are_refused() {
        let foreign = headers(&[(header::HOST, "gpu1:7070"), (header::ORIGIN, "https://evil.example")]);
        assert!(same_origin(&foreign, &Method::GET, "/ws", false).is_err());
        assert!(same_origin(&foreign, &Method::POST, "/api/runs", false).is_err());
        assert!(same_origin(&foreign, &Method::GET, "/api/devices", false).is_ok(), "reads are not state changes");
        let own = headers(&[(header::HOST, "gpu1:7070"), (header::ORIGIN, "http://gpu1:7070")]);
        assert!(same_origin(&own, &Method::GET, "/ws", false).is_ok());
        assert!(same_origin(&own, &Method::GET, "/ws", true).is_err(), "https page must come from https");
        let script = headers(&[(header::HOST, "gpu1:7070")]);
        assert!(same_origin(&script, &Method::POST, "/api/runs", false).is_ok());
    }

    #[test]
    fn finds_the_session_cookie_among_others() {
        let h = headers(&[(header::COOKIE, "theme=dark; gpudash_session=abc123; x=y")]);
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("abc123"));
        assert_eq!(cookie(&HeaderMap::new(), SESSION_COOKIE), None);
    }
}
