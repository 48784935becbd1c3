//! `gpudash-load connections`: what an idle connection and a WebSocket cost the server
//! (resident memory and open files), and how fast `/healthz` answers while a flood of idle
//! connections holds the server at its `--max-connections` limit.
//!
//! Each of the three phases starts its own `gpudash --simulate`, so memory freed by one
//! phase (and kept by the allocator) does not hide the next phase's cost. Idle connections
//! are measured within the server's 10 s request-head timeout, which then closes them.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Child;
use tokio::time::Instant;

use crate::fanout::{ONE_ADDRESS, start_server_with};
use crate::procstat;
use crate::quantile;

const MAX_CONNECTIONS: u32 = 20_000;

#[derive(clap::Args, Debug)]
pub struct ConnectionArgs {
    /// Idle TCP connections (no request sent) to open in the first phase.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CONNECTIONS)))]
    idle: u32,
    /// WebSockets to open in the second phase.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CONNECTIONS)))]
    websockets: u32,
    /// The server's --max-connections in the third phase, where twice as many idle
    /// connections keep arriving while `/healthz` is timed.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(16..=i64::from(MAX_CONNECTIONS)))]
    limit: u32,
    /// `/healthz` requests timed at the limit (each on a new connection, as a probe does).
    #[arg(long, default_value_t = 200)]
    probes: u32,
    /// The gpudash binary to start (`cargo build --release -p gpudash` builds it).
    #[arg(long, default_value = "target/release/gpudash")]
    server: PathBuf,
    /// Simulated GPUs.
    #[arg(long, default_value_t = 2)]
    gpus: u32,
}

pub async fn run(args: ConnectionArgs) -> Result<String, String> {
    let most = u64::from(args.idle.max(args.websockets).max(2 * args.limit));
    let wanted = most + 256;
    let limit = rlimit::increase_nofile_limit(wanted).map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
    if limit < wanted {
        return Err(format!(
            "{most} connections need {wanted} open files; the limit is {limit} (try `ulimit -n {wanted}`)"
        ));
    }
    let mut out = String::new();
    let _ = writeln!(out, "gpudash --simulate {} (binary {})", args.gpus, args.server.display());

    // Phase 1: idle connections, no request sent.
    let (server, addr, pid) = start(&args, &["--max-connections", &(args.idle + 16).to_string()]).await?;
    let before = settle(&pid, None).await?;
    let mut idle = Vec::with_capacity(args.idle as usize);
    for _ in 0..args.idle {
        idle.push(TcpStream::connect(&addr).await.map_err(|e| format!("connect: {e}"))?);
    }
    let after = settle(&pid, Some(before.fds + u64::from(args.idle))).await?;
    per_connection(&mut out, "idle HTTP connection", args.idle, &before, &after);
    drop(idle);
    stop(server).await;

    // Phase 2: WebSockets, each reading every tick.
    let (server, addr, pid) = start(&args, &["--max-connections", &(args.websockets + 16).to_string()]).await?;
    let before = settle(&pid, None).await?;
    let mut readers = Vec::with_capacity(args.websockets as usize);
    for _ in 0..args.websockets {
        let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
            .await
            .map_err(|e| format!("WebSocket connect: {e}"))?;
        readers.push(tokio::spawn(async move { while let Some(Ok(_)) = socket.next().await {} }));
    }
    let after = settle(&pid, Some(before.fds + u64::from(args.websockets))).await?;
    per_connection(&mut out, "WebSocket", args.websockets, &before, &after);
    readers.iter().for_each(tokio::task::JoinHandle::abort);
    stop(server).await;

    // Phase 3: at the limit, with idle connections still arriving.
    let (server, addr, pid) = start(&args, &["--max-connections", &args.limit.to_string()]).await?;
    let before = settle(&pid, None).await?;
    let flood_size = 2 * args.limit as usize;
    let mut held = VecDeque::with_capacity(flood_size);
    for _ in 0..flood_size {
        held.push_back(TcpStream::connect(&addr).await.map_err(|e| format!("connect: {e}"))?);
    }
    // Not `before + limit`: the server may lower its limit to what its open-file limit allows.
    let at_limit = settle(&pid, None).await?;
    let opened = Arc::new(AtomicU64::new(0));
    let flooding = tokio::spawn({
        let (addr, opened) = (addr.clone(), opened.clone());
        async move {
            while let Ok(stream) = TcpStream::connect(&addr).await {
                held.push_back(stream);
                held.pop_front();
                opened.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }
    });
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(args.probes as usize);
    let mut failed = 0;
    for _ in 0..args.probes {
        match healthz(&addr).await {
            Ok(took) => latencies.push(took),
            Err(_) => failed += 1,
        }
    }
    let probing = started.elapsed();
    let during = procstat_fds(&pid);
    flooding.abort();
    let opened = opened.load(Ordering::Relaxed);
    stop(server).await;
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let _ = writeln!(
        out,
        "at --max-connections {}: {} idle opened, then {opened} more during {:.1} s of probes; server fds {} \
         (before: {}), {} during the probes",
        args.limit,
        flood_size,
        probing.as_secs_f64(),
        at_limit.fds,
        before.fds,
        during.map_or_else(|| "?".to_owned(), |n| n.to_string()),
    );
    let _ = writeln!(
        out,
        "/healthz at the limit, new connection each: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {failed} of {} failed",
        ms(quantile(&latencies, 0.5)),
        ms(quantile(&latencies, 0.99)),
        ms(quantile(&latencies, 1.0)),
        args.probes,
    );
    Ok(out)
}

/// Resident memory and open files of the server at one moment.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    rss: u64,
    fds: u64,
}

