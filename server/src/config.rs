//! Command-line flags (with environment fallbacks), validated into a typed [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Fastest sampling period accepted: below this, NVML's own update rate makes samples repeat.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Slowest sampling period accepted.
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// Most simulated GPUs: a big node has 8, 64 leaves room for load tests.
pub const MAX_SIMULATED: u32 = 64;

/// A live dashboard for NVIDIA GPUs: open the printed address in a browser.
#[derive(Parser, Debug, Clone)]
#[command(name = "gpudash", version, about, long_about = None)]
pub struct Cli {
    /// Address and port to serve on (port 0 picks a free one). Loopback by default.
    #[arg(long, env = "GPUDASH_LISTEN", default_value = "127.0.0.1:7070", value_parser = parse_listen)]
    pub listen: SocketAddr,

    /// Sampling period, from 100ms to 60s (e.g. "200ms", "1s", "2.5s").
    #[arg(long, env = "GPUDASH_INTERVAL", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,

    /// Show N simulated GPUs (1 to 64) instead of real ones; everything they report is labelled simulated.
    #[arg(long, env = "GPUDASH_SIMULATE", value_name = "N", value_parser = parse_simulate)]
    pub simulate: Option<u32>,

    /// Inject a fault into the simulator, KIND:INDEX@START[+LENGTH]: from START after the first sample,
    /// for LENGTH or for good. Kinds: lost (falls off the bus, XID 79), hot (ramps to 92 °C, thermal
    /// slowdown), warm (settles at 84 °C, near the slowdown), power-brake, power-cap (draw at the limit,
    /// sw_power_cap), ecc (uncorrectable error, remap pending), memory-full, job-ends (its job
    /// exits, the GPU stays free), idle-holder (a notebook holds memory, computes nothing);
    /// job:INDEX:USER:GIB[:SM]@START+LENGTH runs a process of USER holding GIB GiB at SM % over exactly
    /// that window (for usage accounting tests; nothing else runs on that GPU);
    /// xid:INDEX:CODE@START logs one XID; wrong-result:INDEX makes GPU INDEX's lab runs observe wrong
    /// results; pid:INDEX:PID lists this host's process PID (one a test started) as a compute process on
    /// GPU INDEX until it exits, so --allow-signals can be tried on it. E.g. "lost:1@30s", "hot:0@10s+1m". Repeatable.
    #[arg(long, env = "GPUDASH_SIMULATE_FAULT", value_name = "FAULT", requires = "simulate", value_delimiter = ',')]
    pub simulate_fault: Vec<crate::telemetry::simulator::Fault>,

    /// Directory for the history database [default: $STATE_DIRECTORY under systemd,
    /// /var/lib/gpudash as root, else $XDG_STATE_HOME/gpudash or ~/.local/state/gpudash].
    #[arg(long, env = "GPUDASH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// How long every sample is kept (e.g. "48h", "7d"; at least 10m).
    #[arg(long, env = "GPUDASH_HISTORY_RAW", default_value = "48h", value_parser = parse_retention)]
    pub history_raw: Duration,

    /// How long per-minute min/avg/max rollups are kept (e.g. "30d"; at least 10m).
    #[arg(long, env = "GPUDASH_HISTORY_ROLLUP", default_value = "30d", value_parser = parse_retention)]
    pub history_rollup: Duration,

    /// Days the audit log keeps an entry (1 to 3650); older entries are deleted at start and hourly.
    #[arg(long, env = "GPUDASH_AUDIT_DAYS", value_name = "N", default_value = "180", value_parser = parse_audit_days)]
    pub audit_days: u32,

    /// Keep no history on disk: live view only (the page says history is off).
    #[arg(long, env = "GPUDASH_NO_HISTORY", conflicts_with = "data_dir")]
    pub no_history: bool,

    /// Tokens and access policy (TOML; see the README's "Running it for a team"). Tokens can
    /// also come from GPUDASH_TOKENS="user:role:token,…".
    #[arg(long, env = "GPUDASH_AUTH_FILE", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,

