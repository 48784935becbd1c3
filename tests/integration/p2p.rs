//! Several GPUs with the simulated executor: the topology matrix, the p2p
//! experiment's heatmaps, its hold on every GPU it involves, runs on different
//! GPUs side by side, and the one-GPU refusal.

use std::time::Duration;

use gpudash::lab::SimulatedLab;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::lab::{ChartSpec, LabStatus, Run, RunStatus};
use shared::topology::Topology;

use crate::support::{TestServer, eventually, finished, get_json};

/// `count` simulated GPUs (H200s up to three, then other models) whose lab sleeps `step_ms` per step.
async fn server(count: u32, step_ms: u64) -> TestServer {
    let options = gpudash::Options {
        simulated_lab: SimulatedLab { step: Some(Duration::from_millis(step_ms)), ..SimulatedLab::default() },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(count, 200)), options).await
}

async fn post(server: &TestServer, path: &str, body: &Value) -> (StatusCode, Value) {
    let response = reqwest::Client::new().post(server.url(path)).json(body).send().await.expect("request");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

async fn submit(server: &TestServer, device: u32, params: Value) -> u64 {
    let (status, run) = post(server, "/api/runs", &json!({ "device": device, "params": params })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    run["id"].as_u64().expect("id")
}

#[tokio::test]
async fn with_one_gpu_p2p_is_refused_and_the_rest_works() {
    let server = server(1, 1).await;
    let (status, body) = post(&server, "/api/runs", &json!({ "device": 0, "params": { "kind": "p2p" } })).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "P2P needs two GPUs; this server has one");
    let topology: Topology = get_json(&server, "/api/topology").await;
    assert_eq!((topology.devices.len(), topology.pairs.len()), (1, 0));
    let id = submit(&server, 0, json!({ "kind": "latency" })).await;
    assert_eq!(finished(&server, id).await.summary.status, RunStatus::Succeeded);
    server.stop().await;
}

#[tokio::test]
async fn the_topology_of_simulated_h200s_is_an_nv18_mesh() {
    let server = server(4, 1).await;
    let topology: Topology = get_json(&server, "/api/topology").await;
    assert!(topology.simulated);
    assert_eq!(topology.pairs.len(), 12, "every ordered pair of 4 GPUs");
    let h200s = topology.pair(1, 0).expect("pair 1,0");
    assert_eq!(
        (h200s.link.as_str(), h200s.nvlinks, h200s.p2p_read.as_str(), h200s.p2p_nvlink.as_str()),
        ("NV18", 18, "OK", "OK")
    );
    // GPU 3 is another model: no NVLink between them, PCIe within the node.
    let mixed = topology.pair(0, 3).expect("pair 0,3");
    assert_eq!((mixed.link.as_str(), mixed.p2p_read.as_str()), ("NODE", "NS"));
    assert_eq!(topology.devices[0].nvlinks.iter().filter(|l| l.active).count(), 18);
    server.stop().await;
}

#[tokio::test]
async fn a_p2p_run_measures_every_pair_as_heatmaps() {
    let server = server(3, 1).await;
    let id = submit(&server, 0, json!({ "kind": "p2p", "size": 1073741824u64, "repetitions": 3 })).await;
    let run = finished(&server, id).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary);
    assert_eq!(run.summary.devices, vec![0, 1, 2]);
    assert_eq!(run.summary.passed, Some(true));
    assert_eq!(run.params.kind.name(), "p2p");
    let pairs = run.params.values["pairs"].as_array().expect("the stored run lists its pairs");
    assert_eq!(pairs.len(), 3, "the server fills in every pair");
    let result = run.result.expect("a result");
    assert!(matches!(result.chart, ChartSpec::Heatmap { .. }));
    assert_eq!(result.matrices.len(), 6);
    for m in &result.matrices {
        assert_eq!(m.devices, vec![0, 1, 2]);
        for (i, row) in m.cells.iter().enumerate() {
            for (j, cell) in row.iter().enumerate() {
                assert_eq!(cell.is_some(), i != j, "{} [{i}][{j}]", m.name);
            }
        }
    }
    let uni = &result.matrices[0];
    assert_eq!(uni.name, "unidirectional, peer access enabled");
    assert_eq!(uni.unit, "GB/s");
    // The simulator's figure, not a measurement: what can be wrong is its label, its sign,
    // and whether every export carries the same number, not its size.
    let gbps = uni.cells[0][1].expect("0→1");
    assert!(run.summary.simulated && gbps.is_finite() && gbps > 0.0, "{gbps}");
    let topology: Topology = get_json(&server, "/api/topology").await;
    let link = &topology.pair(0, 1).expect("pair 0,1").link;
    let note = format!("GPU 0 ↔ 1: {link}");
    assert!(
        result.notes.iter().any(|n| n.starts_with(&note)),
        "the note names /api/topology's link: {:?}",
        result.notes
    );

    let svg = reqwest::get(server.url(&format!("/api/runs/{id}/chart.svg"))).await.expect("svg");
    let svg = svg.text().await.expect("text");
    assert!(svg.contains("SIMULATED") && svg.contains("bidirectional, peer access disabled"), "{svg:.400}");
    let csv = reqwest::get(server.url(&format!("/api/runs/{id}/results.csv"))).await.expect("csv");
    let csv = csv.text().await.expect("text");
    let row = ",matrix,\"unidirectional, peer access enabled\",0->1,";
    let in_csv =
        csv.lines().find_map(|l| l.split_once(row)).map(|(_, rest)| rest.split(',').next().unwrap_or_default());
    assert_eq!(
        in_csv.and_then(|v| v.parse::<f64>().ok()),
        Some(gbps),
        "the CSV's 0->1 median is the run's: {csv:.1500}"
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_pairs_are_refused_with_what_is_wrong() {
    let server = server(2, 1).await;
    for (body, expected) in [
        (json!({ "device": 0, "params": { "kind": "p2p", "pairs": [{ "a": 0, "b": 5 }] } }), "GPU 5"),
        (json!({ "device": 0, "params": { "kind": "p2p", "pairs": [{ "a": 1, "b": 1 }] } }), "two different GPUs"),
        (json!({ "device": 0, "params": { "kind": "p2p", "size": 1 } }), "'size' must be from"),
    ] {
        let (status, answer) = post(&server, "/api/runs", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer["error"].as_str().expect("message").contains(expected), "{answer}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_p2p_run_waits_for_and_holds_both_gpus() {
    // Steps of 300 ms: the busy run outlasts the next requests even when each takes 100 ms on a loaded machine.
    let server = server(2, 300).await;
    // GPU 1 is busy; the p2p run on GPU 0 waits for it, and what comes after waits for the p2p run.
    let busy = submit(&server, 1, json!({ "kind": "latency" })).await;
    let p2p = submit(&server, 0, json!({ "kind": "p2p", "repetitions": 2 })).await;
    let lab: LabStatus = get_json(&server, "/api/lab").await;
    let queued = lab.queue.iter().find(|e| e.run.id == p2p).expect("p2p in the queue");
    assert_eq!(queued.run.status, RunStatus::Queued, "GPU 1 is not free yet");
    assert_eq!(queued.run.devices, vec![0, 1]);
    let (status, body) = post(&server, "/api/lab/devices/1/empty_cache", &json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "the p2p run counts on GPU 1 too: {body}");
    let after_on_0 = submit(&server, 0, json!({ "kind": "latency" })).await;
    let after_on_1 = submit(&server, 1, json!({ "kind": "latency" })).await;

    let busy = finished(&server, busy).await;
    let p2p = finished(&server, p2p).await;
    let after_on_0 = finished(&server, after_on_0).await;
    let after_on_1 = finished(&server, after_on_1).await;
    let started = |r: &Run| r.summary.started_ms.expect("started");
    let ended = |r: &Run| r.summary.finished_ms.expect("ended");
    assert_eq!(p2p.summary.status, RunStatus::Succeeded, "{:?}", p2p.summary);
    assert!(started(&p2p) >= ended(&busy), "p2p waited for GPU 1");
    assert!(started(&after_on_0) >= ended(&p2p), "GPU 0's next run waited for p2p");
    assert!(started(&after_on_1) >= ended(&p2p), "GPU 1's next run waited for p2p");
    server.stop().await;
}

#[tokio::test]
async fn cancelling_a_waiting_p2p_run_frees_the_gpus_it_held() {
    let server = server(2, 60).await;
    let busy = submit(&server, 0, json!({ "kind": "transfer" })).await;
    let p2p = submit(&server, 0, json!({ "kind": "p2p" })).await;
    let on_1 = submit(&server, 1, json!({ "kind": "latency" })).await;
    eventually(10, "GPU 0's first run started", || async {
        let lab: LabStatus = get_json(&server, "/api/lab").await;
        lab.queue.iter().any(|e| e.run.id == busy && e.run.status == RunStatus::Running).then_some(())
    })
    .await;
    let (status, body) = post(&server, &format!("/api/runs/{p2p}/cancel"), &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled");
    // GPU 1 was held for the p2p run; once it is cancelled GPU 1 runs its own queue while GPU 0 is still busy.
    let on_1 = finished(&server, on_1).await;
    let busy = finished(&server, busy).await;
    assert_eq!(on_1.summary.status, RunStatus::Succeeded);
    assert!(on_1.summary.finished_ms <= busy.summary.finished_ms, "GPU 1 did not wait for GPU 0");
    server.stop().await;
}

#[tokio::test]
async fn experiments_on_different_gpus_run_at_the_same_time() {
    let server = server(2, 50).await;
    let a = submit(&server, 0, json!({ "kind": "latency" })).await;
    let b = submit(&server, 1, json!({ "kind": "precision", "sizes": [1024] })).await;
    // The two runs' own start and end times overlap (polling for both "running" at once missed
    // the overlap on a loaded machine): one after the other would fail this.
    let (ra, rb) = (finished(&server, a).await.summary, finished(&server, b).await.summary);
    for run in [&ra, &rb] {
        assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
    }
    let span = |r: &shared::lab::RunSummary| (r.started_ms.expect("started"), r.finished_ms.expect("finished"));
    let ((a0, a1), (b0, b1)) = (span(&ra), span(&rb));
    assert!(a0 < b1 && b0 < a1, "GPU 0's run {a0}–{a1} ms and GPU 1's {b0}–{b1} ms did not overlap");
    server.stop().await;
}

#[tokio::test]
async fn simulated_p2p_reports_no_peer_access_where_the_topology_has_none() {
    // GPU 3 is another model than GPU 0: the simulated topology gives the pair no P2P ("NS").
    let server = server(4, 1).await;
    let topology: Topology = get_json(&server, "/api/topology").await;
    assert_eq!(topology.pair(0, 3).expect("pair 0,3").p2p_read, "NS");
    let pairs = json!([{ "a": 0, "b": 1 }, { "a": 0, "b": 3 }]);
    let id = submit(&server, 0, json!({ "kind": "p2p", "pairs": pairs, "repetitions": 2 })).await;
    let run = finished(&server, id).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary);
    let result = run.result.expect("a result");
    let enabled = result.matrices.iter().find(|m| m.name == "unidirectional, peer access enabled").expect("enabled");
    let disabled = result.matrices.iter().find(|m| m.name == "unidirectional, peer access disabled").expect("off");
    assert_eq!(enabled.devices, vec![0, 1, 3]);
    assert!(enabled.cells[0][1].is_some(), "0 and 1 are NVLinked H200s: {:?}", enabled.cells);
    assert_eq!((enabled.cells[0][2], enabled.cells[2][0]), (None, None), "no peer figures for 0 and 3");
    assert!(disabled.cells[0][2].is_some() && disabled.cells[2][0].is_some(), "staged copies still measured");
    assert!(!result.figures.iter().any(|f| f.name.starts_with("GPU 0→3") && f.name.ends_with("enabled")));
    assert!(
        result.notes.iter().any(|n| n.starts_with("GPUs 0 and 3 cannot access each other's memory")),
        "said like hardware says it: {:?}",
        result.notes
    );
    assert!(!result.checks.is_empty() && result.checks.iter().all(|c| c.passed), "{:?}", result.checks);
    server.stop().await;
}
