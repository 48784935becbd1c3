//! The engine's memory, without threads or I/O: which alerts are firing, since when each
//! condition has held, and what the rules saw last. [`Book::evaluate`] (in `rules/mod.rs`) turns
//! one reading into a list of [`Change`]s; here are the transitions every rule shares.

use std::collections::{BTreeMap, HashMap};

use shared::alerts::{Alert, Rule, Severity, Silence};

/// One alert slot: a rule on a GPU, and for per-process rules a process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub rule: Rule,
    pub gpu_uuid: String,
    pub pid: Option<u32>,
}

impl Key {
    pub fn gpu(rule: Rule, gpu_uuid: &str) -> Self {
        Self { rule, gpu_uuid: gpu_uuid.to_owned(), pid: None }
    }

    pub fn of(alert: &Alert) -> Self {
        Self { rule: alert.rule, gpu_uuid: alert.gpu_uuid.clone(), pid: alert.pid }
    }
}

/// What happened to an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Fired,
    /// Still firing with a new message (another XID); stored, not announced.
    Updated,
    Resolved,
    /// Still firing at another severity: its reading crossed one of the overview's levels
    /// (`shared::severity`); announced, so the badge counts it where it now belongs.
    Rated,
    /// A silence began or ended on it.
    Silenced,
}

/// An alert as it is after a change.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub kind: ChangeKind,
    pub alert: Alert,
}

/// A firing alert and what the engine keeps about it.
#[derive(Debug, Clone)]
pub(super) struct Firing {
    pub alert: Alert,
    /// The newest event that extends it (XIDs): it resolves the xid rule's `quiet` after this.
    pub last_event_ms: u64,
    /// Events counted into it (XIDs).
    pub events: u32,
    /// Taken over from the database at start-up and not yet seen anew by the rule that fired it
    /// (the idle tracker restarts its clock with the server).
    pub adopted: bool,
}

/// What the rules remember per GPU between readings.
#[derive(Debug, Clone, Default)]
pub(super) struct GpuMemory {
    /// Timestamp of the newest XID already looked at.
    pub newest_xid_ms: u64,
    /// Some process was seen on it since start-up (or since it was last lost).
    pub had_process: bool,
    /// Whoever was seen on it last.
    pub last_user: Option<String>,
}

/// Every firing alert and every condition on its way to firing.
#[derive(Debug, Default)]
pub struct Book {
    next_id: u64,
    pub(super) firing: BTreeMap<Key, Firing>,
    /// Since when a condition has held without firing yet (its `for` not over).
    pub(super) holding: HashMap<Key, u64>,
    pub(super) gpus: HashMap<String, GpuMemory>,
    pub(super) changes: Vec<Change>,
    /// What caps the `oom` rule's alerts (per process and per reporter).
    pub(super) oom_caps: super::rules::oom::OomCaps,
}

/// What a newly fired alert says.
#[derive(Debug, Clone)]
pub(super) struct Draft {
    pub key: Key,
    pub gpu_index: u32,
    pub severity: Severity,
    pub user: Option<String>,
    pub message: String,
    pub action: String,
    pub simulated: bool,
}

impl Book {
    /// A book that gives new alerts ids from `next_id` on and carries on `firing`, the alerts the
    /// database still holds as firing (from before a restart): they are not fired again.
    pub fn new(next_id: u64, firing: Vec<Alert>, now_ms: u64) -> Self {
        let mut book = Self { next_id: next_id.max(1), ..Self::default() };
        for alert in firing {
            book.next_id = book.next_id.max(alert.id + 1);
            let firing = Firing { alert, last_event_ms: now_ms, events: 1, adopted: true };
            book.firing.insert(Key::of(&firing.alert), firing);
        }
        book
    }

    /// How many alerts are firing (silenced ones included).
    pub fn firing_count(&self) -> u32 {
        u32::try_from(self.firing.len()).unwrap_or(u32::MAX)
    }

    /// The firing alerts, in no particular order.
    pub fn firing(&self) -> impl Iterator<Item = &Alert> {
        self.firing.values().map(|f| &f.alert)
    }

