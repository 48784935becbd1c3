//! `--read-only` and sign-in by a trusted auth proxy (`--auth-proxy-header`), against a running server.
//! The same proxy mode through Debian's nginx with an `auth_request` step is in `proxy.rs`.

use std::net::IpAddr;
use std::time::Duration;

use gpudash::auth::{AuthConfig, GroupRoles, ProxyConfig};
use gpudash::telemetry::simulator::Simulator;
use gpudash::web::site::parse_trusted_proxy;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::auth::Role;

use crate::security::{ADMIN, OPERATOR};
use crate::support::{TestServer, audit_triples};

async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every request that changes something, as (method, path, body).
fn changes() -> Vec<(&'static str, &'static str, Value)> {
    let run = json!({ "device": 0, "params": { "kind": "latency" } });
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let booking = json!({ "devices": [0], "start_ms": now_ms + 60_000, "end_ms": now_ms + 3_600_000, "note": "x" });
    vec![
        ("POST", "/api/runs", run.clone()),
        ("POST", "/api/runs/check", run),
        ("POST", "/api/runs/1/cancel", Value::Null),
        ("POST", "/api/lab/devices/0/empty_cache", Value::Null),
        ("POST", "/api/alerts/silences", json!({ "rule": "temperature", "gpu": 0, "duration": "2h", "reason": "fan" })),
        ("DELETE", "/api/alerts/silences/1", Value::Null),
        ("POST", "/api/processes/4242/signal", json!({ "signal": "SIGTERM" })),
        ("POST", "/api/reservations", booking),
        ("DELETE", "/api/reservations/1", Value::Null),
        ("POST", "/api/bridge/1/empty_cache", Value::Null),
        ("POST", "/api/bridge/1/allocator_map", Value::Null),
    ]
}

fn request(client: &reqwest::Client, method: &str, url: &str, body: &Value) -> reqwest::RequestBuilder {
    let request = match method {
        "POST" => client.post(url),
        "DELETE" => client.delete(url),
        _ => client.get(url),
    };
    if body.is_null() { request } else { request.json(body) }
}

