//! Opening what start-up needs from disk, off the async runtime: SQLite opens (and reads back
//! what it keeps) on a blocking thread, so nothing blocks the runtime's workers. Also the small
//! wiring between the alerts and the parts that feed or deliver them, and the sign-in settings.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use store::{self, Store};
use team::{alerts, audit, auth, bridge, reservations};

/// Runs `open` on a blocking thread; its error (and a panic there) as an I/O error for start-up.
async fn blocking<T: Send + 'static, E: std::error::Error + Send + Sync + 'static>(
    open: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> std::io::Result<T> {
    base::sync::off_runtime(open).await.map_err(std::io::Error::other)?.map_err(std::io::Error::other)
}

/// The history database in `dir`, or none (`--no-history`).
pub async fn store(
    dir: Option<PathBuf>,
    simulated: bool,
    retention: store::Retention,
) -> std::io::Result<Option<Store>> {
    let Some(dir) = dir else {
        tracing::warn!("history is off (--no-history): charts show only what arrives while the page is open");
        return Ok(None);
    };
    let store = blocking(move || Store::open(&dir, simulated, retention)).await?;
    tracing::info!("history in {}", store.path().display());
    Ok(Some(store))
}

/// The recorder's connection to the history database, where there is one.
pub async fn recorder(store: Option<&Store>) -> std::io::Result<Option<store::Recorder>> {
    let Some(store) = store.cloned() else { return Ok(None) };
    blocking(move || store.recorder()).await.map(Some)
}

/// The audit log, kept in the history database, or in memory with `--no-history`.
pub async fn audit(store: Option<&Store>) -> std::io::Result<audit::Audit> {
    match store.map(|s| s.path().to_owned()) {
        Some(path) => blocking(move || audit::Audit::sqlite(&path)).await,
        None => Ok(audit::Audit::memory()),
    }
}

/// The usage sums, kept in the history database, or in memory with `--no-history`.
pub async fn usage(store: Option<&Store>) -> std::io::Result<store::usage::UsageStore> {
    let path = store.map(|s| s.path().to_owned());
    blocking(move || match path {
        Some(path) => store::usage::UsageStore::open(&path),
        None => {
            tracing::warn!("usage sums are kept in memory only (--no-history): a restart forgets them");
            store::usage::UsageStore::memory()
        }
    })
    .await
}

/// The jobs of `telemetry`'s GPUs, whose processes are read every `period`, kept in the history
/// database, or in memory with `--no-history` (opening closes the jobs an earlier run left
/// running: off the runtime's workers).
pub async fn jobs(
    store: Option<&Store>,
    telemetry: &telemetry::Telemetry,
    period: std::time::Duration,
    options: team::jobs::JobsOptions,
) -> std::io::Result<team::jobs::Jobs> {
    let path = store.map(|s| s.path().to_owned());
    let rows = blocking(move || match path {
        Some(path) => store::jobs::JobStore::open(&path, telemetry::now_ms()),
        None => {
            tracing::warn!("jobs are kept in memory only (--no-history): a restart forgets them");
            store::jobs::JobStore::memory()
        }
    })
    .await?;
    let gpus = team::jobs::Jobs::gpu_facts(telemetry);
    Ok(team::jobs::Jobs::new(rows, &gpus, period, options.limits, options.energy))
}

/// The reservations, kept in the history database, or in memory with `--no-history` (opening reads
/// the current ones: off the runtime's workers).
pub async fn reservations(store: Option<&Store>) -> std::io::Result<reservations::Reservations> {
    let path = store.map(|s| s.path().to_owned());
    if path.is_none() {
        tracing::warn!("reservations are kept in memory only (--no-history): a restart forgets them");
    }
    tokio::task::spawn_blocking(move || reservations::Reservations::open(path.as_deref(), telemetry::now_ms()))
        .await
        .map_err(std::io::Error::other)?
        .map_err(std::io::Error::other)
}

/// The alerts, kept in the history database, or in memory with `--no-history` (reading the
/// firing ones back blocks: off the runtime's workers).
pub async fn alerts(store: Option<&Store>, config: alerts::AlertsConfig) -> std::io::Result<alerts::Alerts> {
    let (path, keep) = match store {
        Some(store) => (Some(store.path().to_owned()), store.retention().minute),
        None => (None, store::Retention::default().minute),
    };
    tokio::task::spawn_blocking(move || {
        let kept = match &path {
            Some(path) => store::alerts::AlertStore::open(path),
            None => {
                tracing::warn!("alerts are kept in memory only (--no-history): a restart forgets them");
                store::alerts::AlertStore::memory()
            }
        };
        alerts::Alerts::open(kept.map_err(std::io::Error::other)?, config, keep).map_err(std::io::Error::other)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Starts the webhook deliveries of `alerts` (the file's webhooks and `flags`), shows their
/// status in `GET /api/alerts`, and hands them the webhooks of every alerts file reloaded.
pub fn deliver_alerts(
    alerts: &alerts::Alerts,
    flags: Vec<url::Url>,
    host: &str,
    mut shutdown: watch::Receiver<bool>,
) -> alerts::deliver::Deliveries {
    let mut config = alerts.config();
    let deliveries = alerts::deliver::start_for(&config.borrow_and_update(), &flags, host, alerts.subscribe());
    let reported = deliveries.clone();
    alerts.report_webhooks(move || reported.status());
    let kept = deliveries.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = config.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let reloaded = config.borrow_and_update().clone();
                    deliveries.replace(alerts::deliver::webhooks_for(&reloaded, &flags));
                }
                _ = shutdown.changed() => return,
            }
        }
    });
    kept
}

