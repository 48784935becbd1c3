//! gpudash: a live dashboard for NVIDIA GPUs.
//!
//! A sample is born in [`telemetry`] (NVML or the simulator, on its own
//! thread), kept by the [`telemetry::Telemetry`] hub, and leaves through
//! [`web`] (JSON, the WebSocket and the embedded page).

pub mod cli;
pub mod config;
mod open;
pub mod reload;
pub mod wiring;

// The crates gpudash is built from, under the names its modules have always used: telemetry
// (where a sample is born), store (where it is kept), lab, team (what a shared server adds) and
// web (where samples leave). Cargo keeps each to its own dependencies.
pub use base::{clock, prom_text, sync};
pub use lab;
pub use store;
pub use team::{alerts, audit, auth, bridge, export, flags, fleet, jobs, reservations, signals, usage};
pub use telemetry;
pub use web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use store::Store;
use telemetry::nvml::NvmlSource;
use telemetry::simulator::Simulator;
use telemetry::{GpuSource, NoGpus, Sampler, Telemetry};
use web::AppState;

/// The source the configuration asks for: the simulator, NVML, or, when NVML
/// cannot load, an empty source whose host info says why.
pub fn open_source(config: &Config) -> Box<dyn GpuSource> {
    let interval_ms = u64::try_from(config.interval.as_millis()).unwrap_or(u64::MAX);
    if let Some(count) = config.simulate {
        tracing::warn!(count, "showing simulated GPUs: no figure on the page comes from hardware");
        // The demo shows a forgotten notebook: the idle-but-held case.
        let demo = Simulator::new(count, interval_ms).with_idle_holder();
        let simulator = config.faults.iter().fold(demo, |sim, fault| sim.with_fault(fault.clone()));
        return Box::new(simulator);
    }
    match NvmlSource::open(interval_ms) {
        Ok(source) => Box::new(source),
        Err(reason) => {
            tracing::warn!("no GPUs to show: {reason}. Try `gpudash --simulate 4` for a demo");
            Box::new(NoGpus::new(format!("NVIDIA driver not available: {reason}"), interval_ms))
        }
    }
}

/// How long start-up waits for the first sample before serving without it.
const FIRST_SAMPLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A dashboard serving on a socket, with its sampler running.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    telemetry: Arc<Telemetry>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    sampler: Sampler,
    lab: Arc<lab::Lab>,
    /// Writes the audit log's counted denials and deletes its old entries; flushes at shutdown.
    audit: JoinHandle<()>,
    alerts: alerts::Alerts,
    /// The rules' thread ([`alerts::engine`]).
    alert_engine: std::thread::JoinHandle<()>,
    /// Usage sums and the accounting thread ([`usage::engine`]), which flushes them when it stops.
    usage: store::usage::UsageStore,
    usage_engine: std::thread::JoinHandle<()>,
    /// The jobs and their thread ([`jobs::engine`]), which saves the running ones when it stops.
    jobs: jobs::Jobs,
    jobs_engine: std::thread::JoinHandle<()>,
}

