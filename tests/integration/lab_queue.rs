//! The lab's shared-server manners over HTTP: the host-memory guard at submit and at start, the
//! per-user queue limit, a long queue's small status, and one run per GPU with a shared queue and cancel.

use std::time::{Duration, Instant};

use gpudash::lab::LabConfig;
use gpudash::lab::guards::HostMemory;
use reqwest::StatusCode;
use serde_json::json;
use shared::ServerMessage;
use shared::lab::{ExperimentKind, ExperimentParams, LabEvent, LabStatus, QUEUE_LISTED, Run, RunRequest, RunStatus};

use crate::support::{TestServer, connect, eventually, eventually_every, finished, get_json};

use crate::lab::{lab_server, post};

async fn until_status(server: &TestServer, id: u64, status: RunStatus) {
    eventually_every(20, Duration::from_millis(20), &format!("run {id} to be {status:?}"), || async {
        let run: Run = get_json(server, &format!("/api/runs/{id}")).await;
        if run.summary.status == status { Ok(()) } else { Err(run.summary.status) }
    })
    .await;
}

#[expect(clippy::print_stdout, reason = "the test prints the figure it bounds")]
fn print_figure(text: &str) {
    println!("{text}");
}

#[tokio::test]
async fn the_host_memory_guard_counts_every_running_run_at_submit_and_at_start() {
    const GIB: u64 = 1 << 30;
    // Each step 600 ms: a streams run (5 steps) lasts 3 s, long enough to overlap the others.
    let (server, probe) = lab_server(2, 600, LabConfig::default()).await;
    let streams = |device: u32| json!({ "device": device, "params": { "kind": "streams", "copy_bytes": 4 * GIB, "gemm_size": 1024 } });
    // 4 GiB of page-locked memory and the 1 GiB margin do not fit in 4.5 GiB: refused before it queues.
    probe.set_host_memory(HostMemory { total: 24 * GIB, available: 9 * GIB / 2 });
    let (status, body) = post(&server, "/api/runs", "a", &streams(0)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["error"].as_str().expect("message");
    assert!(
        message.contains("needs 4.00 GiB of page-locked")
            && message.contains("4.50 GiB available")
            && message.contains("smaller"),
        "{message}"
    );

    // 6 GiB: one such run fits, two at once do not.
    probe.set_host_memory(HostMemory { total: 24 * GIB, available: 6 * GIB });
    let latency = json!({ "device": 0, "params": { "kind": "latency" } });
    let (_, first) = post(&server, "/api/runs", "alice", &latency).await;
    let (status, waiting) = post(&server, "/api/runs", "alice", &streams(0)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "nothing running holds host memory yet: {waiting}");
    let (status, beside) = post(&server, "/api/runs", "bob", &streams(1)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{beside}");
    let beside = beside["id"].as_u64().expect("id");
    until_status(&server, beside, RunStatus::Running).await;

    let (status, body) = post(&server, "/api/runs", "carol", &streams(0)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["error"].as_str().expect("message");
    assert!(message.contains("other lab runs running now planned 4.00 GiB"), "{message}");

    // The waiting run reaches the front of GPU 0 while GPU 1's run still holds its 4 GiB: refused at start.
    post(&server, &format!("/api/runs/{}/cancel", first["id"]), "alice", &json!({})).await;
    let waiting = finished(&server, waiting["id"].as_u64().expect("id")).await;
    assert_eq!(waiting.summary.status, RunStatus::Failed);
    let error = waiting.summary.error.expect("why");
    assert!(error.starts_with("refused at start: ") && error.contains("planned 4.00 GiB"), "{error}");
    assert_eq!(finished(&server, beside).await.summary.status, RunStatus::Succeeded);

    // Once it ended, its memory counts no more.
    let (status, again) = post(&server, "/api/runs", "carol", &streams(0)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(finished(&server, again["id"].as_u64().expect("id")).await.summary.status, RunStatus::Succeeded);
    server.stop().await;
}

#[tokio::test]
async fn one_user_cannot_queue_more_runs_than_the_limit() {
    let config = LabConfig { queue_per_user: 2, ..LabConfig::default() };
    let (server, _) = lab_server(1, 500, config).await;
    let latency = json!({ "device": 0, "params": { "kind": "latency" } });
    let mut alices = Vec::new();
    for _ in 0..2 {
        let (status, run) = post(&server, "/api/runs", "alice", &latency).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{run}");
        alices.push(run["id"].as_u64().expect("id"));
    }
    let (status, body) = post(&server, "/api/runs", "alice", &latency).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let message = body["error"].as_str().expect("message");
    assert!(message.contains("'alice' already has 2") && message.contains("--lab-queue-per-user 2"), "{message}");
    let (status, body) = post(&server, "/api/runs", "bob", &latency).await;
    assert_eq!(status, StatusCode::ACCEPTED, "the limit is per user: {body}");
    let lab: LabStatus = get_json(&server, "/api/lab").await;
    assert_eq!((lab.queue_per_user, lab.queue_total), (2, 3));

    // A run that ended (here: cancelled while queued) frees its place.
    post(&server, &format!("/api/runs/{}/cancel", alices[1]), "alice", &json!({})).await;
    let (status, body) = post(&server, "/api/runs", "alice", &latency).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // Sent at once, still two.
    let tries = (0..6).map(|_| post(&server, "/api/runs", "carol", &latency));
    let answers = futures_util::future::join_all(tries).await;
    let accepted = answers.iter().filter(|(status, _)| *status == StatusCode::ACCEPTED).count();
    assert_eq!(accepted, 2, "{answers:?}");
    assert!(answers.iter().all(|(s, _)| *s == StatusCode::ACCEPTED || *s == StatusCode::TOO_MANY_REQUESTS));
    server.stop().await;
}

#[tokio::test]
async fn a_thousand_queued_runs_make_a_small_status() {
    let config = LabConfig { queue_per_user: 1000, ..LabConfig::default() };
    // Steps of 5 s: nothing ends while the test looks, even on a busy machine.
    let (server, _) = lab_server(2, 5000, config).await;
    let lab = server.running.lab().clone();
    let ids = tokio::task::spawn_blocking(move || {
        (0..1000)
            .map(|i| {
                let request = RunRequest {
                    device: i % 2,
                    params: ExperimentParams::defaults(ExperimentKind::named("latency")),
                    force: false,
                };
                lab.submit(request, "alice").expect("queued").summary.id
            })
            .collect::<Vec<u64>>()
    })
    .await
    .expect("submitted");
    until_status(&server, ids[0], RunStatus::Running).await;
    until_status(&server, ids[1], RunStatus::Running).await;

    let mut socket = connect(&server.ws_url()).await;
    let (_, body) = post(&server, "/api/runs", "bob", &json!({ "device": 1, "params": { "kind": "latency" } })).await;
    let bob = body["id"].as_u64().expect("id");
    // The status event that follows bob's run: its size on the wire.
    let deadline = Instant::now() + Duration::from_secs(10);
    let frame = loop {
        assert!(Instant::now() < deadline, "no lab status event");
        let next = tokio::time::timeout(Duration::from_secs(10), futures_util::StreamExt::next(&mut socket)).await;
        let Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text)))) = next else { continue };
        if text.contains(r#""event":"status""#) && text.contains(r#""queue_total":1001"#) {
            break text.as_str().to_owned();
        }
    };
    print_figure(&format!("lab status event with 1001 runs queued: {} bytes", frame.len()));
    assert!(frame.len() < 16 * 1024, "{} bytes", frame.len());

    let ServerMessage::Lab(LabEvent::Status(status)) = serde_json::from_str(&frame).expect("a message") else {
        panic!("not a status: {frame:.200}")
    };
    assert_eq!(status.queue_total, 1001);
    assert_eq!(status.queue.len(), 2 + QUEUE_LISTED, "both running runs and the next {QUEUE_LISTED}");
    assert_eq!(status.unlisted(), 1001 - 2 - QUEUE_LISTED as u32);
    let pending: Vec<u32> = status.devices.iter().map(|d| d.pending).collect();
    assert_eq!(pending, vec![500, 501]);
    let listed: Vec<(u32, u32)> = status.queue.iter().map(|e| (e.run.device, e.position)).collect();
    let expected: Vec<(u32, u32)> = (0..2).flat_map(|gpu| (0..=10).map(move |p| (gpu, p))).collect();
    assert_eq!(listed, expected, "each GPU's running run and its next ten, in order");
    assert!(status.queue.iter().all(|e| e.run.id != bob), "bob's run is counted, not listed");
    let http = reqwest::get(server.url("/api/lab")).await.expect("lab").text().await.expect("text");
    assert!(http.len() < 16 * 1024, "GET /api/lab: {} bytes", http.len());
    server.stop().await;
}

