//! `gpudash-load fanout`: a server, N viewers, a bounded run, one table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::clients::{self, ClientStats, Window};
use crate::procstat::{self, Reading, Usage};
use crate::quantile;

const MAX_CLIENTS: u32 = 2000;
const MAX_DURATION: Duration = Duration::from_secs(120);
const MAX_RAMP: Duration = Duration::from_secs(60);
/// A viewer that gets fewer than this share of the ticks published is starved.
const STARVED_BELOW: f64 = 0.9;

#[derive(clap::Args, Debug)]
pub struct FanoutArgs {
    /// Viewers (WebSockets) to open, at most 2000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLIENTS)))]
    clients: u32,
    /// How long to measure once every viewer is connected (at most 120s).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    duration: Duration,
    /// Viewers connect evenly over this time (at most 60s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    ramp: Duration,
    /// Pause between the last connection and the measuring window.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// How long the server runs before the first viewer connects (at most 120s). Its
    /// snapshot reaches full size (600 points per GPU) after 60 s at 100 ms.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    server_warmup: Duration,
    /// The gpudash binary to start (`cargo build --release -p gpudash` builds it).
    #[arg(long, default_value = "target/release/gpudash")]
    server: PathBuf,
    /// Simulated GPUs.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Sampling period of the server.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    interval: Duration,
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration such as 20s or 100ms: {e}"))
}

pub async fn run(args: FanoutArgs) -> Result<String, String> {
    if args.duration > MAX_DURATION
        || args.server_warmup > MAX_DURATION
        || args.ramp > MAX_RAMP
        || args.warmup > MAX_RAMP
    {
        return Err(format!(
            "runs are bounded: --duration and --server-warmup ≤ {MAX_DURATION:?}, --ramp and --warmup ≤ {MAX_RAMP:?}"
        ));
    }
    if args.interval < Duration::from_millis(10) {
        return Err("--interval must be at least 10ms".into());
    }
    // One descriptor per viewer here and one per socket in the server, which inherits the limit.
    let wanted = u64::from(args.clients) + 256;
    let limit = rlimit::increase_nofile_limit(wanted).map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
    if limit < wanted {
        return Err(format!("{} viewers need {wanted} open files; the limit is {limit} (try `ulimit -n {wanted}`)", {
            args.clients
        }));
    }
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let (mut server, addr) = start_server(&args.server, args.gpus, args.interval).await?;
    let pid = server.id().ok_or("the server exited at once")?.to_string();
    let url = format!("ws://{addr}/ws");
    tokio::time::sleep(args.server_warmup).await;
    let idle = procstat::read(&pid).ok_or("the server exited during its warm-up")?;

    let start = Instant::now();
    let from = start + args.ramp + args.warmup;
    let window = Window { from, until: from + args.duration };
    let expected = (args.duration.as_secs_f64() / args.interval.as_secs_f64()).ceil() as usize;
    let viewers: Vec<_> = (0..args.clients)
        .map(|i| {
            let at = start + args.ramp.mul_f64(f64::from(i) / f64::from(args.clients));
            let url = url.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                clients::run(url, window, expected).await
            })
        })
        .collect();

    // CPU and memory of the server and of this tool, once a second through the window.
    let (mut served, mut tool) = (Vec::<Reading>::new(), Vec::<Reading>::new());
    tokio::time::sleep_until(window.from).await;
    let mut every_second = tokio::time::interval_at(window.from, Duration::from_secs(1));
    for _ in 0..=args.duration.as_secs() {
        every_second.tick().await;
        served.extend(procstat::read(&pid));
        tool.extend(procstat::read("self"));
    }
    tokio::time::sleep_until(window.until).await;
    served.extend(procstat::read(&pid));
    tool.extend(procstat::read("self"));

    let mut stats = Vec::with_capacity(viewers.len());
    for viewer in viewers {
        match tokio::time::timeout_at(window.until + Duration::from_secs(15), viewer).await {
            Ok(Ok(s)) => stats.push(s),
            Ok(Err(e)) => stats.push(ClientStats { error: Some(format!("viewer task: {e}")), ..Default::default() }),
            Err(_) => stats.push(ClientStats { error: Some("viewer did not stop".into()), ..Default::default() }),
        }
    }
    let alive = matches!(server.try_wait(), Ok(None));
    let _ = server.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), server.wait()).await;
    if !alive {
        return Err("the server exited during the run".into());
    }
    Ok(report(&args, &stats, &idle, &Usage::of(&served), &Usage::of(&tool), load_before.trim()))
}

/// Starts the server on a free loopback port and reads the address it logs.
pub async fn start_server(server: &Path, gpus: u32, interval: Duration) -> Result<(Child, String), String> {
    start_server_with(server, gpus, interval, &[ONE_ADDRESS]).await
}

/// Every viewer of these tools comes from 127.0.0.1: they measure capacity, not the per-client share.
pub const ONE_ADDRESS: &str = "--max-connections-per-client=1000000";

/// [`start_server`] with `extra` flags.
pub async fn start_server_with(
    server: &Path,
    gpus: u32,
    interval: Duration,
    extra: &[&str],
) -> Result<(Child, String), String> {
    start_server_env(server, gpus, interval, extra, &[]).await
}