/// What a dashboard runs with besides its GPU source.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sampling period.
    pub interval: Duration,
    /// History database; `None` keeps no history.
    pub store: Option<Store>,
    /// The GPU lab's limits.
    pub lab: lab::LabOptions,
    /// Test hooks of the lab on simulated GPUs (its probe, the length of a step); ignored on real ones.
    pub simulated_lab: lab::SimulatedLab,
    /// Tokens and access policy; the default (no tokens) lets every caller do everything.
    pub auth: auth::AuthConfig,
    /// Where the tokens came from (`--auth-file`), re-read on SIGHUP; `None` keeps them as they are.
    pub auth_file: Option<std::path::PathBuf>,
    /// Listening beyond loopback with no tokens, as `--allow-anonymous` permits: the page warns.
    pub exposed_without_auth: bool,
    /// Reported instead of the OS host name (`--hostname`).
    pub hostname: Option<String>,
    /// The fleet view's Prometheus (`--fleet-prometheus`); `None` turns `/api/fleet` off.
    pub fleet: Option<fleet::FleetConfig>,
    /// Serve HTTPS with this PEM certificate chain and private key.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Where the dashboard is served from (`--public-url`) and which proxies it trusts (`--trusted-proxy`).
    pub site: web::site::Site,
    /// `--allow-anonymous`: serve proxied or non-loopback requests without tokens.
    pub allow_anonymous: bool,
    /// How long the audit log keeps an entry (`--audit-days`).
    pub audit_retention: Duration,
    /// The connection limits and request timeouts (`--max-connections`, `--max-connections-per-client`).
    pub connections: web::serve::ConnectionLimits,
    /// When a process holding memory counts as idle (`--idle-memory`, `--idle-after`).
    pub idle: telemetry::IdleRule,
    /// How jobs are judged and priced.
    pub jobs: jobs::JobsOptions,
    /// The alert rules and webhooks (`--alerts-file`, already read).
    pub alerts: alerts::AlertsConfig,
    /// Where the alerts came from, re-read on SIGHUP; `None` keeps the rules as they are.
    pub alerts_file: Option<std::path::PathBuf>,
    /// `--alert-webhook`: generic webhooks besides the alerts file's (kept across reloads).
    pub alert_webhooks: Vec<url::Url>,
    /// `--allow-signals`: admins (and operators, for their own) may send SIGTERM and SIGKILL to GPU processes.
    pub allow_signals: bool,
    /// `--read-only`: nothing is changed through the API or the page, whatever the roles.
    pub read_only: bool,
    /// A trusted auth proxy signs people in (`--auth-proxy-header`); its peers are `site.trusted_proxies`.
    pub proxy: Option<auth::ProxyConfig>,
    /// People sign in with an OpenID Connect provider (`--oidc-issuer`), already discovered.
    pub oidc: Option<Arc<auth::oidc::Oidc>>,
    /// `--web-config-file`'s accounts: `/metrics` takes them by basic auth, and needs them or a token.
    pub scrapers: Option<Arc<auth::ScrapeUsers>>,
    /// Where they came from, re-read on SIGHUP; `None` keeps them as they are.
    pub web_config_file: Option<std::path::PathBuf>,
    /// `--metrics-client-ca` (with `tls`): scrapers' client certificates are verified against it, and
    /// `/metrics` needs one, an account or a token.
    pub metrics_client_ca: Option<std::path::PathBuf>,
    /// Where processes' containers, pods and Slurm jobs are read, and the owner label.
    pub identity: telemetry::identity::IdentityConfig,
}

impl Options {
    /// Sampling every `interval`, no history, no tokens.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            store: None,
            lab: lab::LabOptions::default(),
            simulated_lab: lab::SimulatedLab::default(),
            auth: auth::AuthConfig::default(),
            auth_file: None,
            exposed_without_auth: false,
            hostname: None,
            fleet: None,
            tls: None,
            site: web::site::Site::default(),
            allow_anonymous: false,
            audit_retention: audit::DEFAULT_RETENTION,
            connections: web::serve::ConnectionLimits::default(),
            idle: telemetry::IdleRule::default(),
            jobs: jobs::JobsOptions::default(),
            alerts: alerts::AlertsConfig::default(),
            alerts_file: None,
            alert_webhooks: Vec::new(),
            allow_signals: false,
            read_only: false,
            proxy: None,
            oidc: None,
            scrapers: None,
            web_config_file: None,
            metrics_client_ca: None,
            identity: telemetry::identity::IdentityConfig::default(),
        }
    }
}

/// Starts sampling `source` every `interval` and serving the dashboard on `listener`, without history.
pub async fn start(listener: TcpListener, source: Box<dyn GpuSource>, interval: Duration) -> std::io::Result<Running> {
    start_with(listener, source, Options::new(interval)).await
}

