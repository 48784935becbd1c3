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

use crate::security::{ADMIN, team_server};
use crate::support::TestServer;

mod cases;
mod notices;

use cases::{Case, case, cases, post};

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
