//! Usage accounting end to end: scripted simulator jobs with known users, memory and SM shares
//! run for known windows; `/api/usage` must charge them to the second, keep the sums across a
//! restart on the same database, and serve the same figures as CSV.
//!
//! Why "to the second" holds: the simulator reads processes every 100 ms when it runs scripted
//! jobs; a job is charged from its own start time (exact) to the last reading that lists it,
//! which is at most one reading period, plus the accounting thread's wake-up delay, before its
//! end. The test allows 0.5 s on each job's GPU-seconds (and the same on GiB-seconds per GiB).

use std::time::Duration;

use shared::usage::{UsageResponse, UsageRow};

use crate::support::{TestServer, eventually};

const INTERVAL_MS: u64 = 100;
/// How far below its exact figure a sum may be (see the module's doc).
const TOLERANCE_S: f64 = 0.5;

async fn server(dir: &std::path::Path, jobs: &[&str]) -> TestServer {
    let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).expect("open store");
    let simulator = crate::support::scripted(2, INTERVAL_MS, jobs);
    let options = gpudash::Options { store: Some(store), ..gpudash::Options::new(Duration::from_millis(INTERVAL_MS)) };
    TestServer::with_options(Box::new(simulator), options).await
}

fn range() -> String {
    let now = gpudash::telemetry::now_ms();
    format!("from={}&to={}", now - 3_600_000, now + 3_600_000)
}

async fn usage(server: &TestServer, group: &str) -> Option<UsageResponse> {
    let url = server.url(&format!("/api/usage?{}&group={group}", range()));
    reqwest::get(url).await.ok()?.json().await.ok()
}

fn row<'a>(rows: &'a [UsageRow], user: &str) -> Option<&'a UsageRow> {
    rows.iter().find(|r| r.user.as_deref() == Some(user))
}

/// GPU-seconds, GiB-seconds and idle GiB-seconds of `user`, or zeros.
fn seconds(rows: &[UsageRow], user: &str) -> (f64, f64, f64) {
    row(rows, user)
        .map_or((0.0, 0.0, 0.0), |r| (r.gpu_hours * 3600.0, r.memory_gib_hours * 3600.0, r.idle_gib_hours * 3600.0))
}

/// Whether `got` is `expected` within the tolerance (sums may only fall short: they never
/// charge time after a job's last reading).
fn near(got: f64, expected: f64, per: f64) -> bool {
    got <= expected + 1e-6 && got >= expected - TOLERANCE_S * per
}

/// Waits until every user's (GPU s, GiB s, idle GiB s) is near its expected figure.
async fn settled(server: &TestServer, expected: &[(&str, f64, f64, f64, f64)]) -> Vec<UsageRow> {
    eventually(30, "usage sums near the scripted jobs' figures", || async {
        let rows = usage(server, "user").await?.rows;
        expected
            .iter()
            .all(|&(user, gpu, gib, memory, idle)| {
                let (got_gpu, got_memory, got_idle) = seconds(&rows, user);
                near(got_gpu, gpu, 1.0) && near(got_memory, memory, gib) && near(got_idle, idle, gib)
            })
            .then_some(rows)
    })
    .await
}

#[tokio::test]
async fn scripted_jobs_are_charged_to_the_second_and_the_sums_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // GPU 0: ana (4 GiB, 75 % SM) and bo (2 GiB, 25 % SM) share it for 3 s; GPU 1: cy holds
    // 6 GiB for 2 s and runs no kernel (idle-held).
    let first = server(dir.path(), &["job:0:ana:4:75@1s+3s", "job:0:bo:2:25@1s+3s", "job:1:cy:6@1s+2s"]).await;
    let rows =
        settled(&first, &[("ana", 2.25, 4.0, 12.0, 0.0), ("bo", 0.75, 2.0, 6.0, 0.0), ("cy", 2.0, 6.0, 12.0, 12.0)])
            .await;
    let (ana, bo, cy) = (row(&rows, "ana").unwrap(), row(&rows, "bo").unwrap(), row(&rows, "cy").unwrap());
    // Energy splits like GPU time: ana and bo were charged the same intervals at 3:1.
    assert!(ana.energy_kwh > 0.0 && bo.energy_kwh > 0.0, "{rows:?}");
    assert!((ana.energy_kwh / bo.energy_kwh - 3.0).abs() < 1e-6, "{rows:?}");
    // cy had GPU 1 to itself: its energy over ~2 s is a plausible board power.
    let watts = cy.energy_kwh * 3.6e6 / (cy.gpu_hours * 3600.0);
    assert!((10.0..=1000.0).contains(&watts), "{watts} W: {rows:?}");
    let gpus = usage(&first, "gpu").await.unwrap().rows;
    let gpu0 = gpus.iter().find(|r| r.gpu == Some(0)).unwrap();
    assert!(near(gpu0.gpu_hours * 3600.0, 3.0, 1.0), "GPU 0 ran jobs for 3 s: {gpus:?}");
    assert!(gpus.iter().all(|r| r.user.is_none()), "{gpus:?}");
    let answer = usage(&first, "user").await.unwrap();
    assert!(answer.persistent && answer.simulated);
    first.stop().await;

    // The same database: the sums are there at once, and a new job of ana's adds to hers.
    let second = server(dir.path(), &["job:0:ana:4@1s+2s"]).await;
    let kept = usage(&second, "user").await.unwrap().rows;
    assert_eq!(seconds(&kept, "bo"), seconds(&rows, "bo"), "bo's sums were kept: {kept:?}");
    assert_eq!(seconds(&kept, "cy"), seconds(&rows, "cy"), "cy's sums were kept: {kept:?}");
    let (ana_gpu, ana_memory, _) = seconds(&rows, "ana");
    // ana alone on GPU 0, no kernel: 2 GPU-seconds, 8 GiB-seconds, all idle-held.
    let after = settled(&second, &[("ana", ana_gpu + 2.0, 4.0, ana_memory + 8.0, 8.0)]).await;
    assert_eq!(seconds(&after, "bo"), seconds(&rows, "bo"));

    // The CSV says the same, with a header.
    let url = second.url(&format!("/api/usage.csv?{}&group=user_gpu", range()));
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/csv; charset=utf-8");
    let text = response.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "user,gpu,gpu_hours,memory_gib_hours,idle_gib_hours,energy_kwh");
    let cy_line = lines.iter().find(|l| l.starts_with("cy,1,")).unwrap_or_else(|| panic!("{text}"));
    let cy_hours: f64 = cy_line.split(',').nth(2).unwrap().parse().unwrap();
    assert!((cy_hours - cy.gpu_hours).abs() < 1e-6, "{cy_line} vs {cy:?}");
    assert_eq!(lines.len(), 4, "ana, bo and cy, each on one GPU: {text}");
    second.stop().await;
}