/// Starts sampling `source` and serving the dashboard on `listener`.
///
/// Returns once the first sample is in, so the API never answers with an empty reading.
pub async fn start_with(
    listener: TcpListener,
    source: Box<dyn GpuSource>,
    options: Options,
) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    let mut host = source.host();
    if let Some(name) = &options.hostname {
        host.hostname.clone_from(name);
    }
    host.history = options.store.is_some();
    let auth = Arc::new(
        auth::Auth::new(options.auth)
            .with_proxy(options.proxy)
            .with_oidc(options.oidc.clone())
            .with_scrapers(options.scrapers)
            .with_client_certificates(options.tls.is_some() && options.metrics_client_ca.is_some()),
    );
    // The GPUs' topology, read once (NVML blocks): off the runtime's workers.
    let (source, topology) = tokio::task::spawn_blocking(move || {
        let topology = source.topology();
        (source, topology)
    })
    .await
    .map_err(std::io::Error::other)?;
    let telemetry = Arc::new(
        Telemetry::new(host, source.devices())
            .with_hardware(topology, source.device_query())
            .with_idle_rule(options.idle),
    );
    let recorder = open::recorder(options.store.as_ref()).await?;
    let mut first_tick = telemetry.subscribe();
    let details_period = source.details_period(options.interval);
    let identities = telemetry::identity::Identities::start(options.identity, &source.devices())?;
    let sampler = Sampler::spawn(source, telemetry.clone(), recorder, Some(identities), options.interval)?;
    if tokio::time::timeout(FIRST_SAMPLE_TIMEOUT, first_tick.recv()).await.is_err() {
        tracing::warn!("no sample within {FIRST_SAMPLE_TIMEOUT:?}; serving anyway");
    }
    // Opening the lab may load NVML: keep it off the runtime's workers.
    let lab = {
        let lab_options = options.lab.clone().with_server(options.store.as_ref().map(Store::path));
        let (telemetry, simulated) = (telemetry.clone(), options.simulated_lab.clone());
        let setup = tokio::task::spawn_blocking(move || wiring::lab::lab_setup(&telemetry, &lab_options, &simulated));
        Arc::new(lab::Lab::start(setup.await.map_err(std::io::Error::other)?))
    };
    let tls = match &options.tls {
        Some((cert, key)) => Some(
            web::tls::acceptor_with(cert, key, options.metrics_client_ca.as_deref()).map_err(std::io::Error::other)?,
        ),
        None => None,
    };
    let (shutdown, shutdown_rx) = watch::channel(false);
    // The clock the engines, the connections and the page's sessions and WebSockets wait, expire and
    // limit on (auth, the proxy and OIDC were given theirs when they were opened; all the system's).
    let clock = clock::Clock::system();
    let audit = open::audit(options.store.as_ref()).await?.keeping(options.audit_retention);
    let alerts = open::alerts(options.store.as_ref(), options.alerts).await?;
    let reservations = open::reservations(options.store.as_ref()).await?;
    // Subscribed before the engine starts, so no alert is fired before its webhooks listen.
    let deliveries =
        open::deliver_alerts(&alerts, options.alert_webhooks, &telemetry.host().hostname, shutdown_rx.clone());
    let bridge = Arc::new(bridge::Registry::default());
    let jobs = open::jobs(options.store.as_ref(), &telemetry, details_period, options.jobs).await?;
    let jobs_engine = jobs::engine::spawn(jobs.clone(), &telemetry, &clock, shutdown_rx.clone())?;
    open::watch_ooms(&alerts, &bridge, &jobs);
    let notices = open::notify_jobs(&alerts, deliveries, &jobs, telemetry.host(), &options.site, shutdown_rx.clone());
    let alert_engine =
        alerts::engine::spawn(alerts.clone(), &telemetry, reservations.clone(), &clock, shutdown_rx.clone())?;
    // Always handled: SIGHUP's default action ends the process, and `systemctl reload` sends it.
    let reloadable = reload::Reloadable {
        alerts: alerts.clone(),
        alerts_file: options.alerts_file,
        auth: auth.clone(),
        auth_file: options.auth_file,
        web_config_file: options.web_config_file,
        oidc: options.oidc,
        audit: audit.clone(),
    };
    reload::on_sighup(reloadable, shutdown_rx.clone())?;
    let usage = open::usage(options.store.as_ref()).await?;
    let minute_retention = options.store.as_ref().map_or(store::Retention::default().minute, |s| s.retention().minute);
    let usage_engine =
        usage::engine::spawn(usage.clone(), &telemetry, details_period, minute_retention, &clock, shutdown_rx.clone())?;
    let fleet = options.fleet.map(fleet::Fleet::new).transpose().map_err(std::io::Error::other)?.map(Arc::new);
    let mut site = options.site;
    site.tls = tls.is_some();
    for name in [gethostname::gethostname().to_string_lossy().into_owned(), telemetry.host().hostname.clone()] {
        let name = name.trim().to_ascii_lowercase();
        if !name.is_empty() && !site.names.contains(&name) {
            site.names.push(name);
        }
    }
    tracing::info!("answering to the host names: {}", site.describe());
    let app = web::app(AppState {
        clock: clock.clone(),
        telemetry: telemetry.clone(),
        live_frames: web::LiveFrames::relay(&telemetry, auth.admits_anonymous_viewers()),
        store: options.store,
        shutdown: shutdown_rx.clone(),
        lab_frames: web::LabFrames::relay(&lab),
        alert_frames: web::AlertFrames::relay(&alerts),
        alerts: alerts.clone(),
        lab: lab.clone(),
        auth,
        audit: audit.clone(),
        bridge,
        tls: tls.is_some(),
        site: Arc::new(site),
        exposed_without_auth: options.exposed_without_auth,
        allow_anonymous: options.allow_anonymous,
        allow_signals: options.allow_signals,
        read_only: options.read_only,
        fleet,
        reservations,
        usage: usage.clone(),
        jobs: jobs.clone(),
        notices,
    });
    let audit = tokio::spawn(audit.maintain(shutdown_rx.clone()));
    let connections = web::serve::ConnectionLimits { clock: clock.clone(), ..options.connections };
    let server = tokio::spawn(web::serve::serve(listener, tls, app, connections, shutdown_rx));
    Ok(Running {
        addr,
        telemetry,
        shutdown,
        server,
        sampler,
        lab,
        audit,
        alerts,
        alert_engine,
        usage,
        usage_engine,
        jobs,
        jobs_engine,
    })
}

