//! `gpudash doctor`: checks, in words, what a team's dashboard needs (the driver, GPM, the host's
//! processes, the workload sources, disk, port, tokens, TLS, webhooks) with the same flags the
//! dashboard takes; exits 1 when something would stop it or leave it blind.

mod checks;
mod host;
mod mail;
mod sign_in;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser as _};
use serde::Serialize;

use crate::cli::Cli;
use crate::config::Config;

/// Flags of `gpudash doctor`; the dashboard's own flags come with them (see [`command`]).
#[derive(Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Print `{"ok": …, "checks": [{"name", "status", "summary", "detail", "fix"}, …]}` instead of text.
    #[arg(long)]
    pub json: bool,

    /// Also send each webhook (the alerts file's and --alert-webhook's) a GET, to see that it
    /// answers; no alert is sent.
    #[arg(long)]
    pub check_webhooks: bool,

    /// The dashboard's flags as given after `doctor`, read by [`parse_from`].
    #[arg(skip)]
    pub server: Option<Box<Cli>>,
}

/// How one check came out.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but something is missing or worse than it could be.
    Warn,
    /// A blocker: the dashboard would not start, or would show nothing useful.
    Fail,
    /// Not there and not needed (no Kubernetes, no TLS asked for).
    Skip,
}

impl Status {
    fn mark(self) -> char {
        match self {
            Status::Ok => '✔',
            Status::Warn => '!',
            Status::Fail => '✖',
            Status::Skip => '–',
        }
    }
}

/// One thing checked, in words.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Check {
    /// A stable name: `driver`, `gpm`, `processes`, `listen`, …
    pub name: &'static str,
    pub status: Status,
    /// One sentence: what was found.
    pub summary: String,
    /// More lines where they help (each GPU, each webhook).
    pub detail: Option<String>,
    /// What to do about it, when it is not ok.
    pub fix: Option<String>,
}

impl Check {
    fn new(name: &'static str, status: Status, summary: impl Into<String>) -> Self {
        Self { name, status, summary: summary.into(), detail: None, fix: None }
    }

    pub fn ok(name: &'static str, summary: impl Into<String>) -> Self {
        Self::new(name, Status::Ok, summary)
    }

    pub fn skip(name: &'static str, summary: impl Into<String>) -> Self {
        Self::new(name, Status::Skip, summary)
    }

    pub fn warn(name: &'static str, summary: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { fix: Some(fix.into()), ..Self::new(name, Status::Warn, summary) }
    }

    pub fn fail(name: &'static str, summary: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { fix: Some(fix.into()), ..Self::new(name, Status::Fail, summary) }
    }

    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        self.detail = (!detail.is_empty()).then_some(detail);
        self
    }
}

/// What `--json` prints.
#[derive(Serialize, Debug)]
struct Report<'a> {
    ok: bool,
    checks: &'a [Check],
}

/// The command line as `gpudash` reads it, where `gpudash doctor` also takes every flag of the
/// dashboard. They are copied from [`Cli`]'s own definition at run time (not written twice), so
/// their names, environment variables, defaults and checks stay the dashboard's.
pub fn command() -> clap::Command {
    let top = Cli::command();
    let server_flags: Vec<clap::Arg> = top
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .map(|a| a.clone().help_heading("Dashboard flags (those of `gpudash` itself)"))
        .collect();
    // And the groups those flags name (`sign_in`: an auth proxy or an OIDC provider).
    let groups: Vec<clap::ArgGroup> = top.get_groups().filter(|g| g.get_id() != "Cli").cloned().collect();
    top.mut_subcommand("doctor", |doctor| doctor.args(server_flags).groups(groups))
}

/// Parses `args` (the program's name first) with [`command`].
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut command = command();
    let matches = command.try_get_matches_from_mut(args)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    if let (Some(crate::cli::Command::Doctor(doctor)), Some(("doctor", flags))) =
        (&mut cli.command, matches.subcommand())
    {
        if let Some(given) = flags_given_before(&command, &matches) {
            return Err(command.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("give --{given} after `doctor` (gpudash doctor --{given} …): the doctor reads the dashboard's flags there"),
            ));
        }
        doctor.server = Some(Box::new(Cli::from_arg_matches(flags).map_err(|e| e.format(&mut command))?));
    }
    Ok(cli)
}

