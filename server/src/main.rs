//! The `gpudash` binary: parse flags, set up logging, serve until Ctrl-C or SIGTERM.

use std::process::ExitCode;

use gpudash::config::Config;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // The lab's CUDA library check runs in a child of this binary (lab/cuda/probe.rs): that child ends here.
    if let Some(code) = lab::cuda::answer_probe() {
        return code;
    }
    // The Lab's runs go to a worker process of this binary (lab/isolated/): that worker serves here.
    if lab::isolated::is_worker() {
        init_logging("warn");
        return lab::isolated::serve();
    }
    let cli = gpudash::cli::parse();
    // `gpudash bench` prints a table: only warnings go to the log. The doctor words every problem itself.
    let default_level = match &cli.command {
        None => "info",
        Some(gpudash::cli::Command::Doctor(_)) => "error",
        Some(_) => "warn",
    };
    init_logging(default_level);
    match &cli.command {
        Some(gpudash::cli::Command::Bench(args)) => return gpudash::cli::bench::main(args),
        Some(gpudash::cli::Command::Alerts { command }) => return gpudash::cli::alerts::main(command),
        Some(gpudash::cli::Command::Doctor(args)) => return gpudash::cli::doctor::main(args),
        Some(gpudash::cli::Command::Token(args)) => return gpudash::cli::token::main(args),
        None => {}
    }
    let mut config = Config::from(cli);
    // The Lab's runs go to worker processes of this very binary.
    config.lab_worker = std::env::current_exe().ok();
    // A dashboard's requests are short and its heavy work runs on threads of its own (sampler, SQLite,
    // lab): a few runtime workers serve a team, and each one idle still holds a stack and a malloc arena.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, RUNTIME_WORKERS));
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(gpudash::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr at `GPUDASH_LOG`'s level, or `default_level`.
fn init_logging(default_level: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("GPUDASH_LOG").unwrap_or_else(|_| EnvFilter::new(default_level)))
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// The most async runtime workers, whatever the core count (tokio's default is one per core: 16 on
/// the H200 machine).
const RUNTIME_WORKERS: usize = 4;

/// Completes on Ctrl-C or SIGTERM (what systemd and `kill` send).
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
