//! Access control at the edge: who the caller is (bearer token, session
//! cookie, or anonymous by policy), which paths need what, cross-site
//! checks, and the login/logout/me routes.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use shared::auth::{LoginRequest, Me, Role};

use super::local_user::{self, ConnectionOwner};
use super::tls::PeerAddr;
use super::{ApiError, AppState, site};
use team::audit::{Action, Event, Outcome};
use team::auth::{Identity, Refused, SessionRef, Unauthorized};

pub mod oidc;
mod vouch;

/// The session cookie over plain HTTP.
pub const SESSION_COOKIE: &str = "gpudash_session";
/// The session cookie over HTTPS: the `__Host-` prefix binds it to this exact host,
/// so another service on the same host name (a Jupyter on another port) cannot set or
/// shadow it, and browsers refuse it without `Secure` and `Path=/`.
pub const SECURE_SESSION_COOKIE: &str = "__Host-gpudash_session";

/// Paths anyone may load: the page itself, health, and the way to log in.
fn is_public(path: &str) -> bool {
    matches!(path, "/" | "/healthz" | "/api/login" | "/api/logout" | "/api/me")
        || path.starts_with("/assets/")
        || path.starts_with("/auth/oidc/")
}

/// The caller as the handlers see it (inserted by [`access`]).
#[derive(Debug, Clone)]
pub struct Caller {
    pub identity: Identity,
    /// Client address, for the audit log (behind a `--trusted-proxy`, the forwarded one).
    pub client: String,
    /// The browser session (or bearer token) the request came with, if any: a WebSocket closes
    /// when it ends (or the token is removed).
    pub session: Option<SessionRef>,
    /// Signed in by the trusted auth proxy (`--auth-proxy-header`): the proxy's sign-out ends it.
    pub by_proxy: bool,
}

impl Caller {
    /// Refuses with 403 (and audits the refusal) unless the caller has `role`.
    pub fn require(&self, state: &AppState, role: Role, action: Action, target: &str) -> Result<(), ApiError> {
        self.require_to(state, role, action, action.doing(), target)
    }

    /// [`Caller::require`] with the refusal naming the action as `doing` ("cancelling someone else's run").
    pub fn require_to(
        &self,
        state: &AppState,
        role: Role,
        action: Action,
        doing: &str,
        target: &str,
    ) -> Result<(), ApiError> {
        if state.read_only && action.changes() {
            let message = format!(
                "this dashboard is read-only (--read-only): {doing} is turned off for everyone, whatever the role"
            );
            self.audit(state, action, target, Outcome::Denied, &message);
            return Err(ApiError { status: StatusCode::FORBIDDEN, message });
        }
        self.identity.require(role, doing).map_err(|refused| {
            let message = refused.to_string();
            self.audit(state, action, target, Outcome::Denied, &message);
            ApiError { status: StatusCode::FORBIDDEN, message }
        })
    }

    pub fn audit(&self, state: &AppState, action: Action, target: &str, outcome: Outcome, detail: &str) {
        state.audit.record(&Event { user: &self.identity.user, client: &self.client, action, target, outcome, detail });
    }
}

/// What the edge knows of a request before the handlers run (inserted by [`access`]).
#[derive(Debug, Clone)]
pub struct Edge {
    pub site: site::Request,
}