    /// Serve HTTPS with this PEM certificate (chain); needs --tls-key.
    #[arg(long, env = "GPUDASH_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key for --tls-cert.
    #[arg(long, env = "GPUDASH_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Serve on a non-loopback address without any token (everyone may do everything; the page warns).
    #[arg(long, env = "GPUDASH_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,

    /// Let admins send SIGTERM and SIGKILL to GPU processes from the page and the API, and operators to
    /// processes of their own Unix user (their token's name). Off by default: the page shows no buttons
    /// and `POST /api/processes/{pid}/signal` answers 403.
    #[arg(long, env = "GPUDASH_ALLOW_SIGNALS")]
    pub allow_signals: bool,

    /// An address people open the dashboard at, e.g. https://gpu1.example.com behind a TLS proxy. Repeatable.
    /// Its host name is accepted in Host headers and its origin in the cross-site check; https makes
    /// session cookies `Secure` and `__Host-` prefixed. Needs tokens (or --allow-anonymous).
    #[arg(long, env = "GPUDASH_PUBLIC_URL", value_name = "URL", value_delimiter = ',', value_parser = crate::web::site::PublicUrl::parse)]
    pub public_url: Vec<crate::web::site::PublicUrl>,

    /// A reverse proxy (IP or network, e.g. 127.0.0.1 or 10.0.0.0/8) whose X-Forwarded-For, -Proto and -Host
    /// (or Forwarded) headers are believed, for client addresses in the audit log and login throttling. Repeatable.
    #[arg(long, env = "GPUDASH_TRUSTED_PROXY", value_name = "IP[/BITS]", value_delimiter = ',', value_parser = crate::web::site::parse_trusted_proxy)]
    pub trusted_proxy: Vec<ipnet::IpNet>,

    /// On this machine, the user (name or uid) a loopback proxy runs as, e.g. www-data: forwarded headers
    /// from a loopback --trusted-proxy are believed only from that user's sockets, so another local user
    /// cannot forge X-Forwarded-For. Repeatable.
    #[arg(long, env = "GPUDASH_TRUSTED_PROXY_USER", value_name = "USER", value_delimiter = ',', value_parser = crate::web::local_user::parse_user)]
    pub trusted_proxy_user: Vec<u32>,

    /// Without tokens, a local user (name or uid) besides the one running gpudash who may use it as admin
    /// from this machine. Repeatable. Other local users are refused: give them tokens instead.
    #[arg(long, env = "GPUDASH_LOCAL_USER", value_name = "USER", value_delimiter = ',', value_parser = crate::web::local_user::parse_user)]
    pub local_user: Vec<u32>,

    /// How long a viewer's or operator's browser session lasts (5m to 30d).
    #[arg(long, env = "GPUDASH_SESSION_LIFETIME", value_name = "DURATION", default_value = "12h", value_parser = parse_session)]
    pub session_lifetime: Duration,

    /// How long an admin's browser session lasts (5m to 30d).
    #[arg(long, env = "GPUDASH_ADMIN_SESSION_LIFETIME", value_name = "DURATION", default_value = "2h", value_parser = parse_session)]
    pub admin_session_lifetime: Duration,

    /// A process holding at least this much device memory can be flagged idle, e.g. 1GiB, 512MiB (1MiB to 16TiB).
    #[arg(long, env = "GPUDASH_IDLE_MEMORY", value_name = "SIZE", default_value = "1GiB", value_parser = parse_idle_memory)]
    pub idle_memory: u64,

    /// Flag a process idle once its GPU's SM activity has stayed below 1% this long (10s to 7d).
    #[arg(long, env = "GPUDASH_IDLE_AFTER", value_name = "DURATION", default_value = "30m", value_parser = parse_idle_after)]
    pub idle_after: Duration,

    /// Host name to report (on the page, in /metrics' `Hostname` label) instead of the OS's, e.g. in containers.
    #[arg(long, env = "GPUDASH_HOSTNAME", value_name = "NAME", value_parser = parse_hostname)]
    pub hostname: Option<String>,

