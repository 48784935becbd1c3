//! The bad-input suite: malformed, mistyped, oversized, hostile requests over
//! REST and the WebSocket. Each gets the right status or close code and a
//! message saying what is allowed; the server stays up; nothing stored changes.
//! (Flag and config cases live in server/tests/process.rs.)

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::security::{ADMIN, OPERATOR, VIEWER, team_server};
use crate::support::TestServer;

/// One REST case: request, expected status, words the answer must contain.
struct Case {
    method: Method,
    path: &'static str,
    token: Option<&'static str>,
    headers: &'static [(&'static str, &'static str)],
    body: Option<Vec<u8>>,
    status: StatusCode,
    says: &'static str,
}

fn case(method: Method, path: &'static str, status: StatusCode, says: &'static str) -> Case {
    Case { method, path, token: Some(OPERATOR), headers: &[], body: None, status, says }
}

fn post(path: &'static str, body: &str, status: StatusCode, says: &'static str) -> Case {
    Case {
        body: Some(body.as_bytes().to_vec()),
        headers: &[("content-type", "application/json")],
        ..case(Method::POST, path, status, says)
    }
}

fn cases() -> Vec<Case> {
    use StatusCode as S;
    let mut all = vec![
        case(Method::GET, "/api/history?metric=gpu_util", S::BAD_REQUEST, "'device' is required"),
        case(Method::GET, "/api/history?device=0", S::BAD_REQUEST, "'metric' is required"),
        case(Method::GET, "/api/history?device=0&metric=fan", S::BAD_REQUEST, "the metrics are"),
        case(Method::GET, "/api/history?device=-1&metric=gpu_util", S::BAD_REQUEST, "whole number"),
        case(Method::GET, "/api/history?device=99999999999&metric=gpu_util", S::NOT_FOUND, "no GPU with index"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&from=9&to=1", S::BAD_REQUEST, "before"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&points=0", S::BAD_REQUEST, "from 1 to 10000"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&points=4294967296", S::BAD_REQUEST, "from 1 to 10000"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&from=1.5", S::BAD_REQUEST, "whole number"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&x=1", S::BAD_REQUEST, "unknown parameter 'x'"),
        case(Method::GET, "/api/history?device=%FF&metric=gpu_util", S::BAD_REQUEST, "whole number"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&to=18446744073709551615", S::BAD_REQUEST, "year 9999"),
        case(
            Method::GET,
            "/api/history?device=0&metric=gpu_util&from=9223372036854775808&to=18446744073709551615",
            S::BAD_REQUEST,
            "year 9999",
        ),
        Case {
            headers: &[("host", "rebind.test:7070")],
            ..case(Method::GET, "/api/devices", S::MISDIRECTED_REQUEST, "--public-url")
        },
        Case { headers: &[("host", "bad host")], ..case(Method::GET, "/api/devices", S::BAD_REQUEST, "Host header") },
        case(Method::GET, "/api/nope", S::NOT_FOUND, "the API has"),
        case(Method::GET, "/assets/%2e%2e/Cargo.toml", S::NOT_FOUND, "no page or file"),
        case(Method::GET, "/assets/frontend.js%00.png", S::NOT_FOUND, "no page or file"),
        case(Method::PUT, "/api/devices", S::METHOD_NOT_ALLOWED, "not allowed"),
        case(Method::DELETE, "/api/runs", S::METHOD_NOT_ALLOWED, "not allowed"),
        post("/api/runs", "{\"device\": 0,", S::BAD_REQUEST, "invalid run request"),
        post(
            "/api/runs",
            "{\"device\": \"zero\", \"params\": {\"kind\": \"latency\"}}",
            S::BAD_REQUEST,
            "invalid run request",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"latency\"}, \"colour\": 1}",
            S::BAD_REQUEST,
            "unknown field",
        ),
        post(
            "/api/runs",
            "{\"device\": -1, \"params\": {\"kind\": \"latency\"}}",
            S::BAD_REQUEST,
            "invalid run request",
        ),
        post("/api/runs", "{\"device\": 0, \"params\": {\"kind\": \"warp\"}}", S::BAD_REQUEST, "unknown variant"),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"transfer\", \"sizes\": [0]}}",
            S::BAD_REQUEST,
            "sizes",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"transfer\", \"sizes\": [1e30]}}",
            S::BAD_REQUEST,
            "invalid run request",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"latency\", \"repetitions\": 0}}",
            S::BAD_REQUEST,
            "repetitions",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"latency\", \"repetitions\": -5}}",
            S::BAD_REQUEST,
            "invalid run request",
        ),
        post("/api/runs", "", S::BAD_REQUEST, "invalid run request"),
        post("/api/runs", "null", S::BAD_REQUEST, "invalid run request"),
        post("/api/runs", "{\"device\": 9, \"params\": {\"kind\": \"latency\"}}", S::NOT_FOUND, "9"),
        case(Method::GET, "/api/runs/abc", S::BAD_REQUEST, "parse"),
        case(Method::GET, "/api/runs/999999", S::NOT_FOUND, "999999"),
        case(Method::POST, "/api/runs/999999/cancel", S::NOT_FOUND, "999999"),
        case(Method::GET, "/api/runs?limit=abc", S::BAD_REQUEST, "accepted"),
        case(Method::GET, "/api/runs?kind=warp", S::BAD_REQUEST, "not an experiment"),
        case(Method::GET, "/api/runs?colour=red", S::BAD_REQUEST, "accepted"),
        case(Method::POST, "/api/lab/devices/9/empty_cache", S::NOT_FOUND, "9"),
        case(Method::GET, "/api/bridge/abc", S::BAD_REQUEST, "parse"),
        case(Method::GET, "/api/bridge/999999", S::NOT_FOUND, "999999"),
        case(Method::POST, "/api/bridge/999999/empty_cache", S::NOT_FOUND, "999999"),
        post("/api/bridge/report", "{\"version\": 1}", S::BAD_REQUEST, "invalid report"),
        post(
            "/api/bridge/report",
            concat!(
                "{\"version\": 1, \"pid\": 7, \"host\": \"h\", \"process_name\": \"p\", \"cuda_version\": null,",
                " \"torch_version\": \"00000000000000000000000000000000000000000000000000000000000000000\",",
                " \"allow_remote_empty_cache\": false, \"interval_s\": 1, \"devices\": []}"
            ),
            S::BAD_REQUEST,
            "at most 64 characters",
        ),
        post("/api/bridge/allocator", "{\"version\": 1}", S::BAD_REQUEST, "invalid allocator report"),
        post(
            "/api/bridge/allocator",
            concat!(
                "{\"version\": 1, \"pid\": 7, \"host\": \"h\", \"reason\": \"periodic\", \"taken_ms\": 1, \"cost_ms\": 0,",
                " \"maps\": [{\"device\": 0, \"free_histogram\": [], \"segments\": [{\"size\": 10, \"stream\": 0,",
                " \"pool\": \"large\", \"allocated\": 1, \"active\": 1, \"free\": 9, \"blocks\": 1}], \"totals\":",
                " {\"reserved\": 5, \"allocated\": 1, \"active\": 1, \"free_in_segments\": 9, \"largest_free_block\": 0,",
                " \"segments\": 1, \"blocks\": 1}}]}"
            ),
            S::BAD_REQUEST,
            "totals.reserved is 5 but the segments add up to 10",
        ),
        Case {
            body: Some(vec![b' '; 300 * 1024]),
            ..post("/api/bridge/allocator", "", S::PAYLOAD_TOO_LARGE, "over the limit of 256 KiB")
        },
        Case { token: Some(VIEWER), ..post("/api/bridge/allocator", "{}", S::FORBIDDEN, "operator role") },
        case(Method::POST, "/api/bridge/999999/allocator_map", S::NOT_FOUND, "999999"),
        Case {
            token: Some(VIEWER),
            ..case(Method::POST, "/api/bridge/999999/allocator_map", S::FORBIDDEN, "operator role")
        },
        post("/api/login", "{\"tok\": 1}", S::BAD_REQUEST, "invalid login"),
        post("/api/login", "{\"token\": \"wrong-token-000000\"}", S::UNAUTHORIZED, "invalid token"),
        case(Method::GET, "/api/audit?limit=0", S::FORBIDDEN, "admin role"),
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?limit=0", S::BAD_REQUEST, "from 1 to 1000") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?limit=-1", S::BAD_REQUEST, "accepted") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?limit=1001", S::BAD_REQUEST, "from 1 to 1000") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?outcome=maybe", S::BAD_REQUEST, "`denied`") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?from=yesterday", S::BAD_REQUEST, "ms since epoch") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?from=9&to=1", S::BAD_REQUEST, "must not be after") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?user=", S::BAD_REQUEST, "'user' must be 1 to 100") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?colour=red", S::BAD_REQUEST, "unknown field") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?before=-3", S::BAD_REQUEST, "accepted") },
        Case {
            token: Some("wrong-token-000000"),
            ..case(Method::GET, "/api/devices", S::UNAUTHORIZED, "invalid token")
        },
        Case { token: None, ..case(Method::GET, "/api/devices", S::UNAUTHORIZED, "needs a token") },
        Case {
            token: None,
            headers: &[("cookie", "gpudash_session=forged")],
            ..case(Method::GET, "/api/devices", S::UNAUTHORIZED, "log in again")
        },
        Case {
            token: Some(VIEWER),
            ..post("/api/runs", "{\"device\": 0, \"params\": {\"kind\": \"latency\"}}", S::FORBIDDEN, "operator role")
        },
        Case {
            token: Some(VIEWER),
            ..case(Method::POST, "/api/lab/devices/0/empty_cache", S::FORBIDDEN, "operator role")
        },
        Case {
            headers: &[("content-type", "application/json"), ("origin", "https://evil.example")],
            ..post("/api/runs", "{\"device\": 0, \"params\": {\"kind\": \"latency\"}}", S::FORBIDDEN, "cross-site")
        },
        Case { token: None, ..case(Method::GET, "/metrics", S::UNAUTHORIZED, "token") },
        // This server runs without --allow-signals.
        post("/api/processes/4242/signal", r#"{"signal":"SIGTERM"}"#, S::FORBIDDEN, "--allow-signals"),
        Case {
            token: Some(ADMIN),
            ..post("/api/processes/1/signal", r#"{"signal":"SIGKILL"}"#, S::FORBIDDEN, "--allow-signals")
        },
    ];
    all.extend(alert_cases());
    all.extend(usage_cases());
    all.extend(reservation_cases());
    // Not UTF-8 at all.
    all.push(Case {
        body: Some(vec![0xff, 0xfe, 0x00, 0x80]),
        ..post("/api/runs", "", S::BAD_REQUEST, "invalid run request")
    });
    // Over the body limit.
    all.push(Case { body: Some(vec![b' '; 2 << 20]), ..post("/api/runs", "", S::PAYLOAD_TOO_LARGE, "") });
    all
}

