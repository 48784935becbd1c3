//! Roles, tokens, sessions, cross-site checks, limits and the audit log.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use gpudash::audit::Audit;
use gpudash::audit::denied::ROWS_PER_WINDOW;
use gpudash::auth::AuthConfig;
use gpudash::store::{Retention, Store};
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, ORIGIN, SET_COOKIE};
use serde_json::{Value, json};
use shared::auth::{AuditOutcome, AuditQuery};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::support::{TestServer, audit_triples};

pub const VIEWER: &str = "viewer-token-0123456789";
pub const OPERATOR: &str = "operator-token-0123456789";
pub const OTHER_OPERATOR: &str = "other-token-0123456789";
pub const ADMIN: &str = "admin-token-0123456789";

/// A team server: four users, viewing and metrics as `viewers`/`metrics` say.
pub async fn team_server(viewers: &str, metrics: &str) -> TestServer {
    team_server_with(viewers, metrics, None).await
}

/// A team server keeping history (and the audit log) in `store`.
async fn team_server_with(viewers: &str, metrics: &str, store: Option<Store>) -> TestServer {
    let tokens =
        format!("vera:viewer:{VIEWER},omar:operator:{OPERATOR},olga:operator:{OTHER_OPERATOR},ada:admin:{ADMIN}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("viewers = \"{viewers}\"\nmetrics = \"{metrics}\"\n")).unwrap();
    let auth = AuthConfig::load(Some(file.path()), Some(&tokens)).unwrap();
    let options = gpudash::Options { auth, store, ..gpudash::Options::new(Duration::from_millis(200)) };
    TestServer::with_options(Box::new(Simulator::new(2, 200)), options).await
}

