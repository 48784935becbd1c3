//! Who vouches for a caller besides a token or a session: a scraper's own credentials on `/metrics`
//! (`--web-config-file`'s basic auth, `--metrics-client-ca`'s client certificate), and a trusted auth
//! proxy's headers (`--auth-proxy-header`). Each refusal is audited and answered here.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use shared::auth::Role;

use super::super::{ApiError, AppState, site};
use super::refused_response;
use team::audit::{Action, Event, Outcome};
use team::auth::proxy::Presented;
use team::auth::web_config::basic_credentials;
use team::auth::{Identity, ProxyUser, Refused, ScrapeUsers};

/// Who a scraper with a verified client certificate is (what `/metrics` shows it, as to anyone signed in).
const CERTIFIED_SCRAPER: &str = "client-certificate";

/// What a scraper without good credentials is told to send.
const BASIC_REALM: &str = "Basic realm=\"gpudash /metrics\", charset=\"UTF-8\"";

/// Asks for basic auth, on a 401 from `/metrics`.
pub(super) fn challenge(response: &mut Response) {
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(BASIC_REALM));
}

/// A scraper of `/metrics` by its client certificate (verified in the handshake) or its basic-auth
/// account; `Ok(None)` on other paths or without either, and the 401 or 429 for a wrong password.
pub(super) async fn scraper(
    state: &AppState,
    path: &str,
    headers: &HeaderMap,
    certified: bool,
    client: IpAddr,
) -> Result<Option<Identity>, Response> {
    if path != "/metrics" {
        return Ok(None);
    }
    if certified {
        return Ok(Some(Identity { user: CERTIFIED_SCRAPER.to_owned(), role: Role::Viewer, anonymous: false }));
    }
    let basic = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(basic_credentials);
    let (Some(scrapers), Some((user, password))) = (state.auth.scrapers(), basic) else { return Ok(None) };
    match scrape_login(&scrapers, user.clone(), password, state, client).await {
        Ok(identity) => Ok(Some(identity)),
        Err(refused) => {
            let detail = format!("user '{}': {refused}", user.chars().take(64).collect::<String>());
            state.audit.record_denied("unknown", &client.to_string(), Action::MetricsScrape, "/metrics", &detail);
            let mut response = refused_response(&refused, "wrong user or password for /metrics");
            challenge(&mut response);
            Err(response)
        }
    }
}

/// Checks a scraper's basic-auth credentials: remembered ones at once, others by bcrypt off the runtime's
/// workers, and only while `from` is not throttled (bcrypt's work is the thing a flood would buy).
async fn scrape_login(
    scrapers: &Arc<ScrapeUsers>,
    user: String,
    password: String,
    state: &AppState,
    from: IpAddr,
) -> Result<Identity, Refused> {
    let who = |user: String| Identity { user, role: Role::Viewer, anonymous: false };
    if scrapers.remembered(&user, &password) {
        return Ok(who(user));
    }
    state.auth.may_check_secret(from)?;
    let scrapers = scrapers.clone();
    let checked = tokio::task::spawn_blocking(move || scrapers.verify(&user, &password).then_some(user)).await;
    checked.ok().flatten().map(who).ok_or(Refused::Invalid)
}

/// The trusted auth proxy's user (unless the request brings its own token); the sign-in audited when
/// it is news, a refusal audited and answered 403.
pub(super) fn proxied(
    state: &AppState,
    site: &site::Request,
    has_token: bool,
    peer: &SocketAddr,
    headers: &HeaderMap,
) -> Result<Option<ProxyUser>, ApiError> {
    let Some(proxy) = state.auth.proxy().filter(|_| !has_token) else { return Ok(None) };
    let client = site.client.to_string();
    let values =
        |name: &str| -> Vec<&str> { headers.get_all(name).iter().map(|v| v.to_str().unwrap_or("\u{fffd}")).collect() };
    let config = proxy.config();
    let presented = Presented { user: values(&config.user_header), groups: values(&config.groups_header) };
    let user = match proxy.identify(site.via_trusted_proxy, &peer.ip().to_string(), &presented) {
        Ok(user) => user,
        Err(refused) => {
            let message = refused.to_string();
            state.audit.record_denied("unknown", &client, Action::Login, "proxy", &message);
            return Err(ApiError { status: StatusCode::FORBIDDEN, message });
        }
    };
    if let Some(user) = user.as_ref().filter(|user| user.audit) {
        let who = &user.identity;
        let detail = format!("{} through the auth proxy (groups: {})", who.role.name(), user.groups.join(", "));
        state.audit.record(&Event {
            user: &who.user,
            client: &client,
            action: Action::Login,
            target: "proxy",
            outcome: Outcome::Ok,
            detail: &detail,
        });
    }
    Ok(user)
}
