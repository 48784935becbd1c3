//! The PyTorch bridge under attack: a flood of reports with new PIDs is capped
//! and the list stays small; a report for a process that runs as another Unix
//! user is refused (admins aside); another operator's report for a process is
//! refused and audited, and so are commands for it; anonymous visitors do not
//! read command lines when tokens exist.

use std::time::Duration;

use gpudash::auth::AuthConfig;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::security::{ADMIN, OPERATOR, OTHER_OPERATOR, VIEWER, team_server};
use crate::support::{TestServer, audit_triples};

/// PIDs from here on never run on a Linux host (the kernel's PID_MAX_LIMIT is 2^22), as for a client
/// in another PID namespace: such a process belongs to whoever attaches it first.
const NO_SUCH_PID: u32 = 1 << 22;

/// A report as `gpudash.attach()` sends it.
fn report(pid: u32, allow: bool, reserved: u64) -> Value {
    json!({
        "version": 1, "pid": pid, "host": "node1", "process_name": "python train.py",
        "torch_version": "2.5.1", "cuda_version": "12.4", "allow_remote_empty_cache": allow, "interval_s": 1.0,
        "devices": [{ "device": 0, "allocated": 0, "allocated_peak": 0, "reserved": reserved, "reserved_peak": reserved,
                      "active": 0, "inactive_split": 0, "alloc_retries": 0, "ooms": 0 }],
    })
}

/// A report of about 60 KB, as the red team sent: a long command line and 200 spans of new names.
fn flood_report(pid: u32) -> Value {
    let mut body = report(pid, false, 1 << 30);
    body["process_name"] = json!("x".repeat(1000));
    body["spans"] = (0..200)
        .map(|i| {
            json!({ "name": format!("{i:03}-{}", "s".repeat(180)), "device": 0, "start_ms": i,
                         "elapsed_ms": 1.5, "memory_delta": -1, "memory_peak": 1 })
        })
        .collect();
    body
}

async fn post(server: &TestServer, path: &str, token: &str, body: Option<&Value>) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().post(server.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.json().await.unwrap_or(Value::Null))
}

async fn get(server: &TestServer, path: &str, token: Option<&str>) -> (StatusCode, Vec<u8>) {
    let mut request = reqwest::Client::new().get(server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.bytes().await.unwrap().to_vec())
}

