//! What job bookkeeping costs (never pass/fail; docs/BENCHMARKS.md, "Jobs"):
//!
//! 1. Per tick: the jobs' thread takes each GPU's newest GPM window from the tick (the fast loop
//!    itself does nothing for jobs). Timed interleaved with the tick's own production on the
//!    simulator (what the sampler does for that tick), over the same ticks.
//! 2. Per slow-loop reading: the tracker observing every GPU's processes, interleaved with the usage
//!    accountant charging the same readings (the bookkeeping every reading already had).
//! 3. Storage: `--jobs` jobs written to a history database in batches as the thread writes them,
//!    then the newest 1,000 listed (all, and one owner's), one job read with its series, and the
//!    file's size. Each figure comes with a check of what it read.

use std::time::{Duration, Instant};

use gpudash::jobs::tracker::{GpuFacts, Tracker};
use gpudash::store::jobs::JobStore;
use gpudash::telemetry::GpuSource;
use gpudash::telemetry::simulator::Simulator;
use gpudash::usage::account::{Accountant, Reading};
use shared::jobs::{Job, JobFigures, JobPoint, JobsQuery, Outcome, Runtime};
use shared::processes::GpuProcess;

use crate::{percentile, thread_cpu_ns};

const OWNERS: [&str; 8] = ["ana", "bo", "cy", "dee", "eve", "fay", "gus", "hal"];

#[allow(clippy::print_stdout)]
pub fn main(jobs: u32, gpus: u32, ticks: u32) -> Result<(), String> {
    per_tick(gpus, ticks)?;
    per_reading(gpus, ticks)?;
    storage(jobs)
}

/// The tick's samples on the simulator vs the jobs' thread's work on them, interleaved.
#[allow(clippy::print_stdout)]
fn per_tick(gpus: u32, ticks: u32) -> Result<(), String> {
    let sim = Simulator::new(gpus, 1000);
    let facts: Vec<GpuFacts> = (0..gpus).map(|index| GpuFacts { index, memory_total: 141 << 30, bf16: true }).collect();
    let mut tracker = Tracker::new(2000, &facts, 1);
    let (mut sampling, mut bookkeeping) = (0u64, 0u64);
    let mut windows = 0usize;
    for tick in 0..u64::from(ticks) {
        let start = thread_cpu_ns();
        let mut samples = sim.sample(tick * 1000);
        let sampled = thread_cpu_ns();
        // Each tick carries the newest window; a new one every tick here, as at a 1 s interval.
        for s in &mut samples {
            let mut activity = s.activity.clone().unwrap_or_default();
            activity.timestamp_ms = tick * 1000 + 1;
            activity.window_ms = 1000;
            activity.sm_active = Some(50.0);
            s.activity = Some(activity);
        }
        let prepared = thread_cpu_ns();
        for s in &samples {
            if let Some(a) = &s.activity {
                tracker.window(s.index, a);
                windows += 1;
            }
        }
        let done = thread_cpu_ns();
        sampling += sampled - start;
        bookkeeping += done - prepared;
    }
    let per = |ns: u64| ns as f64 / f64::from(ticks) / f64::from(gpus);
    println!("jobs: per tick, {ticks} ticks on {gpus} simulated GPUs ({windows} GPM windows taken):");
    println!("  the tick's samples (simulator):   {:>8.3} µs CPU per GPU", per(sampling) / 1e3);
    println!("  jobs' thread, windows taken:      {:>8.3} µs CPU per GPU", per(bookkeeping) / 1e3);
    println!("  the fast loop's own cost for jobs: 0 (it publishes the tick; the jobs' thread reads it)");
    if windows != (ticks * gpus) as usize {
        return Err(format!("check: {windows} windows taken, {} expected", ticks * gpus));
    }
    Ok(())
}

fn process(device: u32, pid: u32, owner: &str) -> GpuProcess {
    GpuProcess {
        device,
        pid,
        kind: shared::processes::ProcessKind::Compute,
        used_memory: Some(20 << 30),
        sm_util: Some(40),
        sm_util_seen_ms: None,
        user: Some(owner.to_owned()),
        name: Some("python3".to_owned()),
        command: None,
        started_ms: Some(0),
        group: Some(pid),
        workload: None,
        owner: None,
        redacted: false,
        idle: None,
    }
}

/// The tracker vs the usage accountant on the same readings (4 processes per GPU), interleaved.
#[allow(clippy::print_stdout)]
fn per_reading(gpus: u32, readings: u32) -> Result<(), String> {
    let facts: Vec<GpuFacts> = (0..gpus).map(|index| GpuFacts { index, memory_total: 141 << 30, bf16: true }).collect();
    let processes: Vec<GpuProcess> =
        (0..gpus).flat_map(|g| (0..4).map(move |p| process(g, 1000 + g * 4 + p, OWNERS[(p as usize) % 8]))).collect();
    let mut tracker = Tracker::new(2000, &facts, 1);
    let mut accountant = Accountant::new(2000);
    let (mut usage_ns, mut jobs_ns) = (0u64, 0u64);
    let mut charged = 0usize;
    for r in 0..u64::from(readings) {
        let at_ms = 1 + r * 2000;
        let on = |g: u32| processes.iter().filter(|p| p.device == g).collect::<Vec<_>>();
        let start = thread_cpu_ns();
        for g in 0..gpus {
            let reading = Reading { device: g, at_ms, energy_mj: Some(r * 1000), gpu_util: Some(40), processes: on(g) };
            charged += accountant.charge(&reading).len();
        }
        let usage_done = thread_cpu_ns();
        let list: Vec<Reading<'_>> = (0..gpus)
            .map(|g| Reading { device: g, at_ms, energy_mj: Some(r * 1000), gpu_util: Some(40), processes: on(g) })
            .collect();
        tracker.observe(&list);
        let jobs_done = thread_cpu_ns();
        usage_ns += usage_done - start;
        jobs_ns += jobs_done - usage_done;
    }
    let per = |ns: u64| ns as f64 / f64::from(readings) / f64::from(gpus) / 1e3;
    let running = tracker.running(false);
    println!("jobs: per slow-loop reading, {readings} readings of {gpus} GPUs × 4 processes:");
    println!("  usage accountant (reference):     {:>8.2} µs CPU per GPU", per(usage_ns));
    println!("  jobs tracker:                     {:>8.2} µs CPU per GPU", per(jobs_ns));
    let held: f64 = running.iter().map(|j| j.figures.held_s).sum();
    let expected = f64::from(gpus * 4) * f64::from(readings - 1) * 2.0;
    if running.len() != (gpus * 4) as usize || (held - expected).abs() > 1e-6 || charged == 0 {
        return Err(format!(
            "check: {} jobs holding {held} GPU-s, {} jobs and {expected} expected",
            running.len(),
            gpus * 4
        ));
    }
    Ok(())
}

