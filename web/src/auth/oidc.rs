//! The OIDC sign-in's two routes: `GET /auth/oidc/login` sends the browser to the provider, and the
//! provider sends it back to `GET /auth/oidc/callback` (a session cookie on success, a page saying why
//! not otherwise). `POST /api/logout` of such a session names the provider's end-session address.

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::{Edge, cookie, session_set_cookie};
use crate::{ApiError, AppState};
use team::audit::{Action, Event, Outcome};
use team::auth::oidc::{Oidc, OidcRefused};

/// The cookie binding a sign-in to the browser that started it, over plain HTTP.
const STATE_COOKIE: &str = "gpudash_oidc_state";
/// Over HTTPS, bound to this exact host like the session cookie.
const SECURE_STATE_COOKIE: &str = "__Host-gpudash_oidc_state";
/// Longest value of a query parameter the provider sends back.
const MAX_PARAM: usize = 4096;

/// `Set-Cookie` for the sign-in's state: `Lax`, since the provider's redirect back is a cross-site navigation.
fn state_set_cookie(secure: bool, value: &str, max_age: u64) -> String {
    let name = if secure { SECURE_STATE_COOKIE } else { STATE_COOKIE };
    let tail = if secure { "; Secure" } else { "" };
    format!("{name}={value}; HttpOnly; SameSite=Lax; Path=/; Max-Age={max_age}{tail}")
}

fn provider(state: &AppState) -> Result<std::sync::Arc<Oidc>, ApiError> {
    state.auth.oidc().cloned().ok_or_else(|| ApiError {
        status: StatusCode::NOT_FOUND,
        message: "this dashboard has no OIDC sign-in (--oidc-issuer); sign in with a token".to_owned(),
    })
}

/// The query's parameters, each at most [`MAX_PARAM`] bytes, or a 400 naming the one that is not.
fn params(query: Option<&str>, allowed: &[&str]) -> Result<Vec<(String, String)>, ApiError> {
    let mut found = Vec::new();
    for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if !allowed.contains(&name.as_ref()) {
            continue;
        }
        if value.len() > MAX_PARAM || found.iter().any(|(n, _): &(String, String)| *n == name) {
            return Err(ApiError::bad_request(format!(
                "the query parameter '{name}' is longer than {MAX_PARAM} bytes or given twice"
            )));
        }
        found.push((name.into_owned(), value.into_owned()));
    }
    Ok(found)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Where to go after signing in: a path on this site, else the dashboard's front page.
fn next_page(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && path.len() <= 2048
                && !path.chars().any(char::is_control) =>
        {
            path.to_owned()
        }
        _ => "/".to_owned(),
    }
}

