//! `gpudash alerts export-prometheus`: the alert rules as a Prometheus alerting-rules file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

use team::alerts::AlertsConfig;
use team::alerts::deliver::prometheus::rules_yaml;

/// What `gpudash alerts` does.
#[derive(Subcommand, Debug, Clone)]
pub enum AlertsCommand {
    /// Write the alert rules (the alerts file's, or the built-in ones) as Prometheus alerting
    /// rules over the series /metrics exposes, for Alertmanager.
    ExportPrometheus(ExportArgs),
}

/// Flags of `gpudash alerts export-prometheus`.
#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// The alerts file whose thresholds to export [default: the built-in rules].
    #[arg(long, env = "GPUDASH_ALERTS_FILE", value_name = "FILE")]
    pub alerts_file: Option<PathBuf>,

    /// Write the rules here (replaced whole, never half-written) instead of to standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Runs `gpudash alerts …`; non-zero when the alerts file is refused or the output cannot be written.
pub fn main(command: &AlertsCommand) -> ExitCode {
    let AlertsCommand::ExportPrometheus(args) = command;
    match export_prometheus(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("gpudash alerts export-prometheus: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the alerts file (if any) and writes the rules where `args` says.
pub fn export_prometheus(args: &ExportArgs) -> Result<(), String> {
    let (config, source) = match &args.alerts_file {
        Some(path) => (AlertsConfig::load(path).map_err(|e| e.to_string())?, path.display().to_string()),
        None => (AlertsConfig::default(), "the built-in rules".to_owned()),
    };
    let yaml = rules_yaml(&config, &source);
    match &args.output {
        Some(path) => write_whole(path, &yaml),
        None => {
            print!("{yaml}");
            Ok(())
        }
    }
}

/// Writes beside `path` and renames, so a Prometheus reloading meanwhile never reads half a file.
fn write_whole(path: &Path, text: &str) -> Result<(), String> {
    let name = path.file_name().ok_or_else(|| format!("--output '{}' is not a file name", path.display()))?;
    let mut temporary = name.to_os_string();
    temporary.push(".tmp");
    let temporary = path.with_file_name(temporary);
    let refuse = |e: std::io::Error| format!("cannot write '{}': {e}", path.display());
    std::fs::write(&temporary, text).map_err(refuse)?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        refuse(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_rules_file_and_refuses_a_bad_alerts_file() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("gpudash.rules.yml");
        export_prometheus(&ExportArgs { alerts_file: None, output: Some(output.clone()) }).unwrap();
        let text = std::fs::read_to_string(&output).unwrap();
        assert!(text.contains("from the built-in rules.") && text.contains("- alert: \"GpudashGpuFree\""));
        let bad = dir.path().join("alerts.toml");
        std::fs::write(&bad, "[rules.temperature]\ncelsius = 500\n").unwrap();
        let err = export_prometheus(&ExportArgs { alerts_file: Some(bad), output: Some(output) }).unwrap_err();
        assert!(err.contains("celsius = 500 is out of range; use 30 to 120"), "{err}");
        let err =
            export_prometheus(&ExportArgs { alerts_file: None, output: Some(dir.path().join("no/such/dir.yml")) })
                .unwrap_err();
        assert!(err.contains("cannot write"), "{err}");
    }
}