    /// Most connections served at once (WebSockets included); past it the connection idle longest
    /// is closed [default: 4096, or what the open-file limit allows].
    #[arg(long, env = "GPUDASH_MAX_CONNECTIONS", value_name = "N", value_parser = parse_max_connections)]
    pub max_connections: Option<usize>,

    /// Most connections one client address (an IPv6 /64) holds at once, trusted proxies excepted;
    /// a quarter of it is how many anonymous WebSockets one client may hold (4 to 1000000).
    #[arg(long, env = "GPUDASH_MAX_CONNECTIONS_PER_CLIENT", value_name = "N", default_value = "64",
          value_parser = parse_max_connections_per_client)]
    pub max_connections_per_client: usize,

    /// Alert rules' thresholds and webhooks (TOML; see server/src/alerts/config.rs). Every rule is on
    /// with its defaults without it. Re-read on SIGHUP: a bad file is refused and the running rules stay.
    #[arg(long, env = "GPUDASH_ALERTS_FILE", value_name = "FILE")]
    pub alerts_file: Option<PathBuf>,
    /// Send every alert to this URL as JSON (a generic webhook, besides the alerts file's `[[webhook]]`
    /// entries). Repeatable; several URLs in the environment variable are separated by spaces.
    #[arg(long, env = "GPUDASH_ALERT_WEBHOOK", value_name = "URL", value_delimiter = ' ', value_parser = crate::alerts::config::parse_webhook_url)]
    pub alert_webhook: Vec<url::Url>,

    #[command(flatten)]
    pub lab: crate::cli::LabArgs,

    #[command(flatten)]
    pub fleet: crate::fleet::FleetArgs,

    #[command(flatten)]
    pub identity: crate::telemetry::identity::IdentityArgs,

    #[command(subcommand)]
    pub command: Option<crate::cli::Command>,
}

/// Everything the server needs to start, already validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub interval: Duration,
    pub simulate: Option<u32>,
    pub faults: Vec<crate::telemetry::simulator::Fault>,
    /// Where history is kept; `None` with `--no-history`.
    pub data_dir: Option<PathBuf>,
    pub retention: crate::store::Retention,
    /// How long the audit log keeps an entry (`--audit-days`).
    pub audit_retention: Duration,
    /// The GPU lab's limits.
    pub lab: crate::lab::LabConfig,
    pub auth_file: Option<PathBuf>,
    pub allow_anonymous: bool,
    /// `--allow-signals`.
    pub allow_signals: bool,
    /// Overrides the OS host name (`--hostname`).
    pub hostname: Option<String>,
    /// The fleet view's Prometheus; `None` without `--fleet-prometheus`.
    pub fleet: Option<crate::fleet::FleetConfig>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Public URLs and trusted proxies (`tls` is set when the server starts).
    pub site: crate::web::site::Site,
    pub session_lifetime: Duration,
    pub admin_session_lifetime: Duration,
    /// `--max-connections`; `None` derives it from the open-file limit.
    pub max_connections: Option<usize>,
    /// `--max-connections-per-client`.
    pub max_connections_per_client: usize,
    /// `--idle-memory` and `--idle-after`.
    pub idle: crate::telemetry::IdleRule,
    /// `--alerts-file`, read at start (a bad file stops start-up) and on SIGHUP.
    pub alerts_file: Option<PathBuf>,
    /// `--alert-webhook`: generic webhooks besides the alerts file's.
    pub alert_webhooks: Vec<url::Url>,
    /// `--container-socket`, `--pod-resources-socket`, `--owner-label`.
    pub identity: crate::telemetry::identity::IdentityArgs,
}

