//! What anonymous viewers see: on a server with tokens, that GPUs are busy and
//! how much they hold, never who runs what (user names, command lines,
//! containers) nor where the history lives; a signed-in viewer, and the local
//! user of a server without tokens, see everything.

use std::time::Duration;

use gpudash::auth::AuthConfig;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::Value;
use shared::ServerMessage;
use shared::processes::GpuProcess;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::browser::eventually;
use crate::security::{ADMIN, VIEWER};
use crate::support::{Socket, TestServer, WithProcesses, next_message};

const WITNESS_PID: u32 = 900_011;
/// What names the witness process's owner and work: none of it may reach an anonymous viewer.
const WITNESS_USER: &str = "zoe";
const WITNESS_SECRET: &str = "s3cret-api-key";
const WITNESS_CONTAINER: &str = "c0ffee123456";
const WITNESS_EXECUTABLE: &str = "serve-llm";

/// Adds one process on GPU 1 whose user, command line (with a secret) and container are
/// known, so a test can look for them.
fn witness(now_ms: u64, processes: &mut Vec<GpuProcess>) {
    processes.push(GpuProcess {
        used_memory: Some(3 << 30),
        sm_util: Some(40),
        sm_util_seen_ms: Some(now_ms),
        user: Some(WITNESS_USER.to_owned()),
        name: Some(WITNESS_EXECUTABLE.to_owned()),
        command: Some(format!("{WITNESS_EXECUTABLE} --model llama --api-key={WITNESS_SECRET}")),
        started_ms: Some(now_ms - 60_000),
        group: None,
        workload: Some(shared::workload::Workload {
            container: Some(shared::workload::Container { id: WITNESS_CONTAINER.to_owned(), ..Default::default() }),
            ..Default::default()
        }),
        ..shared::testing::process(1, WITNESS_PID)
    });
}

/// A server with history in `dir` and, when `auth_file` is `Some`, the security
/// tests' four users under that policy (the text of the auth file).
async fn server(auth_file: Option<&str>, dir: &std::path::Path) -> TestServer {
    let auth = match auth_file {
        Some(text) => {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), text).unwrap();
            AuthConfig::load(Some(file.path()), Some(&format!("vera:viewer:{VIEWER},ada:admin:{ADMIN}"))).unwrap()
        }
        None => AuthConfig::default(),
    };
    let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).unwrap();
    let options = gpudash::Options { auth, store: Some(store), ..gpudash::Options::new(Duration::from_millis(200)) };
    TestServer::with_options(Box::new(WithProcesses::new(Simulator::new(2, 200), witness)), options).await
}

