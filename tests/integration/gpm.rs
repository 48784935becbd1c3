//! SM and tensor activity (the GPM loop, simulated) and idle-but-held processes,
//! as the API, the metrics and the page show them.

use std::time::Duration;

use gpudash::telemetry::IdleRule;
use gpudash::telemetry::simulator::{HOLDER_MEMORY, Simulator};
use serde_json::Value;

use crate::support::{TestServer, eventually};

/// Three simulated GPUs, the last held by an idle notebook, flagged after `idle_after`.
pub async fn with_idle_holder(idle_after: Duration) -> TestServer {
    let options = gpudash::Options {
        idle: IdleRule { memory: 1 << 30, after: idle_after },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(3, 200).with_idle_holder()), options).await
}

async fn json(url: &str) -> Option<Value> {
    reqwest::get(url).await.ok()?.json().await.ok()
}

#[tokio::test]
async fn activity_reaches_the_api_for_every_gpu() {
    let server = with_idle_holder(Duration::from_secs(2)).await;
    let devices = eventually(10, "a GPM window on every GPU", || async {
        let body = json(&server.url("/api/devices")).await?;
        let devices = body["devices"].as_array()?.clone();
        devices.iter().all(|d| d["latest"]["activity"]["sm_active"].is_number()).then_some(devices)
    })
    .await;
    let activity = |i: usize, field: &str| devices[i]["latest"]["activity"][field].as_f64().unwrap();
    // GPU 0 runs a job from the start, GPU 2 only holds the notebook.
    assert!(activity(0, "sm_active") > 10.0, "{}", devices[0]["latest"]);
    assert!(activity(0, "tensor_active") <= activity(0, "sm_active"));
    assert_eq!(activity(2, "sm_active"), 0.0);
    assert!(devices[0]["latest"]["activity"]["unavailable"].is_null());
    server.stop().await;
}

#[tokio::test]
async fn an_idle_holder_is_flagged_after_the_threshold_and_its_gpu_is_held_idle() {
    let server = with_idle_holder(Duration::from_secs(2)).await;
    let body = eventually(15, "the notebook flagged idle", || async {
        let body = json(&server.url("/api/processes")).await?;
        let holder = body["processes"].as_array()?.iter().find(|p| p["device"] == 2)?.clone();
        holder["idle"].is_object().then_some(body)
    })
    .await;
    let processes = body["processes"].as_array().unwrap();
    let holder = processes.iter().find(|p| p["device"] == 2).unwrap();
    assert_eq!(holder["idle"]["signal"], "sm_activity", "{holder}");
    let since = holder["idle"]["since_ms"].as_u64().unwrap();
    assert!(since <= gpudash::telemetry::now_ms() - 2000, "idle for at least --idle-after: {holder}");
    assert!(processes.iter().filter(|p| p["device"] == 0).all(|p| p["idle"].is_null()), "the busy job is not idle");
    let state = |i: u64| body["states"].as_array().unwrap().iter().find(|s| s["index"] == i).unwrap()["state"].clone();
    assert_eq!(state(2), "held_idle");
    assert_eq!(state(0), "busy");
    assert!(!body["free_devices"].as_array().unwrap().contains(&2.into()), "held idle is not free");
    let eli = body["users"].as_array().unwrap().iter().find(|u| u["user"] == "eli").unwrap();
    assert!(eli["idle_memory"].as_u64().unwrap() >= HOLDER_MEMORY * 9 / 10, "{eli}");

    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let line = metrics.lines().find(|l| l.starts_with("gpudash_process_idle_seconds{gpu=\"2\"")).expect("idle series");
    assert!(line.contains("user=\"eli\""), "{line}");
    assert!(!metrics.contains("gpudash_process_idle_seconds{gpu=\"0\""));
    server.stop().await;
}

#[tokio::test]
async fn nobody_is_idle_before_the_threshold() {
    let server = with_idle_holder(Duration::from_secs(3600)).await;
    let body = eventually(10, "the notebook listed", || async {
        let body = json(&server.url("/api/processes")).await?;
        body["processes"].as_array()?.iter().any(|p| p["device"] == 2).then_some(body)
    })
    .await;
    assert!(body["processes"].as_array().unwrap().iter().all(|p| p["idle"].is_null()), "{body}");
    let states = body["states"].as_array().unwrap();
    assert!(states.iter().any(|s| s["index"] == 2 && s["state"] == "busy"), "{states:?}");
    server.stop().await;
}

#[tokio::test]
async fn the_page_shows_activity_beside_util_and_the_idle_holder() {
    use crate::browser::{texts, with_browser};
    let server = with_idle_holder(Duration::from_secs(2)).await;
    let url = server.url("/");
    with_browser(1280, 2400, |c| async move {
        c.goto(&url).await.unwrap();
        crate::browser_overview::open_all_cards(&c, 3).await;
        let sm = eventually(20, "SM and tensor activity on every card", || async {
            let sm = texts(&c, ".gpu-card .sm-active").await;
            let tensor = texts(&c, ".gpu-card .tensor-active").await;
            (sm.len() == 3 && tensor.len() == 3 && sm.iter().chain(&tensor).all(|t| t.ends_with('%'))).then_some(sm)
        })
        .await;
        assert_eq!(sm[2], "0.0%", "the notebook's GPU does nothing: {sm:?}");
        let flag = eventually(20, "the notebook flagged idle in its row and on its card", || async {
            let flag = texts(&c, "#processes tr.process-row[data-gpu='2'] .idle-flag").await.into_iter().next()?;
            let card = texts(&c, ".gpu-card[data-index='2'] .held-idle").await.into_iter().next()?;
            let overview = texts(&c, "#held-idle-gpus").await.into_iter().next()?;
            let row = texts(&c, "tr.gpu-row[data-index='2'] .ov-state").await.concat();
            (card.starts_with("Held idle: 6") && overview == "Held idle: GPU 2" && row == "held idle").then_some(flag)
        })
        .await;
        assert!(flag.starts_with("idle, holding 6") && flag.contains(" for "), "{flag}");
        let idle_per_user = texts(&c, "#who-uses-what tr.user-row td.usage-idle").await;
        assert!(idle_per_user.iter().any(|t| t.starts_with('6')), "{idle_per_user:?}");
    })
    .await;
    server.stop().await;
}
