//! The audit log: every state-changing action (experiment start/cancel,
//! empty_cache, login success/failure) with who, when, from where and how it
//! ended. Kept in the history database when there is one (written on the
//! store's audit thread, so recording never blocks a handler), else in memory.
//! Denials of every kind are aggregated ([`denied`]), entries older than the
//! retention are deleted, and the log holds at most [`Caps`] rows: denials and
//! allowed actions are capped apart, so no flood of denials can push out a
//! login or a reservation.

mod action;
pub mod denied;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use shared::auth::AuditOutcome as Outcome;
use shared::auth::{AuditEntry, AuditQuery};
use tokio::sync::watch;

pub use self::action::Action;
use self::denied::{Denial, DeniedWindows, Summary};
use base::sync::lock;
use store::audit::{AuditRow, AuditStore, AuditStoreError};
use telemetry::now_ms;

/// Rows kept at most, denials and the rest (allowed or failed actions) apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub allowed: usize,
    pub denied: usize,
}

/// The caps of the history database's audit table.
pub const SQLITE_CAPS: Caps = Caps { allowed: 500_000, denied: 20_000 };
/// The caps of the in-memory log (with `--no-history`).
pub const MEMORY_CAPS: Caps = Caps { allowed: 10_000, denied: 2_000 };
/// How long entries are kept unless `--audit-days` says otherwise.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(180 * 24 * 3600);
/// How often closed windows of denials are written as summaries.
const FLUSH_EVERY: Duration = Duration::from_secs(10);
/// How often entries past the retention are deleted (also once at start).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Longest detail stored for a denied attempt (the rest is cut).
const MAX_DENIED_DETAIL: usize = 200;

/// What happened, before it gets an id and a time.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    pub user: &'a str,
    pub client: &'a str,
    pub action: Action,
    pub target: &'a str,
    pub outcome: Outcome,
    pub detail: &'a str,
}

#[derive(Debug)]
enum Backend {
    /// The history database's audit table, written on its own thread.
    Sqlite(AuditStore),
    Memory(Mutex<MemoryLog>),
}

/// The log without a database: denials and the rest in rings of their own.
#[derive(Debug, Default)]
struct MemoryLog {
    last_id: u64,
    allowed: VecDeque<AuditEntry>,
    denied: VecDeque<AuditEntry>,
}

#[derive(Debug)]
struct Shared {
    backend: Backend,
    denied: Mutex<DeniedWindows>,
    caps: Caps,
}

/// A shared handle to the audit log.
#[derive(Debug, Clone)]
pub struct Audit {
    shared: Arc<Shared>,
    /// Entries older than this are deleted.
    keep: Duration,
}

impl Audit {
    /// The log inside the database file at `path`.
    pub fn sqlite(path: &Path) -> Result<Self, AuditStoreError> {
        Ok(Self::with(Backend::Sqlite(AuditStore::open(path)?), SQLITE_CAPS))
    }

    /// A log that lives as long as the process (with `--no-history`).
    pub fn memory() -> Self {
        Self::with(Backend::Memory(Mutex::default()), MEMORY_CAPS)
    }

    fn with(backend: Backend, caps: Caps) -> Self {
        Self { shared: Arc::new(Shared { backend, denied: Mutex::default(), caps }), keep: DEFAULT_RETENTION }
    }

    #[cfg(test)]
    fn capped(self, caps: Caps) -> Self {
        let Ok(shared) = Arc::try_unwrap(self.shared) else { unreachable!("a fresh log has one handle") };
        Self { shared: Arc::new(Shared { caps, ..shared }), keep: self.keep }
    }

    /// The same log, keeping entries for `keep` (`--audit-days`) instead of 180 days.
    pub fn keeping(self, keep: Duration) -> Self {
        Self { keep, ..self }
    }

    /// Records an event; also logged, so nothing is lost if the database fails. A denial
    /// of any kind is aggregated as [`Audit::record_denied`] says.
    pub fn record(&self, event: &Event<'_>) {
        if event.outcome == Outcome::Denied {
            let Event { user, client, action, target, detail, .. } = *event;
            self.record_denied_at(now_ms(), &Denial { user, client, action, target, detail });
        } else {
            self.insert(now_ms(), event);
        }
    }

    /// Records a denied attempt (a wrong token, a role too low, someone else's process),
    /// aggregated: per client and action, the first denials of a minute are written
    /// as rows, the rest are counted into one row when the minute closes.
    pub fn record_denied(&self, user: &str, client: &str, action: Action, target: &str, detail: &str) {
        self.record_denied_at(now_ms(), &Denial { user, client, action, target, detail });
    }