async fn get(server: &TestServer, path: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut request = reqwest::Client::new().get(server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

/// The words of `text` that name the witness or the history's place, if any.
fn leaks(text: &str, dir: &std::path::Path) -> Vec<String> {
    let dir = dir.display().to_string();
    [WITNESS_USER, WITNESS_SECRET, WITNESS_CONTAINER, WITNESS_EXECUTABLE, "history_path", &dir]
        .into_iter()
        .filter(|word| text.contains(word))
        .map(str::to_owned)
        .collect()
}

/// Every process of a JSON list, checked for names: none, and marked redacted.
fn assert_redacted(processes: &Value, what: &str) {
    let processes = processes.as_array().unwrap();
    assert!(processes.iter().any(|p| p["pid"] == WITNESS_PID), "{what}: the busy GPU still shows: {processes:?}");
    for p in processes {
        for field in ["user", "name", "command", "container"] {
            assert_eq!(p[field], Value::Null, "{what}: {field} of {p}");
        }
        assert_eq!(p["redacted"], true, "{what}: {p}");
    }
}

/// The WebSocket as `token` (anonymous when `None`): its snapshot, then the next details message.
async fn stream(server: &TestServer, token: Option<&str>) -> (String, String) {
    let mut request = server.ws_url().into_client_request().unwrap();
    if let Some(token) = token {
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let (mut socket, _): (Socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let snapshot = next_message(&mut socket, 10).await;
    assert!(matches!(snapshot, ServerMessage::Snapshot(_)), "{snapshot:?}");
    // Details come every couple of seconds: well within ten ticks' deadline each.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let details = loop {
        match next_message(&mut socket, 10).await {
            message @ ServerMessage::Details(_) => break message,
            _ => assert!(std::time::Instant::now() < deadline, "no details within 15 s"),
        }
    };
    (serde_json::to_string(&snapshot).unwrap(), serde_json::to_string(&details).unwrap())
}

/// Waits until the slow loop has published the witness, so every view has processes to show.
async fn witness_running(server: &TestServer, token: Option<&str>) {
    eventually(15, "the witness process", || async {
        let (_, body) = get(server, "/api/processes", token).await;
        body.contains(&WITNESS_PID.to_string()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn anonymous_viewers_of_a_team_server_see_load_but_not_who_runs_what() {
    let dir = tempfile::tempdir().unwrap();
    // `metrics` left out: it follows `viewers`, so open here, and its scrapers are anonymous too.
    let server = server(Some("viewers = \"open\"\n"), dir.path()).await;
    witness_running(&server, None).await;

    let (status, devices) = get(&server, "/api/devices", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(leaks(&devices, dir.path()), Vec::<String>::new(), "/api/devices: {devices}");
    let devices: Value = serde_json::from_str(&devices).unwrap();
    assert_eq!(devices["host"]["history"], true, "the page still learns that history is on");
    assert_redacted(&devices["devices"][1]["processes"], "/api/devices");

    let (_, processes) = get(&server, "/api/processes", None).await;
    assert_eq!(leaks(&processes, dir.path()), Vec::<String>::new(), "/api/processes: {processes}");
    let processes: Value = serde_json::from_str(&processes).unwrap();
    assert_redacted(&processes["processes"], "/api/processes");
    assert_eq!(processes["users"], Value::Array(vec![]), "who uses what names people");
    assert!(!processes["free_devices"].as_array().unwrap().contains(&1.into()), "GPU 1 is busy: {processes}");

    let (status, metrics) = get(&server, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(leaks(&metrics, dir.path()), Vec::<String>::new());
    assert!(!metrics.contains("user=") && !metrics.contains("command="), "{metrics}");
    assert!(metrics.contains(&format!("pid=\"{WITNESS_PID}\"")), "the load per process stays: {metrics}");

    let (snapshot, details) = stream(&server, None).await;
    for (what, text) in [("snapshot", &snapshot), ("details", &details)] {
        assert_eq!(leaks(text, dir.path()), Vec::<String>::new(), "/ws {what}: {text}");
        let message: Value = serde_json::from_str(text).unwrap();
        assert_redacted(&message["processes"], what);
    }

    // Signed in, the same views name everyone again.
    let (_, devices) = get(&server, "/api/devices", Some(VIEWER)).await;
    assert!(devices.contains(WITNESS_SECRET) && devices.contains(WITNESS_CONTAINER), "{devices}");
    let (_, processes) = get(&server, "/api/processes", Some(VIEWER)).await;
    let processes: Value = serde_json::from_str(&processes).unwrap();
    assert!(processes["users"].as_array().unwrap().iter().any(|u| u["user"] == WITNESS_USER), "{processes}");
    let (_, metrics) = get(&server, "/metrics", Some(VIEWER)).await;
    assert!(metrics.contains(&format!("user=\"{WITNESS_USER}\",command=\"{WITNESS_EXECUTABLE}\"")), "{metrics}");
    let (snapshot, details) = stream(&server, Some(VIEWER)).await;
    assert!(snapshot.contains(WITNESS_SECRET) && details.contains(WITNESS_USER), "{snapshot}\n{details}");
    assert!(!devices.contains("history_path") && !devices.contains(&dir.path().display().to_string()));
    server.stop().await;
}

#[tokio::test]
async fn metrics_follow_the_viewers_policy_unless_opened() {
    let dir = tempfile::tempdir().unwrap();
    let closed = server(Some("viewers = \"token\"\n"), dir.path()).await;
    witness_running(&closed, Some(VIEWER)).await;
    let (status, body) = get(&closed, "/metrics", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("needs a token"), "{body}");
    let (status, metrics) = get(&closed, "/metrics", Some(VIEWER)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(metrics.contains(&format!("user=\"{WITNESS_USER}\"")), "a scraper with a token sees users: {metrics}");
    closed.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let opened = server(Some("viewers = \"token\"\nmetrics = \"open\"\n"), dir.path()).await;
    witness_running(&opened, Some(VIEWER)).await;
    let (status, metrics) = get(&opened, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK, "explicitly opened");
    assert_eq!(leaks(&metrics, dir.path()), Vec::<String>::new(), "{metrics}");
    assert!(metrics.contains(&format!("pid=\"{WITNESS_PID}\"")), "{metrics}");
    opened.stop().await;
}

#[tokio::test]
async fn a_server_without_tokens_shows_its_local_user_everything() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(None, dir.path()).await;
    witness_running(&server, None).await;
    let (_, devices) = get(&server, "/api/devices", None).await;
    assert!(devices.contains(WITNESS_SECRET) && devices.contains(WITNESS_CONTAINER), "{devices}");
    assert!(!devices.contains("history_path") && !devices.contains(&dir.path().display().to_string()), "{devices}");
    let (_, processes) = get(&server, "/api/processes", None).await;
    assert!(processes.contains(&format!("\"user\":\"{WITNESS_USER}\"")), "{processes}");
    let (_, metrics) = get(&server, "/metrics", None).await;
    assert!(metrics.contains(&format!("user=\"{WITNESS_USER}\"")), "{metrics}");
    let (snapshot, details) = stream(&server, None).await;
    assert!(snapshot.contains(WITNESS_SECRET) && details.contains(WITNESS_CONTAINER), "{snapshot}\n{details}");
    server.stop().await;
}

/// Lab messages on `socket` until a `run` event arrives, as JSON values.
async fn lab_messages_until_a_run(socket: &mut Socket) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        assert!(std::time::Instant::now() < deadline, "no lab run event within 20 s: {seen:?}");
        let message = serde_json::to_value(next_message(socket, 10).await).unwrap();
        if message["type"] == "lab" {
            let is_run = message["event"] == "run";
            seen.push(message);
            if is_run {
                return seen;
            }
        }
    }
}

/// Every `requested_by` anywhere in `value`.
fn requesters(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("requested_by", Value::String(who)) => out.push(who.clone()),
                    _ => requesters(inner, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| requesters(item, out)),
        _ => {}
    }
}

#[tokio::test]
async fn lab_runs_name_who_asked_only_to_signed_in_viewers() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(Some("viewers = \"open\"\n"), dir.path()).await;
    let (mut anonymous, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {VIEWER}").parse().unwrap());
    let (mut signed_in, _) = tokio_tungstenite::connect_async(request).await.unwrap();

    let submitted = reqwest::Client::new()
        .post(server.url("/api/runs"))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({ "device": 0, "params": { "kind": "latency" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), StatusCode::ACCEPTED);
    let id = submitted.json::<Value>().await.unwrap()["id"].as_u64().unwrap();

    let hidden = shared::lab::HIDDEN_REQUESTER.to_owned();
    let mut names = Vec::new();
    requesters(&Value::Array(lab_messages_until_a_run(&mut anonymous).await), &mut names);
    assert!(!names.is_empty() && names.iter().all(|who| *who == hidden), "anonymous socket: {names:?}");
    let mut names = Vec::new();
    requesters(&Value::Array(lab_messages_until_a_run(&mut signed_in).await), &mut names);
    assert!(names.iter().any(|who| who == "ada"), "signed-in socket: {names:?}");

    for path in ["/api/runs".to_owned(), format!("/api/runs/{id}"), "/api/lab".to_owned()] {
        let (status, body) = get(&server, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        let mut names = Vec::new();
        requesters(&serde_json::from_str(&body).unwrap(), &mut names);
        assert!(names.iter().all(|who| *who == hidden), "{path}: {body}");
        let (_, body) = get(&server, &path, Some(VIEWER)).await;
        assert!(!body.contains(&hidden), "{path} signed in: {body}");
    }
    let (_, runs) = get(&server, "/api/runs", None).await;
    assert!(runs.contains(&hidden), "the run is listed, its requester hidden: {runs}");
    server.stop().await;
}
