//! Jobs end to end: scripted simulator jobs in each runtime (a plain process, a container, a pod,
//! a Slurm job) run for known windows; `/api/jobs` must list each from its start to its end with
//! its owner, runtime, GPUs and figures; a job restarted in the same container is a new job, one
//! that moves between GPUs stays one; a job still running when gpudash stops is closed as
//! "unknown" when it starts again on the same database; `/metrics` carries only running jobs.
//!
//! Held time is exact to a reading (100 ms here, see tests/integration/usage.rs): each job's
//! held GPU-seconds may fall short of its window by up to 0.5 s per GPU, never exceed it.

use std::time::Duration;

use shared::jobs::{Grade, JobReport, JobsResponse, Outcome, Runtime};

use crate::support::{TestServer, eventually};

const INTERVAL_MS: u64 = 100;
const TOLERANCE_S: f64 = 0.5;

async fn server(dir: &std::path::Path, jobs: &[&str]) -> TestServer {
    let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).expect("open store");
    let simulator = crate::support::scripted(2, INTERVAL_MS, jobs);
    let mut options =
        gpudash::Options { store: Some(store), ..gpudash::Options::new(Duration::from_millis(INTERVAL_MS)) };
    // Judge jobs of a second or more, so these short ones get verdicts.
    options.jobs.limits.min_held_s = 1.0;
    options.jobs.energy =
        shared::jobs::EnergyTerms { price_per_kwh: Some(0.5), currency: "EUR".into(), carbon_g_per_kwh: Some(400.0) };
    TestServer::with_options(Box::new(simulator), options).await
}

async fn jobs(server: &TestServer, query: &str) -> Option<JobsResponse> {
    reqwest::get(server.url(&format!("/api/jobs?{query}"))).await.ok()?.json().await.ok()
}

fn near(got: f64, expected: f64) -> bool {
    got <= expected + 1e-6 && got >= expected - TOLERANCE_S
}

fn by_name<'a>(jobs: &'a [JobReport], name: &str) -> Vec<&'a JobReport> {
    jobs.iter().filter(|j| j.job.name == name).collect()
}