    fn record_denied_at(&self, now: u64, denial: &Denial<'_>) {
        let (closed, write) = lock(&self.shared.denied).note(denial, now);
        if let Some(summary) = closed {
            self.insert_summary(now, &summary);
        }
        if write {
            let detail = cut(denial.detail, MAX_DENIED_DETAIL);
            let Denial { user, client, action, target, .. } = *denial;
            self.insert(now, &Event { user, client, action, target, outcome: Outcome::Denied, detail });
        }
    }

    /// Writes the summaries of windows of denials that have closed by `now`
    /// (of every window with `all`, at shutdown).
    pub fn flush_denied(&self, now: u64, all: bool) {
        let summaries = lock(&self.shared.denied).close(now, all);
        for summary in &summaries {
            self.insert_summary(now, summary);
        }
    }

    fn insert_summary(&self, now: u64, s: &Summary) {
        let (user, client, action, target, detail) = (&s.user, &s.client, s.action, &s.target, &s.detail);
        self.insert(now, &Event { user, client, action, target, outcome: Outcome::Denied, detail });
    }

    fn insert(&self, ts: u64, event: &Event<'_>) {
        tracing::info!(
            target: "gpudash::audit",
            user = event.user, client = event.client, action = event.action.id(), target = event.target,
            outcome = event.outcome.name(), "{}", event.detail
        );
        match &self.shared.backend {
            Backend::Sqlite(store) => store.insert(AuditRow {
                timestamp_ms: ts,
                user: event.user.to_owned(),
                client: event.client.to_owned(),
                action: event.action.id(),
                target: event.target.to_owned(),
                outcome: event.outcome,
                detail: event.detail.to_owned(),
            }),
            Backend::Memory(log) => {
                let mut log = lock(log);
                log.last_id += 1;
                let entry = AuditEntry {
                    id: log.last_id,
                    timestamp_ms: ts,
                    user: event.user.to_owned(),
                    client: event.client.to_owned(),
                    action: event.action.id().to_owned(),
                    target: event.target.to_owned(),
                    outcome: event.outcome,
                    detail: event.detail.to_owned(),
                    summary: String::new(),
                };
                let (ring, cap) = if event.outcome == Outcome::Denied {
                    (&mut log.denied, self.shared.caps.denied)
                } else {
                    (&mut log.allowed, self.shared.caps.allowed)
                };
                ring.push_back(entry);
                while ring.len() > cap {
                    ring.pop_front();
                }
            }
        }
    }

    /// Deletes the oldest rows past the caps, denials and the rest apart; returns how many
    /// (blocking). Only the database needs it: the memory rings never grow past them.
    fn cap(&self, allowed_too: bool) -> Result<usize, AuditStoreError> {
        match &self.shared.backend {
            Backend::Sqlite(store) => {
                store.cap(self.shared.caps.denied, allowed_too.then_some(self.shared.caps.allowed))
            }
            Backend::Memory(_) => Ok(0),
        }
    }

    /// Deletes the entries older than the retention; returns how many (blocking).
    pub fn prune(&self, now: u64) -> Result<usize, AuditStoreError> {
        let oldest = now.saturating_sub(u64::try_from(self.keep.as_millis()).unwrap_or(u64::MAX));
        match &self.shared.backend {
            Backend::Sqlite(store) => store.prune(oldest),
            Backend::Memory(log) => {
                let mut log = lock(log);
                let before = log.allowed.len() + log.denied.len();
                log.allowed.retain(|e| e.timestamp_ms >= oldest);
                log.denied.retain(|e| e.timestamp_ms >= oldest);
                Ok(before - log.allowed.len() - log.denied.len())
            }
        }
    }

    fn prune_logged(&self, now: u64) {
        match self.prune(now) {
            Ok(0) => {}
            Ok(n) => tracing::info!("deleted {n} audit entries older than the retention (--audit-days)"),
            Err(e) => tracing::error!("could not delete old audit entries: {e}"),
        }
        self.cap_logged(true);
    }

