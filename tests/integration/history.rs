//! `GET /api/history` and `GET /api/history/all` against a real SQLite database in a
//! temporary directory.

use reqwest::StatusCode;
use shared::history::{HistoryAllResponse, HistoryResponse, Metric, Resolution};

use crate::support::{TestServer, eventually};

#[tokio::test]
async fn recent_history_comes_back_downsampled_within_the_points_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_history(2, 100, dir.path()).await;
    // The recorder flushes every 500 ms: wait until two seconds of samples are on disk.
    eventually(15, "two seconds of samples on disk", || async {
        // The last minute at one point per 60 ms: every 100 ms sample is a point of its own.
        let now = gpudash::telemetry::now_ms();
        let url =
            server.url(&format!("/api/history?device=0&metric=power_draw&from={}&to={now}&points=1000", now - 60_000));
        let body: HistoryResponse = reqwest::get(&url).await.ok()?.json().await.ok()?;
        (body.points.len() >= 20).then_some(())
    })
    .await;
    let url = server.url("/api/history?device=1&metric=memory_used&points=5");
    let body: HistoryResponse = reqwest::get(&url).await.unwrap().json().await.unwrap();
    assert_eq!(body.device, 1);
    assert_eq!(body.metric, Metric::MemoryUsed);
    assert_eq!(body.unit, "bytes");
    assert!(body.simulated);
    assert_eq!(body.resolution, Resolution::Raw);
    assert!(!body.points.is_empty() && body.points.len() <= 5, "{:?}", body.points);
    assert!(body.points.iter().all(|p| p.min <= p.avg && p.avg <= p.max && p.max > 0.0));
    assert!(body.to - body.from == 3_600_000, "default range is the last hour");

    // A narrow window at full resolution: one point per sample.
    let to = body.to;
    let url = server.url(&format!("/api/history?device=0&metric=power_draw&from={}&to={to}&points=1000", to - 1500));
    let body: HistoryResponse = reqwest::get(&url).await.unwrap().json().await.unwrap();
    assert_eq!(body.unit, "W");
    assert!(body.points.len() >= 5, "{} points", body.points.len());
    assert!(body.points.iter().all(|p| p.min == p.max), "full resolution: {:?}", body.points);
    server.stop().await;
}

#[tokio::test]
async fn bad_history_requests_say_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_history(1, 1000, dir.path()).await;
    for (query, status, expected) in [
        ("metric=memory_used", StatusCode::BAD_REQUEST, "'device' is required"),
        ("device=0", StatusCode::BAD_REQUEST, "'metric' is required"),
        ("device=7&metric=memory_used", StatusCode::NOT_FOUND, "indexes 0 to 0"),
        ("device=-1&metric=memory_used", StatusCode::BAD_REQUEST, "whole number"),
        ("device=0&metric=fan_speed", StatusCode::BAD_REQUEST, "memory_used, gpu_util"),
        ("device=0&metric=gpu_util&from=10&to=5", StatusCode::BAD_REQUEST, "before"),
        ("device=0&metric=gpu_util&points=0", StatusCode::BAD_REQUEST, "from 1 to 10000"),
        ("device=0&metric=gpu_util&points=99999999999", StatusCode::BAD_REQUEST, "from 1 to 10000"),
        ("device=0&metric=gpu_util&from=yesterday", StatusCode::BAD_REQUEST, "whole number"),
        ("device=0&metric=gpu_util&colour=red", StatusCode::BAD_REQUEST, "unknown parameter 'colour'"),
    ] {
        let response = reqwest::get(server.url(&format!("/api/history?{query}"))).await.unwrap();
        assert_eq!(response.status(), status, "{query}");
        let body: serde_json::Value = response.json().await.unwrap();
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{query}: {message}");
    }
    server.stop().await;
}

#[tokio::test]
async fn without_history_the_endpoint_says_it_is_off() {
    let server = TestServer::simulated(1, 1000).await;
    let response = reqwest::get(server.url("/api/history?device=0&metric=gpu_util")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("--no-history"));
    server.stop().await;
}

#[tokio::test]
async fn one_request_brings_every_metric_of_every_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_history(3, 100, dir.path()).await;
    let all = || async {
        let body: HistoryAllResponse =
            reqwest::get(server.url("/api/history/all?range=5m&points=300")).await.ok()?.json().await.ok()?;
        Some(body)
    };
    let body = eventually(15, "a second of every GPU on disk", || async {
        let body = all().await?;
        body.lines.iter().all(|l| l.metric != Metric::PowerDraw || l.points.len() >= 5).then_some(body)
    })
    .await;
    assert_eq!(body.to - body.from, 300_000, "the range names five minutes");
    assert_eq!(body.bucket_ms, 1000, "five minutes in at most 300 buckets");
    assert!(body.simulated);
    assert_eq!(body.resolution, Resolution::Raw);
    assert_eq!(body.lines.len(), 3 * Metric::ALL.len(), "every metric of every GPU");
    for device in 0..3 {
        for metric in Metric::ALL {
            assert!(body.line(device, metric).is_some(), "GPU {device} {metric:?}");
        }
        let power = body.line(device, Metric::PowerDraw).unwrap();
        assert!(power.len() <= 300 && power.iter().all(|p| p.min <= p.avg && p.avg <= p.max && p.max > 0.0));
    }
    // The same figures as the one-line endpoint, for the same range and buckets.
    let url =
        server.url(&format!("/api/history?device=2&metric=power_draw&from={}&to={}&points=300", body.from, body.to));
    let one: HistoryResponse = reqwest::get(&url).await.unwrap().json().await.unwrap();
    assert_eq!(one.bucket_ms, body.bucket_ms);
    assert_eq!(one.points, body.line(2, Metric::PowerDraw).unwrap());

    for (query, expected) in [
        ("range=2w", "unknown range '2w'; the ranges are 5m, 1h, 24h, 7d"),
        ("range=1h&from=5", "not both"),
        ("points=0", "from 1 to 2000"),
        ("points=2001", "from 1 to 2000"),
        ("from=10&to=5", "before"),
        ("to=soon", "whole number"),
        ("device=0", "unknown parameter 'device'"),
    ] {
        let response = reqwest::get(server.url(&format!("/api/history/all?{query}"))).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert!(body["error"].as_str().unwrap_or_default().contains(expected), "{query}: {body}");
    }
    server.stop().await;

    let off = TestServer::simulated(1, 1000).await;
    let response = reqwest::get(off.url("/api/history/all?range=1h")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    off.stop().await;
}
