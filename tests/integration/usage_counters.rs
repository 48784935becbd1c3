//! Usage as counters in `/metrics` (`gpudash_usage_*_total{owner}`): they equal `/api/usage`'s
//! sums, pass `promtool check metrics`, carry on from the store after a restart (no reset a
//! Prometheus would see), and a real Prometheus's `increase()` over the whole run counts both
//! lives of the server.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use shared::usage::UsageResponse;

use crate::engines::{self, Engine};
use crate::support::{TestServer, eventually, eventually_every};

const INTERVAL_MS: u64 = 100;
const GPU_SECONDS: &str = "gpudash_usage_gpu_seconds_total";

/// A simulated host (one GPU, scripted `jobs`) with its history in `dir`, listening on `addr`.
pub async fn host_on(addr: &str, dir: &Path, hostname: &str, gpus: u32, jobs: &[&str]) -> TestServer {
    let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).expect("open store");
    let simulator = crate::support::scripted(gpus, INTERVAL_MS, jobs);
    let options = gpudash::Options {
        store: Some(store),
        hostname: Some(hostname.to_owned()),
        idle: gpudash::telemetry::IdleRule { memory: 1 << 30, after: Duration::from_secs(1) },
        ..gpudash::Options::new(Duration::from_millis(INTERVAL_MS))
    };
    let listener = gpudash::web::serve::listen(addr.parse().expect("an address")).expect("bind loopback");
    let running = gpudash::start_with(listener, Box::new(simulator), options).await.expect("start");
    let base = format!("http://{}", running.addr());
    TestServer { running, base }
}

/// `family{owner="owner",…}` in `/metrics`, or `None` when the series is not there.
pub async fn counter(server: &TestServer, family: &str, owner: &str) -> Option<f64> {
    let text = reqwest::get(server.url("/metrics")).await.ok()?.text().await.ok()?;
    let prefix = format!("{family}{{owner=\"{owner}\",");
    text.lines().find(|l| l.starts_with(&prefix))?.rsplit(' ').next()?.parse().ok()
}

/// Each user's (GPU-seconds, GiB-seconds) from `/api/usage` over every minute kept.
pub async fn api_usage(server: &TestServer) -> Vec<(String, f64, f64)> {
    let now = gpudash::telemetry::now_ms();
    let url = server.url(&format!("/api/usage?from={}&to={}&group=user", now - 3_600_000, now + 3_600_000));
    let answer: UsageResponse = reqwest::get(url).await.expect("GET /api/usage").json().await.expect("usage JSON");
    answer
        .rows
        .into_iter()
        .map(|r| (r.user.unwrap_or_default(), r.gpu_hours * 3600.0, r.memory_gib_hours * 3600.0))
        .collect()
}

/// Waits until `owner`'s counter is at least `at_least` and equals `/api/usage`'s figure.
async fn settled(server: &TestServer, owner: &str, at_least: f64) -> f64 {
    eventually_every(30, Duration::from_millis(200), "the counter to match /api/usage", || async {
        let counted = counter(server, GPU_SECONDS, owner).await;
        let api = api_usage(server).await.into_iter().find(|(u, ..)| u == owner).map(|(_, gpu, _)| gpu);
        match (counted, api) {
            (Some(c), Some(a)) if c >= at_least && (c - a).abs() < 1e-6 => Ok(c),
            other => Err(other),
        }
    })
    .await
}

#[tokio::test]
async fn usage_counters_carry_on_across_a_restart_and_prometheus_increase_counts_both_lives() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("host");
    std::fs::create_dir_all(&store_dir).unwrap();
    // ana alone on GPU 0 for 3 s: 3 GPU-seconds, 2 GiB held.
    let first = host_on("127.0.0.1:0", &store_dir, "gpu-a", 1, &["job:0:ana:2:50@1s+3s"]).await;
    let addr = first.running.addr().to_string();
    let (_prometheus, prometheus) =
        engines::start(Engine::Prometheus, dir.path(), std::slice::from_ref(&addr), 200).await;
    // Prometheus scrapes first: the series starts at 0 (ana's process is exported before its first charge).
    eventually(20, "Prometheus to see ana's counter", || {
        let prometheus = prometheus.clone();
        async move {
            (!engines::query(&prometheus, &format!("{GPU_SECONDS}{{owner=\"ana\"}}")).await.is_empty()).then_some(())
        }
    })
    .await;
    let before = settled(&first, "ana", 2.5).await;
    assert!(before <= 3.0 + 1e-6, "at most the job's 3 s: {before}");
    let memory = counter(&first, "gpudash_usage_memory_byte_seconds_total", "ana").await.unwrap();
    assert!((memory / f64::from(1u32 << 30) - 2.0 * before).abs() < 1e-3, "2 GiB for {before} s: {memory}");

    // promtool takes the families as they are (no lint on their names, types or help).
    let text = reqwest::get(first.url("/metrics")).await.unwrap().text().await.unwrap();
    let mut check = Command::new(crate::metrics::promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!report.contains("gpudash_usage"), "promtool: {report}");
    // Prometheus has scraped the final figure before the server stops.
    let scraped = |value: f64| {
        let prometheus = prometheus.clone();
        async move {
            let v = engines::query(&prometheus, &format!("{GPU_SECONDS}{{owner=\"ana\"}}")).await;
            v.first().is_some_and(|(_, got)| (got - value).abs() < 1e-9).then_some(())
        }
    };
    eventually(20, "Prometheus to scrape the first life's last figure", || scraped(before)).await;
    first.stop().await;

    // The same database and port: the counter starts where it stopped, then counts a second job.
    let second = host_on(&addr, &store_dir, "gpu-a", 1, &["job:0:ana:2:50@1s+3s"]).await;
    assert_eq!(counter(&second, GPU_SECONDS, "ana").await, Some(before), "the counter carries on from the store");
    let after = settled(&second, "ana", before + 2.5).await;
    eventually(20, "Prometheus to scrape the second life's last figure", || scraped(after)).await;

    // No reset, and increase() over both lives is the whole usage. Evaluated at the last scrape's own
    // time (`@`), Prometheus has nothing to extrapolate at the end, and a series that starts at 0
    // nothing at the start, so the two agree to rounding (a loaded CI machine scrapes irregularly,
    // which moved an `increase()` at "now" 4.7% above the counter).
    let resets = engines::query(&prometheus, &format!("resets({GPU_SECONDS}{{owner=\"ana\"}}[10m])")).await;
    assert_eq!(resets.first().map(|r| r.1), Some(0.0), "a restart is no reset: {resets:?}");
    let first_seen = engines::query(&prometheus, &format!("min_over_time({GPU_SECONDS}{{owner=\"ana\"}}[10m])")).await;
    assert_eq!(first_seen.first().map(|r| r.1), Some(0.0), "a new owner's series starts at 0: {first_seen:?}");
    let last = engines::query(&prometheus, &format!("timestamp({GPU_SECONDS}{{owner=\"ana\"}})")).await;
    let at = last.first().map_or(f64::NAN, |r| r.1);
    let increase =
        engines::query(&prometheus, &format!("increase({GPU_SECONDS}{{owner=\"ana\"}}[10m] @ {at:.3})")).await;
    let got = increase.first().map_or(f64::NAN, |r| r.1);
    assert!((got - after).abs() <= after * 0.01, "increase {got} at {at} vs the counter {after}");
    second.stop().await;
}
