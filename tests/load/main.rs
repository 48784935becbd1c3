//! `gpudash-load`: how the live fan-out holds up with many viewers, and what
//! each wire encoding of a tick would weigh.
//!
//! `gpudash-load connections` measures what an idle connection and a WebSocket
//! cost the server, and `/healthz` at the connection limit; `gpudash-load floods`
//! how fast the admin is answered during the red team's floods.
//!
//! `gpudash-load fanout` starts `gpudash --simulate` on loopback, opens N
//! WebSockets, and reports tick delay, throughput and the server's CPU and
//! memory; `gpudash-load encodings` compares tick encodings;
//! `gpudash-load bridge-flood` floods the PyTorch bridge. Commands and
//! results: docs/BENCHMARKS.md, "Live fan-out" and "Bridge flood".

mod attack;
mod bridge_flood;
mod clients;
mod connections;
mod encodings;
mod fanout;
mod floods;
mod procstat;
mod soak;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "gpudash-load", about = "Loads gpudash's live fan-out on loopback and reports the figures")]
enum Command {
    /// N WebSocket viewers against `gpudash --simulate G --interval I`, for a bounded time.
    Fanout(fanout::FanoutArgs),
    /// Bytes and CPU per tick: JSON full vs JSON delta vs MessagePack vs postcard.
    Encodings(encodings::EncodingArgs),
    /// Viewers connecting and leaving for a long time; the server's memory over time.
    Soak(soak::SoakArgs),
    /// RSS and open files per idle connection and per WebSocket; `/healthz` at --max-connections.
    Connections(connections::ConnectionArgs),
    /// Many ~60 KB bridge reports with new PIDs while viewers read the list; peak memory and list size.
    BridgeFlood(bridge_flood::BridgeFloodArgs),
    /// Slow bodies and anonymous WebSockets from other loopback addresses; the admin's answer times.
    Floods(floods::FloodArgs),
}

fn main() -> ExitCode {
    let outcome = match Command::parse() {
        Command::Fanout(args) => block_on(fanout::run(args)),
        Command::Encodings(args) => encodings::run(&args),
        Command::Soak(args) => block_on(soak::run(args)),
        Command::Connections(args) => block_on(connections::run(args)),
        Command::BridgeFlood(args) => block_on(bridge_flood::run(args)),
        Command::Floods(args) => block_on(floods::run(args)),
    };
    match outcome.and_then(|report| writeln!(std::io::stdout().lock(), "{report}").map_err(anyhow_like)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let _ = writeln!(std::io::stderr().lock(), "gpudash-load: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one async tool on a multi-threaded runtime.
fn block_on(tool: impl Future<Output = Result<String, String>>) -> Result<String, String> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(anyhow_like)?.block_on(tool)
}

/// Errors of this tool are messages for the person running it.
fn anyhow_like(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A value at quantile `q` (0..=1) of sorted `values`.
fn quantile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
