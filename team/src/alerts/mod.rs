//! Alerts: rules evaluated on every sample (off the sampling threads), alerts stored in the
//! history database, and deliveries (webhooks, the page's notifications) that never block sampling.
//!
//! [`Alerts`] is the handle everything else holds: the engine thread ([`engine`]) hands it each
//! reading, the web layer lists, silences and subscribes through it, and deliveries
//! [`Alerts::subscribe`] to the [`AlertEvent`]s it publishes (fire, resolve, silence).

pub mod config;
pub mod deliver;
pub mod engine;
mod rules;
mod state;
mod summary;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::alerts::{
    Alert, AlertEvent, MAX_SILENCES_PER_USER, Rule, RuleSummary, Silence, Subscription, SubscriptionKind, WebhookStatus,
};
use shared::firing::FiringCounts;
use tokio::sync::{broadcast, watch};

pub use config::{AlertsConfig, AlertsFileError, Rules, Webhook, WebhookFormat};
pub use deliver::Deliveries;
pub use rules::Inputs;
pub use rules::oom::OomSignal;
pub use state::{Book, Change, ChangeKind, Key};

use base::sync::lock;
use store::alerts::{AlertFilter, AlertStore, AlertStoreError, SubscribeRefused};

/// Alert events a slow subscriber may fall behind before it misses some.
const EVENT_BACKLOG: usize = 1024;
/// Most subscriptions one user may have.
pub const MAX_SUBSCRIPTIONS: u32 = 32;

/// Why a silence was not set, or not ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SilenceRefused {
    #[error(
        "{by} already has {held} silences in force; one user may have at most {MAX_SILENCES_PER_USER}: \
         end one first"
    )]
    TooMany { by: String, held: usize },
    #[error("no silence {0} in force; GET /api/alerts lists them")]
    NotFound(u64),
    #[error("silence {id} is {by}'s: only who set it or an admin may end it")]
    NotYours { id: u64, by: String },
}

type WebhookReport = Box<dyn Fn() -> Vec<WebhookStatus> + Send + Sync>;
type OomSource = Box<dyn Fn(u64) -> Vec<OomSignal> + Send + Sync>;

/// A shared handle to the alerts of one server.
#[derive(Clone)]
pub struct Alerts {
    inner: Arc<Inner>,
}

struct Inner {
    book: Mutex<Book>,
    /// The silences in force (and ones ending later), read by every evaluation.
    silences: Mutex<Vec<Silence>>,
    store: AlertStore,
    events: broadcast::Sender<AlertEvent>,
    config: watch::Sender<Arc<AlertsConfig>>,
    reload_error: Mutex<Option<String>>,
    webhooks: Mutex<Option<WebhookReport>>,
    /// The bridge's out-of-memory errors, read at every evaluation.
    ooms: Mutex<Option<OomSource>>,
    /// Resolved alerts older than this are deleted.
    keep: Duration,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts").field("firing", &self.firing_count()).finish_non_exhaustive()
    }
}

impl Alerts {
    /// Opens the alerts kept in `store` (blocking: it reads them): the alerts still firing there
    /// are carried on, not fired again; resolved ones older than `keep` are deleted.
    pub fn open(store: AlertStore, config: AlertsConfig, keep: Duration) -> Result<Self, AlertStoreError> {
        let now = telemetry::now_ms();
        let (firing, next_id) = store.firing()?;
        if !firing.is_empty() {
            tracing::info!("{} alerts were firing when gpudash stopped; carrying them on", firing.len());
        }
        let silences = store.silences(now)?;
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let alerts = Self {
            inner: Arc::new(Inner {
                book: Mutex::new(Book::new(next_id, firing, now)),
                silences: Mutex::new(silences),
                store,
                events,
                config: watch::Sender::new(Arc::new(config)),
                reload_error: Mutex::new(None),
                webhooks: Mutex::new(None),
                ooms: Mutex::new(None),
                keep,
            }),
        };
        alerts.prune(now);
        Ok(alerts)
    }

    /// Alerts kept in memory only (`--no-history`, and tests).
    pub fn in_memory(config: AlertsConfig) -> Result<Self, AlertStoreError> {
        Self::open(AlertStore::memory()?, config, store::Retention::default().minute)
    }

    /// Every fire, resolve and silence from now on (deliveries and the WebSocket listen here).
    pub fn subscribe(&self) -> broadcast::Receiver<AlertEvent> {
        self.inner.events.subscribe()
    }

    /// The alerts file as it runs now; changes when SIGHUP loads a good one (webhooks follow it).
    pub fn config(&self) -> watch::Receiver<Arc<AlertsConfig>> {
        self.inner.config.subscribe()
    }

