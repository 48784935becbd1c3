//! The collectives experiment through the HTTP API and `gpudash bench`, on simulated GPUs: busbw figures
//! marked simulated on 2, 4 and 8 GPUs under the path's peak, the one-GPU page, the check catching a wrong
//! reduction on a faulty GPU, bad parameters refused with what is allowed, the experiment listed but
//! disabled with the reason where NCCL or a GPU is missing, and the CLI's exit 2 there.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser as _;
use gpudash::lab::SimulatedLab;
use gpudash::lab::guards::SimulatedProbe;
use gpudash::telemetry::NoGpus;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::lab::{ExperimentInfo, ExperimentKind, Run, RunStatus};

use crate::support::{TestServer, finished, gpudash_binary};

/// `count` simulated GPUs; `args` a command line whose `--simulate-fault`s the lab observes.
async fn server(count: u32, args: &[&str]) -> TestServer {
    let cli = gpudash::cli::Cli::try_parse_from(args).expect("flags parse");
    let config = gpudash::config::Config::from(cli);
    serve(count, SimulatedProbe::with_wrong_results(gpudash::wiring::lab::faulty_gpus(&config.faults))).await
}

async fn serve(count: u32, probe: SimulatedProbe) -> TestServer {
    let probe = Arc::new(probe);
    let options = gpudash::Options {
        simulated_lab: SimulatedLab { probe: Some(probe), step: Some(Duration::from_millis(1)) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(count, 200)), options).await
}

async fn post(server: &TestServer, params: Value) -> (StatusCode, Value) {
    let body = json!({ "device": 0, "params": params });
    let response = reqwest::Client::new().post(server.url("/api/runs")).json(&body).send().await.expect("request");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

async fn run(server: &TestServer, params: Value) -> Run {
    let (status, body) = post(server, params).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    finished(server, body["id"].as_u64().expect("id")).await
}

fn figure(run: &Run, name: &str) -> f64 {
    let result = run.result.as_ref().expect("a result");
    result.figures.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no figure '{name}'")).stats.median
}

fn small() -> Value {
    json!({ "kind": "collectives", "sizes": [1048576, 1073741824], "repetitions": 3, "warmup": 1,
            "ddp": { "parameters": 100000000 } })
}

#[tokio::test]
async fn busbw_on_2_4_and_8_simulated_gpus_is_marked_simulated() {
    for count in [2u32, 4, 8] {
        let server = server(count, &["gpudash"]).await;
        let run = run(&server, small()).await;
        assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary);
        assert!(run.summary.simulated);
        assert_eq!(run.summary.devices, (0..count).collect::<Vec<_>>(), "every GPU joins by default");
        assert_eq!(run.summary.passed, Some(true));
        let busbw = figure(&run, "all_reduce 1.00 GiB busbw");
        let algbw = figure(&run, "all_reduce 1.00 GiB algbw");
        let n = f64::from(count);
        assert!((busbw - algbw * 2.0 * (n - 1.0) / n).abs() < 1e-6 * busbw, "nccl-tests' factor: {busbw} vs {algbw}");
        let result = run.result.as_ref().expect("result");
        // The path's peak from the simulated topology: two H200s on NV18; GPU 3 is an H100 with no NVLink to
        // them, so 4 and 8 GPUs cross PCIe. busbw reaches most of it and never passes it.
        let peak = &result.references[0];
        let path = if count == 2 {
            "NVLink 4 × 18 links (simulated topology), one-way peak"
        } else {
            "PCIe Gen5 x16 (simulated), one-way peak"
        };
        assert_eq!(peak.name, path, "{:?}", result.references);
        assert!(busbw < peak.value && busbw > 0.6 * peak.value, "busbw {busbw} under {peak:?}");
        assert_eq!(result.checks.len(), 4 * 2 * count as usize, "every collective and size checked on every GPU");
        assert!(result.notes.iter().any(|n| n.contains("simulated NCCL")), "{:?}", result.notes);
        assert!(figure(&run, "DDP step: overlapped step") > 0.0);
        server.stop().await;
    }
}

