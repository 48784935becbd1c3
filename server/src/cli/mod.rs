//! Subcommands beside serving: `gpudash bench`, `gpudash token` (and `token add`), `gpudash alerts`, `gpudash doctor`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod alerts;
mod args;
pub mod bench;
pub mod doctor;
mod oidc;
pub mod token;

use std::time::Duration;

use clap::{Args, Subcommand};

pub use args::Cli;

use lab::LabConfig;
use team::flags::ConfigError;

/// What `gpudash` does instead of serving.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Run GPU lab experiments headless and print a table (for SSH sessions, like nvbandwidth).
    Bench(bench::BenchArgs),
    /// Alert rules for other tools: `gpudash alerts export-prometheus`.
    Alerts {
        #[command(subcommand)]
        command: alerts::AlertsCommand,
    },
    /// Check what the dashboard needs (driver, GPM, processes, sockets, disk, port, tokens, TLS), in
    /// words; takes the dashboard's flags after it. Exits 1 when something would stop it.
    Doctor(doctor::DoctorArgs),
    /// Print a new random token and the auth-file entry (its SHA-256) that accepts it; `token add
    /// NAME ROLE --auth-file FILE` appends that entry to the auth file itself.
    Token(token::TokenArgs),
}

/// Reads the command line; `gpudash doctor` takes the dashboard's flags too ([`doctor::command`]).
pub fn parse() -> Cli {
    doctor::parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
}

/// The GPU lab's shared-server manners.
#[derive(Args, Debug, Clone)]
pub struct LabArgs {
    /// Hard time limit of one lab run (e.g. "2m").
    #[arg(long, env = "GPUDASH_LAB_TIME_LIMIT", default_value = "2m", value_parser = parse_duration)]
    pub lab_time_limit: Duration,

    /// The lab releases its CUDA context and memory pool after this long without experiments.
    #[arg(long, env = "GPUDASH_LAB_IDLE_RELEASE", default_value = "60s", value_parser = parse_duration)]
    pub lab_idle_release: Duration,

    /// Device memory every lab run leaves free for other processes, in MiB.
    #[arg(long, env = "GPUDASH_LAB_MARGIN_MIB", default_value_t = 1024)]
    pub lab_margin_mib: u64,

    /// Finished lab runs kept in the history database (10 to 1000000); older ones are deleted.
    #[arg(long, env = "GPUDASH_LAB_RUNS_KEPT", value_name = "N", default_value_t = 10_000, value_parser = parse_runs_kept)]
    pub lab_runs_kept: usize,

    /// Host memory (MemAvailable) every lab run leaves for the rest of the host, in MiB.
    #[arg(long, env = "GPUDASH_LAB_HOST_MARGIN_MIB", default_value_t = 1024)]
    pub lab_host_margin_mib: u64,

    /// Most lab runs one user may have queued or running at once (1 to 1000); admins included.
    #[arg(long, env = "GPUDASH_LAB_QUEUE_PER_USER", value_name = "N", default_value_t = 8, value_parser = parse_queue_per_user)]
    pub lab_queue_per_user: usize,

    /// Who the Lab's worker process (where CUDA runs) switches to when gpudash runs as root; without root
    /// it keeps gpudash's user. The user must be able to open the GPU: /dev/nvidia* are usually mode 0666
    /// (a host that restricts them needs this user in their group). An unknown user stops the start.
    #[arg(long, env = "GPUDASH_LAB_USER", value_name = "NAME", default_value = "nobody", value_parser = parse_lab_user)]
    pub lab_user: String,

    /// NCCL for the lab's collectives experiment: libnccl.so.2 or the folder holding it [default: the loader's
    /// search for libnccl.so.2, then PyTorch's site-packages/nvidia/nccl/lib].
    #[arg(long, value_name = "PATH", env = "GPUDASH_NCCL_LIB")]
    pub nccl_lib: Option<std::path::PathBuf>,
}

impl From<&LabArgs> for LabConfig {
    fn from(args: &LabArgs) -> Self {
        // NCCL is loaded once per process, at the first collectives run: name the file before then.
        if let Some(path) = &args.nccl_lib {
            lab::cuda::nccl::choose_library(path.clone());
        }
        Self {
            time_limit: args.lab_time_limit,
            idle_release: args.lab_idle_release,
            memory_margin: args.lab_margin_mib.saturating_mul(1 << 20),
            runs_kept: args.lab_runs_kept,
            host_margin: args.lab_host_margin_mib.saturating_mul(1 << 20),
            queue_per_user: args.lab_queue_per_user,
        }
    }
}

fn parse_runs_kept(value: &str) -> Result<usize, ConfigError> {
    team::flags::parse_count(value, "runs to keep", lab::RUNS_KEPT)
}

fn parse_queue_per_user(value: &str) -> Result<usize, ConfigError> {
    team::flags::parse_count(value, "runs per user", lab::QUEUE_PER_USER)
}

/// A user name as `useradd` accepts one: 1 to 32 letters, digits, '_', '-' or '.', not starting with '-'.
fn parse_lab_user(value: &str) -> Result<String, ConfigError> {
    let name = value.trim();
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > 32 || name.starts_with('-') || !name.chars().all(allowed) {
        return Err(ConfigError::NotAUserName { value: value.to_owned() });
    }
    Ok(name.to_owned())
}

fn parse_duration(value: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(value.trim()).map_err(|reason| ConfigError::NotADuration {
        value: value.to_owned(),
        reason,
        examples: "30s, 2m or 1h",
    })?;
    if d < Duration::from_secs(1) {
        return Err(ConfigError::TooShort { value: value.to_owned(), least: "1s" });
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_flag_refusals_keep_their_messages() {
        assert_eq!(parse_duration("10ms").unwrap_err().to_string(), "'10ms' is too short; use at least 1s");
        assert_eq!(
            parse_queue_per_user("0").unwrap_err().to_string(),
            "'0' is not a number of runs per user; use a whole number from 1 to 1000"
        );
        assert!(matches!(parse_runs_kept("x"), Err(ConfigError::NotACount { what: "runs to keep", .. })));
        assert_eq!(parse_lab_user(" gpu-lab_1.x "), Ok("gpu-lab_1.x".to_owned()));
        for bad in ["", "-x", "a b", "root;id", "ü", &"x".repeat(33)] {
            let refused = parse_lab_user(bad).unwrap_err().to_string();
            assert!(refused.contains("is not a user name") && refused.contains("not starting with '-'"), "{refused}");
        }
    }
}