impl From<Cli> for Config {
    fn from(cli: Cli) -> Self {
        Self {
            listen: cli.listen,
            interval: cli.interval,
            simulate: cli.simulate,
            faults: cli.simulate_fault,
            data_dir: (!cli.no_history).then(|| cli.data_dir.unwrap_or_else(crate::store::default_data_dir)),
            retention: crate::store::Retention { raw: cli.history_raw, minute: cli.history_rollup },
            audit_retention: Duration::from_secs(u64::from(cli.audit_days) * 24 * 3600),
            lab: crate::lab::LabConfig::from(&cli.lab),
            auth_file: cli.auth_file,
            allow_anonymous: cli.allow_anonymous,
            allow_signals: cli.allow_signals,
            tls_cert: cli.tls_cert,
            tls_key: cli.tls_key,
            fleet: crate::fleet::FleetConfig::from_args(&cli.fleet),
            site: crate::web::site::Site {
                public: cli.public_url,
                trusted_proxies: cli.trusted_proxy,
                proxy_users: crate::web::local_user::Users { uids: cli.trusted_proxy_user },
                local_users: crate::web::local_user::Users { uids: cli.local_user },
                ..crate::web::site::Site::default()
            },
            session_lifetime: cli.session_lifetime,
            admin_session_lifetime: cli.admin_session_lifetime,
            hostname: cli.hostname,
            max_connections: cli.max_connections,
            max_connections_per_client: cli.max_connections_per_client,
            idle: crate::telemetry::IdleRule { memory: cli.idle_memory, after: cli.idle_after },
            alerts_file: cli.alerts_file,
            alert_webhooks: cli.alert_webhook,
            identity: cli.identity,
        }
    }
}

impl Config {
    /// Whether others can reach the dashboard: it listens beyond loopback, or is served at public
    /// URLs through a proxy. Then it refuses to start without tokens unless `--allow-anonymous`
    /// (`gpudash::run`), and `gpudash doctor` names that blocker: one rule for both.
    pub fn exposed(&self) -> bool {
        !self.listen.ip().is_loopback() || !self.site.public.is_empty()
    }
}

