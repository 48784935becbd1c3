//! The `oom` rule: an out-of-memory error that an attached PyTorch process reported through
//! the bridge fires at once, for the process's user; it resolves after `quiet` without another,
//! or as soon as the process stops reporting (the bridge no longer lists it).
//!
//! Reports come from clients, so a burst of fake ones must not page the team: a process fires
//! at most one alert every [`PROCESS_SPACING_MS`] (its later errors update the firing one), and
//! the processes one token user attached at most [`ALERTS_PER_REPORTER`] in [`REPORTER_WINDOW_MS`].
//! Errors past either cap are counted, not announced: the reporter's newest alert says how many,
//! and the log says why.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use shared::alerts::{Rule, Severity, Silence};

use super::settings::quiet;
use super::{AlertRule, Book, Change, ChangeKind, Configured, Draft, Inputs, Key, Prom, human, ms};

pub struct Oom;

/// `[rules.oom]`'s own key.
#[derive(Debug, Clone, PartialEq)]
pub struct Quiet {
    /// An `oom` alert resolves after this long without another (or when its process stops reporting).
    pub quiet: Duration,
}

impl AlertRule for Oom {
    type Settings = Quiet;
    const KEYS: &[&str] = &["quiet"];
    const NO_HOLD: Option<&str> = Some(
        "an out-of-memory error fires when the process reports it; quiet sets how long it stays firing without another",
    );

    fn defaults() -> Configured<Quiet> {
        Configured::on(Severity::Critical, 0, Quiet { quiet: Duration::from_secs(600) })
    }

    fn set(settings: &mut Quiet, _key: &str, value: &toml::Value) -> Result<(), String> {
        settings.quiet = quiet(value)?;
        Ok(())
    }

    fn on_reading(book: &mut Book, rule: &Configured<Quiet>, input: &Inputs<'_>, silences: &[Silence], now: u64) {
        book.oom(rule, input, silences, now);
    }

    fn condition(rule: &Configured<Quiet>, _held: &str) -> String {
        format!(
            "a PyTorch process attached with gpudash.attach() raised torch.cuda.OutOfMemoryError; resolves after {} \
             without another, or when the process stops reporting",
            human(ms(rule.settings.quiet))
        )
    }

    /// No metric carries an out-of-memory error: the Python client reports it to gpudash.
    fn prometheus(_rule: &Configured<Quiet>) -> Option<Prom> {
        None
    }
}

/// A process fires at most one `oom` alert in this long...
pub const PROCESS_SPACING_MS: u64 = 10 * 60 * 1000;
/// ...and the processes one token user attached at most this many...
pub const ALERTS_PER_REPORTER: usize = 3;
/// ...in this long.
pub const REPORTER_WINDOW_MS: u64 = 10 * 60 * 1000;

/// An out-of-memory error of a process the bridge still hears from.
#[derive(Debug, Clone, PartialEq)]
pub struct OomSignal {
    pub pid: u32,
    /// The GPU's UUID as the process reported it, when it did.
    pub gpu_uuid: Option<String>,
    /// The device index as the process numbers it (used when there is no UUID).
    pub device: u32,
    /// Whose process it is; NVML's user for the PID wins when it lists it.
    pub owner: String,
    /// The token user whose report attached the process (the per-reporter cap counts these).
    pub reporter: String,
    /// When the server received it, ms since the epoch.
    pub at_ms: u64,
    /// "asked for 2.10 GiB, largest free block 512 MiB, 3.50 GiB free in total (fragmented)".
    pub what: String,
}

/// What the rule remembers to cap its alerts.
#[derive(Debug, Default)]
pub struct OomCaps {
    /// The newest error of each process already judged (its `at_ms`): each counts once.
    judged: HashMap<u32, u64>,
    /// When each process last fired an alert.
    fired_by_pid: HashMap<u32, u64>,
    by_reporter: HashMap<String, ReporterAlerts>,
}

/// One reporter's alerts in the window.
#[derive(Debug, Default)]
struct ReporterAlerts {
    /// When they fired, oldest first.
    fired: VecDeque<u64>,
    /// The newest one and its message without the count: where held-back errors are counted.
    newest: Option<(Key, String)>,
    /// Errors held back since the window filled.
    held: u64,
}

/// What becomes of a new out-of-memory error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Fire,
    /// Its process fired an alert less than [`PROCESS_SPACING_MS`] ago.
    ProcessSpaced,
    /// Its reporter's processes fired [`ALERTS_PER_REPORTER`] alerts in the window.
    ReporterCapped,
}