    fn cap_logged(&self, allowed_too: bool) {
        let caps = self.shared.caps;
        match self.cap(allowed_too) {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                "deleted the {n} oldest audit entries past the caps ({} denials, {} other entries)",
                caps.denied,
                caps.allowed
            ),
            Err(e) => tracing::error!("could not cap the audit log: {e}"),
        }
    }

    /// The newest entries that pass `query`'s filters, newest first (blocking: call
    /// from `spawn_blocking`). `query` is assumed valid ([`AuditQuery::validate`]).
    /// Sees every entry recorded before the call.
    pub fn list(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, AuditStoreError> {
        let mut entries = match &self.shared.backend {
            Backend::Sqlite(store) => store.list(query)?,
            Backend::Memory(log) => {
                let log = lock(log);
                let mut matching: Vec<AuditEntry> =
                    log.allowed.iter().chain(&log.denied).filter(|e| query.matches(e)).cloned().collect();
                matching.sort_unstable_by_key(|e| std::cmp::Reverse(e.id));
                matching.truncate(query.limit() as usize);
                matching
            }
        };
        for e in &mut entries {
            e.summary = action::summary(&e.user, &e.action, &e.target, e.outcome);
        }
        Ok(entries)
    }

    /// Writes closed windows of denials every few seconds and deletes old entries
    /// at start and hourly, until `stop` turns true; then writes every open window.
    pub async fn maintain(self, mut stop: watch::Receiver<bool>) {
        let mut flush = tokio::time::interval(FLUSH_EVERY);
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        loop {
            let prune_now = tokio::select! {
                _ = flush.tick() => false,
                _ = prune.tick() => true,
                _ = stop.wait_for(|stopping| *stopping) => break,
            };
            let audit = self.clone();
            // SQLite blocks: keep it off the runtime's workers.
            let _ = tokio::task::spawn_blocking(move || {
                if prune_now {
                    audit.prune_logged(now_ms());
                } else {
                    audit.flush_denied(now_ms(), false);
                    audit.cap_logged(false);
                }
            })
            .await;
        }
        let audit = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            audit.flush_denied(now_ms(), true);
            audit.sync();
        })
        .await;
    }

    /// Waits until every entry recorded so far is written (blocking).
    fn sync(&self) {
        if let Backend::Sqlite(store) = &self.shared.backend
            && let Err(e) = store.sync()
        {
            tracing::error!("could not finish writing the audit log: {e}");
        }
    }
}

/// `text` cut to at most `max` characters.
fn cut(text: &str, max: usize) -> &str {
    text.char_indices().nth(max).map_or(text, |(at, _)| &text[..at])
}

#[cfg(test)]
mod tests {
    use super::denied::{ROWS_PER_WINDOW, WINDOW_MS};
    use super::*;

