//! `gpudash-load soak`: viewers that keep connecting and leaving for a long,
//! bounded time, to show the server's memory stays flat.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::fanout::{parse_duration, start_server};
use crate::procstat;

const MAX_CLIENTS: u32 = 2000;
const MAX_DURATION: Duration = Duration::from_secs(45 * 60);

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Viewers at any moment, at most 2000; each stays 1–10 s, leaves, and a new one connects.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLIENTS)))]
    clients: u32,
    /// How long to run (at most 45m).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    duration: Duration,
    /// How often to read the server's memory.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    every: Duration,
    #[arg(long, default_value = "target/release/gpudash")]
    server: PathBuf,
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    interval: Duration,
}

pub async fn run(args: SoakArgs) -> Result<String, String> {
    if args.duration > MAX_DURATION {
        return Err(format!("--duration is at most {}s", MAX_DURATION.as_secs()));
    }
    let (mut server, addr) = start_server(&args.server, args.gpus, args.interval).await?;
    let pid = server.id().ok_or("the server has no pid")?.to_string();
    let url = format!("ws://{addr}/ws");
    let end = Instant::now() + args.duration;
    let (sessions, failures, messages) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut viewers = Vec::new();
    for i in 0..args.clients {
        let (url, sessions, failures, messages) = (url.clone(), sessions.clone(), failures.clone(), messages.clone());
        viewers.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(u64::from(i));
            // Spread the first connections over the first 10 s.
            tokio::time::sleep(Duration::from_millis(rng.u64(0..10_000))).await;
            while Instant::now() < end {
                let stay = Duration::from_millis(rng.u64(1_000..10_000));
                match tokio_tungstenite::connect_async(&url).await {
                    Ok((mut socket, _)) => {
                        sessions.fetch_add(1, Ordering::Relaxed);
                        let leave = Instant::now() + stay;
                        while let Ok(Some(Ok(_))) = tokio::time::timeout_at(leave.min(end), socket.next()).await {
                            messages.fetch_add(1, Ordering::Relaxed);
                        }
                        // Half leave politely, half just drop the connection.
                        if rng.bool() {
                            let _ = socket.close(None).await;
                        }
                    }
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }));
    }
    let started = Instant::now();
    let mut rows = Vec::new();
    while Instant::now() < end {
        if let Some(reading) = procstat::read(&pid) {
            rows.push((started.elapsed(), reading, sessions.load(Ordering::Relaxed)));
        }
        tokio::time::sleep(args.every.min(end.saturating_duration_since(Instant::now()))).await;
    }
    for viewer in viewers {
        let _ = viewer.await;
    }
    let last = procstat::read(&pid);
    let _ = server.kill().await;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gpudash-load soak: {} viewers at a time, each staying 1–10 s, for {:?} against --simulate {} --interval {:?}\n",
        args.clients, args.duration, args.gpus, args.interval
    );
    let _ = writeln!(out, "| elapsed | server RSS | RSS peak | sessions so far |\n| --- | --- | --- | --- |");
    for (at, r, n) in &rows {
        let _ = writeln!(out, "| {:>5} s | {:.1} MiB | {:.1} MiB | {n} |", at.as_secs(), mib(r.rss), mib(r.rss_peak));
    }
    if let Some(last) = last {
        let _ = writeln!(
            out,
            "| end | {:.1} MiB | {:.1} MiB | {} |",
            mib(last.rss),
            mib(last.rss_peak),
            sessions.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "\nsessions {}, failed connects {}, messages received {}",
        sessions.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
        messages.load(Ordering::Relaxed)
    );
    Ok(out)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}