impl OomCaps {
    /// Forgets what no longer limits anything at `now`.
    fn forget(&mut self, now: u64, quiet: u64) {
        self.judged.retain(|_, at| now.saturating_sub(*at) < quiet);
        self.fired_by_pid.retain(|_, at| now.saturating_sub(*at) < PROCESS_SPACING_MS);
        for alerts in self.by_reporter.values_mut() {
            while alerts.fired.front().is_some_and(|at| now.saturating_sub(*at) >= REPORTER_WINDOW_MS) {
                alerts.fired.pop_front();
            }
        }
        self.by_reporter.retain(|_, alerts| !alerts.fired.is_empty());
    }

    /// Judges an error not judged before (`None` for one that was), noting a fire.
    fn judge(&mut self, signal: &OomSignal, now: u64) -> Option<Verdict> {
        if self.judged.get(&signal.pid).is_some_and(|at| *at >= signal.at_ms) {
            return None;
        }
        self.judged.insert(signal.pid, signal.at_ms);
        if self.fired_by_pid.contains_key(&signal.pid) {
            return Some(Verdict::ProcessSpaced);
        }
        let alerts = self.by_reporter.entry(signal.reporter.clone()).or_default();
        if alerts.fired.len() >= ALERTS_PER_REPORTER {
            alerts.held += 1;
            return Some(Verdict::ReporterCapped);
        }
        alerts.fired.push_back(now);
        self.fired_by_pid.insert(signal.pid, now);
        Some(Verdict::Fire)
    }

    /// `message` as the alert for `key` shows it: with the count of held-back errors when it is
    /// its reporter's newest (and remembered as that alert's message without the count).
    fn message(&mut self, reporter: &str, key: &Key, message: String, newest: bool) -> String {
        let Some(alerts) = self.by_reporter.get_mut(reporter) else { return message };
        if newest {
            alerts.newest = Some((key.clone(), message.clone()));
        } else if alerts.newest.as_ref().is_none_or(|(k, _)| k != key) {
            return message;
        } else if let Some((_, base)) = alerts.newest.as_mut() {
            base.clone_from(&message);
        }
        with_held(message, reporter, alerts.held)
    }

    /// The reporter's newest alert and its message with the count, after an error was held back.
    fn held_message(&self, reporter: &str) -> Option<(Key, String)> {
        let alerts = self.by_reporter.get(reporter)?;
        let (key, base) = alerts.newest.clone()?;
        Some((key, with_held(base, reporter, alerts.held)))
    }
}

/// "…; 29 more out-of-memory errors from processes attached by 'eve' were counted, not alerted (…)".
fn with_held(message: String, reporter: &str, held: u64) -> String {
    if held == 0 {
        return message;
    }
    format!(
        "{message}; {held} more out-of-memory error{} from processes attached by '{reporter}' {} counted, not alerted \
         (at most {ALERTS_PER_REPORTER} oom alerts per reporter in {})",
        if held == 1 { "" } else { "s" },
        if held == 1 { "was" } else { "were" },
        human(REPORTER_WINDOW_MS)
    )
}