#[tokio::test]
async fn a_range_before_any_job_is_empty_and_no_history_keeps_sums_in_memory() {
    let simulator =
        gpudash::telemetry::simulator::Simulator::new(1, INTERVAL_MS).with_fault("job:0:ana:1@0s+1m".parse().unwrap());
    let server = TestServer::with_source(Box::new(simulator), INTERVAL_MS).await;
    eventually(30, "ana's job charged in memory", || async {
        let answer = usage(&server, "user").await?;
        (!answer.persistent && seconds(&answer.rows, "ana").0 > 0.0).then_some(())
    })
    .await;
    let empty: UsageResponse =
        reqwest::get(server.url("/api/usage?from=0&to=1000&group=day")).await.unwrap().json().await.unwrap();
    assert!(empty.rows.is_empty(), "{empty:?}");
    // Days start at the asked zone's midnight, and the answer says which zone.
    for offset in [-300i64, 0, 330] {
        let url = server.url(&format!("/api/usage?{}&group=day&utc_offset={offset}", range()));
        let days: UsageResponse = reqwest::get(url).await.unwrap().json().await.unwrap();
        assert_eq!(i64::from(days.utc_offset), offset);
        assert!(!days.rows.is_empty(), "ana's job has a day");
        for row in &days.rows {
            let start = row.day.unwrap() as i64;
            assert_eq!((start + offset * 60_000).rem_euclid(86_400_000), 0, "offset {offset}: {row:?}");
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn anonymous_viewers_of_a_team_server_see_the_sums_but_no_user_names() {
    use crate::security::VIEWER;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "viewers = \"open\"\n").unwrap();
    let auth = gpudash::auth::AuthConfig::load(Some(file.path()), Some(&format!("vera:viewer:{VIEWER}"))).unwrap();
    let simulator = gpudash::telemetry::simulator::Simulator::new(1, INTERVAL_MS)
        .with_fault("job:0:zoe-secret:1:50@0s+1m".parse().unwrap());
    let options = gpudash::Options { auth, ..gpudash::Options::new(Duration::from_millis(INTERVAL_MS)) };
    let server = TestServer::with_options(Box::new(simulator), options).await;
    let ask = |token: Option<&'static str>, path: String| {
        let mut request = reqwest::Client::new().get(server.url(&path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.ok()?.text().await.ok() }
    };
    let signed_in = eventually(30, "zoe's job charged", || async {
        let body = ask(Some(VIEWER), format!("/api/usage?{}", range())).await?;
        body.contains("\"zoe-secret\"").then_some(body)
    })
    .await;
    assert!(signed_in.contains("gpu_hours"), "{signed_in}");
    for path in [format!("/api/usage?{}", range()), format!("/api/usage.csv?{}&group=user_day", range())] {
        let body = ask(None, path.clone()).await.unwrap();
        assert!(!body.contains("zoe"), "{path}: {body}");
        assert!(body.contains(shared::usage::HIDDEN_USER), "{path}: {body}");
    }
    // Rows without users name nobody and are the same for everyone.
    let by_gpu = format!("/api/usage?{}&group=gpu", range());
    let anonymous: UsageResponse = serde_json::from_str(&ask(None, by_gpu).await.unwrap()).unwrap();
    assert_eq!(anonymous.rows.len(), 1, "{anonymous:?}");
    server.stop().await;
}