/// An operator and an admin on one simulated GPU, signals on, read-only as `read_only` says.
async fn team_server(read_only: bool) -> TestServer {
    let spec = format!("omar:operator:{OPERATOR},ada:admin:{ADMIN}");
    let options = gpudash::Options {
        auth: AuthConfig::load(None, Some(&spec)).unwrap(),
        read_only,
        allow_signals: true,
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await
}

#[tokio::test]
async fn read_only_refuses_every_change_to_every_role_and_says_why() {
    let server = team_server(true).await;
    let client = reqwest::Client::new();

    for token in [OPERATOR, ADMIN] {
        for (method, path, body) in changes() {
            let (status, answer) = send(request(&client, method, &server.url(path), &body).bearer_auth(token)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
            let message = answer["error"].as_str().unwrap_or_default();
            assert!(message.starts_with("this dashboard is read-only (--read-only): "), "{method} {path}: {message}");
        }
    }
    // Looking still works, the admin's audit log included, and it holds the refusals.
    let (status, devices) = send(client.get(server.url("/api/devices")).bearer_auth(OPERATOR)).await;
    assert_eq!(status, StatusCode::OK, "{devices}");
    let (_, me) = send(client.get(server.url("/api/me")).bearer_auth(ADMIN)).await;
    assert_eq!((me["read_only"].as_bool(), me["signals"].as_bool()), (Some(true), Some(false)), "{me}");
    let (status, log) = send(client.get(server.url("/api/audit")).bearer_auth(ADMIN)).await;
    assert_eq!(status, StatusCode::OK);
    let triples = audit_triples(&log);
    for action in ["experiment.start", "experiment.cancel", "empty_cache", "alert.silence", "alert.unsilence"] {
        let refused = ("ada".to_owned(), action.to_owned(), "denied".to_owned());
        assert!(triples.contains(&refused), "{refused:?} missing from {triples:?}");
    }
    for action in ["process.signal", "reservation.create", "reservation.release", "bridge.empty_cache"] {
        assert!(triples.iter().any(|(_, a, o)| a == action && o == "denied"), "{action} not audited: {triples:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn without_read_only_the_same_requests_reach_their_handlers() {
    // The fault the test above must catch: were the read-only rule not applied, these answers would differ.
    let server = team_server(false).await;
    let client = reqwest::Client::new();
    for (method, path, body) in changes() {
        let (status, answer) = send(request(&client, method, &server.url(path), &body).bearer_auth(ADMIN)).await;
        let message = answer["error"].as_str().unwrap_or_default();
        // The handler answered: done, or a reason of its own (no run 1, no such process), never a refusal.
        assert_ne!(status, StatusCode::FORBIDDEN, "{method} {path}: {message}");
        assert!(!message.contains("read-only"), "{method} {path}: {status} {message}");
    }
    let (_, me) = send(client.get(server.url("/api/me")).bearer_auth(ADMIN)).await;
    assert_eq!((me["read_only"].as_bool(), me["signals"].as_bool()), (Some(false), Some(true)), "{me}");
    server.stop().await;
}

/// A server whose people sign in through an auth proxy at 127.0.0.1 (`--auth-proxy-header X-Forwarded-User`,
/// gpu-admins are admins, gpu-users operators, everyone else as `others` says), with one token for scripts.
async fn proxied_server(others: Option<Role>) -> TestServer {
    let options = gpudash::Options {
        auth: AuthConfig::load(None, Some(&format!("omar:operator:{OPERATOR}"))).unwrap(),
        proxy: Some(ProxyConfig {
            user_header: gpudash::auth::proxy::parse_header_name("X-Forwarded-User").unwrap(),
            groups_header: gpudash::auth::proxy::parse_header_name("X-Forwarded-Groups").unwrap(),
            roles: GroupRoles { admin: vec!["gpu-admins".into()], operator: vec!["gpu-users".into()], others },
            sign_out: Some("/oauth2/sign_out".into()),
            user_map: gpudash::auth::names::UserMap::default(),
        }),
        site: gpudash::web::site::Site {
            trusted_proxies: vec![parse_trusted_proxy("127.0.0.1").unwrap()],
            ..Default::default()
        },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await
}

/// A client whose connections come from `address` (127.0.0.1 is the trusted proxy; 127.0.0.2 is not).
fn client_from(address: &str) -> reqwest::Client {
    reqwest::Client::builder().local_address(address.parse::<IpAddr>().unwrap()).build().unwrap()
}

fn as_user(request: reqwest::RequestBuilder, user: &str, groups: &str) -> reqwest::RequestBuilder {
    request.header("X-Forwarded-User", user).header("X-Forwarded-Groups", groups)
}

#[tokio::test]
async fn the_trusted_proxys_user_and_groups_decide_the_role() {
    let server = proxied_server(Some(Role::Viewer)).await;
    let proxy = client_from("127.0.0.1");
    let run = json!({ "device": 0, "params": { "kind": "latency" } });

    let (status, me) = send(as_user(proxy.get(server.url("/api/me")), "ana", "staff,gpu-admins")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((me["user"].as_str(), me["role"].as_str()), (Some("ana"), Some("admin")), "{me}");
    assert_eq!((me["by_proxy"].as_bool(), me["sign_out"].as_str()), (Some(true), Some("/oauth2/sign_out")));
    let (status, _) = send(as_user(proxy.get(server.url("/api/audit")), "ana", "gpu-admins")).await;
    assert_eq!(status, StatusCode::OK, "an admin group's member reads the audit log");

    let (status, answer) = send(as_user(proxy.post(server.url("/api/runs/check")), "bo", "gpu-users").json(&run)).await;
    assert_eq!(status, StatusCode::OK, "an operator group's member may run: {answer}");
    let (status, answer) = send(as_user(proxy.post(server.url("/api/runs/check")), "cy", "students").json(&run)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["error"], "running an experiment needs the operator role; 'cy' has viewer");

    // Scripts keep their tokens through the proxy; without the header nobody is named (anonymous viewing).
    let (_, me) = send(proxy.get(server.url("/api/me")).bearer_auth(OPERATOR)).await;
    assert_eq!((me["user"].as_str(), me["by_proxy"].as_bool()), (Some("omar"), Some(false)), "{me}");
    let (_, me) = send(proxy.get(server.url("/api/me"))).await;
    assert_eq!((me["anonymous"].as_bool(), me["role"].as_str()), (Some(true), Some("viewer")), "{me}");

    let (_, log) = send(as_user(proxy.get(server.url("/api/audit")), "ana", "gpu-admins")).await;
    let logins: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "login" && e["target"] == "proxy" && e["outcome"] == "ok")
        .filter_map(|e| e["user"].as_str())
        .collect();
    assert_eq!(logins.iter().filter(|u| **u == "ana").count(), 1, "one sign-in row per user, not per request: {log}");
    assert!(logins.contains(&"bo") && logins.contains(&"cy"), "{logins:?}");
    server.stop().await;
}

#[tokio::test]
async fn the_same_headers_from_anyone_but_the_proxy_are_refused_and_audited() {
    let server = proxied_server(None).await;
    let stranger = client_from("127.0.0.2");
    let (status, answer) = send(as_user(stranger.get(server.url("/api/me")), "ana", "gpu-admins")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        answer["error"],
        "the x-forwarded-user header is believed only from a --trusted-proxy, and this request came from 127.0.0.2 \
         directly; sign in through the proxy"
    );
    // --default-role none: someone the proxy signed in who is in no listed group gets nothing.
    let proxy = client_from("127.0.0.1");
    let (status, answer) = send(as_user(proxy.get(server.url("/api/devices")), "cy", "students")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("--default-role none refuses everyone else"), "{answer}");
    let (status, answer) = send(as_user(proxy.get(server.url("/api/me")), "ana smith", "gpu-admins")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    // Bad input in the proxy's headers: bytes that are not text, a name too long, the header twice.
    let garbage = reqwest::header::HeaderValue::from_bytes(b"\xff\xfeana").unwrap();
    let (status, answer) = send(proxy.get(server.url("/api/me")).header("X-Forwarded-User", garbage)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("a user name here is 1–64 letters"), "{answer}");
    let long = "a".repeat(10_000);
    let (status, answer) = send(as_user(proxy.get(server.url("/api/me")), &long, "gpu-admins")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(answer["error"].as_str().unwrap().len() < 400, "the refusal quotes a bounded part of the name");
    let twice = proxy.get(server.url("/api/me")).header("X-Forwarded-User", "cy").header("X-Forwarded-User", "ana");
    let (status, answer) = send(twice).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(answer["error"].as_str().unwrap().contains("more than once"), "{answer}");

    // Basic credentials name nobody outside /metrics: an anonymous viewer, refused the audit log.
    let (status, answer) = send(proxy.get(server.url("/api/audit")).basic_auth("ana", Some("x"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("an anonymous visitor"), "{answer}");

    let (status, log) = send(as_user(proxy.get(server.url("/api/audit")), "ada", "gpu-admins")).await;
    assert_eq!(status, StatusCode::OK, "{log}");
    let denied: Vec<(&str, &str)> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "login" && e["outcome"] == "denied")
        .map(|e| (e["client"].as_str().unwrap(), e["detail"].as_str().unwrap()))
        .collect();
    assert!(
        denied.iter().any(|(client, detail)| client.starts_with("127.0.0.2") && detail.contains("--trusted-proxy"))
    );
    assert!(denied.iter().any(|(_, detail)| detail.contains("'cy' is in none of the groups")), "{denied:?}");
    server.stop().await;
}