async fn call(method: &str, url: &str, token: Option<&str>, body: Option<Value>) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let mut request = match method {
        "POST" => client.post(url),
        _ => client.get(url),
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn run_request() -> Value {
    json!({ "device": 0, "params": { "kind": "latency" } })
}

#[tokio::test]
async fn roles_decide_who_may_run_cancel_and_read_the_audit_log() {
    let server = team_server("open", "open").await;
    let runs = server.url("/api/runs");

    let (status, body) = call("POST", &runs, None, Some(run_request())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["error"].as_str().unwrap().contains("needs the operator role"), "{body}");
    let (status, _) = call("POST", &runs, Some(VIEWER), Some(run_request())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = call("POST", &runs, Some("not-a-token-at-all"), Some(run_request())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body["error"].as_str().unwrap().contains("invalid token"));

    // The dry run (`POST /api/runs/check`) asks the same role as the submit, and queues nothing.
    let check = server.url("/api/runs/check");
    let (status, body) = call("POST", &check, None, Some(run_request())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["error"].as_str().unwrap().contains("needs the operator role"), "{body}");
    let (status, _) = call("POST", &check, Some(VIEWER), Some(run_request())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call("POST", &check, Some("not-a-token-at-all"), Some(run_request())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = call("POST", &check, Some(OPERATOR), Some(run_request())).await;
    assert_eq!((status, &body["devices"]), (StatusCode::OK, &json!([0])), "{body}");

    let (status, run) = call("POST", &runs, Some(OPERATOR), Some(run_request())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    assert_eq!(run["requested_by"], "omar");
    let cancel = server.url(&format!("/api/runs/{}/cancel", run["id"]));
    let (status, body) = call("POST", &cancel, Some(OTHER_OPERATOR), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["error"].as_str().unwrap().contains("someone else's run needs the admin role"), "{body}");
    let (status, _) = call("POST", &cancel, Some(ADMIN), None).await;
    assert!(status == StatusCode::OK || status == StatusCode::CONFLICT, "admin may cancel anyone's run: {status}");

    let (status, _) = call("GET", &server.url("/api/audit"), Some(OPERATOR), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, log) = call("GET", &server.url("/api/audit"), Some(ADMIN), None).await;
    assert_eq!(status, StatusCode::OK);
    let actions = audit_triples(&log);
    for expected in [
        ("anonymous", "experiment.start", "denied"),
        ("vera", "experiment.start", "denied"),
        ("omar", "experiment.start", "ok"),
        ("olga", "experiment.cancel", "denied"),
        ("omar", "audit.read", "denied"),
    ] {
        let expected = (expected.0.to_owned(), expected.1.to_owned(), expected.2.to_owned());
        assert!(actions.contains(&expected), "{expected:?} missing from {actions:?}");
    }
    assert!(log[0]["client"].as_str().unwrap().starts_with("127.0.0.1"));
    server.stop().await;
}

#[tokio::test]
async fn a_flood_of_denied_logins_writes_a_few_rows_and_a_count_while_real_logins_stay_findable() {
    const FLOOD: u64 = 2000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true, Retention::default()).unwrap();
    let database = store.path().to_owned();
    let server = team_server_with("token", "token", Some(store)).await;
    let login = server.url("/api/login");
    let client = reqwest::Client::new();
    let ok = client.post(&login).json(&json!({ "token": OPERATOR })).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);

    // Wrong tokens and requests with no token at all, a few at a time.
    futures_util::stream::iter(0..FLOOD)
        .for_each_concurrent(8, |i| {
            let request = client.post(&login).header("content-type", "application/json");
            let request = if i % 2 == 0 { request.body(r#"{"token": "guess"}"#) } else { request.body("{}") };
            async move {
                let status = request.send().await.unwrap().status();
                assert!(status.is_client_error(), "{status}");
            }
        })
        .await;

    // The real login is found among the denied ones by filtering.
    let (status, found) = call("GET", &server.url("/api/audit?action=login&outcome=ok"), Some(ADMIN), None).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    let users: Vec<&str> = found.as_array().unwrap().iter().map(|e| e["user"].as_str().unwrap()).collect();
    assert_eq!(users, ["omar"]);
    let (_, denied) = call("GET", &server.url("/api/audit?outcome=denied&limit=1000"), Some(ADMIN), None).await;
    assert!(denied.as_array().unwrap().len() <= 2 * (ROWS_PER_WINDOW as usize + 1), "{denied}");

    // Shutting down writes the count of the window still open.
    server.stop().await;
    let query = AuditQuery {
        action: Some("login".to_owned()),
        outcome: Some(AuditOutcome::Denied),
        limit: Some(1000),
        ..AuditQuery::default()
    };
    let rows = Audit::sqlite(&database).unwrap().list(&query).unwrap();
    let counts: Vec<u64> = rows
        .iter()
        .filter_map(|r| r.detail.split_once(" more denied login attempts from 127.0.0.1")?.0.parse().ok())
        .collect();
    assert!(!counts.is_empty(), "no row counts the denials: {rows:?}");
    assert!(rows.len() <= 2 * (ROWS_PER_WINDOW as usize + 1), "{} rows for {FLOOD} denials", rows.len());
    let written = (rows.len() - counts.len()) as u64;
    assert_eq!(written + counts.iter().sum::<u64>(), FLOOD, "every denial is a row or counted: {rows:?}");
}

#[tokio::test]
async fn token_gated_viewing_needs_a_token_everywhere_but_the_page() {
    let server = team_server("token", "token").await;
    for path in [
        "/api/devices",
        "/api/history?device=0&metric=gpu_util",
        "/api/history/all?range=1h",
        "/api/usage?from=0&to=1&utc_offset=60",
        "/api/usage.csv?from=0&to=1&utc_offset=-300",
        "/metrics",
        "/api/runs",
        "/api/fleet?gpus=none",
        "/api/fleet/host/gpu-01:7070",
        "/api/fleet/owners?range=24h",
    ] {
        let (status, body) = call("GET", &server.url(path), None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(body["error"].as_str().unwrap().contains("token"), "{path}: {body}");
    }
    let (status, _) = call("GET", &server.url("/api/devices"), Some(VIEWER), None).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = reqwest::Client::new().get(server.url("/metrics")).bearer_auth(VIEWER).send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    for path in ["/", "/assets/style.css", "/healthz", "/api/me"] {
        assert_eq!(reqwest::get(server.url(path)).await.unwrap().status(), StatusCode::OK, "{path} stays public");
    }
    let (_, me) = call("GET", &server.url("/api/me"), None, None).await;
    assert_eq!(me["auth_enabled"], true);
    assert_eq!(me["user"], Value::Null);

    // A WebSocket client without a browser Origin is an API client: it needs a token.
    let refused = tokio_tungstenite::connect_async(server.ws_url()).await;
    assert!(refused.is_err(), "a WebSocket without a token must be refused");
    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {VIEWER}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.expect("with a token");
    assert!(matches!(socket.next().await, Some(Ok(Message::Text(_)))));
    server.stop().await;
}

#[tokio::test]
async fn the_login_form_sets_a_strict_http_only_cookie_that_works_until_logout() {
    let server = team_server("token", "open").await;
    let client = reqwest::Client::new();
    let wrong = client.post(server.url("/api/login")).json(&json!({ "token": "guess" })).send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let ok = client.post(server.url("/api/login")).json(&json!({ "token": OPERATOR })).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let cookie = ok.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/"), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();
    let me: Value = ok.json().await.unwrap();
    assert_eq!((me["user"].as_str(), me["role"].as_str()), (Some("omar"), Some("operator")));

    let devices = client.get(server.url("/api/devices")).header(COOKIE, &session).send().await.unwrap();
    assert_eq!(devices.status(), StatusCode::OK);
    let run = client.post(server.url("/api/runs")).header(COOKIE, &session).json(&run_request()).send().await.unwrap();
    assert_eq!(run.status(), StatusCode::ACCEPTED);

    let out = client.post(server.url("/api/logout")).header(COOKIE, &session).send().await.unwrap();
    assert!(out.headers()[SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    let after = client.get(server.url("/api/devices")).header(COOKIE, &session).send().await.unwrap();
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED);

    let (_, log) = call("GET", &server.url("/api/audit"), Some(ADMIN), None).await;
    let logins: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "login")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(logins, ["ok", "denied"], "newest first");
    server.stop().await;
}

#[tokio::test]
async fn cross_site_websockets_and_posts_are_refused() {
    let server = TestServer::simulated(1, 200).await;
    let host = server.running.addr().to_string();
    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("origin", "https://evil.example".parse().unwrap());
    let refused = tokio_tungstenite::connect_async(request).await.unwrap_err();
    assert!(refused.to_string().contains("403"), "{refused}");

    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("origin", format!("http://{host}").parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.is_ok(), "the dashboard's own page connects");

    let post = reqwest::Client::new()
        .post(server.url("/api/runs"))
        .header(ORIGIN, "https://evil.example")
        .json(&run_request())
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::FORBIDDEN);
    let body: Value = post.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("cross-site request refused"));
    server.stop().await;
}

#[tokio::test]
async fn a_flooding_socket_is_closed_with_policy_violation() {
    let server = TestServer::simulated(1, 1000).await;
    let (mut socket, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
    for _ in 0..100 {
        if socket.send(Message::text(r#"{"type":"resync"}"#)).await.is_err() {
            break;
        }
    }
    let code = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(frame) = socket.next().await {
            if let Ok(Message::Close(frame)) = frame {
                return frame.map(|f| f.code);
            }
        }
        None
    })
    .await
    .expect("closed in time");
    assert_eq!(code, Some(CloseCode::Policy));
    assert_eq!(reqwest::get(server.url("/healthz")).await.unwrap().status(), StatusCode::OK, "server stays up");
    server.stop().await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused_and_headers_are_hardened() {
    let server = TestServer::simulated(1, 1000).await;
    let huge = format!("{{\"device\":0,\"params\":{{\"kind\":\"latency\"}},\"pad\":\"{}\"}}", "x".repeat(1 << 20));
    let response = reqwest::Client::new()
        .post(server.url("/api/runs"))
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let page = reqwest::get(server.url("/")).await.unwrap();
    let h = page.headers();
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    server.stop().await;
}