#[tokio::test]
async fn one_gpu_checks_nccl_and_says_collectives_need_two() {
    let server = server(1, &["gpudash"]).await;
    let run = run(&server, small()).await;
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{:?}", run.summary);
    let result = run.result.as_ref().expect("result");
    let note = result.notes.iter().find(|n| n.starts_with("collectives need two GPUs to move data"));
    let note = note.unwrap_or_else(|| panic!("{:?}", result.notes));
    assert!(note.contains("all_reduce, all_gather, reduce_scatter busbw is 0 by nccl-tests' formulas"), "{note}");
    assert!(
        note.contains("broadcast's busbw (factor 1) is a copy within the GPU's memory, not a link speed"),
        "{note}"
    );
    assert_eq!(figure(&run, "all_reduce 1.00 GiB busbw"), 0.0);
    assert!(figure(&run, "broadcast 1.00 GiB busbw") > 1000.0, "a local copy's figure, said so above");
    assert!(result.references.is_empty(), "no link is crossed: no link's peak");
    assert!(figure(&run, "DDP step: compute (backward GEMMs)") > 0.0);
    assert!(result.figures.iter().all(|f| f.name != "DDP step: overlapped step"), "no communication side on one GPU");
    assert!(result.notes.iter().any(|n| n.contains("communication side needs two GPUs")), "{:?}", result.notes);
    server.stop().await;
}

#[tokio::test]
async fn a_wrong_reduction_on_a_faulty_gpu_fails_the_check() {
    let server = server(2, &["gpudash", "--simulate", "2", "--simulate-fault", "wrong-result:1"]).await;
    let run = run(&server, small()).await;
    assert_eq!(run.summary.passed, Some(false), "{:?}", run.summary);
    let result = run.result.as_ref().expect("result");
    let failed: Vec<&str> = result.checks.iter().filter(|c| !c.passed).map(|c| c.detail.as_str()).collect();
    assert!(failed.iter().any(|d| d.contains("elements wrong") && d.contains("want every element 3")), "{failed:?}");
    server.stop().await;
}

#[tokio::test]
async fn bad_parameters_say_what_is_allowed() {
    let server = server(2, &["gpudash"]).await;
    let cases = [
        (json!({ "kind": "collectives", "sizes": [6] }), "multiple of 4"),
        (json!({ "kind": "collectives", "sizes": [2147483648u64] }), "8 B to 1.00 GiB"),
        (json!({ "kind": "collectives", "dtype": "fp16" }), "'dtype' must be fp32 or bf16"),
        (json!({ "kind": "collectives", "collectives": [] }), "all_reduce, all_gather, reduce_scatter or broadcast"),
        (json!({ "kind": "collectives", "gpus": [7] }), "names GPU 7"),
        (json!({ "kind": "collectives", "gpus": [1] }), "'device' must be one of the GPUs in 'gpus'"),
        (json!({ "kind": "collectives", "ddp": { "bucket_cap_mb": 0 } }), "'ddp.bucket_cap_mb'"),
    ];
    for (params, expected) in cases {
        let (status, body) = post(&server, params.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{params}: {body}");
        assert!(body["error"].as_str().unwrap_or("").contains(expected), "{params}: {body}");
    }
    let (status, _) = post(&server, json!({ "kind": "collectives", "collectives": ["all_to_all"] })).await;
    assert!(status.is_client_error());
    server.stop().await;
}

fn bench(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(gpudash_binary());
    command.arg("bench").args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GPUDASH_") {
            command.env_remove(name);
        }
    }
    command.envs(envs.iter().copied());
    let out = command.output().expect("gpudash runs");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8");
    (out.status.code().expect("an exit code"), text(out.stdout), text(out.stderr))
}

#[test]
fn bench_lists_collectives_and_runs_it_simulated_as_json() {
    let (code, help, _) = bench(&["--help"], &[]);
    assert_eq!(code, 0);
    assert!(help.contains("collectives") && help.contains("--nccl-lib"), "{help}");
    let params = r#"{"kind":"collectives","sizes":[16777216,268435456],"repetitions":3,"ddp":null}"#;
    let (code, stdout, stderr) = bench(&["collectives", "--simulate", "--json", "--params", params], &[]);
    assert_eq!(code, 0, "{stderr}");
    let runs: Vec<Run> = serde_json::from_str(&stdout).expect("a JSON array of runs");
    assert!(runs[0].summary.simulated);
    assert_eq!(runs[0].summary.devices, vec![0, 1]);
    let busbw = figure(&runs[0], "all_reduce 256 MiB busbw");
    assert!(busbw > 100.0, "{busbw}");
    let references = &runs[0].result.as_ref().expect("result").references;
    assert!(references[0].name.contains("simulated") && references[0].value == 450.0, "{references:?}");
}

async fn experiments(server: &TestServer) -> Vec<ExperimentInfo> {
    let response = reqwest::get(server.url("/api/lab/experiments")).await.expect("request");
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.expect("JSON body")
}

fn collectives(list: &[ExperimentInfo]) -> &ExperimentInfo {
    list.iter().find(|e| e.kind == ExperimentKind::named("collectives")).expect("collectives is listed")
}