fn redirect(to: &str, cookies: &[String]) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    for value in cookies {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A small page saying why the sign-in failed, with the way to try again.
fn refusal_page(status: StatusCode, message: &str) -> Response {
    let escaped = message.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let body = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign-in refused · gpudash</title></head>\
         <body><main><h1>Sign-in refused</h1><p id=\"sign-in-error\">{escaped}</p>\
         <p><a id=\"sign-in-again\" href=\"/auth/oidc/login\">Sign in again</a> · <a href=\"/\">Back to the dashboard</a></p>\
         </main></body></html>\n"
    );
    let mut response = (status, Html(body)).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /auth/oidc/login?next=/path`: sends the browser to the provider, the sign-in sealed in its state
/// cookie. Opened under another address than `--oidc-redirect-url`'s, it first goes there: the cookie
/// must be set where the provider will send the browser back.
pub async fn login(
    State(state): State<AppState>,
    Extension(edge): Extension<Edge>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let oidc = provider(&state)?;
    let found = params(query.as_deref(), &["next"])?;
    let next = next_page(param(&found, "next"));
    let home = oidc.config().redirect_url.origin().ascii_serialization();
    if edge.site.own_origin.as_deref().is_some_and(|own| own != home) {
        let mut there = oidc.config().redirect_url.clone();
        there.set_path(team::auth::oidc::LOGIN_PATH);
        there.query_pairs_mut().append_pair("next", &next);
        return Ok(redirect(there.as_str(), &[]));
    }
    let begun = oidc.begin(&next);
    let cookie = state_set_cookie(edge.site.secure, &begun.cookie, team::auth::oidc::PENDING_SECONDS);
    Ok(redirect(&begun.url, &[cookie]))
}

/// `GET /auth/oidc/callback?code=…&state=…`: the provider's answer. A session on success; otherwise a
/// page saying why, and an audit row.
pub async fn callback(
    State(state): State<AppState>,
    Extension(edge): Extension<Edge>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let oidc = provider(&state)?;
    let found = params(query.as_deref(), &["code", "state", "error", "error_description", "iss"])?;
    let client = edge.site.client.to_string();
    let secure = edge.site.secure;
    let forget_state = state_set_cookie(secure, "", 0);
    let refuse = |status: StatusCode, refused: &OidcRefused| {
        let message = refused.to_string();
        state.audit.record_denied("unknown", &client, Action::Login, "oidc", &message);
        let mut page = refusal_page(status, &message);
        if let Ok(value) = HeaderValue::from_str(&forget_state) {
            page.headers_mut().append(header::SET_COOKIE, value);
        }
        page
    };
    let (code, sent) = (param(&found, "code"), param(&found, "state"));
    let error = param(&found, "error");
    if code.is_none() && error.is_none() {
        return Err(ApiError::bad_request(
            "this address is where the identity provider sends people back, with code and state in the query; \
             to sign in, open /auth/oidc/login",
        ));
    }
    // The sign-in must come back to the browser that started it (login CSRF otherwise); nothing else in
    // the answer is read before, so a crafted link cannot put its words on this site.
    let bound = cookie(&headers, if secure { SECURE_STATE_COOKIE } else { STATE_COOKIE });
    let pending = match oidc.bound(bound.as_deref(), sent) {
        Ok(pending) => pending,
        Err(refused) => return Ok(refuse(StatusCode::FORBIDDEN, &refused)),
    };
    // RFC 9207: a provider that names itself in the answer must be ours (a mix-up attack otherwise).
    if let Some(issuer) = param(&found, "iss")
        && issuer.trim_end_matches('/') != oidc.config().issuer.trim_end_matches('/')
    {
        let said: String = issuer.chars().take(200).collect();
        let refused = OidcRefused::Provider(format!("the answer came from the issuer {said}, not --oidc-issuer"));
        return Ok(refuse(StatusCode::FORBIDDEN, &refused));
    }
    let Some(code) = code else {
        let described = param(&found, "error_description").map(|d| format!(" ({d})")).unwrap_or_default();
        let shown: String = format!("{}{described}", error.unwrap_or_default()).chars().take(300).collect();
        return Ok(refuse(StatusCode::FORBIDDEN, &OidcRefused::Provider(shown)));
    };
    let signed_in = match oidc.finish(pending, code).await {
        Ok(signed_in) => signed_in,
        Err(refused) => {
            let status = match refused {
                OidcRefused::NoRole { .. }
                | OidcRefused::BadUser(_)
                | OidcRefused::Unverified(_)
                | OidcRefused::Provider(_)
                | OidcRefused::Unknown => StatusCode::FORBIDDEN,
                OidcRefused::Unreachable(_) => StatusCode::BAD_GATEWAY,
                OidcRefused::IdToken(_) | OidcRefused::NoUser { .. } => StatusCode::UNAUTHORIZED,
            };
            return Ok(refuse(status, &refused));
        }
    };
    let identity = &signed_in.identity;
    let (session, lifetime) = state.auth.provider_session(identity);
    let mut detail = format!("{} via {}", identity.role.name(), oidc.provider_name());
    if signed_in.signed_in_as != identity.user {
        detail.push_str(&format!(", signed in as {}", signed_in.signed_in_as));
    }
    if !signed_in.groups.is_empty() {
        detail.push_str(&format!("; groups: {}", signed_in.groups.join(", ")));
    }
    let event = Event {
        user: &identity.user,
        client: &client,
        action: Action::Login,
        target: "oidc",
        outcome: Outcome::Ok,
        detail: &detail,
    };
    state.audit.record(&event);
    let session_cookie = session_set_cookie(secure, &session, lifetime.as_secs());
    Ok(redirect(&signed_in.next, &[session_cookie, forget_state]))
}

/// Where the browser goes after `POST /api/logout` ended a session the provider opened: the provider's
/// end-session endpoint (RP-initiated logout), coming back to this dashboard; `None` when it has none.
pub(super) fn provider_sign_out(state: &AppState) -> Option<String> {
    let oidc = state.auth.oidc()?;
    let mut back = oidc.config().redirect_url.clone();
    back.set_path("/");
    oidc.end_session_url(back.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_here_are_followed_after_signing_in() {
        assert_eq!(next_page(Some("/#lab")), "/#lab");
        assert_eq!(next_page(Some("//evil.example.org")), "/");
        assert_eq!(next_page(Some("https://evil.example.org")), "/");
        assert_eq!(next_page(Some("/\\evil")), "/");
        assert_eq!(next_page(None), "/");
    }

    #[test]
    fn query_parameters_are_bounded_and_single() {
        assert_eq!(params(Some("code=a&state=b&x=y"), &["code", "state"]).unwrap().len(), 2);
        assert!(params(Some("code=a&code=b"), &["code"]).unwrap_err().message.contains("given twice"));
        let long = format!("code={}", "a".repeat(MAX_PARAM + 1));
        assert!(params(Some(&long), &["code"]).is_err());
    }

    #[test]
    fn the_state_cookie_survives_the_providers_redirect() {
        assert!(state_set_cookie(false, "s", 600).contains("SameSite=Lax"));
        assert!(state_set_cookie(true, "s", 600).starts_with("__Host-gpudash_oidc_state=s;"));
        assert!(refusal_page(StatusCode::FORBIDDEN, "<b>").status() == StatusCode::FORBIDDEN);
    }
}
