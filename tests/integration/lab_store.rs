//! Lab runs in the history database: a run made before a restart is still
//! there after it, with its result, and ids go on from where they were.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use shared::lab::{Run, RunStatus, RunSummary};

use crate::support::{TestServer, eventually_every};

async fn run_of(server: &TestServer, id: u64) -> (StatusCode, Option<Run>) {
    let response = reqwest::get(server.url(&format!("/api/runs/{id}"))).await.expect("request");
    let status = response.status();
    (status, if status == StatusCode::OK { Some(response.json().await.expect("a run")) } else { None })
}

async fn submit_and_finish(server: &TestServer, params: serde_json::Value) -> Run {
    let response = reqwest::Client::new()
        .post(server.url("/api/runs"))
        .json(&json!({ "device": 0, "params": params }))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let id = response.json::<serde_json::Value>().await.expect("JSON")["id"].as_u64().expect("id");
    eventually_every(20, Duration::from_millis(30), &format!("run {id} to end"), || async {
        let (_, run) = run_of(server, id).await;
        let run = run.expect("the run");
        if run.summary.status.is_final() { Ok(run) } else { Err(run.summary.status) }
    })
    .await
}

#[tokio::test]
async fn runs_survive_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = TestServer::with_history(1, 200, dir.path()).await;
    let before = submit_and_finish(&server, json!({ "kind": "precision", "sizes": [1024], "repetitions": 3 })).await;
    assert_eq!(before.summary.status, RunStatus::Succeeded);
    server.stop().await;

    let server = TestServer::with_history(1, 200, dir.path()).await;
    let (status, after) = run_of(&server, before.summary.id).await;
    assert_eq!(status, StatusCode::OK, "the run is found after the restart");
    let after = after.expect("the run");
    assert_eq!(after.summary, before.summary);
    assert_eq!(after.params, before.params);
    assert_eq!(after.environment, before.environment);
    assert_eq!(after.result, before.result);
    let listed: Vec<RunSummary> =
        reqwest::get(server.url("/api/runs?kind=precision")).await.expect("list").json().await.expect("JSON");
    assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), vec![before.summary.id]);

    let next = submit_and_finish(&server, json!({ "kind": "precision", "sizes": [1024], "repetitions": 3 })).await;
    assert!(next.summary.id > before.summary.id, "ids go on after a restart");
    assert_eq!(next.previous_id, Some(before.summary.id), "overlays reach runs from before the restart");
    server.stop().await;
}