#[tokio::test]
async fn one_run_per_gpu_a_shared_queue_and_cancel() {
    // Steps of 1 s: the first run (5 steps) outlasts the four submits and the cancels on a busy machine.
    let (server, _) = lab_server(2, 1000, LabConfig::default()).await;
    let body = |device: u32| json!({ "device": device, "params": { "kind": "latency" } });
    let mut ids = Vec::new();
    for (user, device) in [("alice", 0), ("bob", 0), ("carol", 0), ("dave", 1)] {
        let (status, run) = post(&server, "/api/runs", user, &body(device)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{run}");
        ids.push(run["id"].as_u64().expect("id"));
    }
    // Signed in: anonymous visitors of a dashboard with tokens do not see who asked.
    let lab: LabStatus = eventually(10, "alice's and dave's runs started", || async {
        let lab: LabStatus = reqwest::Client::new()
            .get(server.url("/api/lab"))
            .bearer_auth("alice-token-for-tests")
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let running = |id: u64| lab.queue.iter().any(|e| e.run.id == id && e.run.status == RunStatus::Running);
        (running(ids[0]) && running(ids[3])).then_some(lab)
    })
    .await;
    assert!(lab.available && lab.simulated);
    let queue: Vec<(u64, u32, u32, &str)> =
        lab.queue.iter().map(|e| (e.run.id, e.run.device, e.position, e.run.requested_by.as_str())).collect();
    assert_eq!(
        queue,
        vec![(ids[0], 0, 0, "alice"), (ids[1], 0, 1, "bob"), (ids[2], 0, 2, "carol"), (ids[3], 1, 0, "dave")],
        "GPU 0 runs one at a time; GPU 1 runs beside it"
    );

    // A queued run is cancelled at once; a running one at its next step.
    let (status, cancelled) = post(&server, &format!("/api/runs/{}/cancel", ids[2]), "carol", &json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cancelled["status"], "cancelled");
    let (status, _) = post(&server, &format!("/api/runs/{}/cancel", ids[0]), "alice", &json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(finished(&server, ids[0]).await.summary.status, RunStatus::Cancelled);
    assert_eq!(finished(&server, ids[1]).await.summary.status, RunStatus::Succeeded);
    assert_eq!(finished(&server, ids[3]).await.summary.status, RunStatus::Succeeded);

    let (status, again) = post(&server, &format!("/api/runs/{}/cancel", ids[1]), "bob", &json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(again["error"].as_str().expect("message").contains("already ended"));
    let missing = reqwest::get(server.url("/api/runs/999")).await.expect("request");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}
