//! The command line as clap reads it ([`Cli`]: the dashboard's flags, with environment fallbacks,
//! and its subcommands), and its conversion into the typed [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::config::{
    Config, parse_audit_days, parse_carbon_intensity, parse_energy_price, parse_hostname, parse_idle_after,
    parse_idle_memory, parse_interval, parse_job_verdict_after, parse_listen, parse_max_connections,
    parse_max_connections_per_client, parse_retention, parse_session, parse_simulate,
};

/// A live dashboard for NVIDIA GPUs: open the printed address in a browser.
#[derive(Parser, Debug, Clone)]
#[command(name = "gpudash", version, about, long_about = None)]
#[command(group = clap::ArgGroup::new("sign_in").args(["auth_proxy_header", "oidc_issuer"]).multiple(true))]
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
    pub simulate_fault: Vec<telemetry::simulator::Fault>,

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

    /// Tokens and access policy (TOML; see docs/TEAM.md). Tokens can
    /// also come from GPUDASH_TOKENS="user:role:token,…".
    #[arg(long, env = "GPUDASH_AUTH_FILE", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,

    /// Who may scrape /metrics, in the Prometheus exporter-toolkit's web config format (YAML, as node_exporter's
    /// --web.config.file): `basic_auth_users:` maps user names to bcrypt hashes (`htpasswd -nBC 10 USER`).
    /// /metrics then needs one of them by basic auth, or a token. A bad file stops start-up.
    #[arg(long, env = "GPUDASH_WEB_CONFIG_FILE", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,

    /// Serve HTTPS with this PEM certificate (chain); needs --tls-key.
    #[arg(long, env = "GPUDASH_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key for --tls-cert.
    #[arg(long, env = "GPUDASH_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Scrapers of /metrics may present a client certificate signed by a CA in this PEM file (mutual TLS, as
    /// Prometheus's `tls_config` `cert_file`/`key_file` send it); /metrics then needs one, an account of
    /// --web-config-file or a token. Browsers are not asked for one. Needs --tls-cert.
    #[arg(long, env = "GPUDASH_METRICS_CLIENT_CA", value_name = "FILE", requires = "tls_cert")]
    pub metrics_client_ca: Option<PathBuf>,

    /// Serve on a non-loopback address without any token (everyone may do everything; the page warns).
    #[arg(long, env = "GPUDASH_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,

    /// Let admins send SIGTERM and SIGKILL to GPU processes from the page and the API, and operators to
    /// the processes they own by the owner rule (a verified Slurm job's user, a pod's owner, a root
    /// container process's owner label, else the Unix user) when it is their token's name. Off by
    /// default: the page shows no buttons and `POST /api/processes/{pid}/signal` answers 403.
    #[arg(long, env = "GPUDASH_ALLOW_SIGNALS")]
    pub allow_signals: bool,

    /// Change nothing, whatever the roles say: no Lab runs, no empty_cache, no silences, no signals, no
    /// bookings (each answers 403 and is audited); the page shows no such buttons and a "read-only" badge.
    #[arg(long, env = "GPUDASH_READ_ONLY")]
    pub read_only: bool,

    /// An address people open the dashboard at, e.g. https://gpu1.example.com behind a TLS proxy. Repeatable.
    /// Its host name is accepted in Host headers and its origin in the cross-site check; https makes
    /// session cookies `Secure` and `__Host-` prefixed. Needs tokens (or --allow-anonymous).
    #[arg(long, env = "GPUDASH_PUBLIC_URL", value_name = "URL", value_delimiter = ',', value_parser = web::site::PublicUrl::parse)]
    pub public_url: Vec<web::site::PublicUrl>,

    /// A reverse proxy (IP or network, e.g. 127.0.0.1 or 10.0.0.0/8) whose X-Forwarded-For, -Proto and -Host
    /// (or Forwarded) headers are believed, for client addresses in the audit log and login throttling. Repeatable.
    #[arg(long, env = "GPUDASH_TRUSTED_PROXY", value_name = "IP[/BITS]", value_delimiter = ',', value_parser = web::site::parse_trusted_proxy)]
    pub trusted_proxy: Vec<ipnet::IpNet>,

    /// Sign people in through a trusted auth proxy (oauth2-proxy, authentik, nginx auth_request): the header
    /// in which it names the signed-in user, e.g. X-Forwarded-User. Believed only from a --trusted-proxy
    /// (needed); the same header from anyone else is refused (403, audited). Tokens still work for scripts.
    #[arg(long, env = "GPUDASH_AUTH_PROXY_HEADER", value_name = "HEADER", value_parser = team::auth::proxy::parse_header_name)]
    pub auth_proxy_header: Option<String>,

    /// The header in which the auth proxy lists the user's groups, separated by ',' or '|'.
    #[arg(long, env = "GPUDASH_AUTH_PROXY_GROUPS_HEADER", value_name = "HEADER", requires = "auth_proxy_header",
          default_value = team::auth::proxy::DEFAULT_GROUPS_HEADER, value_parser = team::auth::proxy::parse_header_name)]
    pub auth_proxy_groups_header: String,

    /// Where the page's "Log out" sends someone the auth proxy signed in, e.g. /oauth2/sign_out (a path
    /// here or an http(s) URL); without it the page shows no Log out for them.
    #[arg(long, env = "GPUDASH_AUTH_PROXY_SIGN_OUT", value_name = "URL", requires = "auth_proxy_header",
          value_parser = team::auth::proxy::parse_sign_out)]
    pub auth_proxy_sign_out: Option<String>,

    /// Sign-in names mapped to the names owners go by (TOML: a [users] table of "ana@lab.example.org" = "ana"
    /// lines), so someone the auth proxy or the OIDC provider names by e-mail is the Unix, Slurm or pod-label owner of their jobs.
    #[arg(long, env = "GPUDASH_USER_MAP", value_name = "FILE", requires = "sign_in")]
    pub user_map: Option<PathBuf>,

    /// Members of this group (from the auth proxy's groups header or the OIDC groups claim) are admins. Repeatable.
    #[arg(long, env = "GPUDASH_ADMIN_GROUP", value_name = "GROUP", value_delimiter = ',', requires = "sign_in", alias = "oidc-admin-group",
          value_parser = team::auth::groups::parse_group)]
    pub admin_group: Vec<String>,

    /// Members of this group (and of no admin group) are operators. Repeatable.
    #[arg(long, env = "GPUDASH_OPERATOR_GROUP", value_name = "GROUP", value_delimiter = ',', requires = "sign_in", alias = "oidc-operator-group",
          value_parser = team::auth::groups::parse_group)]
    pub operator_group: Vec<String>,

    /// The role of someone signed in by the auth proxy or the OIDC provider who is in no admin or operator
    /// group: viewer, or none to refuse them (403, audited).
    #[arg(long, env = "GPUDASH_DEFAULT_ROLE", value_name = "ROLE", default_value = "viewer", requires = "sign_in",
          value_parser = team::auth::groups::parse_default_role)]
    pub default_role: team::auth::groups::DefaultRole,

    /// On this machine, the user (name or uid) a loopback proxy runs as, e.g. www-data: forwarded headers
    /// from a loopback --trusted-proxy are believed only from that user's sockets, so another local user
    /// cannot forge X-Forwarded-For. Repeatable.
    #[arg(long, env = "GPUDASH_TRUSTED_PROXY_USER", value_name = "USER", value_delimiter = ',', value_parser = web::local_user::parse_user)]
    pub trusted_proxy_user: Vec<u32>,

    /// Without tokens, a local user (name or uid) besides the one running gpudash who may use it as admin
    /// from this machine. Repeatable. Other local users are refused: give them tokens instead.
    #[arg(long, env = "GPUDASH_LOCAL_USER", value_name = "USER", value_delimiter = ',', value_parser = web::local_user::parse_user)]
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

    /// Jobs that held GPUs for less than this (GPU time, summed over their GPUs) get no verdict but an OOM (1s to 7d).
    #[arg(long, env = "GPUDASH_JOB_VERDICT_AFTER", value_name = "DURATION", default_value = "5m", value_parser = parse_job_verdict_after)]
    pub job_verdict_after: Duration,

    /// What a kWh costs, with an optional currency code, e.g. "0.30 EUR": job reports show each job's energy cost.
    #[arg(long, env = "GPUDASH_ENERGY_PRICE", value_name = "PRICE", value_parser = parse_energy_price)]
    pub energy_price: Option<(f64, String)>,

    /// Grams of CO2-equivalent per kWh of the grid (0 to 2000), e.g. 350: job reports show each job's emissions.
    #[arg(long, env = "GPUDASH_CARBON_INTENSITY", value_name = "G_PER_KWH", value_parser = parse_carbon_intensity)]
    pub carbon_intensity: Option<f64>,

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

    /// Alert rules' thresholds and webhooks (TOML; see team/src/alerts/config.rs). Every rule is on
    /// with its defaults without it. Re-read on SIGHUP: a bad file is refused and the running rules stay.
    #[arg(long, env = "GPUDASH_ALERTS_FILE", value_name = "FILE")]
    pub alerts_file: Option<PathBuf>,
    /// Send every alert to this URL as JSON (a generic webhook, besides the alerts file's `[[webhook]]`
    /// entries). Repeatable; several URLs in the environment variable are separated by spaces.
    #[arg(long, env = "GPUDASH_ALERT_WEBHOOK", value_name = "URL", value_delimiter = ' ', value_parser = team::alerts::config::parse_webhook_url)]
    pub alert_webhook: Vec<url::Url>,

    #[command(flatten)]
    pub oidc: super::oidc::OidcArgs,

    #[command(flatten)]
    pub lab: super::LabArgs,

    #[command(flatten)]
    pub fleet: team::fleet::FleetArgs,

    #[command(flatten)]
    pub identity: telemetry::identity::IdentityArgs,

    #[command(subcommand)]
    pub command: Option<super::Command>,
}