    pub(super) fn is_firing(&self, key: &Key) -> bool {
        self.firing.contains_key(key)
    }

    /// Notes whether a condition holds now; `Some(how long it has held)` once it has held for
    /// `hold_ms` and its alert is not firing yet (time to fire).
    pub(super) fn held(&mut self, key: &Key, holds: bool, hold_ms: u64, now_ms: u64) -> Option<u64> {
        if !holds || self.is_firing(key) {
            self.holding.remove(key);
            return None;
        }
        let since = *self.holding.entry(key.clone()).or_insert(now_ms);
        let held = now_ms.saturating_sub(since);
        (held >= hold_ms).then_some(held)
    }

    /// Fires a new alert (the caller checked that none is firing for its key).
    pub(super) fn fire(&mut self, draft: Draft, silences: &[Silence], now_ms: u64) {
        self.holding.remove(&draft.key);
        let Draft { key, gpu_index, severity, user, message, action, simulated } = draft;
        let alert = Alert {
            id: self.next_id,
            rule: key.rule,
            severity,
            gpu_index,
            gpu_uuid: key.gpu_uuid.clone(),
            pid: key.pid,
            user,
            message,
            action,
            fired_ms: now_ms,
            resolved_ms: None,
            silenced: covering(silences, key.rule, &key.gpu_uuid, now_ms).cloned(),
            simulated,
            redacted: false,
        };
        self.next_id += 1;
        self.changes.push(Change { kind: ChangeKind::Fired, alert: alert.clone() });
        self.firing.insert(key, Firing { alert, last_event_ms: now_ms, events: 1, adopted: false });
    }

    /// Gives the alert firing for `key`, if one is, the severity its reading is rated now.
    pub(super) fn rate(&mut self, key: &Key, severity: Severity) {
        if let Some(firing) = self.firing.get_mut(key)
            && firing.alert.severity != severity
        {
            firing.alert.severity = severity;
            self.changes.push(Change { kind: ChangeKind::Rated, alert: firing.alert.clone() });
        }
    }

    /// Resolves the alert firing for `key`, if one is.
    pub(super) fn resolve(&mut self, key: &Key, now_ms: u64) {
        self.holding.remove(key);
        if let Some(mut firing) = self.firing.remove(key) {
            firing.alert.resolved_ms = Some(now_ms.max(firing.alert.fired_ms));
            self.changes.push(Change { kind: ChangeKind::Resolved, alert: firing.alert });
        }
    }

    /// Resolves every alert of `rule` (a rule switched off) and forgets its conditions.
    pub(super) fn resolve_rule(&mut self, rule: Rule, now_ms: u64) {
        self.holding.retain(|k, _| k.rule != rule);
        let keys: Vec<Key> = self.firing.keys().filter(|k| k.rule == rule).cloned().collect();
        keys.iter().for_each(|k| self.resolve(k, now_ms));
    }

    /// Sets or clears `silenced` on every firing alert as the active `silences` say.
    pub fn apply_silences(&mut self, silences: &[Silence], now_ms: u64) -> Vec<Change> {
        for firing in self.firing.values_mut() {
            let alert = &mut firing.alert;
            let silence = covering(silences, alert.rule, &alert.gpu_uuid, now_ms);
            if alert.silenced.as_ref() != silence {
                alert.silenced = silence.cloned();
                self.changes.push(Change { kind: ChangeKind::Silenced, alert: alert.clone() });
            }
        }
        std::mem::take(&mut self.changes)
    }
}

/// The silence in force on `rule` for a GPU at `now_ms`, if any (the one lasting longest).
pub fn covering<'a>(silences: &'a [Silence], rule: Rule, gpu_uuid: &str, now_ms: u64) -> Option<&'a Silence> {
    silences
        .iter()
        .filter(|s| s.rule == rule && s.gpu_uuid == gpu_uuid && s.from_ms <= now_ms && now_ms < s.until_ms)
        .max_by_key(|s| (s.until_ms, s.id))
}

/// A span of time as people say it: "45s", "1m 5s", "2h 3m", "3d 4h".
pub fn human(ms: u64) -> String {
    shared::time::duration(ms)
}