impl Running {
    /// The address actually bound (port 0 resolved).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// The GPU lab.
    pub fn lab(&self) -> &Arc<lab::Lab> {
        &self.lab
    }

    /// The alerts: their events, rules and stored history.
    pub fn alerts(&self) -> &alerts::Alerts {
        &self.alerts
    }

    /// Stops accepting, closes every WebSocket with "going away", and stops sampling.
    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.shutdown.send(true);
        let served = self.server.await.map_err(std::io::Error::other)?;
        // Cancels lab runs and releases their GPUs; joining the workers blocks.
        let lab = self.lab.clone();
        let _ = tokio::task::spawn_blocking(move || lab.shutdown()).await;
        self.sampler.stop();
        let engine = self.alert_engine;
        let _ = tokio::task::spawn_blocking(move || engine.join()).await;
        let alerts = self.alerts;
        let _ = tokio::task::spawn_blocking(move || alerts.sync()).await;
        // The accounting thread has seen the shutdown: joining it writes its last sums.
        let (engine, usage) = (self.usage_engine, self.usage);
        let _ = tokio::task::spawn_blocking(move || {
            let _ = engine.join();
            usage.sync();
        })
        .await;
        // Joining the jobs' thread writes the running jobs as they stand.
        let (engine, jobs) = (self.jobs_engine, self.jobs);
        let _ = tokio::task::spawn_blocking(move || {
            let _ = engine.join();
            jobs.sync();
        })
        .await;
        let _ = self.audit.await;
        served
    }
}

