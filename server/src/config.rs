//! The typed [`Config`] the server starts from, and the checks on each flag's value (the clap
//! definition of the command line, and its conversion into a `Config`, is `cli::Cli`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use team::flags::ConfigError;
use team::flags::{parse_count, parse_duration_within};

/// Fastest sampling period accepted: below this, NVML's own update rate makes samples repeat.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Slowest sampling period accepted.
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// Most simulated GPUs: a big node has 8, 64 leaves room for load tests.
pub const MAX_SIMULATED: u32 = 64;

/// Everything the server needs to start, already validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub interval: Duration,
    pub simulate: Option<u32>,
    pub faults: Vec<telemetry::simulator::Fault>,
    /// Where history is kept; `None` with `--no-history`.
    pub data_dir: Option<PathBuf>,
    pub retention: store::Retention,
    /// How long the audit log keeps an entry (`--audit-days`).
    pub audit_retention: Duration,
    /// The GPU lab's limits.
    pub lab: lab::LabConfig,
    /// `--lab-user`: who the Lab's worker process runs as when gpudash runs as root.
    pub lab_user: String,
    /// The binary the Lab's runs go to as worker processes: `main` sets its own; `None` runs them in
    /// this process.
    pub lab_worker: Option<PathBuf>,
    pub auth_file: Option<PathBuf>,
    /// `--web-config-file`: the scrapers' accounts for `/metrics`.
    pub web_config_file: Option<PathBuf>,
    /// `--metrics-client-ca`: the CAs of scrapers' client certificates.
    pub metrics_client_ca: Option<PathBuf>,
    pub allow_anonymous: bool,
    /// `--allow-signals`.
    pub allow_signals: bool,
    /// `--read-only`.
    pub read_only: bool,
    /// `--auth-proxy-header` and the group rule: a trusted auth proxy signs people in (its `user_map` is
    /// read from `user_map` at start).
    pub proxy: Option<team::auth::ProxyConfig>,
    /// `--oidc-issuer` and the rest: people sign in with an OpenID Connect provider (its `user_map` is
    /// read from `user_map` at start).
    pub oidc: Option<team::auth::oidc::OidcConfig>,
    /// `--user-map`: sign-in names to owner names.
    pub user_map: Option<PathBuf>,
    /// Overrides the OS host name (`--hostname`).
    pub hostname: Option<String>,
    /// The fleet view's Prometheus; `None` without `--fleet-prometheus`.
    pub fleet: Option<team::fleet::FleetConfig>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Public URLs and trusted proxies (`tls` is set when the server starts).
    pub site: web::site::Site,
    pub session_lifetime: Duration,
    pub admin_session_lifetime: Duration,
    /// `--max-connections`; `None` derives it from the open-file limit.
    pub max_connections: Option<usize>,
    /// `--max-connections-per-client`.
    pub max_connections_per_client: usize,
    /// `--idle-memory` and `--idle-after`.
    pub idle: telemetry::IdleRule,
    /// `--job-verdict-after`, `--energy-price`, `--carbon-intensity`.
    pub jobs: team::jobs::JobsOptions,
    /// `--alerts-file`, read at start (a bad file stops start-up) and on SIGHUP.
    pub alerts_file: Option<PathBuf>,
    /// `--alert-webhook`: generic webhooks besides the alerts file's.
    pub alert_webhooks: Vec<url::Url>,
    /// `--container-socket`, `--pod-resources-socket`, `--owner-label`.
    pub identity: telemetry::identity::IdentityArgs,
}

impl Config {
    /// Whether others can reach the dashboard: it listens beyond loopback, or is served at public
    /// URLs through a proxy. Then it refuses to start without tokens unless `--allow-anonymous`
    /// (`gpudash::run`), and `gpudash doctor` names that blocker: one rule for both.
    pub fn exposed(&self) -> bool {
        !self.listen.ip().is_loopback() || !self.site.public.is_empty()
    }
}

