//! The busy-GPU refusal under `--simulate`: the simulator's processes make a GPU busy
//! for the lab as NVML's list does on hardware, so a run there is refused unless forced.

use std::sync::Arc;
use std::time::Duration;

use gpudash::lab::SimulatedLab;
use gpudash::lab::guards::SimulatedProbe;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::lab::{Run, RunStatus};

use crate::support::{TestServer, eventually, finished, get_json};

/// Two simulated GPUs with the lab's probe as `--simulate` builds it: GPU 0 starts a job at once,
/// GPU 1 only after an idle spell of 20 s or more.
async fn simulate_server() -> TestServer {
    let probe = Arc::new(SimulatedProbe::default().following_simulator());
    let options = gpudash::Options {
        simulated_lab: SimulatedLab { probe: Some(probe), step: Some(Duration::from_millis(1)) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(2, 200)), options).await
}

async fn submit(server: &TestServer, device: u32, force: bool) -> (StatusCode, Value) {
    let body = json!({ "device": device, "params": { "kind": "latency", "repetitions": 10 }, "force": force });
    let response = reqwest::Client::new().post(server.url("/api/runs")).json(&body).send().await.expect("request");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

#[tokio::test]
async fn a_gpu_the_simulator_computes_on_is_refused_unless_forced() {
    let server = simulate_server().await;
    let pid = eventually(10, "the simulator's job on GPU 0", || async {
        let processes: Value = get_json(&server, "/api/processes").await;
        processes["processes"].as_array()?.iter().find(|p| p["device"] == 0)?["pid"].as_u64()
    })
    .await;

    let (status, body) = submit(&server, 0, false).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let error = body["error"].as_str().expect("a message");
    assert!(
        error.contains(&format!("GPU 0 has 1 other process(es) computing: pid {pid}")) && error.contains("force"),
        "{error}"
    );
    let lab: Value = get_json(&server, "/api/lab").await;
    assert_eq!(lab["queue"], json!([]), "a refusal queues nothing: {lab}");

    // GPU 1 idles at first: the same run is taken there, and the lab does not count itself as another process.
    let (status, body) = submit(&server, 1, false).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let free: Run = serde_json::from_value(body).expect("a run");
    assert_eq!(finished(&server, free.summary.id).await.summary.status, RunStatus::Succeeded);

    let (status, body) = submit(&server, 0, true).await;
    assert_eq!(status, StatusCode::ACCEPTED, "forced: {body}");
    let forced: Run = serde_json::from_value(body).expect("a run");
    assert!(forced.plan.notes.iter().any(|n| n.contains("running anyway (forced)")), "{:?}", forced.plan.notes);
    assert_eq!(finished(&server, forced.summary.id).await.summary.status, RunStatus::Succeeded);
    server.stop().await;
}

async fn check(server: &TestServer, body: &Value) -> (StatusCode, Value) {
    let response = reqwest::Client::new().post(server.url("/api/runs/check")).json(body).send().await.expect("request");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

/// `POST /api/runs/check` answers what a submit would, and queues nothing: the refusal with the same
/// words, or the GPUs a multi-GPU run takes (every GPU for collectives and p2p by default) and the plan.
#[tokio::test]
async fn a_check_answers_as_the_submit_would_without_queueing() {
    let server = simulate_server().await;
    let pid = eventually(10, "the simulator's job on GPU 0", || async {
        let processes: Value = get_json(&server, "/api/processes").await;
        processes["processes"].as_array()?.iter().find(|p| p["device"] == 0)?["pid"].as_u64()
    })
    .await;
    let collectives = json!({ "kind": "collectives", "sizes": [1048576], "repetitions": 2 });

    let (status, body) = check(&server, &json!({ "device": 1, "params": collectives, "force": false })).await;
    assert_eq!(status, StatusCode::CONFLICT, "GPU 0 is busy and collectives takes it: {body}");
    let error = body["error"].as_str().expect("a message");
    assert!(error.contains(&format!("GPU 0 has 1 other process(es) computing: pid {pid}")), "{error}");

    let (status, body) = check(&server, &json!({ "device": 1, "params": collectives, "force": true })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: shared::lab::RunCheck = serde_json::from_value(body).expect("a RunCheck");
    assert_eq!(answer.devices, [0, 1]);
    assert!(answer.plan.notes.iter().any(|n| n.contains("running anyway (forced)")), "{:?}", answer.plan.notes);
    assert!(answer.plan.notes.iter().any(|n| n.contains("occupies GPUs 0, 1")), "{:?}", answer.plan.notes);

    let p2p = json!({ "device": 1, "params": { "kind": "p2p", "repetitions": 1 }, "force": true });
    let (status, body) = check(&server, &p2p).await;
    assert_eq!((status, &body["devices"]), (StatusCode::OK, &json!([0, 1])), "{body}");
    let (status, body) = check(&server, &json!({ "device": 7, "params": { "kind": "latency" } })).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let lab: Value = get_json(&server, "/api/lab").await;
    assert_eq!(lab["queue"], json!([]), "a check queues nothing: {lab}");
    let runs: Value = get_json(&server, "/api/runs").await;
    assert_eq!(runs, json!([]), "and stores nothing");
    server.stop().await;
}
