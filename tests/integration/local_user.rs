//! Who is on the other end of a loopback connection: without tokens only gpudash's own user (and
//! the `--local-user`s) is let in, so a plain proxy run by another user or another user's browser
//! is refused; with `--trusted-proxy-user`, only that user's sockets may forward client addresses.
//! Another user's socket is opened by `setpriv` (util-linux) running curl as `nobody`, so these
//! tests need root, as CI has.

use std::time::Duration;

use gpudash::auth::AuthConfig;
use gpudash::telemetry::simulator::Simulator;
use gpudash::web::local_user::{Users, own_uid};
use gpudash::web::site::{Site, parse_trusted_proxy};
use serde_json::{Value, json};

use crate::support::TestServer;

const NOBODY: u32 = 65534;
const ADMIN: &str = "admin-token-0123456789";

/// Whether this test can open a socket as another user; says so when it cannot.
#[expect(clippy::print_stderr, reason = "a skipped test says why")]
fn can_switch_users() -> bool {
    let root = own_uid() == 0;
    if !root {
        eprintln!("skipped: opening a socket as another user needs root (CI runs as root)");
    }
    root
}

/// curl as `nobody`: the status code and the body.
async fn curl_as_nobody(url: &str, extra: &[&str]) -> (u16, String) {
    let nobody = NOBODY.to_string();
    let output = tokio::process::Command::new("setpriv")
        .args(["--reuid", &nobody, "--regid", &nobody, "--clear-groups", "curl", "-sS", "--max-time", "10"])
        .args(extra)
        .args(["-w", "\n%{http_code}", url])
        .output()
        .await
        .expect("setpriv and curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

async fn server(site: Site, auth: AuthConfig) -> TestServer {
    let options = gpudash::Options { site, auth, ..gpudash::Options::new(Duration::from_millis(200)) };
    TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await
}

#[tokio::test]
async fn without_tokens_only_gpudash_own_user_and_named_local_users_get_in() {
    if !can_switch_users() {
        return;
    }
    let alone = server(Site::default(), AuthConfig::default()).await;
    let url = alone.url("/api/devices");
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 200, "the user running gpudash");
    let (status, body) = curl_as_nobody(&url, &[]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("only the user running it") && body.contains("uid 65534"), "{body}");
    assert!(body.contains("--local-user"), "says how to let them in: {body}");
    let (status, _) = curl_as_nobody(&alone.url("/healthz"), &[]).await;
    assert_eq!(status, 200, "health is for any local user (a health check)");
    let (status, _) = curl_as_nobody(&alone.url("/metrics"), &[]).await;
    assert_eq!(status, 200, "open metrics are for any local user (a Prometheus running as its own user)");
    alone.stop().await;

    let shared = Site { local_users: Users { uids: vec![NOBODY] }, ..Site::default() };
    let together = server(shared, AuthConfig::default()).await;
    let (status, body) = curl_as_nobody(&together.url("/api/devices"), &[]).await;
    assert_eq!(status, 200, "a --local-user: {body}");
    together.stop().await;
}

#[tokio::test]
async fn a_loopback_proxy_forwards_client_addresses_only_from_its_own_user() {
    if !can_switch_users() {
        return;
    }
    let site = Site {
        trusted_proxies: vec![parse_trusted_proxy("127.0.0.1").unwrap()],
        proxy_users: Users { uids: vec![own_uid()] },
        ..Site::default()
    };
    let auth = AuthConfig::load(None, Some(&format!("ada:admin:{ADMIN}"))).unwrap();
    let server = server(site, auth).await;
    let login = server.url("/api/login");
    let wrong = json!({ "token": "not-a-token-0123456789" }).to_string();
    let (status, _) = curl_as_nobody(
        &login,
        &["-H", "X-Forwarded-For: 203.0.113.9", "-H", "Content-Type: application/json", "--data", &wrong],
    )
    .await;
    assert_eq!(status, 401);
    let client = reqwest::Client::new();
    let answer = client
        .post(&login)
        .header("x-forwarded-for", "198.51.100.7")
        .header("content-type", "application/json")
        .body(wrong)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    let log: Value = client
        .get(server.url("/api/audit?outcome=denied"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let clients: Vec<&str> = log.as_array().unwrap().iter().filter_map(|e| e["client"].as_str()).collect();
    assert!(clients.contains(&"198.51.100.7"), "the proxy's user forwards the client: {clients:?}");
    assert!(clients.contains(&"127.0.0.1"), "nobody's forged header is not believed: {clients:?}");
    assert!(!clients.contains(&"203.0.113.9"), "{clients:?}");
    server.stop().await;
}

/// Issue 56, item 5: without tokens every caller is the one local user, and every place names that user
/// alike: `/api/me`, a lab run's `requested_by`, a booking's holder and the audit log (the Lab once said
/// "anonymous" where the booking said "root").
#[tokio::test]
async fn without_tokens_the_local_user_has_one_name_everywhere() {
    let server = TestServer::simulated(2, 500).await;
    let name = gpudash::auth::local_user_name();
    let client = reqwest::Client::new();
    let me: Value = crate::support::get_json(&server, "/api/me").await;
    assert_eq!(me["user"], name, "{me}");
    let run: Value = client
        .post(server.url("/api/runs"))
        .json(&json!({ "device": 0, "params": { "kind": "latency", "repetitions": 10 } }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["requested_by"], name, "{run}");
    let now = gpudash::clock::now_ms();
    let booking = json!({ "devices": [1], "start_ms": now, "end_ms": now + 3_600_000, "note": "one name" });
    let held: Value =
        client.post(server.url("/api/reservations")).json(&booking).send().await.unwrap().json().await.unwrap();
    assert_eq!(held["user"], name, "{held}");
    // The audit log's writer is a thread of its own: wait for both entries.
    let audit = crate::support::eventually(10, "the run and the booking in the audit log", || async {
        let audit: Value = crate::support::get_json(&server, "/api/audit").await;
        let actions: Vec<&str> = audit.as_array()?.iter().filter_map(|e| e["action"].as_str()).collect();
        (actions.contains(&"experiment.start") && actions.iter().any(|a| a.starts_with("reservation"))).then_some(audit)
    })
    .await;
    let users: Vec<&str> = audit.as_array().into_iter().flatten().filter_map(|e| e["user"].as_str()).collect();
    assert!(users.iter().all(|u| *u == name), "{audit}");
    server.stop().await;
}
