//! `gpudash-load bridge-flood`: the red team's bridge flood (finding 2) as a
//! benchmark: many ~60 KB reports, each with a new PID, while viewers read
//! `GET /api/bridge`; prints the server's peak memory and the largest list.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fanout::start_server;
use crate::procstat;

const MAX_REPORTS: u32 = 100_000;

#[derive(clap::Args, Debug)]
pub struct BridgeFloodArgs {
    /// Reports to post, each for a new PID (at most 100000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REPORTS)))]
    reports: u32,
    /// Reports in flight at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    posters: u32,
    /// Viewers reading `GET /api/bridge` back to back while the flood runs.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=64))]
    readers: u32,
    #[arg(long, default_value = "target/release/gpudash")]
    server: PathBuf,
}

/// A report of about 60 KB: a 1000-character command line and 200 spans of new names.
fn flood_report(pid: u32) -> Vec<u8> {
    let spans: Vec<Value> = (0..200)
        .map(|i| {
            json!({ "name": format!("{pid}-{i:03}-{}", "s".repeat(170)), "device": 0, "start_ms": i,
                    "elapsed_ms": 1.5, "memory_delta": -1, "memory_peak": 1 })
        })
        .collect();
    json!({
        "version": 1, "pid": pid, "host": "flood", "process_name": "x".repeat(1000), "torch_version": "2.5.1",
        "cuda_version": "12.4", "allow_remote_empty_cache": true, "interval_s": 1.0,
        "devices": [{ "device": 0, "allocated": 1, "allocated_peak": 1, "reserved": 2, "reserved_peak": 2,
                      "active": 1, "inactive_split": 0, "alloc_retries": 0, "ooms": 0 }],
        "spans": spans,
    })
    .to_string()
    .into_bytes()
}

pub async fn run(args: BridgeFloodArgs) -> Result<String, String> {
    let (mut server, addr) = start_server(&args.server, 1, Duration::from_millis(500)).await?;
    let pid = server.id().ok_or("the server has no pid")?.to_string();
    let idle = procstat::read(&pid).ok_or("cannot read the server's /proc entry")?;
    let client = reqwest::Client::new();
    let (next, accepted, refused) =
        (Arc::new(AtomicU64::new(1)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let report_bytes = flood_report(1).len();
    let started = Instant::now();
    let mut posters = Vec::new();
    for _ in 0..args.posters {
        let (client, next, accepted, refused) = (client.clone(), next.clone(), accepted.clone(), refused.clone());
        let url = format!("http://{addr}/api/bridge/report");
        let total = u64::from(args.reports);
        posters.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n > total {
                    return;
                }
                let body = flood_report(n as u32);
                let sent = client.post(&url).header("content-type", "application/json").body(body).send().await;
                match sent.map(|r| r.status().is_success()) {
                    Ok(true) => accepted.fetch_add(1, Ordering::Relaxed),
                    _ => refused.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let flooding = Arc::new(AtomicBool::new(true));
    let mut readers = Vec::new();
    for _ in 0..args.readers {
        let (client, flooding) = (client.clone(), flooding.clone());
        let url = format!("http://{addr}/api/bridge");
        readers.push(tokio::spawn(async move {
            let (mut largest, mut slowest, mut reads) = (0usize, Duration::ZERO, 0u64);
            // One more read after the flood: the list at its fullest.
            let mut last = false;
            while !last {
                last = !flooding.load(Ordering::Relaxed);
                let asked = Instant::now();
                if let Ok(response) = client.get(&url).send().await
                    && let Ok(body) = response.bytes().await
                {
                    largest = largest.max(body.len());
                    slowest = slowest.max(asked.elapsed());
                    reads += 1;
                }
            }
            (largest, slowest, reads)
        }));
    }
    for poster in posters {
        let _ = poster.await;
    }
    let flood_time = started.elapsed();
    flooding.store(false, Ordering::Relaxed);
    let (mut largest, mut slowest, mut reads) = (0, Duration::ZERO, 0);
    for reader in readers {
        if let Ok((l, s, n)) = reader.await {
            (largest, slowest, reads) = (largest.max(l), slowest.max(s), reads + n);
        }
    }
    let end = procstat::read(&pid).ok_or("the server is gone")?;
    let _ = server.kill().await;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gpudash-load bridge-flood: {} reports of {} KB, each a new PID, {} in flight; {} viewers reading GET /api/bridge\n",
        args.reports,
        report_bytes / 1000,
        args.posters,
        args.readers
    );
    let _ = writeln!(out, "| figure | value |\n| --- | --- |");
    let _ = writeln!(
        out,
        "| reports accepted / refused | {} / {} |",
        accepted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
    let _ = writeln!(out, "| flood time | {:.1} s |", flood_time.as_secs_f64());
    let _ = writeln!(out, "| server RSS idle → end | {:.1} → {:.1} MiB |", mib(idle.rss), mib(end.rss));
    let _ = writeln!(out, "| server peak RSS (VmHWM) | {:.1} MiB |", mib(end.rss_peak));
    let _ = writeln!(out, "| largest GET /api/bridge | {:.1} KiB |", largest as f64 / 1024.0);
    let _ = writeln!(out, "| slowest GET /api/bridge | {:.2} s ({reads} reads) |", slowest.as_secs_f64());
    Ok(out)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}