fn stored_job(id: u64) -> Job {
    let owner = OWNERS[(id % 8) as usize];
    Job {
        id,
        key: format!("process:{id}"),
        name: format!("python3 (group {id})"),
        owner: owner.to_owned(),
        runtime: Runtime::ALL[(id % 4) as usize],
        gpus: vec![(id % 8) as u32],
        started_ms: id * 60_000,
        watched_from_ms: id * 60_000,
        last_seen_ms: id * 60_000 + 3_600_000,
        ended_ms: Some(id * 60_000 + 3_600_000),
        outcome: Outcome::Ended,
        figures: JobFigures {
            held_s: 3600.0,
            gpu_s: 3600.0,
            activity_s: 3600.0,
            sm_active_mean: Some(0.42),
            memory_peak_bytes: 40 << 30,
            memory_capacity_bytes: 141 << 30,
            ..JobFigures::default()
        },
        // An hour at the first 10 s step: 360 points.
        series: (0..shared::jobs::MAX_POINTS as u64)
            .map(|i| JobPoint {
                at_ms: id * 60_000 + i * 10_000,
                sm_active: Some(0.42),
                memory_bytes: 40 << 30,
                ..JobPoint::default()
            })
            .collect(),
        pids: vec![id as u32],
    }
}

#[allow(clippy::print_stdout)]
fn storage(jobs: u32) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("history.sqlite");
    let store = JobStore::open(&path, 0).map_err(|e| e.to_string())?;
    let start = Instant::now();
    // The thread saves a few jobs at a time (those that started and ended at one reading).
    for batch in (1..=u64::from(jobs)).collect::<Vec<_>>().chunks(10) {
        store.save(batch.iter().map(|&id| stored_job(id)).collect());
        // Keep the queue from filling (it would drop saves, which is what it does when a disk stalls).
        if batch[0] % 10_000 == 1 {
            store.sync();
        }
    }
    store.sync();
    let write = start.elapsed();
    let size = std::fs::metadata(&path).map_err(|e| e.to_string())?.len()
        + std::fs::metadata(dir.path().join("history.sqlite-wal")).map_or(0, |m| m.len());
    let time = |query: JobsQuery| -> Result<(Duration, Duration, Vec<Job>), String> {
        let mut times = Vec::new();
        let mut last = Vec::new();
        for _ in 0..21 {
            let t = Instant::now();
            last = store.list(query.clone()).map_err(|e| e.to_string())?.0;
            times.push(t.elapsed());
        }
        times.sort_unstable();
        Ok((percentile(&times, 0.5), percentile(&times, 0.95), last))
    };
    let newest = JobsQuery { limit: 1000, ..JobsQuery::default() };
    let (median, p95, listed) = time(newest)?;
    let ids_ok = listed.len() == 1000
        && listed.first().map(|j| j.id) == Some(u64::from(jobs))
        && listed.windows(2).all(|w| w[0].id > w[1].id);
    let (owner_median, owner_p95, owned) =
        time(JobsQuery { owner: Some("ana".into()), limit: 1000, ..JobsQuery::default() })?;
    let owner_ok = owned.len() == 1000 && owned.iter().all(|j| j.owner == "ana");
    let t = Instant::now();
    let one = store.get(u64::from(jobs) / 2).map_err(|e| e.to_string())?;
    let get = t.elapsed();
    let one_ok =
        one.as_ref().is_some_and(|j| j.series.len() == shared::jobs::MAX_POINTS && j.id == u64::from(jobs) / 2);
    println!("jobs: storage, {jobs} jobs of an hour each (360-point series) in one history database:");
    println!(
        "  written in {:.2} s ({:.0} jobs/s, batches of 10 on the writer thread)",
        write.as_secs_f64(),
        f64::from(jobs) / write.as_secs_f64()
    );
    println!(
        "  on disk: {:.1} MiB ({:.0} B per job, series included)",
        size as f64 / 1048576.0,
        size as f64 / f64::from(jobs)
    );
    println!("  newest 1000:            median {:>7.2} ms, p95 {:>7.2} ms   check {}", ms(median), ms(p95), ok(ids_ok));
    println!(
        "  newest 1000 of one owner: median {:>5.2} ms, p95 {:>7.2} ms   check {}",
        ms(owner_median),
        ms(owner_p95),
        ok(owner_ok)
    );
    println!("  one job with its series: {:>7.2} ms                      check {}", ms(get), ok(one_ok));
    if !(ids_ok && owner_ok && one_ok) {
        return Err("a storage check failed (see above)".to_owned());
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn ok(pass: bool) -> &'static str {
    if pass { "ok" } else { "FAILED" }
}