impl Book {
    /// Fires an alert per process with a fresh out-of-memory error, within the caps; resolves the rest.
    fn oom(&mut self, rule: &Configured<Quiet>, input: &Inputs<'_>, silences: &[Silence], now: u64) {
        let config = &rule.config;
        let quiet = ms(rule.settings.quiet);
        self.oom_caps.forget(now, quiet);
        let mut current = HashSet::new();
        let mut signals: Vec<&OomSignal> =
            input.ooms.iter().filter(|s| config.enabled && now.saturating_sub(s.at_ms) < quiet).collect();
        // The first to come fire: a burst is judged in the order it arrived.
        signals.sort_by_key(|s| (s.at_ms, s.pid));
        for signal in signals {
            let by_uuid = signal.gpu_uuid.as_ref().and_then(|uuid| input.devices.iter().find(|d| &d.uuid == uuid));
            let Some(info) = by_uuid.or_else(|| input.devices.iter().find(|d| d.index == signal.device)) else {
                continue;
            };
            // Who it is travels in `user` (left out for anonymous viewers), never in the message.
            let message =
                format!("PID {} ran out of memory on GPU {} ({}): {}", signal.pid, info.index, info.name, signal.what);
            // One alert per process: a firing one, on whichever GPU, takes its new errors.
            let firing_key = self.firing.keys().find(|k| k.rule == Rule::Oom && k.pid == Some(signal.pid)).cloned();
            if let Some(key) = firing_key {
                current.insert(key.clone());
                let message = self.oom_caps.message(&signal.reporter, &key, message, false);
                if let Some(firing) = self.firing.get_mut(&key)
                    && signal.at_ms > firing.last_event_ms
                {
                    firing.last_event_ms = signal.at_ms;
                    firing.events += 1;
                    firing.alert.message = message;
                    self.changes.push(Change { kind: ChangeKind::Updated, alert: firing.alert.clone() });
                }
                continue;
            }
            let key = Key { rule: Rule::Oom, gpu_uuid: info.uuid.clone(), pid: Some(signal.pid) };
            match self.oom_caps.judge(signal, now) {
                None => {}
                Some(Verdict::Fire) => {
                    current.insert(key.clone());
                    let message = self.oom_caps.message(&signal.reporter, &key, message, true);
                    let user = input
                        .processes
                        .iter()
                        .find(|p| p.pid == signal.pid)
                        .and_then(|p| p.owner_name().map(str::to_owned));
                    let draft = Draft {
                        key,
                        gpu_index: info.index,
                        severity: config.severity,
                        user: user.or_else(|| Some(signal.owner.clone())),
                        message,
                        action: "open the process on the PyTorch view: its allocator map shows whether the memory \
                                 was fragmented (try expandable_segments:True) or simply full (a smaller batch)"
                            .to_owned(),
                        simulated: input.simulated || info.simulated,
                    };
                    self.fire(draft, silences, now);
                }
                Some(Verdict::ProcessSpaced) => tracing::info!(
                    pid = signal.pid,
                    reporter = %signal.reporter,
                    "PID {} ran out of memory again less than {} after its last oom alert: counted, not alerted",
                    signal.pid,
                    human(PROCESS_SPACING_MS)
                ),
                Some(Verdict::ReporterCapped) => self.hold_for_reporter(signal),
            }
        }
        let gone: Vec<Key> =
            self.firing.keys().filter(|k| k.rule == Rule::Oom && !current.contains(*k)).cloned().collect();
        gone.iter().for_each(|k| self.resolve(k, now));
    }

    /// Counts an error past its reporter's cap into the reporter's newest alert, if it still fires.
    fn hold_for_reporter(&mut self, signal: &OomSignal) {
        tracing::warn!(
            pid = signal.pid,
            reporter = %signal.reporter,
            "out-of-memory error of PID {} counted, not alerted: processes attached by '{}' fired {ALERTS_PER_REPORTER} \
             oom alerts in the last {}",
            signal.pid,
            signal.reporter,
            human(REPORTER_WINDOW_MS)
        );
        let Some((key, message)) = self.oom_caps.held_message(&signal.reporter) else { return };
        if let Some(firing) = self.firing.get_mut(&key) {
            firing.alert.message = message;
            self.changes.push(Change { kind: ChangeKind::Updated, alert: firing.alert.clone() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(pid: u32, reporter: &str, at_ms: u64) -> OomSignal {
        OomSignal {
            pid,
            gpu_uuid: None,
            device: 0,
            owner: reporter.into(),
            reporter: reporter.into(),
            at_ms,
            what: "asked for 1 GiB".into(),
        }
    }

    #[test]
    fn a_reporter_fires_a_few_alerts_a_window_and_a_process_one() {
        let mut caps = OomCaps::default();
        let verdicts: Vec<_> = (1..=5).map(|pid| caps.judge(&signal(pid, "eve", 10), 10)).collect();
        let (fire, capped) = (Some(Verdict::Fire), Some(Verdict::ReporterCapped));
        assert_eq!(verdicts, [fire, fire, fire, capped, capped]);
        assert_eq!(caps.judge(&signal(5, "eve", 10), 20), None, "judged once");
        assert_eq!(caps.judge(&signal(9, "ana", 10), 20), fire, "another reporter has her own");
        assert_eq!(caps.judge(&signal(1, "eve", 30), 30), Some(Verdict::ProcessSpaced));
        let key = Key { rule: Rule::Oom, gpu_uuid: "GPU-0".into(), pid: Some(3) };
        caps.message("eve", &key, "PID 3 ran out".into(), true);
        let (_, message) = caps.held_message("eve").unwrap();
        assert!(message.starts_with("PID 3 ran out; 2 more out-of-memory errors"), "{message}");
        assert!(message.contains("attached by 'eve' were counted, not alerted (at most 3"), "{message}");

        let later = 10 + REPORTER_WINDOW_MS.max(PROCESS_SPACING_MS);
        caps.forget(later, 600_000);
        assert_eq!(caps.judge(&signal(1, "eve", later), later), fire, "a new window");
        assert_eq!(caps.held_message("eve"), None, "the count starts again");
    }
}
