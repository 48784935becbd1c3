//! The HTTP side: /api/devices, /healthz, errors and the embedded app.

use gpudash::telemetry::NoGpus;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use shared::DevicesResponse;

use crate::support::{TestServer, eventually};

#[tokio::test]
async fn devices_are_listed_and_labelled_simulated() {
    let server = TestServer::simulated(3, 100).await;
    let body: DevicesResponse = eventually(10, "a reading of every GPU", || async {
        let body: DevicesResponse = reqwest::get(server.url("/api/devices")).await.ok()?.json().await.ok()?;
        body.devices.iter().all(|d| d.latest.is_some()).then_some(body)
    })
    .await;
    assert!(body.host.simulated);
    assert_eq!(body.host.interval_ms, 100);
    assert_eq!(body.devices.len(), 3);
    for (i, device) in body.devices.iter().enumerate() {
        assert_eq!(device.info.index as usize, i);
        assert!(device.info.simulated, "{device:?}");
        assert!(device.info.name.ends_with("(simulated)"), "{}", device.info.name);
        let latest = device.latest.as_ref().expect("a reading after the first tick");
        let used = latest.memory_used.unwrap();
        assert_eq!(used + latest.memory_free.unwrap(), device.info.memory_total);
    }
    server.stop().await;
}

#[tokio::test]
async fn without_a_driver_the_api_says_why() {
    let server =
        TestServer::with_source(Box::new(NoGpus::new("libnvidia-ml.so.1: cannot open".into(), 1000)), 1000).await;
    let body: DevicesResponse = reqwest::get(server.url("/api/devices")).await.unwrap().json().await.unwrap();
    assert!(body.devices.is_empty());
    assert!(!body.host.simulated);
    assert_eq!(body.host.gpu_error.as_deref(), Some("libnvidia-ml.so.1: cannot open"));
    server.stop().await;
}

#[tokio::test]
async fn health_reports_fresh_samples() {
    let server = TestServer::simulated(1, 100).await;
    let body: serde_json::Value = eventually(10, "/healthz answering 200", || async {
        let response = reqwest::get(server.url("/healthz")).await.ok()?;
        if response.status() != StatusCode::OK {
            return None;
        }
        response.json().await.ok()
    })
    .await;
    assert_eq!(body["status"], "ok");
    assert!(body["last_sample_age_ms"].as_u64().unwrap() < 5_000);
    server.stop().await;
}

#[tokio::test]
async fn unknown_paths_get_a_json_404_that_says_what_exists() {
    let server = TestServer::simulated(1, 1000).await;
    for path in ["/api/nope", "/api", "/assets/../Cargo.toml", "/etc/passwd", "/assets/frontend.wasm"] {
        let response = reqwest::get(server.url(path)).await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: serde_json::Value = response.json().await.unwrap();
        let message = body["error"].as_str().unwrap();
        assert!(message.contains("/api/devices") || message.contains("dashboard is at /"), "{path}: {message}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_app_is_served_compressed_with_etags_and_a_csp() {
    let server = TestServer::simulated(1, 1000).await;
    let client = reqwest::Client::new();
    let index = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(index.status(), StatusCode::OK);
    let csp = index.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("'wasm-unsafe-eval'"), "{csp}");
    assert!(index.text().await.unwrap().contains("/assets/boot.js"));

    let wasm = client.get(server.url("/assets/frontend_bg.wasm")).header(ACCEPT_ENCODING, "gzip").send().await.unwrap();
    assert_eq!(wasm.headers()[CONTENT_TYPE], "application/wasm");
    assert_eq!(wasm.headers()[CONTENT_ENCODING], "gzip");
    let etag = wasm.headers()[ETAG].clone();
    let plain = client.get(server.url("/assets/frontend_bg.wasm")).send().await.unwrap();
    assert!(plain.headers().get(CONTENT_ENCODING).is_none());
    assert_eq!(&plain.bytes().await.unwrap()[..4], b"\0asm");

    let again = client.get(server.url("/assets/frontend_bg.wasm")).header(IF_NONE_MATCH, etag).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    server.stop().await;
}
