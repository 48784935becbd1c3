//! The job notices' routes in the bad-input suite: `PUT /api/jobs/notices` bodies, the admin-only
//! `POST /api/jobs/digest`, and the checks every route gets (a foreign Origin, a rebinding Host,
//! a body over the limit).

use reqwest::{Method, StatusCode};

use super::cases::{Case, case, post};
use crate::security::{ADMIN, VIEWER};

fn put(body: &str, status: StatusCode, says: &'static str) -> Case {
    Case { method: Method::PUT, ..post("/api/jobs/notices", body, status, says) }
}

pub(super) fn cases() -> Vec<Case> {
    use StatusCode as S;
    const EVIL: &[(&str, &str)] = &[("content-type", "application/json"), ("origin", "https://evil.example")];
    const REBIND: &[(&str, &str)] = &[("content-type", "application/json"), ("host", "rebind.test:7070")];
    vec![
        put("{}", S::BAD_REQUEST, "nothing to change"),
        put(r#"{"notices":"yes"}"#, S::BAD_REQUEST, "invalid choice"),
        put(r#"{"notice":false}"#, S::BAD_REQUEST, "unknown field `notice`"),
        put(r#"{"digest":null,"notices":null}"#, S::BAD_REQUEST, "nothing to change"),
        put("[", S::BAD_REQUEST, "either or both"),
        Case { body: Some(vec![0xff, 0xfe]), ..put("", S::BAD_REQUEST, "invalid choice") },
        Case { token: None, ..put(r#"{"notices":false}"#, S::UNAUTHORIZED, "token") },
        Case { headers: EVIL, ..put(r#"{"notices":false}"#, S::FORBIDDEN, "cross-site") },
        Case { headers: REBIND, ..put(r#"{"notices":false}"#, S::MISDIRECTED_REQUEST, "--public-url") },
        Case { body: Some(vec![b' '; 2 << 20]), ..put("", S::PAYLOAD_TOO_LARGE, "over the limit") },
        case(Method::DELETE, "/api/jobs/notices", S::METHOD_NOT_ALLOWED, "not allowed"),
        Case { headers: REBIND, ..case(Method::GET, "/api/jobs/notices", S::MISDIRECTED_REQUEST, "--public-url") },
        post("/api/jobs/digest", "", S::FORBIDDEN, "admin role"),
        Case { token: Some(VIEWER), ..post("/api/jobs/digest", "", S::FORBIDDEN, "admin role") },
        Case { token: Some(ADMIN), ..post("/api/jobs/digest", "{}", S::BAD_REQUEST, "takes no body") },
        Case { token: Some(ADMIN), headers: EVIL, ..post("/api/jobs/digest", "", S::FORBIDDEN, "cross-site") },
        case(Method::GET, "/api/jobs/digest", S::METHOD_NOT_ALLOWED, "not allowed"),
    ]
}
