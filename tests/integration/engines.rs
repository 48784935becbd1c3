//! The two engines the fleet reads, started for a test: Debian's Prometheus and Debian's
//! VictoriaMetrics (single-node, scraping itself with `-promscrape.config`), both answering
//! Prometheus's query API, scraping loopback targets at a sub-second interval.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::fleet::{ChildGuard, free_port, prometheus_binary};
use crate::support::{Said, eventually_every};

/// Which time-series engine answers the fleet's queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Prometheus,
    VictoriaMetrics,
}

fn victoria_metrics_binary() -> String {
    let path = std::env::var("VICTORIA_METRICS").unwrap_or_else(|_| "/usr/bin/victoria-metrics".to_owned());
    assert!(
        Path::new(&path).exists(),
        "this test needs VictoriaMetrics (Debian package `victoria-metrics`; `bash tests/run.sh` installs it)"
    );
    path
}

/// Starts `engine` on loopback scraping `targets` (job `gpudash`) every `interval_ms`, waits until
/// it answers queries, and returns it with its base URL.
pub async fn start(engine: Engine, dir: &Path, targets: &[String], interval_ms: u64) -> (ChildGuard, String) {
    start_jobs(engine, dir, targets, interval_ms, &["gpudash"]).await
}

/// [`start`], with one scrape job per name in `jobs`, each scraping every target (a host that
/// reports twice when there are two).
pub async fn start_jobs(
    engine: Engine,
    dir: &Path,
    targets: &[String],
    interval_ms: u64,
    jobs: &[&str],
) -> (ChildGuard, String) {
    let list = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
    let mut config =
        format!("global:\n  scrape_interval: {interval_ms}ms\n  scrape_timeout: {interval_ms}ms\nscrape_configs:\n");
    for job in jobs {
        config += &format!("  - job_name: {job}\n    static_configs:\n      - targets: [{list}]\n");
    }
    let config_path = dir.join("scrape.yml");
    std::fs::write(&config_path, config).expect("write scrape.yml");
    let port = free_port();
    let log = dir.join(format!("{engine:?}.log"));
    let out = std::fs::File::create(&log).expect("log file");
    let data = dir.join(format!("{engine:?}-data"));
    let mut command = match engine {
        Engine::Prometheus => {
            let mut c = Command::new(prometheus_binary());
            c.arg(format!("--config.file={}", config_path.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"));
            c
        }
        Engine::VictoriaMetrics => {
            let mut c = Command::new(victoria_metrics_binary());
            c.arg(format!("-promscrape.config={}", config_path.display()))
                .arg(format!("-storageDataPath={}", data.display()))
                .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
                // Answer with the newest samples, not only those older than 30 s (its default).
                .arg("-search.latencyOffset=0s");
            c
        }
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log file"))
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("start {engine:?}: {e}"));
    let guard = ChildGuard::new(child, log);
    let base = format!("http://127.0.0.1:{port}");
    let what = format!("{engine:?} to answer queries");
    eventually_every(30, Duration::from_millis(200), &what, || async {
        let url = format!("{base}/api/v1/query?query=1");
        match reqwest::get(&url).await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(Said(format!("{url} answered {}; its log:\n{}", r.status(), guard.log_tail()))),
            Err(e) => Err(Said(format!("{url}: {e}; its log:\n{}", guard.log_tail()))),
        }
    })
    .await;
    (guard, base)
}

/// The instant vector `promql` at `base` now, as (labels, value).
pub async fn query(base: &str, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let answer: serde_json::Value = reqwest::Client::new()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", promql)])
        .send()
        .await
        .expect("query")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer["status"], "success", "{promql}: {answer}");
    answer["data"]["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|s| (s["metric"].clone(), s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)))
        .collect()
}