/// A host without NCCL: collectives is listed with where gpudash looked and how to point at NCCL; a run is
/// refused with the same words (bad parameters still get their 400); the other experiments run.
#[tokio::test]
async fn without_nccl_collectives_is_listed_but_disabled_with_the_reason() {
    let server = serve(2, SimulatedProbe::default().without_nccl()).await;
    let list = experiments(&server).await;
    let reason = collectives(&list).unavailable.clone().expect("a reason");
    assert!(reason.starts_with("NCCL (libnccl.so.2) not found: looked in libnccl.so.2 (a simulated host"), "{reason}");
    assert!(reason.contains("--nccl-lib / GPUDASH_NCCL_LIB"), "{reason}");
    assert!(list.iter().filter(|e| e.kind != ExperimentKind::named("collectives")).all(|e| e.unavailable.is_none()));
    let (status, body) = post(&server, small()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"].as_str(), Some(format!("collectives cannot run here: {reason}").as_str()));
    let (status, _) = post(&server, json!({ "kind": "collectives", "sizes": [6] })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a bad request is a bad request first");
    let latency = run(&server, json!({ "kind": "latency", "repetitions": 10 })).await;
    assert_eq!(latency.summary.status, RunStatus::Succeeded);
    // A simulated host with NCCL lists it available.
    let fine = serve(1, SimulatedProbe::default()).await;
    assert_eq!(collectives(&experiments(&fine).await).unavailable, None);
    fine.stop().await;
    server.stop().await;
}

/// No GPU: every experiment is listed, each with the lab's reason, as `GET /api/lab` gives it.
#[tokio::test]
async fn without_a_gpu_every_experiment_is_listed_with_the_labs_reason() {
    let why = "NVIDIA driver not available: libnvidia-ml.so.1: cannot open shared object file";
    let server = TestServer::with_source(Box::new(NoGpus::new(why.into(), 1000)), 1000).await;
    let status: Value = reqwest::get(server.url("/api/lab")).await.expect("request").json().await.expect("JSON");
    let lab = status["reason"].as_str().expect("the lab's reason");
    let list = experiments(&server).await;
    assert_eq!(list.len(), gpudash::lab::experiments::ALL.len());
    for e in &list {
        assert_eq!(e.unavailable.as_deref(), Some(format!("the GPU lab is unavailable: {lab}").as_str()), "{e:?}");
    }
    server.stop().await;
}

/// A real (not simulated) lab asks the library loader: pointed at a missing file, it names that file.
#[test]
fn a_real_lab_without_nccl_says_where_it_looked() {
    let missing = "/nonexistent/gpudash-integration/libnccl.so.2";
    gpudash::lab::cuda::nccl::choose_library(missing.into());
    let devices = vec![gpudash::lab::LabGpu { index: 0, name: "test GPU".into(), uuid: String::new() }];
    let probe = Arc::new(SimulatedProbe::default());
    let config = gpudash::lab::LabConfig::default();
    let host = gpudash::lab::LabHost::default();
    let mut setup = gpudash::lab::LabSetup::simulated(config, host, devices, probe, Duration::from_millis(1));
    setup.simulated = false;
    let lab = gpudash::lab::Lab::start(setup);
    let list = lab.experiments();
    let reason = collectives(&list).unavailable.clone().expect("NCCL is missing");
    assert!(reason.starts_with(&format!("NCCL (libnccl.so.2) not found: looked in {missing} (")), "{reason}");
    let params = serde_json::from_value(small()).expect("params");
    let request = shared::lab::RunRequest { device: 0, params, force: false };
    let refused = lab.submit(request, "test").expect_err("refused").to_string();
    assert!(refused.starts_with("collectives cannot run here: NCCL (libnccl.so.2) not found"), "{refused}");
    lab.shutdown();
}

/// Without NCCL `gpudash bench collectives` exits 2 and says where it looked: a path given with --nccl-lib is
/// the only place tried, so this holds on any machine.
#[test]
fn bench_without_nccl_exits_2_with_where_it_looked() {
    let missing = "/nonexistent/gpudash-test/libnccl.so.2";
    let (code, _, stderr) = bench(&["collectives", "--nccl-lib", missing], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("collectives cannot run here: NCCL (libnccl.so.2) not found: looked in"), "{stderr}");
    assert!(stderr.contains(missing), "names the path it was given: {stderr}");
    let (code, _, stderr) = bench(&["collectives"], &[("GPUDASH_NCCL_LIB", missing)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(missing), "GPUDASH_NCCL_LIB is honoured: {stderr}");
}
