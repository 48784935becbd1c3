//! Verdicts a team can trust: a Slurm job claimed in a process's environment names no owner
//! unless Slurm placed the process there (the real-Slurm side is in `identity.rs`), and a GPU whose
//! figures say it is in use is never "free" although no process of it is visible.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::time::Duration;

use fantoccini::Locator;
use gpudash::alerts::AlertsConfig;
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;
use shared::alerts::{AlertsResponse, Rule};
use shared::reservations::Reservation;

use crate::browser::{texts, with_browser};
use crate::support::{TestServer, eventually, eventually_every, get_json};

/// A process killed when the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The uid of Unix user `name`, made (without a home) when missing.
fn user(name: &str) -> u32 {
    let uid = || {
        let out = Command::new("id").args(["-u", name]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if uid().is_none() {
        let made = Command::new("useradd").args(["--no-create-home", "--shell", "/usr/sbin/nologin", name]).status();
        assert!(made.is_ok_and(|s| s.success()), "useradd {name}");
    }
    uid().expect("the user exists now")
}

/// User bo runs a process whose environment claims ana's Slurm job 4242, outside any Slurm cgroup,
/// on GPU 0 that ana has booked: it is bo's (usage, rights), shown as an unverified claim, counted
/// under no job, and an intruder on ana's booking.
#[tokio::test]
#[expect(clippy::print_stderr, reason = "a skipped test says why")]
async fn a_slurm_job_claimed_in_the_environment_is_not_believed() {
    if gpudash::web::local_user::own_uid() != 0 {
        eprintln!("skipped: starting a process as another user needs root (CI runs as root)");
        return;
    }
    let (ana, bo) = (user("ana"), user("bo"));
    let forged = Command::new("sleep")
        .arg("120")
        .env_clear()
        .envs([("SLURM_JOB_ID", "4242"), ("SLURM_JOB_USER", "ana"), ("SLURM_JOB_UID", &ana.to_string())])
        .uid(bo)
        .gid(bo)
        .spawn()
        .unwrap();
    let pid = forged.id();
    let _forged = Killed(forged);

    let dir = tempfile::tempdir().unwrap();
    let store = gpudash::store::Store::open(dir.path(), true, gpudash::store::Retention::default()).unwrap();
    let table = gpudash::store::reservations::ReservationStore::open(store.path()).unwrap();
    let now = gpudash::telemetry::now_ms();
    let booking = Reservation {
        id: 0,
        devices: vec![0],
        user: "ana".into(),
        start_ms: now,
        end_ms: now + 3_600_000,
        note: "ablation".into(),
        created_ms: now,
        released_ms: None,
        intruders: Vec::new(),
        redacted: false,
    };
    table.insert(&booking).unwrap();
    // The simulator's own jobs stay away: bo's is the only process on GPU 0.
    let simulator = Simulator::new(1, 200)
        .with_fault("job-ends:0@0s".parse().unwrap())
        .with_fault(format!("pid:0:{pid}").parse().unwrap());
    let options = gpudash::Options { store: Some(store), ..gpudash::Options::new(Duration::from_millis(200)) };
    let server = TestServer::with_options(Box::new(simulator), options).await;

    let url = server.url("/api/processes");
    let body = eventually(30, "the forged job's process with its claim", || async {
        let body: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
        let listed =
            body["processes"].as_array()?.iter().any(|p| p["pid"] == pid && p["workload"]["job"]["id"] == "4242");
        listed.then_some(body)
    })
    .await;
    let p = body["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid).unwrap();
    assert_eq!((&p["owner"]["name"], &p["owner"]["source"]), (&"bo".into(), &"unix_user".into()), "{p}");
    assert_eq!((&p["workload"]["job"]["user"], &p["workload"]["job"]["verified"]), (&"ana".into(), &false.into()));
    assert_eq!(body["intruders"], serde_json::json!([pid]), "an intruder on ana's booking: {body}");
    let usage: Vec<&str> = body["users"].as_array().unwrap().iter().filter_map(|u| u["user"].as_str()).collect();
    assert_eq!(usage, ["bo"], "its memory is bo's: {body}");
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("gpudash_process_memory_bytes{") && l.contains(&format!("pid=\"{pid}\"")))
        .unwrap_or_else(|| panic!("no series of {pid}: {metrics}"));
    assert!(line.contains("user=\"bo\"") && !line.contains("hpc_job"), "no job label for a claim: {line}");
    server.stop().await;
}

/// GPU 0 computes for a job whose process gpudash cannot see: it reads "in use (no process
/// visible)" with its figures in `/api/processes` and on the page, is in no "Free:" list and fires
/// no `gpu_free`; once that job ends it is free, and the alert fires (so the test can tell).
#[tokio::test]
async fn a_gpu_in_use_with_no_visible_process_is_never_free() {
    with_browser(1280, 800, |c| async move {
        let simulator = ["unseen:0@0s+12s", "job-ends:1@2s"]
            .iter()
            .fold(Simulator::new(2, 200), |s, f| s.with_fault(f.parse().unwrap()));
        let alerts = AlertsConfig::parse("[rules.gpu_free]\nfor = \"1s\"\n", "test.toml").unwrap();
        let options = gpudash::Options { alerts, ..gpudash::Options::new(Duration::from_millis(200)) };
        let server = TestServer::with_options(Box::new(simulator), options).await;
        let every = Duration::from_millis(200);
        let body = eventually_every(20, every, "GPU 0 in use with no process, GPU 1 free", || async {
            let body: Value = get_json(&server, "/api/processes").await;
            let state = &body["states"][0];
            let told = state["state"] == "in_use_unseen" && body["free_devices"] == serde_json::json!([1]);
            if told { Ok(body) } else { Err(body) }
        })
        .await;
        assert_eq!(body["processes"].as_array().map(Vec::len), Some(0), "no process is visible: {body}");
        let reason = body["states"][0]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("GiB used") && reason.ends_with("with no process visible"), "{body}");

        c.goto(&server.url("/")).await.unwrap();
        eventually_every(15, every, "GPU 0's row in use, 'Free: GPU 1'", || async {
            let free = texts(&c, "#free-gpus").await.concat();
            let state = texts(&c, "tr.gpu-row[data-index='0'] .ov-state").await.concat();
            if free == "Free: GPU 1" && state == "in use (no process visible)" { Ok(()) } else { Err((free, state)) }
        })
        .await;
        let class = c
            .find(Locator::Css("tr.gpu-row[data-index='0'] .ov-state"))
            .await
            .unwrap()
            .attr("class")
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(class.contains("state-in-use-unseen"), "{class}");

        // GPU 1 came free (its alert fires), GPU 0 never while its unseen job runs.
        let alerts = eventually(20, "gpu_free on GPU 1", || async {
            let alerts: AlertsResponse = get_json(&server, "/api/alerts").await;
            alerts.alerts.iter().any(|a| a.rule == Rule::GpuFree && a.gpu_index == 1).then_some(alerts)
        })
        .await;
        let on_gpu0 = |a: &AlertsResponse| a.alerts.iter().any(|a| a.rule == Rule::GpuFree && a.gpu_index == 0);
        let state: Value = get_json(&server, "/api/processes").await;
        if state["states"][0]["state"] == "in_use_unseen" {
            assert!(!on_gpu0(&alerts), "no gpu_free while GPU 0 is in use: {:?}", alerts.alerts);
        }
        // The unseen job ends with its window: GPU 0 is free, and said so.
        eventually(30, "gpu_free on GPU 0 once its unseen job ended", || async {
            let alerts: AlertsResponse = get_json(&server, "/api/alerts").await;
            on_gpu0(&alerts).then_some(())
        })
        .await;
        let body: Value = get_json(&server, "/api/processes").await;
        assert_eq!(body["states"][0]["state"], "free", "{body}");
        server.stop().await;
    })
    .await;
}