/// Serves until `signal` completes, then shuts down cleanly.
pub async fn run(config: Config, signal: impl Future<Output = ()>) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if let Some(count) = config.simulate
        && let Some(fault) = config.faults.iter().find(|f| f.device() >= count)
    {
        anyhow::bail!(
            "--simulate-fault names GPU {}, but --simulate {count} shows GPUs 0 to {}; name one of those",
            fault.device(),
            count - 1
        );
    }
    // Root's Lab worker runs as --lab-user: an unknown one stops start-up, before anything is opened.
    let worker_user = lab::isolated::lab_user(&config.lab_user)?;
    // A bad alerts file stops start-up before anything is opened.
    let alerts = match &config.alerts_file {
        Some(path) => {
            let loaded = alerts::AlertsConfig::load(path)?;
            tracing::info!("alert rules from {}", path.display());
            loaded
        }
        None => alerts::AlertsConfig::default(),
    };
    let tokens = std::env::var("GPUDASH_TOKENS").ok();
    let auth = auth::AuthConfig::load(config.auth_file.as_deref(), tokens.as_deref())?;
    let mut auth = auth;
    auth.session = config.session_lifetime;
    auth.admin_session = config.admin_session_lifetime;
    if config.proxy.is_some()
        && let Some(refusal) =
            auth::proxy::unbelievable(&config.site.trusted_proxies, !config.site.proxy_users.uids.is_empty())
    {
        anyhow::bail!("{refusal}");
    }
    let signs_in = !auth.tokens.is_empty() || config.proxy.is_some() || config.oidc.is_some();
    // A bad user map, or an OIDC provider that cannot be used, stops start-up.
    let (proxy, oidc) = open::sign_in(&config).await?;
    // A bad web config file stops start-up too.
    let scrapers = match &config.web_config_file {
        Some(path) => {
            let users = auth::ScrapeUsers::load(path)?;
            tracing::info!("/metrics takes basic auth from {} user(s) of {}", users.len(), path.display());
            Some(Arc::new(users))
        }
        None => None,
    };
    let exposed = config.exposed();
    if exposed && !signs_in {
        if !config.allow_anonymous {
            anyhow::bail!(
                "refusing to serve on {}{} without authentication: anyone who can reach it could run GPU experiments.\n\
                 Configure tokens (`gpudash token` prints one; put it in an auth file given with --auth-file, or in \
                 GPUDASH_TOKENS=\"user:role:token\"), or pass --allow-anonymous if this network is trusted or a \
                 proxy in front authenticates everyone",
                config.listen,
                if config.site.public.is_empty() { String::new() } else { " and the public URLs given".to_owned() },
            );
        }
        tracing::warn!(
            "serving on {} with no authentication (--allow-anonymous): anyone who can reach it may run experiments",
            config.listen
        );
    }
    let open_files = web::serve::raise_open_file_limit();
    let listener =
        web::serve::listen(config.listen).with_context(|| format!("cannot listen on '{}'", config.listen))?;
    // Loading NVML blocks (it opens the driver): keep it off the runtime's workers.
    let source = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || open_source(&config)).await.context("opening the GPU source")?
    };
    let store = open::store(config.data_dir.clone(), config.simulate.is_some(), config.retention).await?;
    let options = Options {
        alerts,
        alerts_file: config.alerts_file.clone(),
        auth_file: config.auth_file.clone(),
        alert_webhooks: config.alert_webhooks.clone(),
        interval: config.interval,
        store,
        lab: lab::LabOptions {
            config: config.lab.clone(),
            worker: config.lab_worker.clone(),
            worker_user,
            ..lab::LabOptions::default()
        },
        // The lab's part of --simulate-fault (wrong-result); the simulator injects the rest. The simulator's
        // processes make GPUs busy for the lab as NVML's do on hardware.
        simulated_lab: lab::SimulatedLab {
            probe: Some(Arc::new(
                lab::guards::SimulatedProbe::with_wrong_results(wiring::lab::faulty_gpus(&config.faults))
                    .following_simulator(),
            )),
            ..lab::SimulatedLab::default()
        },
        exposed_without_auth: exposed && !signs_in,
        auth,
        tls: config.tls_cert.clone().zip(config.tls_key.clone()),
        site: config.site.clone(),
        allow_anonymous: config.allow_anonymous,
        hostname: config.hostname.clone(),
        fleet: config.fleet.clone(),
        audit_retention: config.audit_retention,
        connections: web::serve::ConnectionLimits {
            max: web::serve::max_connections(config.max_connections, open_files),
            per_client: config.max_connections_per_client,
            exempt: config.site.trusted_proxies.clone(),
            ..web::serve::ConnectionLimits::default()
        },
        idle: config.idle,
        jobs: config.jobs,
        allow_signals: config.allow_signals,
        read_only: config.read_only,
        proxy,
        oidc,
        scrapers,
        web_config_file: config.web_config_file.clone(),
        metrics_client_ca: config.metrics_client_ca.clone(),
        identity: telemetry::identity::IdentityConfig::from_args(&config.identity),
    };
    let running = start_with(listener, source, options).await.context("cannot start the sampler")?;
    let scheme = if config.tls_cert.is_some() { "https" } else { "http" };
    tracing::info!("gpudash {} serving on {scheme}://{}", env!("CARGO_PKG_VERSION"), running.addr());
    signal.await;
    tracing::info!("shutting down");
    running.shutdown().await.context("the server stopped with an error")
}