/// The usage API (`/api/usage` and its CSV): ranges, groups, numbers; each case asked of both.
fn usage_cases() -> Vec<Case> {
    use StatusCode as S;
    macro_rules! both {
        ($query:literal, $says:literal) => {
            [
                case(Method::GET, concat!("/api/usage?", $query), S::BAD_REQUEST, $says),
                case(Method::GET, concat!("/api/usage.csv?", $query), S::BAD_REQUEST, $says),
            ]
        };
    }
    [
        both!("from=9&to=1", "'from' (9) must be before 'to' (1)"),
        both!("from=0&to=31708800001", "at most 366 days"),
        both!("from=0&to=1&group=week", "the groups are user, gpu, day"),
        both!("from=yesterday&to=1", "whole number of ms"),
        both!("from=0&to=1.5", "whole number of ms"),
        both!("from=0&to=99999999999999999999", "whole number of ms"),
        both!("to=1", "'from' is required"),
        both!("from=0", "'to' is required"),
        both!("from=0&to=1&user=ana", "unknown parameter 'user'"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The alerts API: filters, silences and subscriptions.
fn alert_cases() -> Vec<Case> {
    use StatusCode as S;
    const SILENCES: &str = "/api/alerts/silences";
    const SUBSCRIPTIONS: &str = "/api/alerts/subscriptions";
    vec![
        case(Method::GET, "/api/alerts?state=maybe", S::BAD_REQUEST, "use firing, resolved or all"),
        case(Method::GET, "/api/alerts?limit=0", S::BAD_REQUEST, "from 1 to 1000"),
        case(Method::GET, "/api/alerts?limit=1001", S::BAD_REQUEST, "from 1 to 1000"),
        case(Method::GET, "/api/alerts?limit=many", S::BAD_REQUEST, "from 1 to 1000"),
        case(Method::GET, "/api/alerts?rule=hot", S::BAD_REQUEST, "the rules are temperature, clock_events"),
        case(Method::GET, "/api/alerts?gpu=-1", S::BAD_REQUEST, "GPU index"),
        case(Method::GET, "/api/alerts?from=yesterday", S::BAD_REQUEST, "ms since epoch"),
        case(Method::GET, "/api/alerts?from=9&to=1", S::BAD_REQUEST, "must not be after"),
        case(Method::GET, "/api/alerts?colour=red", S::BAD_REQUEST, "accepted: state, from, to, gpu, rule, limit"),
        case(Method::PUT, "/api/alerts", S::METHOD_NOT_ALLOWED, "not allowed"),
        post(SILENCES, "{\"rule\":", S::BAD_REQUEST, "invalid silence"),
        post(SILENCES, "[]", S::BAD_REQUEST, "invalid silence"),
        post(
            SILENCES,
            r#"{"rule":"ecc","gpu":0,"duration":"2h","reason":"r","until":1}"#,
            S::BAD_REQUEST,
            "unknown field `until`",
        ),
        post(SILENCES, r#"{"rule":"hot","gpu":0,"duration":"2h","reason":"r"}"#, S::BAD_REQUEST, "unknown variant"),
        post(SILENCES, r#"{"rule":"ecc","gpu":-1,"duration":"2h","reason":"r"}"#, S::BAD_REQUEST, "invalid silence"),
        post(SILENCES, r#"{"rule":"ecc","gpu":0,"duration":"5s","reason":"r"}"#, S::BAD_REQUEST, "from 1m to 30d"),
        post(SILENCES, r#"{"rule":"ecc","gpu":0,"duration":"31d","reason":"r"}"#, S::BAD_REQUEST, "from 1m to 30d"),
        post(
            SILENCES,
            r#"{"rule":"ecc","gpu":0,"duration":"soon","reason":"r"}"#,
            S::BAD_REQUEST,
            "not a duration from 1m",
        ),
        post(
            SILENCES,
            r#"{"rule":"ecc","gpu":0,"duration":"2h","reason":"  "}"#,
            S::BAD_REQUEST,
            "1 to 200 characters",
        ),
        post(SILENCES, r#"{"rule":"ecc","gpu":9,"duration":"2h","reason":"r"}"#, S::NOT_FOUND, "no GPU 9"),
        Case {
            token: Some(VIEWER),
            ..post(SILENCES, r#"{"rule":"ecc","gpu":0,"duration":"2h","reason":"r"}"#, S::FORBIDDEN, "operator role")
        },
        case(Method::DELETE, "/api/alerts/silences/abc", S::BAD_REQUEST, "not a silence id"),
        case(Method::DELETE, "/api/alerts/silences/999", S::NOT_FOUND, "no silence 999"),
        Case { token: Some(VIEWER), ..case(Method::DELETE, "/api/alerts/silences/1", S::FORBIDDEN, "operator role") },
        post(SUBSCRIPTIONS, r#"{"kind":"nope"}"#, S::BAD_REQUEST, "invalid subscription"),
        post(SUBSCRIPTIONS, r#"{"kind":"critical","x":1}"#, S::BAD_REQUEST, "unknown field"),
        post(SUBSCRIPTIONS, r#"{"kind":"gpu_free"}"#, S::BAD_REQUEST, "invalid subscription"),
        post(SUBSCRIPTIONS, r#"{"kind":"gpu_free","gpu_uuid":"GPU-nope"}"#, S::BAD_REQUEST, "no GPU with UUID"),
        post(SUBSCRIPTIONS, "", S::BAD_REQUEST, "invalid subscription"),
        case(Method::DELETE, "/api/alerts/subscriptions/abc", S::BAD_REQUEST, "not a subscription id"),
        case(Method::DELETE, "/api/alerts/subscriptions/999", S::NOT_FOUND, "no subscription 999"),
        Case { token: None, ..case(Method::GET, SUBSCRIPTIONS, S::UNAUTHORIZED, "needs a token") },
    ]
}

/// The reservations API: every refusal names what is wrong and what is allowed.
fn reservation_cases() -> Vec<Case> {
    use StatusCode as S;
    const PATH: &str = "/api/reservations";
    let now = gpudash::telemetry::now_ms();
    let (soon, hour, day) = (now + 60_000, 3_600_000, 86_400_000);
    let body = |devices: &str, start: u64, end: u64, note: &str| {
        format!(r#"{{"devices":{devices},"start_ms":{start},"end_ms":{end},"note":"{note}"}}"#)
    };
    vec![
        post(PATH, &body("[7]", soon, soon + hour, "n"), S::BAD_REQUEST, "no GPU 7; this host has 2 GPUs"),
        post(PATH, &body("[]", soon, soon + hour, "n"), S::BAD_REQUEST, "name at least one GPU"),
        post(PATH, &body("[1,1]", soon, soon + hour, "n"), S::BAD_REQUEST, "GPU 1 is listed twice"),
        post(PATH, &body("[0]", soon + hour, soon, "n"), S::BAD_REQUEST, "must be after 'start_ms'"),
        post(PATH, &body("[0]", soon, soon + 400 * day, "n"), S::BAD_REQUEST, "the longest allowed is 366 days"),
        post(PATH, &body("[0]", now - day, now + hour, "n"), S::BAD_REQUEST, "more than 5 minutes in the past"),
        post(PATH, &body("[0]", now + 400 * day, now + 401 * day, "n"), S::BAD_REQUEST, "at most 366 days ahead"),
        post(PATH, &body("[0]", soon, soon + hour, &"x".repeat(5000)), S::BAD_REQUEST, "at most 200 are allowed"),
        post(PATH, &body("[0]", soon, soon + hour, "a\\u0007b"), S::BAD_REQUEST, "control character"),
        post(PATH, "{\"devices\":", S::BAD_REQUEST, "invalid reservation"),
        post(PATH, r#"{"devices":[-1],"start_ms":1,"end_ms":2}"#, S::BAD_REQUEST, "invalid reservation"),
        post(PATH, r#"{"devices":[0],"start_ms":"soon","end_ms":2}"#, S::BAD_REQUEST, "invalid reservation"),
        post(PATH, r#"{"devices":[0],"start_ms":1,"end_ms":2,"who":"ana"}"#, S::BAD_REQUEST, "unknown field `who`"),
        Case { token: Some(VIEWER), ..post(PATH, &body("[0]", soon, soon + hour, "n"), S::FORBIDDEN, "operator role") },
        case(Method::GET, "/api/reservations?all=maybe", S::BAD_REQUEST, "must be 1 or 0"),
        case(Method::GET, "/api/reservations?colour=red", S::BAD_REQUEST, "accepted: all=1"),
        case(Method::DELETE, "/api/reservations/abc", S::BAD_REQUEST, "not a reservation id"),
        case(Method::DELETE, "/api/reservations/-3", S::BAD_REQUEST, "not a reservation id"),
        case(Method::DELETE, "/api/reservations/999", S::NOT_FOUND, "no reservation 999"),
        Case { token: Some(VIEWER), ..case(Method::DELETE, "/api/reservations/1", S::FORBIDDEN, "operator role") },
        case(Method::PUT, "/api/reservations", S::METHOD_NOT_ALLOWED, "not allowed"),
    ]
}

async fn stored(server: &TestServer) -> (usize, usize) {
    let client = reqwest::Client::new();
    let runs: Value =
        client.get(server.url("/api/runs?limit=500")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let audit: Value =
        client.get(server.url("/api/audit?limit=1000")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let ok_actions =
        audit.as_array().unwrap().iter().filter(|e| e["outcome"] == "ok" && e["action"] != "login").count();
    (runs.as_array().unwrap().len(), ok_actions)
}

#[tokio::test]
async fn every_bad_rest_request_is_refused_clearly_and_changes_nothing() {
    let server = team_server("token", "token").await;
    let before = stored(&server).await;
    let cases = cases();
    assert!(cases.len() >= 45, "{} REST cases", cases.len());
    check(&server, &cases).await;
    assert_eq!(stored(&server).await, before, "a refused request changed stored data");
    server.stop().await;
}

/// Signals with `--allow-signals` on: a bad signal, PID or body, PID 1, a PID that is no GPU process.
#[tokio::test]
async fn every_bad_signal_request_is_refused_clearly_and_changes_nothing() {
    use crate::signals::{ADMIN, OWN_OPERATOR, VIEWER};
    use StatusCode as S;
    const TERM: &str = r#"{"signal":"SIGTERM"}"#;
    let mut child = crate::signals::Started::sleep();
    let server = crate::signals::server(&[child.pid()], true, true).await;
    crate::signals::listed(&server, child.pid(), "sleep", Some(ADMIN)).await;
    let admin = |c: Case| Case { token: Some(ADMIN), ..c };
    let cases = [
        admin(post("/api/processes/4242/signal", r#"{"signal":"SIGHUP"}"#, S::BAD_REQUEST, "SIGTERM")),
        admin(post("/api/processes/4242/signal", r#"{"signal":"sigkill"}"#, S::BAD_REQUEST, "SIGKILL")),
        admin(post("/api/processes/4242/signal", r#"{"signal":9}"#, S::BAD_REQUEST, "invalid signal request")),
        admin(post(
            "/api/processes/4242/signal",
            r#"{"signal":"SIGTERM","force":true}"#,
            S::BAD_REQUEST,
            "unknown field",
        )),
        admin(post("/api/processes/4242/signal", "", S::BAD_REQUEST, "invalid signal request")),
        admin(post("/api/processes/abc/signal", TERM, S::BAD_REQUEST, "'abc' is not a PID")),
        admin(post("/api/processes/-5/signal", TERM, S::BAD_REQUEST, "is not a PID")),
        admin(post("/api/processes/0/signal", TERM, S::BAD_REQUEST, "PID 0 is not a process")),
        admin(post("/api/processes/4194305/signal", TERM, S::BAD_REQUEST, "largest PID")),
        admin(post("/api/processes/99999999999999999999999/signal", TERM, S::BAD_REQUEST, "is not a PID")),
        admin(post("/api/processes/1/signal", TERM, S::FORBIDDEN, "init system")),
        admin(post("/api/processes/4194304/signal", TERM, S::NOT_FOUND, "not a GPU process")),
        Case { token: Some(VIEWER), ..post("/api/processes/4242/signal", TERM, S::FORBIDDEN, "operator role") },
        Case { token: Some(OWN_OPERATOR), ..post("/api/processes/1/signal", TERM, S::FORBIDDEN, "init system") },
        admin(case(Method::GET, "/api/processes/4242/signal", S::METHOD_NOT_ALLOWED, "not allowed")),
    ];
    check(&server, &cases).await;
    assert!(child.running(), "no bad request signalled anything");
    let log: Value = reqwest::Client::new()
        .get(server.url("/api/audit?action=process.signal"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(log.as_array().unwrap().iter().all(|e| e["outcome"] == "denied"), "{log}");
    server.stop().await;
}

/// Sends each case and checks its status and message, and that the server stays up.
async fn check(server: &TestServer, cases: &[Case]) {
    let client = reqwest::Client::new();
    for c in cases {
        let mut request = client.request(c.method.clone(), server.url(c.path));
        if let Some(token) = c.token {
            request = request.bearer_auth(token);
        }
        for (name, value) in c.headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = &c.body {
            request = request.body(body.clone());
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{} {}: {e}", c.method, c.path));
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert_eq!(status, c.status, "{} {}: {text}", c.method, c.path);
        assert!(text.contains(c.says), "{} {}: expected '{}' in {text}", c.method, c.path, c.says);
        assert_eq!(
            reqwest::get(server.url("/healthz")).await.unwrap().status(),
            StatusCode::OK,
            "down after {}",
            c.path
        );
    }
}

#[tokio::test]
async fn raw_path_traversal_never_escapes_the_embedded_app() {
    let server = TestServer::simulated(1, 1000).await;
    for path in ["/assets/../../../../etc/passwd", "/../Cargo.toml", "/assets/..%2f..%2fetc%2fpasswd", "//etc/passwd"] {
        // A raw request: HTTP clients normalise `..` away before sending.
        let mut stream = tokio::net::TcpStream::connect(server.running.addr()).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer)).await;
        let status_line = answer.lines().next().unwrap_or_default();
        assert!(status_line.contains(" 404 ") || status_line.contains(" 400 "), "{path}: {status_line}");
        assert!(!answer.contains("root:") && !answer.contains("[workspace]"), "{path} leaked a file");
    }
    server.stop().await;
}

/// Sends `message` and returns the server's error text or the close code it answered with.
async fn ws_answer(server: &TestServer, message: Message) -> Result<String, Option<CloseCode>> {
    let (mut socket, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
    let _ = socket.next().await; // snapshot
    let _ = socket.send(message).await;
    tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(frame) = socket.next().await {
            match frame {
                Ok(Message::Text(text)) => {
                    let value: Value = serde_json::from_str(&text).unwrap();
                    if value["type"] == "error" {
                        return Ok(value["message"].as_str().unwrap().to_owned());
                    }
                }
                Ok(Message::Close(frame)) => return Err(frame.map(|f| f.code)),
                Err(_) => return Err(None),
                Ok(_) => {}
            }
        }
        Err(None)
    })
    .await
    .expect("an answer in time")
}

#[tokio::test]
async fn bad_websocket_frames_get_an_error_or_a_close_code() {
    let server = TestServer::simulated(1, 1000).await;
    for (message, expected) in [
        (Message::text("not json"), "accepted message is"),
        (Message::text("{\"type\":\"reboot\"}"), "accepted message is"),
        (Message::text("{\"type\":\"resync\",\"x\":1}"), "accepted message is"),
        (Message::text("{\"type\":42}"), "accepted message is"),
        (Message::text("[]"), "accepted message is"),
        (Message::binary(vec![0xff, 0x00, 0xfe]), "binary messages are not accepted"),
    ] {
        let answer = ws_answer(&server, message.clone()).await;
        assert!(answer.as_ref().is_ok_and(|m| m.contains(expected)), "{message:?}: {answer:?}");
    }
    let oversized = ws_answer(&server, Message::text("x".repeat(1 << 20))).await;
    assert!(matches!(oversized, Err(Some(CloseCode::Size) | None)), "{oversized:?}");

    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("origin", "http://attacker.example".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.unwrap_err().to_string().contains("403"));
    assert_eq!(reqwest::get(server.url("/healthz")).await.unwrap().status(), StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn websocket_upgrades_need_a_valid_token_when_viewing_is_gated() {
    let server = team_server("token", "open").await;
    for token in [None, Some("wrong-token-000000")] {
        let mut request = server.ws_url().into_client_request().unwrap();
        if let Some(token) = token {
            request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        let err = tokio_tungstenite::connect_async(request).await.unwrap_err().to_string();
        assert!(err.contains("401"), "{token:?}: {err}");
    }
    server.stop().await;
}