/// Middleware: checks the Host, identifies the caller, applies the path policy and the cross-site checks.
pub async fn access(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let peer = request
        .extensions()
        .get::<ConnectInfo<PeerAddr>>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |ConnectInfo(PeerAddr(addr))| *addr);
    let owner = request.extensions().get::<ConnectionOwner>().cloned();
    // The owner of a loopback socket is looked up (once per connection) only where it decides something.
    let owner_uid = || owner.as_ref().and_then(ConnectionOwner::uid);
    let headers = request.headers();
    let checked = if state.site.proxy_users.uids.is_empty() || !peer.ip().is_loopback() {
        state.site.check(peer, headers)
    } else {
        state.site.check_from(peer, owner_uid(), headers)
    };
    let site = match checked {
        Ok(site) => site,
        Err(refusal) => return refusal.into_response(),
    };
    if let Err(refusal) = same_origin(&state.site, &site, headers, request.method(), &path) {
        return refusal.into_response();
    }
    if let Err(refusal) = tokenless_behind_proxy(&state, &site, &path, owner_uid) {
        return refusal.into_response();
    }
    let client = site.client.to_string();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let session = session_cookie(headers, site.secure);
    let certified = request.extensions().get::<super::tls::VerifiedClient>().is_some();
    let scraper = match vouch::scraper(&state, &path, headers, certified, site.client).await {
        Ok(scraper) => scraper,
        Err(refusal) => return refusal,
    };
    let proxied = match vouch::proxied(&state, &site, bearer.is_some(), &peer, headers) {
        Ok(proxied) => proxied,
        Err(refusal) => return refusal.into_response(),
    };
    let by_proxy = proxied.is_some();
    let identified = match (scraper, proxied, bearer) {
        (Some(scraper), _, _) => Ok((scraper, None)),
        (None, Some(user), _) => Ok((user.identity, None)),
        // A wrong Bearer token counts against the address, like a wrong login; a right one always works.
        (None, None, Some(token)) if state.auth.enabled() => match state.auth.check_token_from(token, site.client) {
            Ok(identity) => Ok((identity, Some(state.auth.bearer(token)))),
            Err(refused) => {
                // Aggregated per client and minute, like denied logins.
                state.audit.record_denied("unknown", &client, Action::AuthBearer, &path, &refused.to_string());
                return refused_response(&refused, "invalid token; check the Authorization: Bearer header");
            }
        },
        (None, None, _) => state.auth.identify(bearer, session.as_deref()),
    };

    let allowed = match (&identified, path.as_str()) {
        (_, p) if is_public(p) => true,
        // Scrapers: open by policy, or any valid token (not a browser's anonymous access).
        (Ok((who, _)), "/metrics") => state.auth.open_metrics() || !who.anonymous,
        (Err(_), "/metrics") => state.auth.open_metrics() && bearer.is_none(),
        (Ok(_), _) => true,
        (Err(_), _) => false,
    };
    if !allowed {
        let scrapers = state.auth.scrapers().is_some();
        let message = match identified {
            Err(e) => e.to_string(),
            Ok(_) if scrapers || state.auth.client_certificates() => {
                "/metrics needs credentials here: a user of --web-config-file by basic auth (Prometheus's \
                 `basic_auth`), a client certificate of --metrics-client-ca (over https), or Authorization: \
                 Bearer <token>"
                    .to_owned()
            }
            Ok(_) => "/metrics needs a token here: send Authorization: Bearer <token>".to_owned(),
        };
        let mut response = ApiError { status: StatusCode::UNAUTHORIZED, message }.into_response();
        if scrapers && path == "/metrics" {
            vouch::challenge(&mut response);
        }
        return response;
    }
    if let Ok((identity, session)) = identified {
        request.extensions_mut().insert(Caller { identity, client, session, by_proxy });
    }
    let secure = site.secure;
    request.extensions_mut().insert(Edge { site });
    let mut response = next.run(request).await;
    if secure && state.tls {
        response.headers_mut().insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
    response
}

/// Under `--tls-cert`: browsers keep to https for a year (a proxy that terminates TLS sets its own).
const HSTS: &str = "max-age=31536000";

pub(super) fn refused_response(refused: &Refused, invalid: &str) -> Response {
    match refused {
        Refused::Invalid => ApiError { status: StatusCode::UNAUTHORIZED, message: invalid.to_owned() }.into_response(),
        Refused::Throttled(_) => {
            ApiError { status: StatusCode::TOO_MANY_REQUESTS, message: refused.to_string() }.into_response()
        }
    }
}

/// Without tokens every caller is the local admin; that holds only for the user running
/// gpudash (or a `--local-user`) on this machine. A request that came through a proxy, names
/// the server by something other than a loopback address, or comes from another local user's
/// socket (a plain proxy, someone else's browser) could be anyone: refuse it unless `--allow-anonymous`.
fn tokenless_behind_proxy(
    state: &AppState,
    site: &site::Request,
    path: &str,
    owner: impl FnOnce() -> Option<u32>,
) -> Result<(), ApiError> {
    if state.auth.enabled() || state.allow_anonymous {
        return Ok(());
    }
    let only_local = !site.forwarded && site.loopback_host;
    // Health, and open metrics, for any local user: a health check or a Prometheus running as its own user.
    // (Where /metrics takes a scraper's own credentials, those decide, for any local user too.)
    let scraped = state.auth.open_metrics() || state.auth.scrapers().is_some() || state.auth.client_certificates();
    let for_anyone_local = path == "/healthz" || (path == "/metrics" && scraped);
    if only_local && !for_anyone_local {
        let own = local_user::own_uid();
        return match owner() {
            Some(uid) if uid == own || state.site.local_users.contains(uid) => Ok(()),
            who => Err(ApiError {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "this dashboard has no tokens, so only the user running it, {}, may use it from this machine; \
                     this connection is {}. Configure tokens (`gpudash token`, --auth-file), or name this user with \
                     --local-user",
                    local_user::describe(own),
                    who.map_or_else(
                        || "from a socket whose owner cannot be read".to_owned(),
                        |uid| format!("{}'s", local_user::describe(uid))
                    ),
                ),
            }),
        };
    }
    if only_local {
        return Ok(());
    }
    Err(ApiError {
        status: StatusCode::FORBIDDEN,
        message: if site.forwarded {
            "this dashboard has no tokens, and this request came through a proxy: everyone who reaches the proxy \
             would be admin. Configure tokens (`gpudash token`, --auth-file), or pass --allow-anonymous if that is \
             really meant"
                .to_owned()
        } else {
            "this dashboard has no tokens, so only its local user (at http://127.0.0.1 or http://localhost) may use \
             it. Configure tokens (`gpudash token`, --auth-file) to serve it under another name, or pass \
             --allow-anonymous if that is really meant"
                .to_owned()
        },
    })
}

