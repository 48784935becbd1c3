//! Honest states over HTTP: `/healthz` says "degraded" (still 200: the server is alive) when no
//! driver was found or a GPU is lost, and the server's file paths reach admins only.

use std::time::Duration;

use gpudash::auth::AuthConfig;
use gpudash::telemetry::NoGpus;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::Value;
use shared::{DevicesResponse, ServerMessage};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::security::{ADMIN, VIEWER};
use crate::support::{Socket, TestServer, eventually, next_message};

/// A driver error naming where the library and the server's files live.
const DRIVER_ERROR: &str =
    "NVIDIA driver not available: /opt/secret-place/lib/libnvidia-ml.so.1: cannot open shared object file";
const SECRET_DIR: &str = "/opt/secret-place";

/// `/healthz`'s status code and body, once it answers.
async fn health(server: &TestServer) -> (StatusCode, Value) {
    let response = reqwest::get(server.url("/healthz")).await.unwrap();
    (response.status(), response.json().await.unwrap())
}

#[tokio::test]
async fn healthz_is_ok_until_a_gpu_is_lost_then_degraded_with_the_reason() {
    // The loss comes 5 s after the first sample: time for a loaded CI machine to start the
    // server and ask once before it (at 1 s, a run on two busy cores asked too late).
    let source = Simulator::new(2, 100).with_fault("lost:1@5s".parse().unwrap());
    let server = TestServer::with_source(Box::new(source), 100).await;
    let (status, body) = health(&server).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ok", "before the fault: {body}");
    assert_eq!(body["reasons"], Value::Array(vec![]), "{body}");

    let body = eventually(20, "/healthz saying degraded", || async {
        let (status, body) = health(&server).await;
        (status == StatusCode::OK && body["status"] == "degraded").then_some(body)
    })
    .await;
    let reasons = body["reasons"].as_array().unwrap();
    assert_eq!(reasons.len(), 1, "{body}");
    assert!(reasons[0].as_str().unwrap().starts_with("GPU 1 is lost"), "{body}");
    server.stop().await;
}

#[tokio::test]
async fn healthz_stays_ok_on_a_healthy_simulator() {
    let server = TestServer::simulated(2, 100).await;
    // Over a few samples, never anything but ok.
    for _ in 0..5 {
        let body = eventually(10, "/healthz answering", || async {
            let (status, body) = health(&server).await;
            (status == StatusCode::OK).then_some(body)
        })
        .await;
        assert_eq!(body["status"], "ok", "{body}");
        assert_eq!(body["reasons"], Value::Array(vec![]), "{body}");
    }
    server.stop().await;
}

/// A server with no driver (its error names a path) and tokens for a viewer and an admin.
async fn driverless_team_server() -> TestServer {
    let auth = AuthConfig::load(None, Some(&format!("vera:viewer:{VIEWER},ada:admin:{ADMIN}"))).unwrap();
    let options = gpudash::Options { auth, ..gpudash::Options::new(Duration::from_millis(200)) };
    let source = Box::new(NoGpus::new(DRIVER_ERROR.to_owned(), 200));
    TestServer::with_options(source, options).await
}

async fn devices_as(server: &TestServer, token: &str) -> DevicesResponse {
    let response = reqwest::Client::new().get(server.url("/api/devices")).bearer_auth(token).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

#[tokio::test]
async fn without_a_driver_healthz_is_degraded_and_only_admins_see_the_servers_paths() {
    let server = driverless_team_server().await;

    let viewer = devices_as(&server, VIEWER).await;
    let error = viewer.host.gpu_error.expect("the viewer still learns why there are no GPUs");
    assert!(!error.contains(SECRET_DIR), "a viewer reads no server path: {error}");
    assert_eq!(error, "NVIDIA driver not available: [path hidden]: cannot open shared object file");

    let admin = devices_as(&server, ADMIN).await;
    assert_eq!(admin.host.gpu_error.as_deref(), Some(DRIVER_ERROR), "an admin reads the whole error");

    // The socket does not tell admins apart: its snapshot has no path for anyone.
    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {ADMIN}").parse().unwrap());
    let (mut socket, _): (Socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    match next_message(&mut socket, 10).await {
        ServerMessage::Snapshot(snapshot) => {
            let error = snapshot.host.gpu_error.unwrap();
            assert!(error.starts_with("NVIDIA driver not available") && !error.contains(SECRET_DIR), "{error}");
        }
        other => panic!("expected a snapshot first, got {other:?}"),
    }

    // `/healthz` is public: degraded, and the reason names no path either.
    let body = eventually(20, "/healthz saying degraded", || async {
        let (status, body) = health(&server).await;
        (status == StatusCode::OK && body["status"] == "degraded").then_some(body)
    })
    .await;
    let text = body.to_string();
    assert!(text.contains("no GPU can be read") && !text.contains(SECRET_DIR), "{text}");
    server.stop().await;
}
