//! `/metrics` behind `--web-config-file` (the exporter-toolkit's `basic_auth_users`), scraped by a real
//! Prometheus: the right password is scraped, a wrong one and none are refused (401, audited), and a
//! token still works for scripts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gpudash::auth::{AuthConfig, ScrapeUsers};
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use reqwest::header::WWW_AUTHENTICATE;
use serde_json::Value;

use crate::fleet::{ChildGuard, launch_prometheus};
use crate::security::{ADMIN, VIEWER};
use crate::support::{Said, TestServer, TlsFiles, eventually_every};

/// One scrape job of the Prometheus config, with `basic_auth` when `password` is given.
fn job(name: &str, target: &str, password: Option<&str>) -> String {
    let auth = password
        .map_or_else(String::new, |p| format!("    basic_auth:\n      username: prometheus\n      password: '{p}'\n"));
    format!("  - job_name: {name}\n{auth}    static_configs:\n      - targets: ['{target}']\n")
}

/// Waits until Prometheus at `base` has scraped each of `jobs` with the health `wanted` ("up" or "down"),
/// and returns each job's (health, last error).
async fn healths<const N: usize>(
    base: &str,
    jobs: [&str; N],
    wanted: [&str; N],
    prometheus: &ChildGuard,
) -> [(String, String); N] {
    eventually_every(30, Duration::from_millis(250), "every job scraped as wanted", || async {
        let answer: Value = reqwest::get(format!("{base}/api/v1/targets")).await.unwrap().json().await.unwrap();
        let active = answer["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        let health = |job: &str| {
            let target = active.iter().find(|t| t["labels"]["job"] == job)?;
            let text = |key: &str| target[key].as_str().unwrap_or_default().to_owned();
            Some((text("health"), text("lastError")))
        };
        let seen = jobs.map(health);
        if seen.iter().zip(wanted).all(|(s, w)| s.as_ref().is_some_and(|(h, _)| h == w)) {
            Ok(seen.map(Option::unwrap_or_default))
        } else {
            Err(Said(format!("{seen:?}; Prometheus's log:\n{}", prometheus.log_tail())))
        }
    })
    .await
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
    // Malformed Basic headers are no credentials: 401, never a server error.
    for bad in ["Basic !!!", "Basic bm9jb2xvbg==", "Basic ", "Basic w7/Dvg=="] {
        let answer = client.get(&metrics).header("authorization", bad).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{bad}");
    }
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
    let [_, wrong, none] = healths(&base, ["right", "wrong", "none"], ["up", "down", "down"], &prometheus).await;
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

/// A scrape job over https presenting the client certificate `cert` (and its `key`), if any.
fn tls_job(name: &str, target: &str, ca: &Path, client: Option<(&Path, &Path)>) -> String {
    let identity = client.map_or_else(String::new, |(cert, key)| {
        format!("      cert_file: {}\n      key_file: {}\n", cert.display(), key.display())
    });
    format!(
        "  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {}\n{identity}    static_configs:\n      \
         - targets: ['{target}']\n",
        ca.display()
    )
}

#[tokio::test]
async fn prometheus_scrapes_with_a_client_certificate_and_others_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsFiles::generate_for(&["127.0.0.1"], dir.path());
    let elsewhere = tempfile::tempdir().unwrap();
    let stranger = TlsFiles::generate_for(&["127.0.0.1"], elsewhere.path());
    let options = gpudash::Options {
        auth: AuthConfig::load(None, Some(&format!("vera:viewer:{VIEWER},ada:admin:{ADMIN}"))).unwrap(),
        tls: Some((tls.cert.clone(), tls.key.clone())),
        metrics_client_ca: Some(tls.ca.clone()),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await;
    let target = server.running.addr().to_string();
    let metrics = format!("https://{target}/metrics");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&tls.ca).unwrap()).unwrap();
    let pem = |files: &TlsFiles| {
        [std::fs::read(&files.client_cert).unwrap(), std::fs::read(&files.client_key).unwrap()].concat()
    };
    let client = |identity: Option<Vec<u8>>| {
        let builder = reqwest::Client::builder().use_rustls_tls().add_root_certificate(ca.clone());
        let builder = match identity {
            Some(pem) => builder.identity(reqwest::Identity::from_pem(&pem).unwrap()),
            None => builder,
        };
        builder.build().unwrap()
    };

    // The page is served to a browser without a certificate; /metrics is not.
    assert_eq!(client(None).get(format!("https://{target}/")).send().await.unwrap().status(), StatusCode::OK);
    let bare = client(None).get(&metrics).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let body: Value = bare.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("--metrics-client-ca"), "{body}");
    let certified = client(Some(pem(&tls))).get(&metrics).send().await.unwrap();
    assert_eq!(certified.status(), StatusCode::OK);
    assert!(certified.text().await.unwrap().contains("DCGM_FI_DEV_GPU_TEMP"));
    assert!(
        client(Some(pem(&stranger))).get(&metrics).send().await.is_err(),
        "another CA's certificate fails the handshake"
    );

    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{}{}{}",
        tls_job("certified", &target, &tls.ca, Some((&tls.client_cert, &tls.client_key))),
        tls_job("stranger", &target, &tls.ca, Some((&stranger.client_cert, &stranger.client_key))),
        tls_job("bare", &target, &tls.ca, None),
    );
    let (prometheus, base) = launch_prometheus(dir.path(), &config, None).await;
    let [_, stranger_job, bare_job] =
        healths(&base, ["certified", "stranger", "bare"], ["up", "down", "down"], &prometheus).await;
    assert!(bare_job.1.contains("401"), "{bare_job:?}");
    assert!(stranger_job.1.to_lowercase().contains("tls"), "refused in the handshake, before HTTP: {stranger_job:?}");
    // A certificate lets a scraper into /metrics only.
    let audit = client(Some(pem(&tls))).get(format!("https://{target}/api/audit")).send().await.unwrap();
    assert_eq!(audit.status(), StatusCode::FORBIDDEN, "a certified scraper is an anonymous viewer elsewhere");
    drop(prometheus);
    server.stop().await;
}
