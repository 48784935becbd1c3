//! Benchmarks of gpudash's own costs, printing figures (never pass/fail):
//!
//!   gpudash-bench sampler [--simulate N] [--samples N]   CPU time of one fast-path sample per GPU
//!   gpudash-bench gpm [--simulate N] [--windows N]       CPU time of the GPM loop per GPU per second
//!   gpudash-bench loops [--seconds 20] [--watched]       the sampler's loops as the server runs them: CPU per loop and per NVML call
//!   gpudash-bench history [--days 7] [--gpus 8]          insert a week of 1 Hz history, time a 7-day query, size on disk
//!   gpudash-bench fleet [--nodes 100] [--gpus 8]         the fleet view's Prometheus queries over a generated fleet
//!   gpudash-bench alerts [--gpus 8]                      rule evaluation CPU per tick; sample → webhook receipt
//!   gpudash-bench identity [--processes 64]              a new process's workload lookup; a cached slow-loop pass
//!   gpudash-bench jobs [--jobs 100000] [--gpus 8]         job bookkeeping per tick and per reading; 100k jobs stored, the newest 1000 listed

mod alerts;
mod fleet;
mod identity;
mod jobs;
mod loops;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use gpudash::store::{HistoryQuery, Retention, Store};
use gpudash::telemetry::GpuSource;
use gpudash::telemetry::nvml::NvmlSource;
use gpudash::telemetry::simulator::Simulator;
use shared::DeviceSample;
use shared::history::Metric;

#[derive(Parser)]
#[command(name = "gpudash-bench", about = "Measure gpudash's own costs and print the figures")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Time the fast sampling path (NVML, or the simulator with --simulate).
    Sampler {
        #[arg(long)]
        simulate: Option<u32>,
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        samples: u32,
        /// Also time each NVML call of the fast path on GPU 0.
        #[arg(long)]
        per_call: bool,
    },
    /// Time the GPM loop: one window (a GPM sample and a metrics computation) per GPU per second.
    Gpm {
        #[arg(long)]
        simulate: Option<u32>,
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(2..=10_000))]
        windows: u32,
    },
    /// Run the sampler's real threads at the server's cadence; print each loop's CPU per GPU per second
    /// and each NVML call's count and cost inside it.
    Loops {
        #[arg(long)]
        simulate: Option<u32>,
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=60_000))]
        interval_ms: u64,
        /// Count as a page watching (the GPM loop keeps 1 s windows, not 5 s).
        #[arg(long)]
        watched: bool,
    },
    /// Fill a history database and time queries on it.
    History {
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=60))]
        days: u64,
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
        gpus: u32,
    },
    /// Serve a generated fleet of static dcgm-style /metrics pages, scrape it with Prometheus, time the fleet queries.
    Fleet {
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
        nodes: u32,
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
        gpus: u32,
        /// The engine to run: Prometheus, or VictoriaMetrics (a path containing "victoria", e.g. /usr/bin/victoria-metrics).
        #[arg(long, alias = "prometheus", default_value = "/usr/bin/prometheus")]
        engine: String,
        /// Seconds of scraping before timing, so the 10-minute look-back has samples to read.
        #[arg(long, default_value_t = 6)]
        settle: u64,
        /// The engine's scrape interval, seconds (2 keeps the bench short; 15 to 60 is usual for GPU hosts).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=60))]
        scrape_interval: u64,
    },
    /// Time the alert rules' evaluation per tick and an alert's way from its sample to a webhook.
    Alerts {
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
        gpus: u32,
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=100_000))]
        ticks: u32,
        /// Lost-and-back windows (each gives one firing and one resolved delivery).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
        windows: u32,
    },
    /// Time workload identity: the first look at a new process and a slow-loop pass over known ones.
    Identity {
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        processes: u32,
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        passes: u32,
    },
    /// Time job bookkeeping per tick and per slow-loop reading, and storing and listing many jobs.
    Jobs {
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1000..=10_000_000))]
        jobs: u32,
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
        gpus: u32,
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        ticks: u32,
    },
}