/// [`start_server_with`] with `env` variables set for the server.
pub async fn start_server_env(
    server: &Path,
    gpus: u32,
    interval: Duration,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<(Child, String), String> {
    let mut child = Command::new(server)
        .args(["--simulate", &gpus.to_string(), "--listen", "127.0.0.1:0", "--no-history"])
        .arg("--interval")
        .arg(format!("{}ms", interval.as_millis()))
        .args(extra)
        .envs(env.iter().copied())
        .env("GPUDASH_LOG", "warn,gpudash=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            format!("cannot start '{}': {e} (build it with `cargo build --release -p gpudash`)", server.display())
        })?;
    let stderr = child.stderr.take().ok_or("no stderr from the server")?;
    let mut lines = BufReader::new(stderr).lines();
    let find_addr = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.split("serving on http://").nth(1) {
                return Some(rest.split_whitespace().next().unwrap_or_default().to_owned());
            }
        }
        None
    };
    let addr = tokio::time::timeout(Duration::from_secs(30), find_addr)
        .await
        .map_err(|_| "the server did not say where it serves within 30 s")?
        .ok_or("the server exited before serving")?;
    if !addr.starts_with("127.0.0.1:") {
        return Err(format!("refusing to load '{addr}': only 127.0.0.1 is loaded"));
    }
    // Keep reading its log so the pipe never fills and blocks it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, addr))
}

fn report(
    args: &FanoutArgs,
    stats: &[ClientStats],
    idle: &Reading,
    server: &Usage,
    tool: &Usage,
    load: &str,
) -> String {
    let connect_failures = stats.iter().filter(|s| s.error.as_deref().is_some_and(|e| e.contains("connect"))).count();
    let dropped = stats.iter().filter(|s| s.error.is_some()).count() - connect_failures;
    let first = stats.iter().filter_map(|s| s.first_seq).min().unwrap_or(0);
    let last = stats.iter().filter_map(|s| s.last_seq).max().unwrap_or(0);
    let published = (last + 1).saturating_sub(first).max(1);
    let mut shares: Vec<f64> = stats.iter().map(|s| f64::from(s.ticks) / published as f64).collect();
    shares.sort_by(f64::total_cmp);
    let starved = shares.iter().filter(|&&s| s < STARVED_BELOW).count();
    let mut delays: Vec<u32> = stats.iter().flat_map(|s| s.delays_us.iter().copied()).collect();
    delays.sort_unstable();
    let ms = |us: u32| f64::from(us) / 1000.0;
    let secs = args.duration.as_secs_f64();
    let ticks: u64 = stats.iter().map(|s| u64::from(s.ticks)).sum();
    let messages = ticks + stats.iter().map(|s| u64::from(s.other_messages)).sum::<u64>();
    let tick_bytes: u64 = stats.iter().map(|s| s.tick_bytes).sum();
    let all_bytes: u64 = stats.iter().map(|s| s.all_bytes).sum();
    let resyncs: u32 = stats.iter().map(|s| s.resyncs).sum();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let cpu_target = if args.clients <= 100 { "≤ 10 %" } else { "≤ 50 % (at 1,000)" };

    let mut out = String::new();
    let _ = writeln!(
        out,
        "gpudash-load fanout: {} viewers, {} simulated GPUs every {:?}; server up {:?} before the first viewer, \
         viewers connect over {:?}, measured {:?} after a {:?} pause",
        args.clients, args.gpus, args.interval, args.server_warmup, args.ramp, args.duration, args.warmup
    );
    let _ = writeln!(out, "machine: {} CPUs, {}; load average before: {load}", cpus(), cpu_model());
    let _ = writeln!(out, "\n| figure | value | target |\n| --- | --- | --- |");
    let mut row = |figure: &str, value: String, target: &str| {
        let _ = writeln!(out, "| {figure} | {value} | {target} |");
    };
    row("viewers connected", format!("{} of {}", stats.len() - connect_failures, args.clients), "all");
    row("viewers dropped during the run", dropped.to_string(), "0");
    row("ticks published in the window", published.to_string(), "");
    row(
        "ticks received per viewer: min / median",
        format!("{:.1} % / {:.1} %", 100.0 * quantile(&shares, 0.0), 100.0 * quantile(&shares, 0.5)),
        "",
    );
    row("starved viewers (< 90 % of ticks)", starved.to_string(), "0");
    row("resync snapshots (viewer fell behind)", resyncs.to_string(), "0");
    row(
        "tick delay p50 / p99 / p99.9 / max",
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1} ms",
            ms(quantile(&delays, 0.5)),
            ms(quantile(&delays, 0.99)),
            ms(quantile(&delays, 0.999)),
            ms(delays.last().copied().unwrap_or(0))
        ),
        "p99 ≤ 50 ms",
    );
    row("messages per second (all viewers)", format!("{:.0}", messages as f64 / secs), "");
    row("bytes per second (all viewers)", format!("{:.2} MiB/s", mib(all_bytes) / secs), "");
    row("bytes per tick message", format!("{:.0}", tick_bytes as f64 / ticks.max(1) as f64), "");
    let mut snapshots: Vec<usize> = stats.iter().filter_map(|s| s.snapshot_bytes).collect();
    snapshots.sort_unstable();
    row("bytes of the snapshot on connect (median)", quantile(&snapshots, 0.5).to_string(), "");
    row(
        "server CPU, mean / busiest second",
        format!("{:.1} % / {:.1} % of one core", server.cpu_mean_pct, server.cpu_peak_pct),
        cpu_target,
    );
    row(
        "server RSS, before the viewers / end / peak",
        format!("{:.1} / {:.1} / {:.1} MiB", mib(idle.rss), mib(server.rss_last), mib(server.rss_peak)),
        "≤ 100 MiB",
    );
    row(
        "this tool's CPU, mean / busiest second",
        format!("{:.1} % / {:.1} % of one core", tool.cpu_mean_pct, tool.cpu_peak_pct),
        "",
    );
    if let Some(e) = stats.iter().find_map(|s| s.error.as_deref()) {
        let _ = writeln!(out, "\nfirst viewer error: {e}");
    }
    out
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