/// Refuses cross-site WebSocket upgrades and state-changing requests whose
/// browser-sent `Origin` is not this dashboard. Clients that send no Origin
/// (scripts, the load tool) pass and are judged by their token like any API client.
fn same_origin(
    site: &site::Site,
    request: &site::Request,
    headers: &HeaderMap,
    method: &Method,
    path: &str,
) -> Result<(), ApiError> {
    let checked = path == "/ws" || !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    if !checked {
        return Ok(());
    }
    let theirs = origin.to_str().unwrap_or("");
    if !site.is_own_origin(request, theirs) {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "cross-site request refused: Origin '{theirs}' is not this dashboard ('{}'); behind a reverse proxy, \
                 name the address people open with --public-url (e.g. --public-url https://gpu1.example.com)",
                request.own_origin.as_deref().unwrap_or("no Host header"),
            ),
        });
    }
    Ok(())
}

/// The session id from the cookie of the page's scheme: over https only the `__Host-` one,
/// since any plain-http service on the same host name can plant a `gpudash_session`.
fn session_cookie(headers: &HeaderMap, secure: bool) -> Option<String> {
    cookie(headers, if secure { SECURE_SESSION_COOKIE } else { SESSION_COOKIE })
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('=').map(str::to_owned))
}

/// `Set-Cookie` for a session (or, with `max_age` 0, for clearing it).
fn session_set_cookie(secure: bool, value: &str, max_age: u64) -> String {
    if secure {
        format!("{SECURE_SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}; Secure")
    } else {
        format!("{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}")
    }
}

fn me(state: &AppState, identity: Option<&Identity>, by_proxy: bool) -> Me {
    let proxy = state.auth.proxy().map(team::auth::ProxyAuth::config);
    let sign_out = proxy.and_then(|p| p.sign_out.clone()).filter(|_| by_proxy);
    Me {
        user: identity.map(|i| i.user.clone()),
        role: identity.map(|i| i.role),
        anonymous: identity.is_none_or(|i| i.anonymous),
        auth_enabled: state.auth.enabled(),
        exposed_without_auth: state.exposed_without_auth,
        signals: state.allow_signals && !state.read_only,
        read_only: state.read_only,
        by_proxy,
        sign_out,
        sign_in: state.auth.oidc().map(|oidc| shared::auth::SignInWith {
            url: team::auth::oidc::LOGIN_PATH.to_owned(),
            provider: oidc.provider_name(),
        }),
    }
}