impl From<Cli> for Config {
    fn from(cli: Cli) -> Self {
        let roles =
            team::auth::GroupRoles { admin: cli.admin_group, operator: cli.operator_group, others: cli.default_role.0 };
        Self {
            listen: cli.listen,
            interval: cli.interval,
            simulate: cli.simulate,
            faults: cli.simulate_fault,
            data_dir: (!cli.no_history).then(|| cli.data_dir.unwrap_or_else(store::default_data_dir)),
            retention: store::Retention { raw: cli.history_raw, minute: cli.history_rollup },
            audit_retention: Duration::from_secs(u64::from(cli.audit_days) * 24 * 3600),
            lab: lab::LabConfig::from(&cli.lab),
            lab_user: cli.lab.lab_user.clone(),
            lab_worker: None,
            auth_file: cli.auth_file,
            web_config_file: cli.web_config_file,
            metrics_client_ca: cli.metrics_client_ca,
            allow_anonymous: cli.allow_anonymous,
            allow_signals: cli.allow_signals,
            read_only: cli.read_only,
            proxy: cli.auth_proxy_header.map(|user_header| team::auth::ProxyConfig {
                user_header,
                groups_header: cli.auth_proxy_groups_header,
                roles: roles.clone(),
                sign_out: cli.auth_proxy_sign_out,
                user_map: team::auth::names::UserMap::default(),
            }),
            oidc: cli.oidc.config(&roles),
            user_map: cli.user_map,
            tls_cert: cli.tls_cert,
            tls_key: cli.tls_key,
            fleet: team::fleet::FleetConfig::from_args(&cli.fleet),
            site: web::site::Site {
                public: cli.public_url,
                trusted_proxies: cli.trusted_proxy,
                proxy_users: web::local_user::Users { uids: cli.trusted_proxy_user },
                local_users: web::local_user::Users { uids: cli.local_user },
                ..web::site::Site::default()
            },
            session_lifetime: cli.session_lifetime,
            admin_session_lifetime: cli.admin_session_lifetime,
            hostname: cli.hostname,
            max_connections: cli.max_connections,
            max_connections_per_client: cli.max_connections_per_client,
            idle: telemetry::IdleRule { memory: cli.idle_memory, after: cli.idle_after },
            jobs: team::jobs::JobsOptions {
                limits: shared::jobs::Thresholds {
                    min_held_s: cli.job_verdict_after.as_secs_f64(),
                    ..shared::jobs::Thresholds::default()
                },
                energy: shared::jobs::EnergyTerms {
                    price_per_kwh: cli.energy_price.as_ref().map(|(p, _)| *p),
                    currency: cli.energy_price.map(|(_, c)| c).unwrap_or_default(),
                    carbon_g_per_kwh: cli.carbon_intensity,
                },
            },
            alerts_file: cli.alerts_file,
            alert_webhooks: cli.alert_webhook,
            identity: cli.identity,
        }
    }
}

#[cfg(test)]
mod tests;