/// A dashboard flag written before `doctor` (which would be silently ignored), by its long name.
fn flags_given_before(command: &clap::Command, matches: &ArgMatches) -> Option<String> {
    command
        .get_arguments()
        .filter(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .find_map(|a| a.get_long().map(str::to_owned))
}

/// Runs every check, prints them, and exits 1 when one is a blocker.
pub fn main(args: &DoctorArgs) -> ExitCode {
    let cli = match &args.server {
        Some(cli) => (**cli).clone(),
        // Built without `parse_from` (a test): the dashboard's defaults and environment.
        None => match Cli::try_parse_from(["gpudash"]) {
            Ok(cli) => cli,
            Err(e) => e.exit(),
        },
    };
    let config = Config::from(cli);
    let checks = match checks::all(&config, args.check_webhooks) {
        Ok(checks) => checks,
        Err(e) => {
            eprintln!("gpudash doctor: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        let report = Report { ok: blockers(&checks) == 0, checks: &checks };
        match serde_json::to_string_pretty(&report) {
            Ok(text) => print(&text),
            Err(e) => {
                eprintln!("gpudash doctor: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print(text(&checks).trim_end());
    }
    ExitCode::from(exit_status(&checks))
}

#[expect(clippy::print_stdout, reason = "the doctor's report is its output")]
fn print(text: &str) {
    println!("{text}");
}

fn blockers(checks: &[Check]) -> usize {
    checks.iter().filter(|c| c.status == Status::Fail).count()
}

/// 1 when a check failed, else 0: warnings and skips never fail the doctor.
fn exit_status(checks: &[Check]) -> u8 {
    u8::from(blockers(checks) > 0)
}

/// One line per check (mark, name, summary); under a check that is not ok or skipped, its detail
/// and fix; then the count of blockers and warnings.
fn text(checks: &[Check]) -> String {
    const INDENT: &str = "                     ";
    let mut out = String::new();
    for check in checks {
        out.push_str(&format!("{} {:<18} {}\n", check.status.mark(), check.name, check.summary));
        if matches!(check.status, Status::Warn | Status::Fail) {
            for line in check.detail.iter().flat_map(|d| d.lines()) {
                out.push_str(&format!("{INDENT}{line}\n"));
            }
            if let Some(fix) = &check.fix {
                out.push_str(&format!("{INDENT}fix: {fix}\n"));
            }
        }
    }
    let warnings = checks.iter().filter(|c| c.status == Status::Warn).count();
    out.push_str(&format!("{}, {}\n", count(blockers(checks), "blocker"), count(warnings, "warning")));
    out
}

/// "1 GPU", "2 GPUs".
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doctor(args: &[&str]) -> Result<(Cli, DoctorArgs), clap::Error> {
        let cli = parse_from(["gpudash", "doctor"].iter().chain(args))?;
        let Some(crate::cli::Command::Doctor(doctor)) = cli.command.clone() else { panic!("not the doctor") };
        Ok((cli, doctor))
    }

    #[test]
    fn doctor_takes_the_dashboards_flags_after_it() {
        let (_, args) = doctor(&["--simulate", "2", "--listen", "0.0.0.0:7071", "--json", "--no-history"]).unwrap();
        let server = args.server.expect("the dashboard's flags are read");
        assert!(args.json && !args.check_webhooks);
        assert_eq!((server.simulate, server.listen.port(), server.no_history), (Some(2), 7071, true));
        let config = Config::from(*server);
        assert_eq!(config.data_dir, None);
        // The defaults are the dashboard's.
        let (_, args) = doctor(&[]).unwrap();
        assert_eq!(args.server.unwrap().listen, "127.0.0.1:7070".parse().unwrap());
    }

    #[test]
    fn doctor_refuses_what_the_dashboard_refuses_and_flags_before_it() {
        let err = doctor(&["--listen", "localhost"]).unwrap_err().to_string();
        assert!(err.contains("use IP:PORT"), "{err}");
        let err = doctor(&["--tls-cert", "c.pem"]).unwrap_err().to_string();
        assert!(err.contains("--tls-key"), "{err}");
        let err = parse_from(["gpudash", "--listen", "0.0.0.0:1", "doctor"]).unwrap_err().to_string();
        assert!(err.contains("give --listen after `doctor`"), "{err}");
        // The other subcommands are as they were.
        assert!(parse_from(["gpudash", "bench", "--simulate", "memory"]).is_ok());
        assert!(parse_from(["gpudash", "token", "--listen", "0.0.0.0:1"]).is_err());
    }

    fn sample() -> Vec<Check> {
        vec![
            Check::ok("driver", "2 simulated GPUs"),
            Check::warn("processes", "/proc hides other users' processes (hidepid=2)", "drop hidepid")
                .with_detail("line one\nline two"),
            Check::skip("tls", "plain HTTP on loopback"),
        ]
    }

    #[test]
    fn doctor_exits_1_only_for_a_blocker() {
        let mut checks = sample();
        assert_eq!(exit_status(&checks), 0, "warnings and skips do not fail");
        checks.push(Check::fail("listen", "port 7070 is in use by another process", "--listen"));
        assert_eq!(exit_status(&checks), 1);
        assert_eq!(exit_status(&[]), 0);
    }

    #[test]
    fn doctor_text_marks_each_check_and_counts_at_the_end() {
        let mut checks = sample();
        checks.push(Check::fail("listen", "port 7070 is in use by another process", "choose another --listen"));
        let out = text(&checks);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("✔ driver ") && lines[0].ends_with("2 simulated GPUs"), "{out}");
        assert!(lines[1].starts_with("! processes "), "{out}");
        assert_eq!(lines[2].trim(), "line one");
        assert_eq!(lines[4].trim(), "fix: drop hidepid");
        assert!(lines[5].starts_with("– tls "), "{out}");
        assert!(lines[6].starts_with("✖ listen ") && lines[7].trim() == "fix: choose another --listen", "{out}");
        assert_eq!(lines.last(), Some(&"1 blocker, 1 warning"));
        assert_eq!(text(&[]).trim(), "0 blockers, 0 warnings");
    }

    #[test]
    fn doctor_json_has_a_stable_shape() {
        let checks = sample();
        let json = serde_json::to_value(Report { ok: blockers(&checks) == 0, checks: &checks }).unwrap();
        assert_eq!(json["ok"], true);
        let first = &json["checks"][0];
        let mut keys: Vec<&str> = first.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["detail", "fix", "name", "status", "summary"]);
        assert_eq!((first["status"].as_str(), first["fix"].is_null()), (Some("ok"), true));
        assert_eq!(json["checks"][1]["status"], "warn");
        assert_eq!(json["checks"][1]["detail"], "line one\nline two");
        assert_eq!(json["checks"][2]["status"], "skip");
        assert_eq!(serde_json::to_value(Status::Fail).unwrap(), "fail");
    }
}