#[allow(clippy::print_stdout)]
fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Bench::Sampler { simulate, samples, per_call } => {
            if per_call && simulate.is_none() {
                per_call_costs(samples)
            } else {
                sampler(simulate, samples)
            }
        }
        Bench::Gpm { simulate, windows } => gpm(simulate, windows),
        Bench::Loops { simulate, seconds, interval_ms, watched } => {
            loops::main(simulate, seconds, interval_ms, watched)
        }
        Bench::History { days, gpus } => history(days, gpus),
        Bench::Fleet { nodes, gpus, engine, settle, scrape_interval } => {
            fleet::main(nodes, gpus, &engine, settle, scrape_interval)
        }
        Bench::Alerts { gpus, ticks, windows } => alerts::main(gpus, ticks, windows),
        Bench::Identity { processes, passes } => identity::main(processes as usize, passes),
        Bench::Jobs { jobs, gpus, ticks } => jobs::main(jobs, gpus, ticks),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("gpudash-bench: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

/// CPU time this thread has used (CLOCK_THREAD_CPUTIME_ID), ns.
fn thread_cpu_ns() -> u64 {
    u64::try_from(cpu_time::ThreadTime::now().as_duration().as_nanos()).unwrap_or(u64::MAX)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[allow(clippy::print_stdout)]
fn per_call_costs(iterations: u32) -> Result<(), String> {
    let source = NvmlSource::open(100).map_err(|e| e.to_string())?;
    println!("NVML call costs on GPU 0, mean of {iterations} calls:");
    for (name, micros) in source.profile_calls(0, iterations) {
        println!("  {name:<28} {micros:>8.1} µs");
    }
    sampler(None, iterations)
}

/// The GPM loop's cost: it closes one window per GPU each second, so the CPU time of one
/// step per GPU is its CPU time per GPU per second. Steps run back to back here (GPM needs no
/// pause for the cost; the figures of such short windows are not what is measured).
#[allow(clippy::print_stdout)]
fn gpm(simulate: Option<u32>, windows: u32) -> Result<(), String> {
    let time = |gpus: usize, step: &mut dyn FnMut(u64) -> usize| {
        let gpus = gpus.max(1) as f64;
        step(0); // opens the first window; NVML's first metrics computation is slow (5.8 ms once on the H200; no log kept)
        step(1);
        let (cpu, wall) = (thread_cpu_ns(), Instant::now());
        let mut closed = 0;
        for i in 0..windows {
            closed += step(u64::from(i) + 2);
        }
        let per = |total: f64| total / f64::from(windows) / gpus;
        let cpu_us = per(thread_cpu_ns().saturating_sub(cpu) as f64 / 1e3);
        let wall_us = per(wall.elapsed().as_secs_f64() * 1e6);
        println!("GPM loop, {windows} windows on {gpus} GPU(s), {closed} closed:");
        println!("  CPU per GPU per second: {cpu_us:.1} µs ({:.4}% of one core)", cpu_us / 1e4);
        println!("  wall per GPU per window: {wall_us:.1} µs (off the fast path: its own thread)");
        println!("  reference: pynvml on an H200, one sample 0.23 ms + one metrics call 1.0-1.4 ms");
    };
    match simulate {
        Some(n) => {
            let sim = Simulator::new(n, 100);
            for t in 0..3 {
                sim.sample(t * 100);
            }
            time(n as usize, &mut |t| sim.activity(t).len());
        }
        None => {
            let source = NvmlSource::open(100).map_err(|e| e.to_string())?;
            let mut reader = source.gpm_reader();
            let step = &mut |t| {
                let windows = reader.step(t);
                if let Some((i, reason)) = windows.iter().find_map(|(i, a)| Some((i, a.unavailable.clone()?))) {
                    println!("  GPU {i}: n/a: {reason}");
                }
                windows.len()
            };
            time(source.devices().len(), step);
        }
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn sampler(simulate: Option<u32>, samples: u32) -> Result<(), String> {
    let source: Box<dyn GpuSource> = match simulate {
        Some(n) => Box::new(Simulator::new(n, 100)),
        None => Box::new(NvmlSource::open(100).map_err(|e| e.to_string())?),
    };
    let gpus = source.devices().len().max(1) as u32;
    let kind = if simulate.is_some() { "simulator" } else { "NVML" };
    // Warm-up: NVML loads state lazily on the first calls.
    for _ in 0..20 {
        source.sample(0);
    }
    let mut walls = Vec::with_capacity(samples as usize);
    let cpu_start = thread_cpu_ns();
    let start = Instant::now();
    for _ in 0..samples {
        let t = Instant::now();
        let readings: Vec<DeviceSample> = source.sample(0);
        walls.push(t.elapsed());
        std::hint::black_box(readings);
    }
    let total = start.elapsed();
    let cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
    walls.sort();
    let per_gpu = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(gpus);
    let cpu_per_gpu_us = cpu_ns as f64 / 1e3 / f64::from(samples) / f64::from(gpus);
    println!("fast-path sample ({kind}, {gpus} GPU(s), {samples} samples, {:.2} s)", total.as_secs_f64());
    println!(
        "  wall per GPU:  median {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        per_gpu(percentile(&walls, 0.5)),
        per_gpu(percentile(&walls, 0.99)),
        per_gpu(walls[walls.len() - 1])
    );
    println!("  CPU per GPU:   {cpu_per_gpu_us:.2} µs (CPU time of this thread, user + system)");
    println!("  8 GPUs at 10 Hz would cost {:.3}% of one core", cpu_per_gpu_us * 8.0 * 10.0 / 1e4);
    println!(
        "  reference: target ≤ 100 µs per GPU; other tools' costs on this machine: python3 tests/gpu/peer_costs.py"
    );

    // The rest of a tick: history ring, JSON serialized once for every socket.
    let hub = gpudash::telemetry::Telemetry::new(source.host(), source.devices());
    let ticks: Vec<Vec<DeviceSample>> = (0..samples.min(2000)).map(|i| source.sample(u64::from(i) * 100)).collect();
    let bytes =
        gpudash::web::encode(&shared::ServerMessage::Tick(shared::Tick { seq: 1, samples: ticks[0].clone() })).len();
    // The hub publishes the typed tick; web's relay encodes it once for every socket (the same call here).
    let mut updates = hub.subscribe();
    let cpu = thread_cpu_ns();
    for (i, tick) in ticks.into_iter().enumerate() {
        hub.publish(tick, i as u64 * 100);
        if let Ok(gpudash::telemetry::Update::Tick(tick)) = updates.try_recv() {
            std::hint::black_box(gpudash::web::encode(&shared::ServerMessage::Tick(shared::Tick::clone(&tick))));
        }
    }
    let publish_us = thread_cpu_ns().saturating_sub(cpu) as f64 / 1e3 / f64::from(samples.min(2000));
    println!(
        "publish (history ring + one JSON serialization per tick): {publish_us:.1} µs CPU per tick, {bytes} bytes per tick"
    );

    let t = Instant::now();
    let cpu = thread_cpu_ns();
    let details = source.details(0);
    println!(
        "slow-loop details (health, PCIe traffic, energy, processes): {:.1} ms wall, {:.2} ms CPU for {} GPU(s), {} process(es)",
        t.elapsed().as_secs_f64() * 1e3,
        thread_cpu_ns().saturating_sub(cpu) as f64 / 1e6,
        details.health.len(),
        details.processes.len()
    );
    Ok(())
}

#[allow(clippy::print_stdout)]
fn history(days: u64, gpus: u32) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = Store::open(dir.path(), true, Retention::default()).map_err(|e| e.to_string())?;
    let recorder = store.recorder().map_err(|e| e.to_string())?;
    let now = gpudash::telemetry::now_ms() / 1000 * 1000;
    let seconds = days * 86_400;
    let from = now - seconds * 1000;
    let mut rng = fastrand::Rng::with_seed(7);
    let start = Instant::now();
    let mut tick = Vec::with_capacity(gpus as usize);
    for s in 0..seconds {
        let t = from + s * 1000;
        tick.clear();
        tick.extend((0..gpus).map(|index| DeviceSample {
            index,
            timestamp_ms: t,
            memory_used: Some(rng.u64(1 << 30..140 << 30)),
            memory_free: Some(rng.u64(0..1 << 30)),
            gpu_util: Some(rng.u32(0..=100)),
            mem_util: Some(rng.u32(0..=100)),
            temperature_c: Some(rng.u32(30..80)),
            power_draw_mw: Some(rng.u32(70_000..700_000)),
            power_limit_mw: Some(700_000),
            sm_clock_mhz: Some(rng.u32(345..1980)),
            mem_clock_mhz: Some(3201),
            ..DeviceSample::default()
        }));
        recorder.record_waiting(&tick);
    }
    recorder.stop();
    let insert = start.elapsed();
    let rows = seconds * u64::from(gpus);
    println!(
        "history insert: {days} days × {gpus} GPUs at 1 Hz = {rows} samples in {:.1} s ({:.0} samples/s, batched every 500 ms)",
        insert.as_secs_f64(),
        rows as f64 / insert.as_secs_f64()
    );

    let mut times = Vec::new();
    for metric in Metric::ALL {
        for device in 0..gpus.min(2) {
            let query = HistoryQuery { device, metric, from, to: now, points: 1000 };
            let t = Instant::now();
            let answer = store.history(&query, now).map_err(|e| e.to_string())?;
            times.push(t.elapsed());
            if metric == Metric::MemoryUsed && device == 0 {
                println!(
                    "  7-day query: {} points, {} ms buckets, from {:?}",
                    answer.points.len(),
                    answer.bucket_ms,
                    answer.resolution
                );
            }
        }
    }
    times.sort();
    println!(
        "history query ({days}-day range, 1000 points, {} queries): median {:.1} ms, max {:.1} ms (target ≤ 100 ms)",
        times.len(),
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
    let size = |name: &str| std::fs::metadata(dir.path().join(name)).map(|m| m.len()).unwrap_or(0);
    let db = size("history-simulated.db") + size("history-simulated.db-wal");
    println!(
        "history size on disk: {:.1} MiB (48 h raw + {days} days of minute rollups for {gpus} GPUs; target ≤ 1 GiB)",
        db as f64 / 1048576.0
    );
    Ok(())
}
