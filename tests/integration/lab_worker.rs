//! The Lab's runs in a worker process (lab/src/isolated/): the simulated executor behind the
//! built gpudash binary started as the worker, as the real server runs it. A run goes through the
//! worker and gives what an in-process run gives; a worker that aborts mid-run fails that run with
//! the reason while the dashboard keeps sampling, and the next run gets a fresh worker; cancel
//! reaches the worker mid-run; the idle release ends the worker; as root, the worker runs as nobody.
//!
//! Each test starts its workers from a link of the binary in a folder of its own, so the worker
//! processes it looks for in /proc (by their executable and `GPUDASH_LAB_WORKER` in their
//! environment) are its own, not those of a test running beside it.
#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpudash::lab::guards::SimulatedProbe;
use gpudash::lab::{LabConfig, LabOptions, SimulatedLab};
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::DevicesResponse;
use shared::lab::{LabStatus, Run, RunStatus};

use crate::lab::{lab_server, lab_tokens, post};
use crate::support::{TestServer, eventually, finished, get_json, gpudash_binary};

/// The gpudash binary under a folder of this test's own, readable and traversable by every user
/// (the worker may run as nobody, who may not reach the build folder).
struct OwnBinary {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl OwnBinary {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new().prefix("gpudash-worker").tempdir().expect("a temp folder");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod 755");
        let path = dir.path().join("gpudash");
        if std::fs::hard_link(gpudash_binary(), &path).is_err() {
            std::fs::copy(gpudash_binary(), &path).expect("copy the gpudash binary");
        }
        Self { _dir: dir, path }
    }
}