/// `GET /api/me`: who the page is talking as, and whether it should offer a login.
pub async fn whoami(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Json<Me> {
    Json(me(&state, caller.as_ref().map(|c| &c.identity), caller.as_ref().is_some_and(|c| c.by_proxy)))
}

/// `POST /api/login` `{"token": "..."}`: sets an HttpOnly, SameSite=Strict session cookie
/// (`__Host-` prefixed and `Secure` when the page is served over https).
pub async fn login(
    State(state): State<AppState>,
    Extension(edge): Extension<Edge>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let client = edge.site.client.to_string();
    let request: LoginRequest = serde_json::from_slice(&body).map_err(|e| {
        if state.auth.enabled() {
            state.audit.record_denied("unknown", &client, Action::Login, "session", "no token in the request");
        }
        ApiError::bad_request(format!("invalid login ({e}); send {{\"token\": \"...\"}}"))
    })?;
    if !state.auth.enabled() {
        return Err(ApiError::bad_request("this server has no tokens configured: everyone is already let in"));
    }
    let audit = |user: &str, outcome, detail: &str| {
        state.audit.record(&Event { user, client: &client, action: Action::Login, target: "session", outcome, detail });
    };
    match state.auth.login(&request.token, edge.site.client) {
        Ok((identity, session, lifetime)) => {
            audit(&identity.user, Outcome::Ok, identity.role.name());
            let cookie = session_set_cookie(edge.site.secure, &session, lifetime.as_secs());
            let mut response = Json(me(&state, Some(&identity), false)).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            Ok(response)
        }
        Err(refused) => {
            // Aggregated: a flood of wrong tokens cannot flood the log.
            state.audit.record_denied("unknown", &client, Action::Login, "session", &refused.to_string());
            Err(ApiError::from(refused))
        }
    }
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> Self {
        let status = match refused {
            Refused::Invalid => StatusCode::UNAUTHORIZED,
            Refused::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
        };
        ApiError { status, message: refused.to_string() }
    }
}

/// `POST /api/logout`: ends the session (its open WebSockets close) and clears the cookie: 204, or for a
/// session the OIDC provider opened 200 with `{"sign_out": URL}`, the provider's end-session address.
pub async fn logout(State(state): State<AppState>, Extension(edge): Extension<Edge>, headers: HeaderMap) -> Response {
    let mut provider = None;
    if let Some(session) = session_cookie(&headers, edge.site.secure) {
        let opened = state.auth.identify(None, Some(&session)).ok().and_then(|(_, opened)| opened);
        if opened.is_some_and(|s| s.from_provider) {
            provider = oidc::provider_sign_out(&state);
        }
        state.auth.logout(&session);
    }
    let mut response = match provider {
        Some(url) => Json(shared::auth::LoggedOut { sign_out: Some(url) }).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    };
    for secure in [false, true] {
        if secure && !edge.site.secure {
            continue;
        }
        if let Ok(value) = HeaderValue::from_str(&session_set_cookie(secure, "", 0)) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
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

    fn checked(site: &site::Site, h: &HeaderMap, method: &Method, path: &str) -> Result<(), ApiError> {
        let request = site.check("127.0.0.1:40000".parse().unwrap(), h)?;
        same_origin(site, &request, h, method, path)
    }

    #[test]
    fn cross_site_websockets_and_posts_are_refused() {
        let plain = site::Site { names: vec!["gpu1".into()], ..site::Site::default() };
        let foreign = headers(&[(header::HOST, "gpu1:7070"), (header::ORIGIN, "https://evil.example")]);
        assert!(checked(&plain, &foreign, &Method::GET, "/ws").is_err());
        assert!(checked(&plain, &foreign, &Method::POST, "/api/runs").is_err());
        assert!(checked(&plain, &foreign, &Method::GET, "/api/devices").is_ok(), "reads are not state changes");
        let own = headers(&[(header::HOST, "gpu1:7070"), (header::ORIGIN, "http://gpu1:7070")]);
        assert!(checked(&plain, &own, &Method::GET, "/ws").is_ok());
        let tls = site::Site { tls: true, ..plain.clone() };
        assert!(checked(&tls, &own, &Method::GET, "/ws").is_err(), "https page must come from https");
        let script = headers(&[(header::HOST, "gpu1:7070")]);
        assert!(checked(&plain, &script, &Method::POST, "/api/runs").is_ok());
    }

    #[test]
    fn a_tls_proxy_keeping_host_passes_with_its_public_url() {
        let behind = headers(&[(header::HOST, "gpu1.example.com"), (header::ORIGIN, "https://gpu1.example.com")]);
        let plain = site::Site::default();
        assert!(checked(&plain, &behind, &Method::POST, "/api/login").is_err(), "unknown name");
        let public = site::Site {
            public: vec![site::PublicUrl::parse("https://gpu1.example.com").unwrap()],
            ..site::Site::default()
        };
        assert!(checked(&public, &behind, &Method::POST, "/api/login").is_ok());
    }

    #[test]
    fn session_cookies_take_the_host_prefix_over_https() {
        assert!(session_set_cookie(true, "x", 60).starts_with("__Host-gpudash_session=x;"));
        assert!(session_set_cookie(true, "x", 60).ends_with("; Secure"));
        assert!(!session_set_cookie(false, "x", 60).contains("Secure"));
        let h = headers(&[(header::COOKIE, "gpudash_session=old; __Host-gpudash_session=new")]);
        assert_eq!(session_cookie(&h, true).as_deref(), Some("new"));
        assert_eq!(session_cookie(&h, false).as_deref(), Some("old"));
        let planted = headers(&[(header::COOKIE, "gpudash_session=planted-by-a-plain-http-port")]);
        assert_eq!(session_cookie(&planted, true), None, "over https the plain name is not accepted");
    }

    #[test]
    fn finds_the_session_cookie_among_others() {
        let h = headers(&[(header::COOKIE, "theme=dark; gpudash_session=abc123; x=y")]);
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("abc123"));
        assert_eq!(cookie(&HeaderMap::new(), SESSION_COOKIE), None);
    }
}