async fn start(args: &ConnectionArgs, extra: &[&str]) -> Result<(Child, String, String), String> {
    let extra: Vec<&str> = std::iter::once(ONE_ADDRESS).chain(extra.iter().copied()).collect();
    let (server, addr) = start_server_with(&args.server, args.gpus, Duration::from_secs(1), &extra).await?;
    let pid = server.id().ok_or("the server exited at once")?.to_string();
    Ok((server, addr, pid))
}

async fn stop(mut server: Child) {
    let _ = server.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), server.wait()).await;
}

/// The server's footprint once it has `fds` open files (if given) and its memory has stopped
/// growing for a second; fails after 30 s.
async fn settle(pid: &str, fds: Option<u64>) -> Result<Footprint, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last: Option<Footprint> = None;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = procstat::read(pid).ok_or("the server exited")?.rss;
        let now = Footprint { rss, fds: procstat_fds(pid).ok_or("the server exited")? };
        let enough = fds.is_none_or(|wanted| now.fds >= wanted);
        if enough && last.is_some_and(|l| l.rss == now.rss && l.fds == now.fds) {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return Err(format!("the server did not settle in 30 s: {now:?}, expected {fds:?} files"));
        }
        last = Some(now);
    }
}

fn procstat_fds(pid: &str) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

fn per_connection(out: &mut String, what: &str, count: u32, before: &Footprint, after: &Footprint) {
    let n = f64::from(count);
    let _ = writeln!(
        out,
        "{count} × {what}: RSS {:.1} → {:.1} MiB ({:.1} KiB each), fds {} → {} ({:.2} each)",
        before.rss as f64 / 1048576.0,
        after.rss as f64 / 1048576.0,
        (after.rss as f64 - before.rss as f64) / n / 1024.0,
        before.fds,
        after.fds,
        (after.fds as f64 - before.fds as f64) / n,
    );
}

/// One `GET /healthz` on a new connection: the time to a complete `200` answer.
async fn healthz(addr: &str) -> Result<Duration, String> {
    let started = Instant::now();
    let probe = async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.map_err(|e| format!("read: {e}"))?;
        if answer.starts_with(b"HTTP/1.1 200") { Ok(started.elapsed()) } else { Err("not 200".to_owned()) }
    };
    tokio::time::timeout(Duration::from_secs(5), probe).await.map_err(|_| "no answer in 5 s".to_owned())?
}
