//! `gpudash-load floods`: the red team's floods against a gpudash of its own process (the release
//! build), with the admin's `/healthz` and login probed from 127.0.0.1 every 100 ms; prints each
//! flood's answer times beside the goal of a second. The attacks are `attack.rs`, the same the
//! integration test runs against a server in its own process.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::attack::{self, Counts, Probes};
use crate::fanout::start_server_env;

const ADMIN: &str = "flood-admin-token-0123456789";
/// The goal: every probe answered within this long.
const GOAL: Duration = Duration::from_secs(1);

#[derive(clap::Args, Debug)]
pub struct FloodArgs {
    /// The gpudash binary to start (`cargo build --release -p gpudash` builds it).
    #[arg(long, default_value = "target/release/gpudash")]
    server: PathBuf,
    /// How long each flood lasts (longer than the 5 s body deadline, so slow bodies are cut and reconnect).
    #[arg(long, default_value = "8s", value_parser = humantime::parse_duration)]
    length: Duration,
}

/// One flood: its name, the server's --max-connections (None: the default), and what attacks.
struct Flood {
    name: &'static str,
    max: Option<u32>,
    sockets: Vec<(Ipv4Addr, bool)>,
}

fn floods() -> Vec<Flood> {
    let from = |a: u8| Ipv4Addr::new(127, 0, 0, 2 + a);
    vec![
        Flood {
            name: "1,000 slow bodies from 127.0.0.2, default limits",
            max: None,
            sockets: (0..1000).map(|_| (from(0), false)).collect(),
        },
        Flood {
            name: "400 slow bodies from 127.0.0.2-5, --max-connections 100",
            max: Some(100),
            sockets: (0..400).map(|i| (from((i % 4) as u8), false)).collect(),
        },
        Flood {
            name: "200 anonymous WebSockets from 127.0.0.2-21, --max-connections 100",
            max: Some(100),
            sockets: (0..200).map(|i| (from((i % 20) as u8), true)).collect(),
        },
    ]
}

pub async fn run(args: FloodArgs) -> Result<String, String> {
    rlimit::increase_nofile_limit(8192).map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let auth = dir.path().join("auth.toml");
    std::fs::write(&auth, "viewers = \"open\"\n").map_err(|e| format!("writing {}: {e}", auth.display()))?;
    let auth = auth.display().to_string();
    let tokens = format!("ada:admin:{ADMIN}");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "floods against {} ({:?} each), probes every 100 ms from 127.0.0.1 (goal: every answer within {GOAL:?})",
        args.server.display(),
        args.length
    );
    let _ =
        writeln!(out, "flood | opened | closed by gpudash | /healthz p50/p99/max | login p50/p99/max | failed | goal");
    for flood in floods() {
        let max = flood.max.map(|m| m.to_string());
        let mut extra = vec!["--auth-file", auth.as_str()];
        if let Some(max) = &max {
            extra.extend(["--max-connections", max.as_str()]);
        }
        let env = [("GPUDASH_TOKENS", tokens.as_str())];
        let (mut server, addr) = start_server_env(&args.server, 2, Duration::from_secs(1), &extra, &env).await?;
        let to: SocketAddr = addr.parse().map_err(|e| format!("the server's address '{addr}': {e}"))?;
        let (stop, counts) = (Arc::new(AtomicBool::new(false)), Arc::new(Counts::default()));
        let attackers = flood
            .sockets
            .iter()
            .map(|&(from, websocket)| {
                let (stop, counts) = (stop.clone(), counts.clone());
                if websocket {
                    tokio::spawn(attack::anonymous_socket(from, to, stop, counts))
                } else {
                    tokio::spawn(attack::trickle(from, to, stop, counts))
                }
            })
            .collect();
        let base = format!("http://{addr}");
        let probes = attack::while_probing(&base, ADMIN, GOAL * 5, args.length, attackers, stop).await;
        let _ = server.start_kill();
        let _ = server.wait().await;
        let slowest = probes.healthz.iter().chain(&probes.login).max().copied().unwrap_or_default();
        let met = probes.failures.is_empty() && slowest <= GOAL;
        let _ = writeln!(
            out,
            "{} | {} | {} | {} | {} | {} of {} | {}",
            flood.name,
            counts.opened.load(Ordering::Relaxed),
            counts.closed.load(Ordering::Relaxed),
            Probes::summary(&probes.healthz),
            Probes::summary(&probes.login),
            probes.failures.len(),
            probes.healthz.len() + probes.login.len() + probes.failures.len(),
            if met { "MET" } else { "NOT MET" },
        );
        for failure in probes.failures.iter().take(5) {
            let _ = writeln!(out, "  {failure}");
        }
    }
    Ok(out)
}