    fn event(action: Action) -> Event<'static> {
        Event { user: "ana", client: "127.0.0.1", action, target: "GPU 0", outcome: Outcome::Ok, detail: "" }
    }

    fn both(dir: &tempfile::TempDir) -> [Audit; 2] {
        [Audit::sqlite(&dir.path().join("a.db")).unwrap(), Audit::memory()]
    }

    fn query() -> AuditQuery {
        AuditQuery::default()
    }

    #[test]
    fn both_backends_list_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        for audit in both(&dir) {
            audit.record(&event(Action::Login));
            audit.record(&event(Action::EmptyCache));
            let all = audit.list(&query()).unwrap();
            assert_eq!(all.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["empty_cache", "login"]);
            assert_eq!(audit.list(&AuditQuery { before: Some(all[0].id), ..query() }).unwrap().len(), 1);
        }
    }

    #[test]
    fn the_sqlite_log_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        Audit::sqlite(&path).unwrap().record(&event(Action::Login));
        assert_eq!(Audit::sqlite(&path).unwrap().list(&query()).unwrap().len(), 1);
    }

    #[test]
    fn a_flood_of_denials_writes_a_few_rows_and_one_exact_count() {
        let dir = tempfile::tempdir().unwrap();
        for audit in both(&dir) {
            for i in 0..20_000 {
                audit.record_denied_at(
                    1_000 + i / 10,
                    &Denial {
                        user: "unknown",
                        client: "10.0.0.9",
                        action: Action::Login,
                        target: "session",
                        detail: "x",
                    },
                );
            }
            audit.flush_denied(1_000 + WINDOW_MS, false);
            let rows = audit.list(&AuditQuery { limit: Some(1000), ..query() }).unwrap();
            assert_eq!(rows.len(), ROWS_PER_WINDOW as usize + 1, "{rows:?}");
            assert!(rows.iter().all(|r| r.outcome == Outcome::Denied && r.client == "10.0.0.9"));
            assert_eq!(
                rows[0].detail, "19995 more denied login attempts from 10.0.0.9 within a minute (last: x)",
                "the summary is the newest row"
            );
        }
    }

    #[test]
    fn nothing_counted_is_lost_at_shutdown() {
        let audit = Audit::memory();
        let denial =
            Denial { user: "unknown", client: "::1", action: Action::AuthBearer, target: "/api/devices", detail: "x" };
        for _ in 0..ROWS_PER_WINDOW + 3 {
            audit.record_denied_at(0, &denial);
        }
        audit.flush_denied(1, false);
        assert_eq!(audit.list(&query()).unwrap().len(), ROWS_PER_WINDOW as usize, "the window is still open");
        audit.flush_denied(1, true);
        let rows = audit.list(&query()).unwrap();
        assert!(rows[0].detail.starts_with("3 more denied auth.bearer attempts from ::1"), "{rows:?}");
        assert_eq!(rows[0].target, "/api/devices");
    }

    #[test]
    fn every_kind_of_denial_is_aggregated() {
        let audit = Audit::memory();
        for _ in 0..1000 {
            audit.record(&Event { user: "anonymous", outcome: Outcome::Denied, ..event(Action::ExperimentStart) });
        }
        let rows = audit.list(&AuditQuery { limit: Some(1000), ..query() }).unwrap();
        assert_eq!(rows.len(), ROWS_PER_WINDOW as usize, "the rest wait for the window's summary");
        audit.flush_denied(0, true);
        let rows = audit.list(&AuditQuery { limit: Some(1000), ..query() }).unwrap();
        assert!(rows[0].detail.starts_with("995 more denied experiment.start attempts from 127.0.0.1"), "{rows:?}");
    }

    #[test]
    fn denials_never_push_out_allowed_actions() {
        let dir = tempfile::tempdir().unwrap();
        for audit in both(&dir) {
            let audit = audit.capped(Caps { allowed: 3, denied: 5 });
            audit.insert(1, &event(Action::Login));
            audit.insert(2, &event(Action::ReservationCreate));
            for i in 0..50 {
                let client = format!("10.0.{i}.1");
                audit.insert(10 + i, &Event { client: &client, outcome: Outcome::Denied, ..event(Action::Login) });
            }
            audit.cap(true).unwrap();
            let rows = audit.list(&AuditQuery { limit: Some(1000), ..query() }).unwrap();
            let (denied, allowed): (Vec<_>, Vec<_>) = rows.iter().partition(|e| e.outcome == Outcome::Denied);
            assert_eq!(denied.len(), 5, "the newest denials are kept");
            assert_eq!(denied[0].client, "10.0.49.1");
            assert_eq!(allowed.iter().map(|e| e.timestamp_ms).collect::<Vec<_>>(), [2, 1], "nothing allowed lost");
            for t in 3..6 {
                audit.insert(100 + t, &event(Action::EmptyCache));
            }
            audit.cap(true).unwrap();
            let rows = audit.list(&AuditQuery { limit: Some(1000), outcome: Some(Outcome::Ok), ..query() }).unwrap();
            assert_eq!(rows.len(), 3, "allowed rows have a cap of their own");
        }
    }

    #[test]
    fn denied_details_are_cut_to_a_bounded_length() {
        let audit = Audit::memory();
        let long = "é".repeat(5000);
        audit.record_denied("unknown", "::1", Action::Login, "session", &long);
        assert_eq!(audit.list(&query()).unwrap()[0].detail.chars().count(), MAX_DENIED_DETAIL);
    }

    #[test]
    fn entries_past_the_retention_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let day = 24 * 3600 * 1000;
        for audit in both(&dir) {
            let audit = audit.keeping(Duration::from_secs(2 * 24 * 3600));
            let now = 100 * day;
            audit.insert(now - 3 * day, &event(Action::Login));
            audit.insert(now - day, &event(Action::EmptyCache));
            assert_eq!(audit.prune(now).unwrap(), 1);
            let left = audit.list(&query()).unwrap();
            assert_eq!(left.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["empty_cache"]);
        }
    }

    #[test]
    fn filters_combine_in_both_backends() {
        let dir = tempfile::tempdir().unwrap();
        for audit in both(&dir) {
            audit.insert(1_000, &event(Action::Login));
            audit.insert(2_000, &Event { user: "bob", outcome: Outcome::Denied, ..event(Action::Login) });
            audit.insert(3_000, &Event { outcome: Outcome::Failed, ..event(Action::ExperimentStart) });
            audit.insert(4_000, &Event { user: "bob", ..event(Action::ExperimentStart) });
            let ids = |q: AuditQuery| audit.list(&q).unwrap().iter().map(|e| e.timestamp_ms).collect::<Vec<_>>();
            assert_eq!(ids(AuditQuery { user: Some("bob".into()), ..query() }), [4_000, 2_000]);
            assert_eq!(ids(AuditQuery { action: Some("login".into()), ..query() }), [2_000, 1_000]);
            assert_eq!(ids(AuditQuery { outcome: Some(Outcome::Denied), ..query() }), [2_000]);
            assert_eq!(ids(AuditQuery { outcome: Some(Outcome::Ok), user: Some("ana".into()), ..query() }), [1_000]);
            assert_eq!(ids(AuditQuery { from: Some(2_000), to: Some(3_000), ..query() }), [3_000, 2_000]);
            assert_eq!(ids(AuditQuery { limit: Some(1), action: Some("experiment.start".into()), ..query() }), [4_000]);
            assert!(ids(AuditQuery { user: Some("nobody".into()), ..query() }).is_empty());
        }
    }
}
