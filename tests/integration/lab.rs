//! The GPU lab over HTTP and the WebSocket, with the simulated executor:
//! queue, guards, validation, cancel, time limit, storage, charts and CSV.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpudash::lab::guards::{ComputeProcess, SimulatedProbe};
use gpudash::lab::{LabConfig, LabOptions, SimulatedLab};
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::ServerMessage;
use shared::lab::{LabEvent, LabStatus, Run, RunStatus, RunSummary, TrimOutcome};

use crate::support::{TestServer, connect, eventually, finished, get_json, next_message};

/// A server with `count` simulated GPUs whose lab sleeps `step` per experiment step.
pub(crate) async fn lab_server(count: u32, step_ms: u64, config: LabConfig) -> (TestServer, Arc<SimulatedProbe>) {
    let probe = Arc::new(SimulatedProbe::default());
    let options = gpudash::Options {
        lab: LabOptions { config, ..LabOptions::default() },
        simulated_lab: SimulatedLab { probe: Some(probe.clone()), step: Some(Duration::from_millis(step_ms)) },
        auth: lab_tokens(),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    (TestServer::with_options(Box::new(Simulator::new(count, 200)), options).await, probe)
}

/// Operators named after the test users; each test user's token is `<user>-token-for-tests`.
pub(crate) fn lab_tokens() -> gpudash::auth::AuthConfig {
    let tokens = ["a", "alice", "bob", "carol", "dave"].map(|u| format!("{u}:operator:{u}-token-for-tests")).join(",");
    gpudash::auth::AuthConfig::load(None, Some(&tokens)).expect("test tokens")
}

pub(crate) async fn post(server: &TestServer, path: &str, user: &str, body: &Value) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(server.url(path))
        .bearer_auth(format!("{user}-token-for-tests"))
        .json(body)
        .send()
        .await
        .expect("request");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

fn small_transfer() -> Value {
    json!({ "kind": "transfer", "sizes": [4096, 1048576, 67108864], "repetitions": 5 })
}

#[tokio::test]
async fn a_run_streams_progress_and_ends_with_a_chart_and_csv() {
    let (server, _) = lab_server(2, 10, LabConfig::default()).await;
    let mut socket = connect(&server.ws_url()).await;
    assert!(matches!(next_message(&mut socket, 5).await, ServerMessage::Snapshot(_)));

    let (status, body) = post(&server, "/api/runs", "alice", &json!({ "device": 1, "params": small_transfer() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let queued: Run = serde_json::from_value(body).expect("a run");
    assert_eq!(queued.summary.status, RunStatus::Queued);
    assert_eq!(queued.summary.requested_by, "alice");
    assert!(queued.summary.simulated, "simulated runs say so");
    assert!(queued.plan.notes.iter().any(|n| n.contains("device memory")), "{:?}", queued.plan.notes);

    // Over the socket: queued, progress, then the end.
    let (mut saw_progress, mut ended) = (false, None);
    let deadline = Instant::now() + Duration::from_secs(20);
    while ended.is_none() && Instant::now() < deadline {
        if let ServerMessage::Lab(event) = next_message(&mut socket, 10).await {
            match event {
                LabEvent::Progress { id, .. } if id == queued.summary.id => saw_progress = true,
                LabEvent::Run(summary) if summary.id == queued.summary.id && summary.status.is_final() => {
                    ended = Some(summary);
                }
                _ => {}
            }
        }
    }
    assert!(saw_progress, "progress is streamed");
    assert_eq!(ended.expect("the run ended").status, RunStatus::Succeeded);

    let run = finished(&server, queued.summary.id).await;
    let result = run.result.expect("a result");
    assert_eq!(
        result.series.len(),
        gpudash::lab::experiments::transfer::params::CopyKind::ALL.len(),
        "one curve per copy kind"
    );
    assert!(result.references.iter().any(|r| r.name.contains("PCIe Gen5 x16")));
    assert!(result.notes.iter().any(|n| n.contains("written before they are timed")));
    assert!(result.figures.iter().any(|f| f.name == "h2d_pinned efficiency" && f.unit == "%"));

    let svg = reqwest::get(server.url(&format!("/api/runs/{}/chart.svg", run.summary.id))).await.expect("svg");
    assert_eq!(svg.headers()["content-type"], "image/svg+xml");
    let svg = svg.text().await.expect("text");
    assert!(svg.starts_with("<svg") && svg.contains("SIMULATED") && svg.contains("h2d_pinned"), "{svg:.300}");

    let csv = reqwest::get(server.url(&format!("/api/runs/{}/results.csv", run.summary.id))).await.expect("csv");
    let csv = csv.text().await.expect("text");
    assert!(csv.starts_with("run,device,kind,simulated,section"), "{csv:.200}");
    assert!(csv.lines().any(|l| l.contains(",series,d2d,67108864,")), "{csv:.2000}");

    let listed: Vec<RunSummary> = get_json(&server, "/api/runs?device=1&kind=transfer").await;
    assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), vec![run.summary.id]);
    server.stop().await;
}

#[tokio::test]
async fn the_sm_copy_runs_beside_the_copy_engine_and_the_sizes_in_l2_are_marked() {
    let (server, _) = lab_server(1, 1, LabConfig::default()).await;
    let params = json!({ "kind": "transfer", "sizes": [1048576, 16777216, 268435456], "copies": ["d2d", "d2d_kernel"],
        "repetitions": 3 });
    let (status, body) = post(&server, "/api/runs", "a", &json!({ "device": 0, "params": params })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = finished(&server, body["id"].as_u64().expect("id")).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary.error);
    let result = run.result.expect("a result");
    let names: Vec<&str> = result.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["d2d", "d2d_kernel"]);
    assert_eq!(result.l2_bytes, Some(60 << 20), "the simulated H200's L2");
    assert!(
        result.notes.iter().any(|n| n.contains("source and destination in it") && n.contains("simulated")),
        "{:?}",
        result.notes
    );
    let svg = reqwest::get(server.url(&format!("/api/runs/{}/chart.svg", run.summary.id))).await.expect("svg");
    let svg = svg.text().await.expect("text");
    assert!(svg.contains("src + dst fit in L2 (60 MiB)") && svg.contains("SIMULATED"), "{svg:.300}");

    let (status, body) = post(
        &server,
        "/api/runs",
        "a",
        &json!({ "device": 0, "params": { "kind": "transfer", "copies": ["d2d_sm"] } }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"].as_str().expect("an error message");
    assert!(message.contains("d2d_sm") && message.contains("d2d_kernel"), "{message}");
    server.stop().await;
}

#[tokio::test]
async fn the_previous_run_on_the_same_gpu_is_linked_for_overlays() {
    let (server, _) = lab_server(1, 1, LabConfig::default()).await;
    let request = json!({ "device": 0, "params": { "kind": "precision", "sizes": [1024], "repetitions": 3 } });
    let (_, first) = post(&server, "/api/runs", "a", &request).await;
    let first = finished(&server, first["id"].as_u64().expect("id")).await;
    let (_, second) = post(&server, "/api/runs", "a", &request).await;
    let second = finished(&server, second["id"].as_u64().expect("id")).await;
    assert_eq!(first.previous_id, None);
    assert_eq!(second.previous_id, Some(first.summary.id));
    assert_eq!(second.summary.passed, Some(true), "every GEMM matched the host");
    let svg = reqwest::get(server.url(&format!("/api/runs/{}/chart.svg", second.summary.id))).await.expect("svg");
    assert!(svg.text().await.expect("text").contains(&format!("(run {})", first.summary.id)));
    server.stop().await;
}

#[tokio::test]
async fn bad_parameters_are_refused_with_the_field_and_range() {
    let (server, _) = lab_server(1, 1, LabConfig::default()).await;
    for (body, status, expected) in [
        (json!({ "device": 0, "params": { "kind": "memory", "blocks": 0 } }), 400, "'blocks' must be from 1 to 64"),
        (json!({ "device": 0, "params": { "kind": "transfer", "sizes": [1] } }), 400, "'sizes' must be from 4096"),
        (json!({ "device": 0, "params": { "kind": "fft" } }), 400, "'fft' is not an experiment; use memory"),
        (json!({ "device": 0, "params": { "kind": "latency", "repetition": 9 } }), 400, "unknown field"),
        (json!({ "device": 7, "params": { "kind": "latency" } }), 404, "no GPU 7"),
    ] {
        let (got, body) = post(&server, "/api/runs", "a", &body).await;
        assert_eq!(got.as_u16(), status, "{body}");
        let message = body["error"].as_str().expect("an error message");
        assert!(message.contains(expected), "{message}");
    }
    server.stop().await;
}

#[tokio::test]
async fn guards_refuse_too_much_memory_and_busy_gpus_unless_forced() {
    let (server, probe) = lab_server(1, 1, LabConfig::default()).await;
    let huge = json!({ "device": 0, "params": { "kind": "memory", "block_bytes": 17179869184u64, "blocks": 64 } });
    let (status, body) = post(&server, "/api/runs", "a", &huge).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let message = body["error"].as_str().expect("message");
    assert!(message.contains("needs 1.0") && message.contains("free for others"), "{message}");

    probe.set_processes(0, vec![ComputeProcess { pid: 4242, used_bytes: Some(20 << 30) }]);
    let latency = json!({ "device": 0, "params": { "kind": "latency" } });
    let (status, body) = post(&server, "/api/runs", "a", &latency).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let message = body["error"].as_str().expect("message");
    assert!(message.contains("pid 4242 (20.0 GiB)") && message.contains("force"), "{message}");

    let forced = json!({ "device": 0, "params": { "kind": "latency" }, "force": true });
    let (status, body) = post(&server, "/api/runs", "a", &forced).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = finished(&server, body["id"].as_u64().expect("id")).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded);
    assert!(run.plan.notes.iter().any(|n| n.contains("forced")), "{:?}", run.plan.notes);
    server.stop().await;
}

/// Polls run `id` until it is `status`, failing the test after 20 s.
#[tokio::test]
async fn a_run_past_its_time_limit_is_stopped() {
    let config = LabConfig { time_limit: Duration::from_millis(300), ..LabConfig::default() };
    let (server, _) = lab_server(1, 100, config).await;
    let (_, run) = post(&server, "/api/runs", "a", &json!({ "device": 0, "params": { "kind": "transfer" } })).await;
    let run = finished(&server, run["id"].as_u64().expect("id")).await;
    assert_eq!(run.summary.status, RunStatus::TimedOut);
    assert!(run.summary.error.expect("why").contains("time limit"));
    server.stop().await;
}

#[tokio::test]
async fn failing_runs_report_why_release_the_pool_and_leave_the_lab_usable() {
    for (config, error) in [
        (LabConfig::default(), Some("CUDA_ERROR_OUT_OF_MEMORY: out of memory (cuMemAllocAsync of 64.0 GiB)")),
        (LabConfig::default(), Some("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")),
        (LabConfig { time_limit: Duration::from_millis(400), ..LabConfig::default() }, None),
    ] {
        let slow = error.is_none();
        let (server, probe) = lab_server(1, if slow { 40 } else { 5 }, config).await;
        if let Some(error) = error {
            probe.fail_next_run(0, error);
        }
        let (_, run) = post(&server, "/api/runs", "a", &json!({ "device": 0, "params": { "kind": "transfer" } })).await;
        let run = finished(&server, run["id"].as_u64().expect("id")).await;
        let why = run.summary.error.clone().expect("a failed run says why");
        match error {
            Some(error) => {
                assert_eq!(run.summary.status, RunStatus::Failed);
                assert_eq!(why, error);
            }
            None => assert_eq!(run.summary.status, RunStatus::TimedOut),
        }
        let lab: LabStatus = get_json(&server, "/api/lab").await;
        let gpu = &lab.devices[0];
        assert!(!gpu.context_open && gpu.pool_reserved == 0, "pool and context released after '{why}': {gpu:?}");
        // The lab is usable: the next run on the same GPU succeeds.
        let (_, next) = post(&server, "/api/runs", "a", &json!({ "device": 0, "params": { "kind": "latency" } })).await;
        let next = finished(&server, next["id"].as_u64().expect("id")).await;
        assert_eq!(next.summary.status, RunStatus::Succeeded, "after '{why}'");
        server.stop().await;
    }
}

#[tokio::test]
async fn empty_cache_and_idle_release_hand_memory_back() {
    let config = LabConfig { idle_release: Duration::from_millis(700), ..LabConfig::default() };
    let (server, _) = lab_server(1, 1, config).await;
    let (_, run) = post(&server, "/api/runs", "a", &json!({ "device": 0, "params": small_transfer() })).await;
    finished(&server, run["id"].as_u64().expect("id")).await;
    let lab: LabStatus = get_json(&server, "/api/lab").await;
    assert!(lab.devices[0].context_open && lab.devices[0].pool_reserved > 0, "{:?}", lab.devices);

    let (status, body) = post(&server, "/api/lab/devices/0/empty_cache", "a", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let trimmed: TrimOutcome = serde_json::from_value(body).expect("trim outcome");
    assert!(trimmed.released_bytes >= 128 << 20, "{trimmed:?}");
    assert_eq!(trimmed.reserved_after, 0);

    // Nobody experimenting: the lab lets go of the GPU (after 0.7 s idle).
    eventually(10, "the idle lab releasing its context", || async {
        let lab: LabStatus = get_json(&server, "/api/lab").await;
        (!lab.devices[0].context_open).then_some(())
    })
    .await;
    let (status, _) = post(&server, "/api/lab/devices/5/empty_cache", "a", &json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn every_experiment_runs_on_the_simulated_executor() {
    // Two GPUs: p2p needs them.
    let (server, _) = lab_server(2, 1, LabConfig::default()).await;
    let experiments: Vec<Value> = get_json(&server, "/api/lab/experiments").await;
    assert_eq!(experiments.len(), gpudash::lab::experiments::ALL.len());
    for experiment in experiments {
        // Each says itself in PyTorch's words and lists its form's fields.
        assert!(experiment["snippet"].as_str().is_some_and(|s| s.starts_with("import torch")), "{experiment}");
        assert!(experiment["fields"].as_array().is_some_and(|f| !f.is_empty()), "{experiment}");
        let params = experiment["defaults"].clone();
        let (status, run) = post(&server, "/api/runs", "a", &json!({ "device": 0, "params": params })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{run}");
        let run = finished(&server, run["id"].as_u64().expect("id")).await;
        assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary);
        let result = run.result.expect("result");
        assert!(!result.figures.is_empty(), "{}", experiment["kind"]);
        // What the figures mean for a PyTorch program, in the experiment's words (the simulated figures say it).
        assert!(run.takeaway.as_ref().is_some_and(|t| !t.is_empty()), "{}: no takeaway", experiment["kind"]);
        let svg = reqwest::get(server.url(&format!("/api/runs/{}/chart.svg", run.summary.id))).await.expect("svg");
        assert!(svg.text().await.expect("text").contains("</svg>"));
    }
    let memory: Vec<RunSummary> = get_json(&server, "/api/runs?kind=memory").await;
    let memory: Run = get_json(&server, &format!("/api/runs/{}", memory[0].id)).await;
    let steps = &memory.result.expect("result").memory_steps;
    assert_eq!(steps.first().map(|s| s.label.as_str()), Some("start"));
    let freed = steps.iter().find(|s| s.label.starts_with("free ")).expect("a free step");
    assert!(freed.reserved > freed.allocated, "freed blocks stay reserved: {freed:?}");
    assert_eq!(steps.last().map(|s| s.reserved), Some(0), "empty_cache trims the pool");
    server.stop().await;
}

/// Telemetry that found no NVML: the lab is unavailable for the telemetry's own reason, on any
/// machine (a GPU's presence does not matter: the lab has no device handle to run on).
#[tokio::test]
async fn without_nvml_the_lab_says_why_and_the_dashboard_works() {
    let source = gpudash::telemetry::NoGpus::new("libnvidia-ml.so.1: cannot open".into(), 1000);
    let server = TestServer::with_source(Box::new(source), 1000).await;
    let lab: LabStatus = get_json(&server, "/api/lab").await;
    assert!(!lab.available);
    assert_eq!(lab.reason.as_deref(), Some("libnvidia-ml.so.1: cannot open"), "the telemetry's words: {lab:?}");
    // No tokens on this server: the local user may run experiments, so the answer is the lab's own.
    let response = reqwest::Client::new()
        .post(server.url("/api/runs"))
        .json(&json!({ "device": 0, "params": { "kind": "latency" } }))
        .send()
        .await
        .expect("request");
    let status = response.status();
    let body: Value = response.json().await.expect("JSON body");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body["error"].as_str().expect("message").starts_with("the GPU lab is unavailable: "));
    let devices = reqwest::get(server.url("/api/devices")).await.expect("devices");
    assert_eq!(devices.status(), StatusCode::OK);
    server.stop().await;
}

#[test]
fn bench_parses_and_runs_headless() {
    use clap::Parser;
    let cli = gpudash::cli::Cli::try_parse_from(["gpudash", "bench", "--device", "0", "transfer", "latency", "--json"])
        .expect("bench flags parse");
    let Some(gpudash::cli::Command::Bench(args)) = cli.command else { panic!("not bench") };
    assert_eq!(args.experiments.len(), 2);
    assert!(args.json);
    let err = gpudash::cli::Cli::try_parse_from(["gpudash", "bench", "fft"]).expect_err("unknown experiment");
    assert!(err.to_string().contains("'fft' is not an experiment"), "{err}");

    let simulated =
        gpudash::cli::Cli::try_parse_from(["gpudash", "bench", "--simulate", "latency", "--json"]).expect("parse");
    let Some(gpudash::cli::Command::Bench(args)) = simulated.command else { panic!("not bench") };
    assert_eq!(gpudash::cli::bench::main(&args), std::process::ExitCode::SUCCESS);
    // Parameters that do not read, of a kind that is none, or of a kind the run leaves out: exit 2 before
    // anything runs.
    for bad in [
        r#"{"kind":"latency","repetition":9}"#,
        r#"{"kind":"latency","repetitions":-5}"#,
        r#"{"kind":"to_devce"}"#,
        r#"{"kind":"memory"}"#,
    ] {
        let Some(gpudash::cli::Command::Bench(args)) = cli_bench(&["--simulate", "latency", "--params", bad]) else {
            panic!("not bench")
        };
        assert_eq!(gpudash::cli::bench::main(&args), std::process::ExitCode::from(2), "{bad}");
    }

    // On real hardware: with a GPU the real latency experiment runs and passes its checks; without, it fails.
    let Some(gpudash::cli::Command::Bench(args)) = cli_bench(&["--device", "0", "latency", "--json"]) else {
        panic!("not bench")
    };
    let code = gpudash::cli::bench::main(&args);
    if std::path::Path::new("/proc/driver/nvidia").exists() {
        assert_eq!(code, std::process::ExitCode::SUCCESS, "a GPU is here: the latency run on GPU 0 succeeds");
    } else {
        assert_ne!(code, std::process::ExitCode::SUCCESS, "no GPU: non-zero");
    }
}

fn cli_bench(rest: &[&str]) -> Option<gpudash::cli::Command> {
    use clap::Parser;
    let args = ["gpudash", "bench"].iter().chain(rest).copied();
    gpudash::cli::Cli::try_parse_from(args).expect("parse").command
}

/// The dashboard checks the lab's CUDA libraries in a child of its own binary
/// (lab/src/cuda/probe.rs), so what loading libcublas leaves behind stays out of the server.
/// Started as the dashboard starts it, the built binary answers with one bit per library (libcuda,
/// libcublas, libcublasLt, libnvrtc) and exits, rather than serving; no libcuda where no NVIDIA
/// driver is loaded.
#[test]
fn the_built_binary_answers_the_lab_library_check_and_exits() {
    let mut child = std::process::Command::new(crate::support::gpudash_binary())
        .env("GPUDASH_PROBE_CUDA_LIBRARIES", "1")
        .env("GPUDASH_LISTEN", "127.0.0.1:0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("gpudash starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gpudash did not answer the library check within 30 s: it serves instead of answering");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut stdout).expect("UTF-8 output");
    assert!(status.success(), "{status}: {stdout}");
    let bits = stdout
        .lines()
        .find_map(|line| line.strip_prefix("gpudash cuda libraries loaded: "))
        .unwrap_or_else(|| panic!("no answer line in {stdout:?}"));
    assert!(bits.len() == 4 && bits.chars().all(|c| c == '0' || c == '1'), "one bit per library: {bits:?}");
    if !std::path::Path::new("/proc/driver/nvidia").exists() {
        assert!(bits.starts_with('0'), "libcuda cannot load without a driver: {bits:?}");
    }
}