    /// Every rule as it runs now, in [`Rule::ALL`] order.
    pub fn rules(&self) -> Vec<RuleSummary> {
        summary::summaries(&self.inner.config.borrow().rules)
    }

    /// Why the last reload refused the alerts file, if it did.
    pub fn reload_error(&self) -> Option<String> {
        lock(&self.inner.reload_error).clone()
    }

    /// Re-reads the alerts file (on SIGHUP): a good file replaces the rules and webhooks; a bad one
    /// is logged and kept as [`Alerts::reload_error`], and the rules already running keep running.
    pub fn reload(&self, path: &Path) -> Result<(), AlertsFileError> {
        match AlertsConfig::load(path) {
            Ok(config) => {
                tracing::info!("alerts file {} reloaded", path.display());
                *lock(&self.inner.reload_error) = None;
                self.inner.config.send_replace(Arc::new(config));
                Ok(())
            }
            Err(e) => {
                tracing::error!("{e}; the rules already running keep running");
                // Shown to every signed-in viewer: no webhook's token, whatever the message quotes.
                *lock(&self.inner.reload_error) = Some(deliver::format::redact_urls(&e.to_string()));
                Err(e)
            }
        }
    }

    /// How many alerts are firing (silenced ones included).
    pub fn firing_count(&self) -> u32 {
        lock(&self.inner.book).firing_count()
    }

    /// The firing alerts by severity, silenced ones apart.
    pub fn counts(&self) -> FiringCounts {
        FiringCounts::of(lock(&self.inner.book).firing())
    }

    /// True when alerts outlive the process (kept in the history database).
    pub fn persistent(&self) -> bool {
        self.inner.store.persistent()
    }

    /// Lets deliveries report on their webhooks in `GET /api/alerts`.
    pub fn report_webhooks(&self, report: impl Fn() -> Vec<WebhookStatus> + Send + Sync + 'static) {
        *lock(&self.inner.webhooks) = Some(Box::new(report));
    }

    /// Lets the `oom` rule read the out-of-memory errors attached PyTorch processes reported.
    pub fn watch_ooms(&self, source: impl Fn(u64) -> Vec<OomSignal> + Send + Sync + 'static) {
        *lock(&self.inner.ooms) = Some(Box::new(source));
    }

    /// The out-of-memory errors to evaluate at `now_ms` (none before [`Alerts::watch_ooms`]).
    pub fn ooms(&self, now_ms: u64) -> Vec<OomSignal> {
        lock(&self.inner.ooms).as_ref().map(|source| source(now_ms)).unwrap_or_default()
    }

    /// What each webhook's deliveries look like now.
    pub fn webhooks(&self) -> Vec<WebhookStatus> {
        lock(&self.inner.webhooks).as_ref().map(|report| report()).unwrap_or_default()
    }

    /// Evaluates every rule on one reading: stores what changed and announces fires, resolves
    /// and silences. Returns the changes (for tests and benchmarks).
    pub fn evaluate(&self, input: &Inputs<'_>, now_ms: u64) -> Vec<Change> {
        let config = self.inner.config.borrow().clone();
        let silences = lock(&self.inner.silences).clone();
        let mut book = lock(&self.inner.book);
        let changes = book.evaluate(&config.rules, input, &silences, now_ms);
        self.publish(&book, &changes);
        changes
    }

    fn publish(&self, book: &Book, changes: &[Change]) {
        let after = book.firing_count();
        // Counted back from the end, so each event carries the count right after its own change.
        let mut firing = after;
        let mut counts = vec![0; changes.len()];
        for (i, change) in changes.iter().enumerate().rev() {
            counts[i] = firing;
            match change.kind {
                ChangeKind::Fired => firing = firing.saturating_sub(1),
                ChangeKind::Resolved => firing += 1,
                ChangeKind::Updated | ChangeKind::Rated | ChangeKind::Silenced => {}
            }
        }
        for (change, firing) in changes.iter().zip(counts) {
            self.inner.store.save(change.alert.clone());
            if change.kind == ChangeKind::Updated {
                continue;
            }
            log(change);
            // Nobody listening is normal.
            let _ = self.inner.events.send(AlertEvent { alert: change.alert.clone(), firing });
        }
    }

    /// Stored alerts that pass `filter` (blocking).
    pub fn list(&self, filter: AlertFilter) -> Result<Vec<Alert>, AlertStoreError> {
        let mut alerts = self.inner.store.list(filter)?;
        shared::alerts::sort_for_display(&mut alerts);
        Ok(alerts)
    }

    /// The silences in force now.
    pub fn silences(&self, now_ms: u64) -> Vec<Silence> {
        lock(&self.inner.silences).iter().filter(|s| s.from_ms <= now_ms && now_ms < s.until_ms).cloned().collect()
    }