/// Why a flag's value was refused; each message says what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("'{value}' is not an address and port; use IP:PORT, e.g. 127.0.0.1:7070, 0.0.0.0:7070 or [::1]:0")]
    NotAnAddress { value: String },
    /// Not something humantime reads; `examples` are what this flag usually gets.
    #[error("'{value}' is not a duration ({reason}); use e.g. {examples}")]
    NotADuration { value: String, reason: humantime::DurationError, examples: &'static str },
    /// A duration outside the flag's range; `allowed` says the range.
    #[error("'{value}' is out of range; {allowed}")]
    OutOfRange { value: String, allowed: &'static str },
    #[error("'{value}' is too short; use at least {least}")]
    TooShort { value: String, least: &'static str },
    /// Not a whole number within `min..=max` of `what` (connections, GPUs).
    #[error("'{value}' is not a number of {what} from {min} to {max}")]
    NotACount { value: String, what: &'static str, min: usize, max: usize },
    /// Like [`Self::NotACount`], for the lab's limits.
    #[error("'{value}' is not a number of {what}; use a whole number from {min} to {max}")]
    NotAWholeNumber { value: String, what: &'static str, min: usize, max: usize },
    #[error("'{value}' is not a number of days from 1 to 3650; e.g. 180 keeps half a year")]
    NotAuditDays { value: String },
    #[error("'{value}' is not a host name; use 1 to 253 characters without spaces, e.g. gpu-07")]
    NotAHostName { value: String },
    #[error("'{value}' is not a memory size from 1MiB to 16TiB; use a number and a unit, e.g. 1GiB, 512MiB or 2GB")]
    NotASize { value: String },
}

/// A duration flag's value within `range`: `examples` for what to write, `allowed` says the range.
pub(crate) fn parse_duration_within(
    value: &str,
    range: std::ops::RangeInclusive<Duration>,
    examples: &'static str,
    allowed: &'static str,
) -> Result<Duration, ConfigError> {
    let duration = humantime::parse_duration(value.trim()).map_err(|reason| ConfigError::NotADuration {
        value: value.to_owned(),
        reason,
        examples,
    })?;
    if !range.contains(&duration) {
        return Err(ConfigError::OutOfRange { value: value.to_owned(), allowed });
    }
    Ok(duration)
}

/// A whole number of `what` within `range`.
fn parse_count(value: &str, what: &'static str, range: std::ops::RangeInclusive<usize>) -> Result<usize, ConfigError> {
    match value.trim().parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(ConfigError::NotACount { value: value.to_owned(), what, min: *range.start(), max: *range.end() }),
    }
}

fn parse_listen(value: &str) -> Result<SocketAddr, ConfigError> {
    value.trim().parse().map_err(|_| ConfigError::NotAnAddress { value: value.to_owned() })
}

fn parse_interval(value: &str) -> Result<Duration, ConfigError> {
    parse_duration_within(
        value,
        MIN_INTERVAL..=MAX_INTERVAL,
        "200ms, 1s or 2.5s",
        "the interval must be between 100ms and 60s",
    )
}

fn parse_retention(value: &str) -> Result<Duration, ConfigError> {
    const MIN: Duration = Duration::from_secs(600);
    const MAX: Duration = Duration::from_secs(10 * 366 * 24 * 3600);
    parse_duration_within(value, MIN..=MAX, "48h, 7d or 30d", "keep history from 10m to 10 years")
}

fn parse_session(value: &str) -> Result<Duration, ConfigError> {
    const MIN: Duration = Duration::from_secs(300);
    const MAX: Duration = Duration::from_secs(30 * 24 * 3600);
    parse_duration_within(value, MIN..=MAX, "30m, 2h or 7d", "a session lasts from 5m to 30d")
}

fn parse_audit_days(value: &str) -> Result<u32, ConfigError> {
    match value.trim().parse::<u32>() {
        Ok(days) if (1..=3650).contains(&days) => Ok(days),
        _ => Err(ConfigError::NotAuditDays { value: value.to_owned() }),
    }
}

fn parse_hostname(value: &str) -> Result<String, ConfigError> {
    let name = value.trim();
    if name.is_empty() || name.len() > 253 || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(ConfigError::NotAHostName { value: value.to_owned() });
    }
    Ok(name.to_owned())
}

/// Most connections `--max-connections` accepts.
pub const MAX_CONNECTIONS: usize = 1_000_000;

fn parse_max_connections(value: &str) -> Result<usize, ConfigError> {
    parse_count(value, "connections", 16..=MAX_CONNECTIONS)
}

fn parse_max_connections_per_client(value: &str) -> Result<usize, ConfigError> {
    parse_count(value, "connections per client", 4..=MAX_CONNECTIONS)
}

fn parse_idle_after(value: &str) -> Result<Duration, ConfigError> {
    const MIN: Duration = Duration::from_secs(10);
    const MAX: Duration = Duration::from_secs(7 * 24 * 3600);
    parse_duration_within(value, MIN..=MAX, "30m, 2h or 90s", "idle-after must be between 10s and 7d")
}

/// A memory size such as "1GiB", "512MiB", "2GB" or "1073741824" (bytes), within 1 MiB to 16 TiB.
fn parse_idle_memory(value: &str) -> Result<u64, ConfigError> {
    const UNITS: [(&str, f64); 9] = [
        ("tib", 1_099_511_627_776.0),
        ("gib", 1_073_741_824.0),
        ("mib", 1_048_576.0),
        ("kib", 1024.0),
        ("tb", 1e12),
        ("gb", 1e9),
        ("mb", 1e6),
        ("kb", 1e3),
        ("b", 1.0),
    ];
    let refuse = || ConfigError::NotASize { value: value.to_owned() };
    let text = value.trim().to_ascii_lowercase();
    let (number, scale) = UNITS
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n.trim(), *scale)))
        .unwrap_or((text.as_str(), 1.0));
    let number: f64 = number.parse().map_err(|_| refuse())?;
    let bytes = number * scale;
    if !bytes.is_finite() || !(1_048_576.0..=17_592_186_044_416.0).contains(&bytes) {
        return Err(refuse());
    }
    Ok(bytes.round() as u64)
}

fn parse_simulate(value: &str) -> Result<u32, ConfigError> {
    let most = MAX_SIMULATED as usize;
    // At most MAX_SIMULATED (64), so it fits.
    parse_count(value, "GPUs", 1..=most).map(|n| n as u32)
}

#[cfg(test)]
mod tests;
