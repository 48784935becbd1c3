//! SIGHUP (`systemctl reload gpudash`): the alerts file, the auth file, the web config file and the
//! OIDC provider (discovery, keys, client secret file) are read again. A bad one is refused with a
//! logged error and what runs stays; each sign-in setting's reload is audited.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use team::audit::{Action, Audit, Event, Outcome};
use team::{alerts, auth};

/// What SIGHUP re-reads, and where it reports.
#[derive(Debug)]
pub struct Reloadable {
    pub alerts: alerts::Alerts,
    /// `--alerts-file`; `None` keeps the rules as they are.
    pub alerts_file: Option<PathBuf>,
    pub auth: Arc<auth::Auth>,
    /// `--auth-file`; `None` keeps the tokens as they are.
    pub auth_file: Option<PathBuf>,
    /// `--web-config-file`; `None` keeps `/metrics` as it is.
    pub web_config_file: Option<PathBuf>,
    /// `--oidc-issuer`: its discovery document, keys and client secret file are read again.
    pub oidc: Option<Arc<auth::oidc::Oidc>>,
    pub audit: Audit,
}

/// Re-reads the files of `reloadable` on each SIGHUP until shutdown; without any, SIGHUP is
/// logged and changes nothing. Always handled: SIGHUP's default action would end the process.
pub fn on_sighup(reloadable: Reloadable, mut shutdown: watch::Receiver<bool>) -> std::io::Result<()> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let reloadable = Arc::new(reloadable);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = hangups.recv() => {
                    if reloadable.alerts_file.is_none()
                        && reloadable.auth_file.is_none()
                        && reloadable.web_config_file.is_none()
                        && reloadable.oidc.is_none()
                    {
                        tracing::info!(
                            "SIGHUP: nothing to re-read (no --alerts-file, --auth-file, --web-config-file or --oidc-issuer)"
                        );
                        continue;
                    }
                    let files = reloadable.clone();
                    // Reading the files blocks.
                    let _ = tokio::task::spawn_blocking(move || files.reload()).await;
                    if let Some(oidc) = &reloadable.oidc {
                        tokio::select! {
                            () = reloadable.reload_provider(oidc) => {}
                            _ = shutdown.changed() => return,
                        }
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    });
    Ok(())
}

impl Reloadable {
    fn reload(&self) {
        if let Some(path) = &self.alerts_file {
            let _ = self.alerts.reload(path);
        }
        if let Some(path) = &self.auth_file {
            self.reload_tokens(path);
        }
        if let Some(path) = &self.web_config_file {
            self.reload_scrapers(path);
        }
    }

    /// The OIDC provider's discovery document, keys and client secret read again; on failure the
    /// provider in force stays. Signed-in sessions are not touched either way.
    async fn reload_provider(&self, oidc: &auth::oidc::Oidc) {
        let target = oidc.config().issuer.clone();
        let (outcome, detail) = match oidc.reload().await {
            Ok(()) => {
                tracing::info!("OIDC provider {target} reloaded");
                (Outcome::Ok, "discovery, keys and client secret read again".to_owned())
            }
            Err(refused) => {
                tracing::error!("{refused}; the OIDC settings already in force stay");
                (Outcome::Failed, refused.to_string())
            }
        };
        self.audited(&target, outcome, &detail);
    }

    /// The web config file's accounts put in force, or the file refused and the accounts in force kept.
    fn reload_scrapers(&self, path: &std::path::Path) {
        let target = path.display().to_string();
        let reloaded = auth::ScrapeUsers::load(path).map_err(|e| e.to_string()).and_then(|users| {
            let count = users.len();
            self.auth.reload_scrapers(users).map(|()| count).map_err(|e| e.to_string())
        });
        let (outcome, detail) = match reloaded {
            Ok(count) => {
                tracing::info!("web config file {target} reloaded: {count} scraper account(s)");
                (Outcome::Ok, format!("{count} scraper account(s) for /metrics"))
            }
            Err(refused) => {
                tracing::error!("{refused}; the scraper accounts already in force stay");
                (Outcome::Failed, refused)
            }
        };
        self.audited(&target, outcome, &detail);
    }

    /// The auth file's tokens (with `GPUDASH_TOKENS`, which the process was started with) put in
    /// force, or the file refused and the tokens in force kept.
    fn reload_tokens(&self, path: &std::path::Path) {
        let env = std::env::var("GPUDASH_TOKENS").ok();
        let reloaded = auth::AuthConfig::load(Some(path), env.as_deref()).map_err(auth::ReloadRefused::from);
        let target = path.display().to_string();
        let (outcome, detail) = match reloaded.and_then(|config| self.auth.reload(config)) {
            Ok(changed) => {
                tracing::info!("auth file {target} reloaded: {changed}");
                (Outcome::Ok, changed.to_string())
            }
            Err(refused) => {
                tracing::error!("{refused}; the tokens already in force stay");
                (Outcome::Failed, refused.to_string())
            }
        };
        self.audited(&target, outcome, &detail);
    }

    /// A reload of `target` in the audit log, as `auth.reload` by gpudash on SIGHUP.
    fn audited(&self, target: &str, outcome: Outcome, detail: &str) {
        let event = Event { user: "gpudash", client: "SIGHUP", action: Action::AuthReload, target, outcome, detail };
        self.audit.record(&event);
    }
}