/// A server with `count` simulated GPUs whose Lab runs in workers of `binary`, each step sleeping
/// `step_ms`; the first `aborts` workers abort halfway through their first run.
async fn worker_server(binary: &Path, step_ms: u64, config: LabConfig, aborts: usize) -> TestServer {
    let options = gpudash::Options {
        lab: LabOptions { config, worker: Some(binary.to_owned()), worker_aborts: aborts, ..LabOptions::default() },
        simulated_lab: SimulatedLab {
            probe: Some(Arc::new(SimulatedProbe::default())),
            step: Some(Duration::from_millis(step_ms)),
        },
        auth: lab_tokens(),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await
}

/// The live Lab workers started from `binary`: their PIDs.
fn workers(binary: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            exe.as_deref() == Some(binary)
                && environ.split(|&b| b == 0).any(|var| var.starts_with(b"GPUDASH_LAB_WORKER="))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Waits for exactly one live worker of `binary` and returns its PID.
async fn the_worker(binary: &Path) -> u32 {
    eventually(20, "one Lab worker process", || async {
        match workers(binary).as_slice() {
            [pid] => Some(*pid),
            _ => None,
        }
    })
    .await
}

fn small_transfer() -> Value {
    json!({ "kind": "transfer", "sizes": [4096, 1048576, 67108864], "repetitions": 5 })
}

async fn submit(server: &TestServer, params: &Value) -> u64 {
    let (status, body) = post(server, "/api/runs", "a", &json!({ "device": 0, "params": params })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["id"].as_u64().expect("id")
}

/// Series, figures (name and unit) and reference lines of a run: what a chart and its table show.
fn shape(run: &Run) -> (Vec<String>, Vec<(String, String)>, Vec<String>) {
    let result = run.result.as_ref().expect("a result");
    let series = result.series.iter().map(|s| s.name.clone()).collect();
    let figures = result.figures.iter().map(|f| (f.name.clone(), f.unit.clone())).collect();
    let references = result.references.iter().map(|r| r.name.clone()).collect();
    (series, figures, references)
}

#[tokio::test]
async fn a_run_goes_through_a_reused_worker_and_gives_what_an_in_process_run_gives() {
    let binary = OwnBinary::new();
    let server = worker_server(&binary.path, 5, LabConfig::default(), 0).await;
    assert!(workers(&binary.path).is_empty(), "no worker before the first run");
    let run = finished(&server, submit(&server, &small_transfer()).await).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary.error);
    assert!(run.summary.simulated && run.progress.is_some(), "{:?}", run.summary);
    let worker = the_worker(&binary.path).await;
    assert_ne!(worker, std::process::id());

    // The same run in-process: the same series, figures and reference lines (the PCIe peak came
    // through the worker's questions to the dashboard's probe).
    let (in_process, _) = lab_server(1, 5, LabConfig::default()).await;
    let here = finished(&in_process, submit(&in_process, &small_transfer()).await).await;
    assert_eq!(shape(&run), shape(&here));
    assert!(shape(&run).2.iter().any(|r| r.contains("PCIe Gen5 x16")), "{:?}", shape(&run).2);
    in_process.stop().await;

    // The next run reuses the worker; the pool it reports is the worker's.
    let next = finished(&server, submit(&server, &json!({ "kind": "latency" })).await).await;
    assert_eq!(next.summary.status, RunStatus::Succeeded, "{:?}", next.summary.error);
    assert_eq!(workers(&binary.path), vec![worker], "the worker is reused");
    let lab: LabStatus = get_json(&server, "/api/lab").await;
    assert!(lab.devices[0].context_open, "{:?}", lab.devices);
    server.stop().await;
    eventually(10, "the worker ending with the server", || async { workers(&binary.path).is_empty().then_some(()) })
        .await;
}

#[tokio::test]
async fn a_worker_that_aborts_fails_its_run_and_the_dashboard_keeps_sampling() {
    let binary = OwnBinary::new();
    let server = worker_server(&binary.path, 20, LabConfig::default(), 1).await;
    let run = finished(&server, submit(&server, &small_transfer()).await).await;
    assert_eq!(run.summary.status, RunStatus::Failed);
    let why = run.summary.error.clone().expect("a failed run says why");
    assert_eq!(
        why, "the Lab worker died during the run (killed by signal 6, SIGABRT); the dashboard kept running",
        "the reason names the worker's death"
    );
    assert!(workers(&binary.path).is_empty(), "the dead worker was reaped");

    // The dashboard kept running and sampling.
    let health: Value = get_json(&server, "/healthz").await;
    assert_eq!(health["status"], "ok", "{health}");
    let first_age = health["last_sample_age_ms"].as_u64().expect("an age");
    assert!(first_age < 5_000, "{health}");
    let sampled_at = |devices: DevicesResponse| devices.devices[0].latest.as_ref().map(|s| s.timestamp_ms);
    let before = sampled_at(get_json(&server, "/api/devices").await);
    eventually(10, "a newer sample after the worker died", || async {
        let health: Value = get_json(&server, "/healthz").await;
        let now = sampled_at(get_json(&server, "/api/devices").await);
        (health["status"] == "ok" && health["last_sample_age_ms"].as_u64()? < 5_000 && now > before).then_some(())
    })
    .await;

    // The next run gets a fresh worker (the fault was for the first only) and succeeds.
    let next = finished(&server, submit(&server, &small_transfer()).await).await;
    assert_eq!(next.summary.status, RunStatus::Succeeded, "{:?}", next.summary.error);
    the_worker(&binary.path).await;
    server.stop().await;
}

#[tokio::test]
async fn cancel_reaches_the_worker_mid_run_and_the_worker_serves_on() {
    let binary = OwnBinary::new();
    let server = worker_server(&binary.path, 100, LabConfig::default(), 0).await;
    let long = json!({ "kind": "transfer", "repetitions": 50 });
    let id = submit(&server, &long).await;
    eventually(20, "the run to report progress from the worker", || async {
        let run: Run = get_json(&server, &format!("/api/runs/{id}")).await;
        (run.summary.status == RunStatus::Running && run.progress.is_some()).then_some(())
    })
    .await;
    let worker = the_worker(&binary.path).await;
    let (status, body) = post(&server, &format!("/api/runs/{id}/cancel"), "a", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = finished(&server, id).await;
    assert_eq!(run.summary.status, RunStatus::Cancelled, "{:?}", run.summary.error);
    assert_eq!(workers(&binary.path), vec![worker], "a cancelled run leaves its worker serving");
    let next = finished(&server, submit(&server, &json!({ "kind": "latency" })).await).await;
    assert_eq!(next.summary.status, RunStatus::Succeeded, "{:?}", next.summary.error);
    server.stop().await;
}

/// A worker that talks without end (progress every 5 ms) and hears neither cancel nor its limit is
/// still stopped at the time limit: the dashboard looks at the limit on every frame, not only when
/// the worker is quiet, and kills it after the grace.
#[tokio::test]
async fn a_chatty_hung_worker_is_killed_at_the_time_limit() {
    let binary = OwnBinary::new();
    let config = LabConfig { time_limit: Duration::from_millis(500), ..LabConfig::default() };
    let options = gpudash::Options {
        lab: LabOptions { config, worker: Some(binary.path.clone()), worker_chatters: 1, ..LabOptions::default() },
        simulated_lab: SimulatedLab { probe: Some(Arc::new(SimulatedProbe::default())), step: None },
        auth: lab_tokens(),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await;
    let run = finished(&server, submit(&server, &small_transfer()).await).await;
    assert_eq!(run.summary.status, RunStatus::TimedOut, "{:?}", run.summary.error);
    let took = run.summary.finished_ms.unwrap() - run.summary.started_ms.unwrap();
    assert!(took < 9_000, "the limit (0.5 s) and the grace (5 s), not never: {took} ms");
    assert!(workers(&binary.path).is_empty(), "the deaf worker was killed");
    let next = finished(&server, submit(&server, &json!({ "kind": "latency" })).await).await;
    assert_eq!(next.summary.status, RunStatus::Succeeded, "a fresh worker serves: {:?}", next.summary.error);
    server.stop().await;
}

#[tokio::test]
async fn the_idle_release_ends_the_worker_process() {
    let binary = OwnBinary::new();
    let config = LabConfig { idle_release: Duration::from_millis(800), ..LabConfig::default() };
    let server = worker_server(&binary.path, 1, config, 0).await;
    let run = finished(&server, submit(&server, &small_transfer()).await).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary.error);
    eventually(15, "the idle release ending the worker", || async {
        let lab: LabStatus = get_json(&server, "/api/lab").await;
        (workers(&binary.path).is_empty() && !lab.devices[0].context_open).then_some(())
    })
    .await;
    // A later run starts a worker again.
    let next = finished(&server, submit(&server, &json!({ "kind": "latency" })).await).await;
    assert_eq!(next.summary.status, RunStatus::Succeeded, "{:?}", next.summary.error);
    server.stop().await;
}

#[tokio::test]
async fn as_root_the_worker_runs_as_nobody_without_groups() {
    if !is_root() {
        eprintln!("skipped: the worker drops privileges only when the dashboard runs as root (this test is not root)");
        return;
    }
    let nobody = gpudash::lab::isolated::look_up("nobody").expect("the nobody user");
    let binary = OwnBinary::new();
    let options = gpudash::Options {
        lab: LabOptions {
            worker: Some(binary.path.clone()),
            worker_user: Some(nobody.clone()),
            ..LabOptions::default()
        },
        simulated_lab: SimulatedLab {
            probe: Some(Arc::new(SimulatedProbe::default())),
            step: Some(Duration::from_millis(5)),
        },
        auth: lab_tokens(),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await;
    let run = finished(&server, submit(&server, &small_transfer()).await).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary.error);
    let worker = the_worker(&binary.path).await;
    let status = std::fs::read_to_string(format!("/proc/{worker}/status")).expect("the worker's status");
    let field = |name: &str| {
        let line = status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_default();
        line.split_whitespace().map(str::to_owned).collect::<Vec<_>>()
    };
    let uid = nobody.uid.to_string();
    assert_eq!(field("Uid:"), vec![uid.as_str(); 4], "real, effective, saved and fs uid: {status}");
    assert_eq!(field("Gid:"), vec![nobody.gid.to_string(); 4], "{status}");
    assert!(field("Groups:").is_empty(), "no supplementary group: {status}");
    server.stop().await;
}

/// Whether this test runs as root: the effective uid of /proc/self.
fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1)) == Some("0")
}
