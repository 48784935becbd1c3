//! `/metrics` behind `--web-config-file` (the exporter-toolkit's `basic_auth_users`), scraped by a real
//! Prometheus: the right password is scraped, a wrong one and none are refused (401, audited), and a
//! token still works for scripts.

use std::sync::Arc;
use std::time::Duration;

use gpudash::auth::{AuthConfig, ScrapeUsers};
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use reqwest::header::WWW_AUTHENTICATE;
use serde_json::Value;

use crate::fleet::launch_prometheus;
use crate::security::{ADMIN, VIEWER};
use crate::support::{Said, TestServer, eventually_every};

/// One scrape job of the Prometheus config, with `basic_auth` when `password` is given.
fn job(name: &str, target: &str, password: Option<&str>) -> String {
    let auth = password
        .map_or_else(String::new, |p| format!("    basic_auth:\n      username: prometheus\n      password: '{p}'\n"));
    format!("  - job_name: {name}\n{auth}    static_configs:\n      - targets: ['{target}']\n")
}

#[tokio::test]
async fn prometheus_scrapes_with_basic_auth_and_wrong_passwords_are_refused_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    let hash = bcrypt::hash("s3cret", 5).unwrap();
    std::fs::write(
        &web,
        format!("# as for node_exporter's --web.config.file\nbasic_auth_users:\n  prometheus: '{hash}'\n"),
    )
    .unwrap();
    let tokens = format!("vera:viewer:{VIEWER},ada:admin:{ADMIN}");
    let options = gpudash::Options {
        auth: AuthConfig::load(None, Some(&tokens)).unwrap(),
        scrapers: Some(Arc::new(ScrapeUsers::load(&web).unwrap())),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await;
    let target = server.running.addr().to_string();

    // Straight from a script: no credentials is 401 with the challenge; a token, or the password, is 200.
    let client = reqwest::Client::new();
    let metrics = server.url("/metrics");
    let bare = client.get(&metrics).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    assert!(bare.headers()[WWW_AUTHENTICATE].to_str().unwrap().starts_with("Basic realm="));
    let body: Value = bare.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("--web-config-file"), "{body}");
    assert_eq!(client.get(&metrics).bearer_auth(VIEWER).send().await.unwrap().status(), StatusCode::OK);
    let scraped = client.get(&metrics).basic_auth("prometheus", Some("s3cret")).send().await.unwrap();
    assert_eq!(scraped.status(), StatusCode::OK);
    assert!(scraped.text().await.unwrap().contains("DCGM_FI_DEV_GPU_TEMP"));

    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{}{}{}",
        job("right", &target, Some("s3cret")),
        job("wrong", &target, Some("guess")),
        job("none", &target, None),
    );
    let (prometheus, base) = launch_prometheus(dir.path(), &config, None).await;
    let targets = eventually_every(30, Duration::from_millis(250), "all three jobs scraped", || async {
        let answer: Value = reqwest::get(format!("{base}/api/v1/targets")).await.unwrap().json().await.unwrap();
        let active = answer["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        let health = |job: &str| {
            active.iter().find(|t| t["labels"]["job"] == job).map(|t| {
                (
                    t["health"].as_str().unwrap_or_default().to_owned(),
                    t["lastError"].as_str().unwrap_or_default().to_owned(),
                )
            })
        };
        match (health("right"), health("wrong"), health("none")) {
            (Some(right), Some(wrong), Some(none)) if right.0 == "up" && wrong.0 == "down" && none.0 == "down" => {
                Ok((right, wrong, none))
            }
            other => Err(Said(format!("{other:?}; Prometheus's log:\n{}", prometheus.log_tail()))),
        }
    })
    .await;
    let (_, wrong, none) = targets;
    assert!(wrong.1.contains("401"), "{wrong:?}");
    assert!(none.1.contains("401"), "{none:?}");

    // The wrong password is in the audit log (aggregated per client and minute), the right one is not.
    let log: Value =
        client.get(server.url("/api/audit")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let denied: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "metrics.scrape" && e["outcome"] == "denied")
        .filter_map(|e| e["detail"].as_str())
        .collect();
    assert!(denied.iter().any(|d| d.contains("user 'prometheus'")), "{log}");
    drop(prometheus);
    server.stop().await;
}