    /// Silences `rule` on a GPU (blocking), unless its author already has
    /// [`MAX_SILENCES_PER_USER`] in force; a firing alert it covers is announced as silenced.
    pub fn silence(&self, silence: Silence) -> Result<Result<Silence, SilenceRefused>, AlertStoreError> {
        let now = telemetry::now_ms();
        let stored = {
            // Held across the insert, so two racing requests cannot both take the last place.
            let mut silences = lock(&self.inner.silences);
            let held = silences.iter().filter(|s| s.by == silence.by && s.from_ms <= now && now < s.until_ms).count();
            if held >= MAX_SILENCES_PER_USER {
                return Ok(Err(SilenceRefused::TooMany { by: silence.by, held }));
            }
            let stored = self.inner.store.add_silence(silence)?;
            silences.push(stored.clone());
            stored
        };
        self.reapply_silences();
        Ok(Ok(stored))
    }

    /// Ends silence `id` now for `by` (blocking): only its author may, or anyone when `admin`.
    pub fn unsilence(
        &self,
        id: u64,
        by: &str,
        admin: bool,
    ) -> Result<Result<Silence, SilenceRefused>, AlertStoreError> {
        let now = telemetry::now_ms();
        let found = lock(&self.inner.silences).iter().find(|s| s.id == id && now < s.until_ms).cloned();
        let Some(silence) = found else { return Ok(Err(SilenceRefused::NotFound(id))) };
        if silence.by != by && !admin {
            return Ok(Err(SilenceRefused::NotYours { id, by: silence.by }));
        }
        let ended = self.inner.store.end_silence(id, now)?;
        lock(&self.inner.silences).retain(|s| s.id != id);
        self.reapply_silences();
        Ok(if ended { Ok(silence) } else { Err(SilenceRefused::NotFound(id)) })
    }

    fn reapply_silences(&self) {
        let now = telemetry::now_ms();
        let silences = lock(&self.inner.silences).clone();
        let mut book = lock(&self.inner.book);
        let changes = book.apply_silences(&silences, now);
        self.publish(&book, &changes);
    }

    /// `user`'s subscriptions (blocking).
    pub fn subscriptions(&self, user: &str) -> Result<Vec<Subscription>, AlertStoreError> {
        self.inner.store.subscriptions(user)
    }

    /// Adds a subscription for `user` (blocking).
    pub fn add_subscription(
        &self,
        user: &str,
        kind: SubscriptionKind,
    ) -> Result<Result<Subscription, SubscribeRefused>, AlertStoreError> {
        self.inner.store.subscribe(user, kind, MAX_SUBSCRIPTIONS)
    }

    /// Deletes `user`'s subscription `id` (blocking); `false` when it is not theirs or not there.
    pub fn remove_subscription(&self, user: &str, id: u64) -> Result<bool, AlertStoreError> {
        self.inner.store.unsubscribe(user, id)
    }

    /// Deletes alerts resolved longer ago than the rollup retention, and silences ended as long ago (blocking).
    pub fn prune(&self, now_ms: u64) {
        let keep = u64::try_from(self.inner.keep.as_millis()).unwrap_or(u64::MAX);
        lock(&self.inner.silences).retain(|s| s.until_ms > now_ms);
        match self.inner.store.prune(now_ms.saturating_sub(keep)) {
            Ok(0) => {}
            Ok(n) => tracing::info!("deleted {n} resolved alerts and ended silences past the retention"),
            Err(e) => tracing::error!("could not delete old alerts: {e}"),
        }
    }

    /// Waits until every change so far is stored (blocking).
    pub fn sync(&self) -> Result<(), AlertStoreError> {
        self.inner.store.sync()
    }
}

fn log(change: &Change) {
    let a = &change.alert;
    let what = match change.kind {
        ChangeKind::Fired => "fired",
        ChangeKind::Resolved => "resolved",
        ChangeKind::Silenced if a.silenced.is_some() => "silenced",
        ChangeKind::Silenced => "no longer silenced",
        ChangeKind::Updated => "updated",
        ChangeKind::Rated => "re-rated",
    };
    tracing::info!(target: "gpudash::alerts", id = a.id, rule = a.rule.as_str(), gpu = a.gpu_index, severity = a.severity.as_str(), "alert {what}: {}", a.message);
}

/// The rule name `name`, or a message listing the rules.
pub fn parse_rule(name: &str) -> Result<Rule, String> {
    Rule::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Rule::ALL.iter().map(|r| r.as_str()).collect();
        format!("'{name}' is not a rule; the rules are {}", names.join(", "))
    })
}