pub(crate) fn parse_listen(value: &str) -> Result<SocketAddr, ConfigError> {
    value.trim().parse().map_err(|_| ConfigError::NotAnAddress { value: value.to_owned() })
}

pub(crate) fn parse_interval(value: &str) -> Result<Duration, ConfigError> {
    parse_duration_within(
        value,
        MIN_INTERVAL..=MAX_INTERVAL,
        "200ms, 1s or 2.5s",
        "the interval must be between 100ms and 60s",
    )
}

pub(crate) fn parse_retention(value: &str) -> Result<Duration, ConfigError> {
    const MIN: Duration = Duration::from_secs(600);
    const MAX: Duration = Duration::from_secs(10 * 366 * 24 * 3600);
    parse_duration_within(value, MIN..=MAX, "48h, 7d or 30d", "keep history from 10m to 10 years")
}

pub(crate) fn parse_session(value: &str) -> Result<Duration, ConfigError> {
    const MIN: Duration = Duration::from_secs(300);
    const MAX: Duration = Duration::from_secs(30 * 24 * 3600);
    parse_duration_within(value, MIN..=MAX, "30m, 2h or 7d", "a session lasts from 5m to 30d")
}

pub(crate) fn parse_audit_days(value: &str) -> Result<u32, ConfigError> {
    match value.trim().parse::<u32>() {
        Ok(days) if (1..=3650).contains(&days) => Ok(days),
        _ => Err(ConfigError::NotAuditDays { value: value.to_owned() }),
    }
}

pub(crate) fn parse_hostname(value: &str) -> Result<String, ConfigError> {
    let name = value.trim();
    if name.is_empty() || name.len() > 253 || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(ConfigError::NotAHostName { value: value.to_owned() });
    }
    Ok(name.to_owned())
}

/// Most connections `--max-connections` accepts.
pub const MAX_CONNECTIONS: usize = 1_000_000;

pub(crate) fn parse_max_connections(value: &str) -> Result<usize, ConfigError> {
    parse_count(value, "connections", 16..=MAX_CONNECTIONS)
}

pub(crate) fn parse_max_connections_per_client(value: &str) -> Result<usize, ConfigError> {
    parse_count(value, "connections per client", 4..=MAX_CONNECTIONS)
}

pub(crate) fn parse_idle_after(value: &str) -> Result<Duration, ConfigError> {
    const MIN: Duration = Duration::from_secs(10);
    const MAX: Duration = Duration::from_secs(7 * 24 * 3600);
    parse_duration_within(value, MIN..=MAX, "30m, 2h or 90s", "idle-after must be between 10s and 7d")
}

pub(crate) fn parse_job_verdict_after(value: &str) -> Result<Duration, ConfigError> {
    const MAX: Duration = Duration::from_secs(7 * 24 * 3600);
    parse_duration_within(
        value,
        Duration::from_secs(1)..=MAX,
        "5m, 1h or 30s",
        "job-verdict-after must be between 1s and 7d",
    )
}

/// `--energy-price`: a price per kWh and an optional currency code ("0.30 EUR").
pub(crate) fn parse_energy_price(value: &str) -> Result<(f64, String), ConfigError> {
    shared::jobs::EnergyTerms::parse_price(value).map_err(ConfigError::Refused)
}

/// `--carbon-intensity`: grams of CO2e per kWh.
pub(crate) fn parse_carbon_intensity(value: &str) -> Result<f64, ConfigError> {
    shared::jobs::EnergyTerms::parse_carbon(value).map_err(ConfigError::Refused)
}

/// A memory size such as "1GiB", "512MiB", "2GB" or "1073741824" (bytes), within 1 MiB to 16 TiB.
pub(crate) fn parse_idle_memory(value: &str) -> Result<u64, ConfigError> {
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

pub(crate) fn parse_simulate(value: &str) -> Result<u32, ConfigError> {
    let most = MAX_SIMULATED as usize;
    // At most MAX_SIMULATED (64), so it fits.
    parse_count(value, "GPUs", 1..=most).map(|n| n as u32)
}