/// Tells owners about their jobs through `deliveries`' job webhooks and the alerts file's
/// `[smtp]`, as its `[jobs]` says (read again on every reload); links go to the first `--public-url`.
pub fn notify_jobs(
    alerts: &alerts::Alerts,
    deliveries: alerts::deliver::Deliveries,
    jobs: &team::jobs::Jobs,
    host: &shared::HostInfo,
    site: &web::site::Site,
    shutdown: watch::Receiver<bool>,
) -> team::jobs::notify::Notifier {
    let page = site.public.first().map(|p| {
        let port = p.port.map(|port| format!(":{port}")).unwrap_or_default();
        format!("{}://{}{port}/", p.scheme, p.host)
    });
    let origin = team::jobs::notify::compose::Origin { host: host.hostname.clone(), page, simulated: host.simulated };
    let backoff = std::time::Duration::from_secs(5);
    team::jobs::notify::Notifier::start(jobs.clone(), deliveries, origin, alerts.config(), shutdown, backoff)
}

/// The `oom` rule reads the out-of-memory errors attached PyTorch processes reported.
pub fn watch_ooms(alerts: &alerts::Alerts, bridge: &Arc<bridge::Registry>, jobs: &team::jobs::Jobs) {
    let bridge = Arc::downgrade(bridge);
    let jobs = jobs.clone();
    alerts.watch_ooms(move |now| {
        let Some(bridge) = bridge.upgrade() else { return Vec::new() };
        bridge
            .recent_ooms(now)
            .into_iter()
            .inspect(|oom| {
                // The job with the process ends as out of memory (marking again changes nothing).
                jobs.mark(oom.pid, shared::jobs::Outcome::Oom, oom.record.at_ms);
            })
            .map(|oom| alerts::OomSignal {
                pid: oom.pid,
                gpu_uuid: oom.gpu_uuid,
                device: oom.record.device,
                owner: oom.owner,
                reporter: oom.reporter,
                at_ms: oom.record.at_ms,
                what: oom.record.figures(),
            })
            .collect()
    });
}

/// The sign-in settings put together: the user map read into the auth proxy's and the OIDC provider's
/// settings, and the provider discovered. A bad map or a provider that cannot be used stops start-up.
pub async fn sign_in(
    config: &crate::config::Config,
) -> anyhow::Result<(Option<auth::ProxyConfig>, Option<Arc<auth::oidc::Oidc>>)> {
    let user_map = match &config.user_map {
        Some(path) => {
            let map = auth::names::UserMap::load(path)?;
            tracing::info!("{} sign-in name(s) mapped to owner names by {}", map.len(), path.display());
            map
        }
        None => auth::names::UserMap::default(),
    };
    let proxy = config.proxy.clone().map(|proxy| auth::ProxyConfig { user_map: user_map.clone(), ..proxy });
    let oidc = match config.oidc.clone() {
        Some(settings) => {
            let settings = auth::oidc::OidcConfig { user_map, ..settings };
            let issuer = settings.issuer.clone();
            let oidc = auth::oidc::Oidc::discover(settings, base::clock::Clock::system()).await?;
            tracing::info!("people sign in with the OIDC provider {issuer}");
            Some(Arc::new(oidc))
        }
        None => None,
    };
    Ok((proxy, oidc))
}
