//! The lab's correctness checks catch a wrong result: a server started with
//! `--simulate-fault wrong-result:1` runs experiments through the HTTP API, and
//! every run on GPU 1 is marked failed with its failed checks named, while the
//! same runs on GPU 0 pass.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser as _;
use gpudash::lab::SimulatedLab;
use gpudash::lab::guards::SimulatedProbe;
use gpudash::telemetry::simulator::Simulator;
use serde_json::{Value, json};
use shared::lab::{Run, RunStatus};

use crate::support::{TestServer, eventually};

/// Two simulated GPUs, with the faults of a command line that asks for them.
async fn faulty_server(args: &[&str]) -> TestServer {
    let cli = gpudash::cli::Cli::try_parse_from(args).expect("flags parse");
    let config = gpudash::config::Config::from(cli);
    let probe = Arc::new(SimulatedProbe::with_wrong_results(gpudash::wiring::lab::faulty_gpus(&config.faults)));
    let options = gpudash::Options {
        simulated_lab: SimulatedLab { probe: Some(probe), step: Some(Duration::from_millis(1)) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(Simulator::new(2, 200)), options).await
}

/// Submits `params` on `device` and waits for the run to end.
async fn run(server: &TestServer, device: u32, params: &Value) -> Run {
    let response = reqwest::Client::new()
        .post(server.url("/api/runs"))
        .json(&json!({ "device": device, "params": params }))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
    let id = response.json::<Value>().await.expect("JSON")["id"].as_u64().expect("id");
    eventually(30, &format!("run {id} to end"), || async move {
        let run: Run = reqwest::get(server.url(&format!("/api/runs/{id}"))).await.ok()?.json().await.ok()?;
        run.summary.status.is_final().then_some(run)
    })
    .await
}

/// The names of the run's failed checks.
fn failed(run: &Run) -> Vec<String> {
    let result = run.result.as_ref().expect("a result");
    result.checks.iter().filter(|c| !c.passed).map(|c| c.name.clone()).collect()
}

#[tokio::test]
async fn a_wrong_result_fails_the_run_and_names_the_check() {
    let server = faulty_server(&["gpudash", "--simulate", "2", "--simulate-fault", "wrong-result:1"]).await;
    let experiments = [
        (
            json!({ "kind": "transfer", "sizes": [4096, 1048576, 67108864], "copies": ["h2d_pinned", "d2d"] }),
            vec!["h2d_pinned copies are byte-exact at every size", "d2d copies are byte-exact at every size"],
        ),
        (
            json!({ "kind": "memory", "block_bytes": 1048576, "blocks": 4 }),
            vec!["the pool caches freed blocks", "empty_cache returns the cached memory"],
        ),
        (
            json!({ "kind": "precision", "sizes": [256], "dtypes": ["fp32", "bf16"] }),
            vec!["fp32 256 matches the host", "bf16 256 matches the host"],
        ),
        (
            json!({ "kind": "streams", "copy_bytes": 16777216, "gemm_size": 256, "kernels": 2, "repetitions": 1 }),
            vec![
                "the copied bytes arrive intact",
                "the GEMM's output matches the host",
                "every spin kernel ran to its end",
            ],
        ),
    ];
    for (params, names) in &experiments {
        let sound = run(&server, 0, params).await;
        assert_eq!(sound.summary.status, RunStatus::Succeeded);
        assert_eq!(sound.summary.passed, Some(true), "{params}: {:?}", failed(&sound));
        let faulty = run(&server, 1, params).await;
        assert_eq!(faulty.summary.status, RunStatus::Succeeded, "the run ends; its checks fail");
        assert_eq!(faulty.summary.passed, Some(false), "{params}");
        let failed = failed(&faulty);
        for name in names {
            assert!(failed.iter().any(|f| f == name), "{params}: {name} should fail, failed: {failed:?}");
        }
    }
    // P2P: only the copies that land on the faulty GPU are wrong, with peer access on and off.
    let p2p = run(&server, 0, &json!({ "kind": "p2p", "size": 1048576, "pairs": [{ "a": 0, "b": 1 }] })).await;
    assert_eq!(p2p.summary.passed, Some(false));
    let mut failed = failed(&p2p);
    failed.sort();
    assert_eq!(
        failed,
        [
            "GPU 0 → 1 copies are byte-exact, peer access disabled",
            "GPU 0 → 1 copies are byte-exact, peer access enabled"
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn without_the_fault_the_same_runs_pass() {
    let server = faulty_server(&["gpudash", "--simulate", "2"]).await;
    for params in [
        json!({ "kind": "transfer", "sizes": [4096, 1048576] }),
        json!({ "kind": "memory", "block_bytes": 1048576, "blocks": 4 }),
        json!({ "kind": "p2p", "size": 1048576 }),
    ] {
        let run = run(&server, 1, &params).await;
        assert_eq!(run.summary.passed, Some(true), "{params}: {:?}", failed(&run));
    }
    server.stop().await;
}

#[test]
fn an_unknown_fault_lists_every_fault() {
    let err = gpudash::cli::Cli::try_parse_from(["gpudash", "--simulate", "2", "--simulate-fault", "wrong:1"])
        .expect_err("not a fault")
        .to_string();
    assert!(err.contains("lost:INDEX@DELAY") && err.contains("wrong-result:INDEX"), "{err}");
}