async fn listed(server: &TestServer) -> Vec<Value> {
    let (status, body) = get(server, "/api/bridge", Some(VIEWER)).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn a_report_flood_is_capped_per_user_and_the_list_stays_small() {
    let server = team_server("token", "token").await;
    let mut refused = None;
    for pid in NO_SUCH_PID + 1..=NO_SUCH_PID + 40 {
        let body = flood_report(pid);
        assert!(body.to_string().len() > 55_000, "a red-team-sized report");
        let (status, answer) = post(&server, "/api/bridge/report", OPERATOR, Some(&body)).await;
        if status != StatusCode::OK {
            refused = Some((pid, status, answer));
            break;
        }
    }
    let (pid, status, answer) = refused.expect("40 new processes from one user were all accepted");
    assert_eq!((pid - NO_SUCH_PID, status), (33, StatusCode::TOO_MANY_REQUESTS), "{answer}");
    let message = answer["error"].as_str().unwrap();
    assert!(message.contains("32 attached processes") && message.contains("10 minutes"), "{message}");
    let (status, _) = post(&server, "/api/bridge/report", OPERATOR, Some(&flood_report(NO_SUCH_PID + 1))).await;
    assert_eq!(status, StatusCode::OK, "a process already attached keeps reporting");
    let other = flood_report(NO_SUCH_PID + 1_000);
    let (status, answer) = post(&server, "/api/bridge/report", OTHER_OPERATOR, Some(&other)).await;
    assert_eq!(status, StatusCode::OK, "another user still attaches: {answer}");

    let (status, body) = get(&server, "/api/bridge", Some(VIEWER)).await;
    assert_eq!(status, StatusCode::OK);
    let list: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(list.len(), 33);
    assert!(body.len() <= list.len() * 16 * 1024, "{} bytes for {} processes", body.len(), list.len());
    assert!(list.iter().all(|p| p["spans"].as_array().unwrap().len() <= 16), "span names are bounded");
    let id = list[0]["id"].as_u64().unwrap();
    let (status, detail) = get(&server, &format!("/api/bridge/{id}"), Some(VIEWER)).await;
    assert_eq!(status, StatusCode::OK);
    let detail: Value = serde_json::from_slice(&detail).unwrap();
    assert_eq!(detail["id"], id, "one process's details");
    assert!(detail["recent_spans"].as_array().unwrap().len() <= 16, "only spans of kept names are kept");
    server.stop().await;
}

#[tokio::test]
async fn another_operators_report_for_a_process_is_refused_and_commands_stay_with_the_owner() {
    let server = team_server("open", "open").await;
    let gib = 1u64 << 30;
    let pid = NO_SUCH_PID + 77;
    let (status, _) = post(&server, "/api/bridge/report", OPERATOR, Some(&report(pid, false, 4 * gib))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = post(&server, "/api/bridge/report", OTHER_OPERATOR, Some(&report(pid, true, 1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("attached by 'omar'"), "{answer}");
    let process = listed(&server).await.remove(0);
    assert_eq!(process["allow_remote_empty_cache"], false, "the spoofed consent was not stored");
    assert_eq!(process["devices"][0]["reserved"], 4 * gib, "the spoofed figures were not stored");
    let id = process["id"].as_u64().unwrap();
    let empty_cache = format!("/api/bridge/{id}/empty_cache");
    let (status, _) = post(&server, &empty_cache, OTHER_OPERATOR, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "no consent from the owner");

    // The owner consents; an admin's command goes to the owner's client only.
    post(&server, "/api/bridge/report", OPERATOR, Some(&report(pid, true, 4 * gib))).await;
    let (status, pending) = post(&server, &empty_cache, ADMIN, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let command = pending["id"].as_u64().unwrap();
    let mut fake = report(pid, true, 1);
    fake["command_results"] = json!([{ "id": command, "ok": true, "released_bytes": 1u64 << 50 }]);
    let (status, _) = post(&server, "/api/bridge/report", OTHER_OPERATOR, Some(&fake)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(listed(&server).await[0]["empty_cache"]["released_bytes"], Value::Null, "no fake result");
    let (_, answer) = post(&server, "/api/bridge/report", OPERATOR, Some(&report(pid, true, 4 * gib))).await;
    assert_eq!(answer["commands"], json!([{ "kind": "empty_cache", "id": command }]));

    // Consent withdrawn after the request: the command is not delivered, and the page can say why.
    let (status, pending) = post(&server, &empty_cache, ADMIN, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, answer) = post(&server, "/api/bridge/report", OPERATOR, Some(&report(pid, false, 4 * gib))).await;
    assert_eq!(answer["commands"], json!([]));
    let state = &listed(&server).await[0]["empty_cache"];
    assert_eq!((&state["id"], &state["refused"]), (&pending["id"], &json!(true)));

    let (_, log) = audit_log(&server).await;
    for expected in [
        ("omar", "bridge.attach", "ok"),
        ("olga", "bridge.report", "denied"),
        ("omar", "bridge.consent", "ok"),
        ("ada", "bridge.empty_cache", "ok"),
        ("omar", "bridge.empty_cache", "ok"),
        ("omar", "bridge.empty_cache", "denied"),
    ] {
        assert!(
            log.contains(&(expected.0.into(), expected.1.into(), expected.2.into())),
            "{expected:?} not in {log:?}"
        );
    }
    let attaches = log.iter().filter(|e| e.1 == "bridge.attach").count();
    assert_eq!(attaches, 1, "periodic reports are not audited: {log:?}");
    server.stop().await;
}

/// The audit log as (user, action, outcome), newest first.
async fn audit_log(server: &TestServer) -> (StatusCode, Vec<(String, String, String)>) {
    let (status, body) = get(server, "/api/audit?limit=1000", Some(ADMIN)).await;
    (status, audit_triples(&serde_json::from_slice(&body).unwrap()))
}

#[tokio::test]
async fn anonymous_visitors_do_not_read_attached_processes_when_tokens_exist() {
    let server = team_server("open", "open").await;
    let (status, _) = post(&server, "/api/bridge/report", OPERATOR, Some(&report(NO_SUCH_PID + 5, false, 1))).await;
    assert_eq!(status, StatusCode::OK);
    let id = listed(&server).await[0]["id"].as_u64().unwrap();
    for path in ["/api/bridge".to_owned(), format!("/api/bridge/{id}")] {
        let (status, body) = get(&server, &path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(body["error"].as_str().unwrap().contains("need a signed-in viewer"), "{path}: {body}");
    }
    assert_eq!(get(&server, "/api/devices", None).await.0, StatusCode::OK, "GPU figures stay open");
    server.stop().await;

    let workstation = TestServer::simulated(1, 500).await;
    assert_eq!(get(&workstation, "/api/bridge", None).await.0, StatusCode::OK, "no tokens: everyone is the admin");
    workstation.stop().await;
}

/// The user running the tests, whom a child process of theirs runs as ("root" in CI).
fn current_user() -> String {
    let out = std::process::Command::new("id").arg("-un").output().expect("id runs");
    assert!(out.status.success(), "id -un: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

const EVE: &str = "eve-token-0123456789";
const OWNER: &str = "owner-token-0123456789";

#[tokio::test]
async fn a_report_for_a_process_that_runs_as_another_user_is_refused_unless_an_admin_sends_it() {
    let me = current_user();
    assert_ne!(me, "eve", "the impostor must be someone else");
    let tokens = format!("eve:operator:{EVE},{me}:operator:{OWNER},ada:admin:{ADMIN},vera:viewer:{VIEWER}");
    let auth = AuthConfig::load(None, Some(&tokens)).unwrap();
    let options = gpudash::Options { auth, ..gpudash::Options::new(Duration::from_millis(200)) };
    let server = TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await;
    // A real process of the user running the tests, killed when dropped.
    let sleeper = crate::signals::Started::sleep();
    let pid = sleeper.pid();
    let gib = 1u64 << 30;

    // Eve claims the process, consenting to remote empty_cache for it.
    let (status, answer) = post(&server, "/api/bridge/report", EVE, Some(&report(pid, true, 1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let message = answer["error"].as_str().unwrap();
    assert!(message.contains(&format!("runs as Unix user '{me}'")) && message.contains("or an admin"), "{message}");
    assert!(listed(&server).await.is_empty(), "nothing of eve's report was kept");
    let map = crate::bridge_allocator::map(pid, 2, "periodic");
    let (status, answer) = post(&server, "/api/bridge/allocator", EVE, Some(&map)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");

    // The owner's own client attaches, without consent: eve is still refused, and an admin's
    // empty_cache needs the owner's consent, not eve's.
    let (status, answer) = post(&server, "/api/bridge/report", OWNER, Some(&report(pid, false, 4 * gib))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, _) = post(&server, "/api/bridge/report", EVE, Some(&report(pid, true, 1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let process = listed(&server).await.remove(0);
    assert_eq!((process["pid"].as_u64(), &process["allow_remote_empty_cache"]), (Some(pid.into()), &json!(false)));
    assert_eq!(process["devices"][0]["reserved"], 4 * gib, "eve's figures were not stored");
    let id = process["id"].as_u64().unwrap();
    let (status, _) = post(&server, &format!("/api/bridge/{id}/empty_cache"), ADMIN, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "no consent from the owner");

    // An admin may report for anyone's process.
    let (status, answer) = post(&server, "/api/bridge/report", ADMIN, Some(&report(pid, false, 4 * gib))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(listed(&server).await[0]["id"].as_u64(), Some(id), "still the owner's entry");

    let (_, log) = audit_log(&server).await;
    for expected in [("eve", "bridge.report", "denied"), ("eve", "bridge.allocator_map", "denied")] {
        let expected = (expected.0.to_owned(), expected.1.to_owned(), expected.2.to_owned());
        assert!(log.contains(&expected), "{expected:?} not in {log:?}");
    }
    assert!(log.contains(&(me, "bridge.attach".to_owned(), "ok".to_owned())), "{log:?}");
    drop(sleeper);
    server.stop().await;
}