#[tokio::test]
async fn jobs_of_every_runtime_start_and_end_with_their_owner_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    let first = server(
        dir.path(),
        &[
            // A plain process of ana's, busy on GPU 0 for 3 s.
            "job:0:ana:4:80@1s+3s",
            // bo's container on GPU 1 for 2 s, restarted 2 s later for 2 s: two jobs.
            "job:1:bo@container:trainer:2:50@1s+2s",
            "job:1:bo@container:trainer:2:50@5s+2s",
            // A pod of namespace ml moving from GPU 0 to GPU 1: one job.
            "job:0:cy@pod:ml/bert-0:3:60@4500ms+1500ms",
            "job:1:cy@pod:ml/bert-0:3:60@6s+1500ms",
            // dee's Slurm job holds 6 GiB on GPU 0 and runs nothing for 2 s: idle.
            "job:0:dee@slurm:4242:6@6500ms+2s",
            // eve's process is still running when this server stops.
            "job:1:eve:1:10@9s+120s",
        ],
    )
    .await;
    let all = eventually(30, "every scripted job but eve's ended, eve's running", || async {
        let answer = jobs(&first, "limit=50").await?;
        let ended = answer.jobs.iter().filter(|j| j.job.ended_ms.is_some()).count();
        // Running, and long enough (`min_held_s`, 1 s here) to be in /metrics.
        let eve_runs = answer
            .jobs
            .iter()
            .any(|j| j.job.owner == "eve" && j.job.outcome == Outcome::Running && j.job.figures.held_s >= 1.0);
        (ended == 5 && eve_runs).then_some(answer)
    })
    .await;
    assert!(all.persistent && all.simulated && !all.more);
    let ana = by_name(&all.jobs, "python3 (group 60000)");
    assert_eq!(ana.len(), 1, "{:?}", all.jobs);
    let ana = ana[0];
    assert_eq!((ana.job.owner.as_str(), ana.job.runtime, ana.job.gpus.as_slice()), ("ana", Runtime::Process, &[0][..]));
    assert!(near(ana.job.figures.held_s, 3.0), "{:?}", ana.job.figures);
    assert_eq!(ana.job.outcome, Outcome::Ended);
    assert!(ana.job.figures.sm_active_mean.is_some_and(|a| a > 0.3), "GPM on a simulated H200: {:?}", ana.job.figures);
    assert_eq!(ana.job.figures.memory_peak_bytes, 4 << 30);
    assert!(ana.energy_kwh > 0.0 && ana.cost.as_deref().is_some_and(|c| c.ends_with(" EUR")), "{ana:?}");
    assert!(ana.co2_kg.is_some_and(|c| (c - ana.energy_kwh * 0.4).abs() < 1e-9));

    let bo = by_name(&all.jobs, "container trainer");
    assert_eq!(bo.len(), 2, "a restart in the same container is a new job: {:?}", all.jobs);
    assert!(
        bo.iter()
            .all(|j| j.job.owner == "bo" && j.job.runtime == Runtime::Container && near(j.job.figures.held_s, 2.0))
    );
    assert!(bo[0].job.id > bo[1].job.id, "newest first");

    let cy = by_name(&all.jobs, "pod ml/bert-0");
    assert_eq!(cy.len(), 1, "moving between GPUs stays one job: {:?}", all.jobs);
    assert_eq!((cy[0].job.owner.as_str(), cy[0].job.gpus.as_slice()), ("ml", &[0, 1][..]));
    assert!(near(cy[0].job.figures.held_s, 3.0), "1.5 s on each GPU: {:?}", cy[0].job.figures);
    let dee = by_name(&all.jobs, "Slurm job 4242");
    assert_eq!(dee.len(), 1);
    let dee = dee[0];
    assert_eq!((dee.job.owner.as_str(), dee.job.runtime), ("dee", Runtime::Slurm));
    assert!(near(dee.job.figures.idle_s, 2.0) && near(dee.job.figures.held_s, 2.0), "{:?}", dee.job.figures);
    assert_eq!(dee.grade, Grade::Poor);
    assert_eq!(dee.verdicts[0].rule, "idle", "{:?}", dee.verdicts);
    let words = &dee.verdicts[0].words;
    assert!(
        words.starts_with("held 1 GPU for ") && words.contains(" at 0% SM activity: 2 GPU-seconds idle"),
        "{words}"
    );

    // Filters: owner, runtime, state; a job's page has its series.
    let slurm = jobs(&first, "runtime=slurm").await.unwrap();
    assert_eq!(slurm.jobs.len(), 1);
    let running = jobs(&first, "state=running").await.unwrap();
    assert_eq!(running.jobs.iter().map(|j| j.job.owner.as_str()).collect::<Vec<_>>(), ["eve"]);
    assert_eq!(jobs(&first, "owner=bo&state=ended").await.unwrap().jobs.len(), 2);
    let page: JobReport =
        reqwest::get(first.url(&format!("/api/jobs/{}", ana.job.id))).await.unwrap().json().await.unwrap();
    assert!(!page.job.series.is_empty() && page.job.series.iter().any(|p| p.memory_bytes == 4 << 30), "{page:?}");
    // Only the running job is in /metrics (once it has held a GPU for --job-verdict-after).
    let metrics = reqwest::get(first.url("/metrics")).await.unwrap().text().await.unwrap();
    let info: Vec<&str> = metrics.lines().filter(|l| l.starts_with("gpudash_job_info{")).collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(info[0].contains("owner=\"eve\"") && info[0].contains("runtime=\"process\""), "{info:?}");
    let eve_id = running.jobs[0].job.id;
    // The CSV has a header and a row per job.
    let csv = reqwest::get(first.url("/api/jobs.csv?state=ended")).await.unwrap().text().await.unwrap();
    assert_eq!(csv.lines().next(), Some(shared::jobs::CSV_HEADER));
    assert_eq!(csv.lines().count(), 6, "{csv}");
    first.stop().await;

    // The same database: the jobs are there, eve's is closed with its end unknown, ids carry on.
    let second = server(dir.path(), &["job:0:fay:1:50@1s+2s"]).await;
    let eve: JobReport = reqwest::get(second.url(&format!("/api/jobs/{eve_id}"))).await.unwrap().json().await.unwrap();
    assert_eq!(eve.job.outcome, Outcome::Unknown);
    assert_eq!(eve.job.ended_ms, Some(eve.job.last_seen_ms));
    let fay =
        eventually(20, "fay's job listed", || async { jobs(&second, "owner=fay").await?.jobs.into_iter().next() })
            .await;
    assert!(fay.job.id > eve_id, "ids carry on: {} after {eve_id}", fay.job.id);
    assert_eq!(jobs(&second, "limit=50").await.unwrap().jobs.len(), 7);
    second.stop().await;
}
