//! The alerts file (`--alerts-file`): each rule's thresholds and the webhooks.
//!
//! Every rule is on by default with the thresholds below; the file changes only what it names.
//! A file that does not parse, names an unknown key or holds an out-of-range value is refused
//! with its line and what is allowed, and the rules already running keep running.
//!
//! ```toml
//! [rules.temperature]
//! celsius = 85          # 30 to 120
//! for = "1m"            # how long it must hold before it fires
//! severity = "warning"  # info, warning or critical: the least an alert of the rule is; one
//!                       # whose reading the overview rates worse (92 °C past a GPU's 87 °C
//!                       # slowdown, a hardware XID) takes the overview's level
//!
//! [rules.gpu_free]
//! for = "30s"           # a job restarting within this does not count
//!
//! [rules.reservation_intruder]
//! for = "0s"            # someone else's process on a reserved GPU; the alert goes to the holder
//!
//! [rules.xid]
//! ignore = [43]         # codes that never alert
//!
//! [[webhook]]
//! url = "https://ntfy.example.org/gpus"
//! format = "ntfy"       # generic, slack or ntfy
//! min_severity = "warning"
//! ```

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use shared::alerts::{Rule, Severity};

use super::deliver::format::{redact_urls, target_text};

/// Why an alerts file was refused; the message names the file, the place and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlertsFileError {
    #[error("cannot read the alerts file {path}: {reason}")]
    Unreadable { path: String, reason: String },
    /// TOML syntax, an unknown key or a wrong type; toml's message carries the line and column.
    #[error("the alerts file {path} is not valid: {reason}")]
    Invalid { path: String, reason: String },
    #[error("the alerts file {path}: {what}")]
    OutOfRange { path: String, what: String },
}

/// One rule's settings after defaults and validation.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleConfig {
    pub enabled: bool,
    pub severity: Severity,
    /// How long the condition must hold before the alert fires (zero: at once).
    pub hold: Duration,
}

/// Every rule's thresholds, as the engine and the Prometheus export read them.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub temperature: RuleConfig,
    pub temperature_celsius: u32,
    pub clock_events: RuleConfig,
    /// Clock-event names (as in `DeviceSample::clock_events`) that count.
    pub clock_event_reasons: Vec<String>,
    pub xid: RuleConfig,
    /// An XID alert resolves after this long without a new XID on its GPU.
    pub xid_quiet: Duration,
    pub xid_ignore: Vec<u64>,
    pub ecc: RuleConfig,
    pub device_lost: RuleConfig,
    pub memory_full: RuleConfig,
    /// Share of the total memory, 50 to 100.
    pub memory_full_percent: f64,
    /// Held on top of `--idle-after`, which flags the process in the first place.
    pub idle_held: RuleConfig,
    /// A GPU must stay free this long before it is announced.
    pub gpu_free: RuleConfig,
    /// Someone else's process on a reserved GPU, for this long.
    pub reservation_intruder: RuleConfig,
    /// An out-of-memory error reported by an attached PyTorch process.
    pub oom: RuleConfig,
    /// An `oom` alert resolves after this long without another (or when its process stops reporting).
    pub oom_quiet: Duration,
}

/// Clock events that mean the GPU is being protected from heat or a power emergency.
pub const DEFAULT_CLOCK_EVENT_REASONS: [&str; 3] =
    ["sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"];

impl Default for Rules {
    fn default() -> Self {
        let on = |severity, secs| RuleConfig { enabled: true, severity, hold: Duration::from_secs(secs) };
        Rules {
            temperature: on(Severity::Warning, 60),
            temperature_celsius: 85,
            clock_events: on(Severity::Warning, 60),
            clock_event_reasons: DEFAULT_CLOCK_EVENT_REASONS.iter().map(|s| (*s).to_owned()).collect(),
            // Critical for every code but an application's own (`shared::severity::xid_level`).
            xid: on(Severity::Warning, 0),
            xid_quiet: Duration::from_millis(shared::severity::XID_RECENT_MS),
            xid_ignore: Vec::new(),
            ecc: on(Severity::Critical, 0),
            device_lost: on(Severity::Critical, 0),
            memory_full: on(Severity::Warning, 300),
            memory_full_percent: 95.0,
            idle_held: on(Severity::Warning, 0),
            gpu_free: on(Severity::Info, 30),
            reservation_intruder: on(Severity::Warning, 0),
            oom: on(Severity::Critical, 0),
            oom_quiet: Duration::from_secs(600),
        }
    }
}

impl Rules {
    /// The settings every rule shares.
    pub fn rule(&self, rule: Rule) -> &RuleConfig {
        match rule {
            Rule::Temperature => &self.temperature,
            Rule::ClockEvents => &self.clock_events,
            Rule::Xid => &self.xid,
            Rule::Ecc => &self.ecc,
            Rule::DeviceLost => &self.device_lost,
            Rule::MemoryFull => &self.memory_full,
            Rule::IdleHeld => &self.idle_held,
            Rule::GpuFree => &self.gpu_free,
            Rule::ReservationIntruder => &self.reservation_intruder,
            Rule::Oom => &self.oom,
        }
    }
}

/// How a webhook's body is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// `{"alert": {...}, "state": "firing", "host": "..."}`: the alert as the API shows it.
    #[default]
    Generic,
    /// `{"text": "..."}`, what Slack's incoming webhooks (and Mattermost, Rocket.Chat) accept.
    Slack,
    /// The message as the body, title/priority/tags as ntfy headers.
    Ntfy,
}

impl WebhookFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookFormat::Generic => "generic",
            WebhookFormat::Slack => "slack",
            WebhookFormat::Ntfy => "ntfy",
        }
    }
}

/// One receiver of alerts.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    pub url: url::Url,
    pub format: WebhookFormat,
    /// Alerts below this severity are not sent.
    pub min_severity: Severity,
    /// How long one attempt may take.
    pub timeout: Duration,
}

impl Webhook {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// A generic webhook for every alert (what `--alert-webhook URL` gives).
    pub fn generic(url: url::Url) -> Self {
        Webhook { url, format: WebhookFormat::Generic, min_severity: Severity::Info, timeout: Self::DEFAULT_TIMEOUT }
    }
}

/// A whole alerts file, validated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AlertsConfig {
    pub rules: Rules,
    pub webhooks: Vec<Webhook>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    rules: FileRules,
    #[serde(default)]
    webhook: Vec<FileWebhook>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileRules {
    temperature: Option<FileRule>,
    clock_events: Option<FileRule>,
    xid: Option<FileRule>,
    ecc: Option<FileRule>,
    device_lost: Option<FileRule>,
    memory_full: Option<FileRule>,
    idle_held: Option<FileRule>,
    gpu_free: Option<FileRule>,
    reservation_intruder: Option<FileRule>,
    oom: Option<FileRule>,
}

/// One `[rules.NAME]` table; which keys a rule accepts beyond the common ones is checked in [`load_rule`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileRule {
    enabled: Option<bool>,
    severity: Option<String>,
    #[serde(rename = "for")]
    hold: Option<String>,
    celsius: Option<u32>,
    percent: Option<f64>,
    reasons: Option<Vec<String>>,
    quiet: Option<String>,
    ignore: Option<Vec<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWebhook {
    url: String,
    #[serde(default)]
    format: WebhookFormat,
    min_severity: Option<String>,
    timeout: Option<String>,
}

impl AlertsConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, AlertsFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| AlertsFileError::Unreadable { path: shown.clone(), reason: e.to_string() })?;
        Self::parse(&text, &shown)
    }

    /// Validates the text of an alerts file called `path` (for messages).
    pub fn parse(text: &str, path: &str) -> Result<Self, AlertsFileError> {
        let file: File = toml::from_str(text)
            .map_err(|e| AlertsFileError::Invalid { path: path.to_owned(), reason: toml_reason(text, &e) })?;
        let range = |what: String| AlertsFileError::OutOfRange { path: path.to_owned(), what };
        let mut rules = Rules::default();
        let r = file.rules;
        let entries = [
            (Rule::Temperature, r.temperature),
            (Rule::ClockEvents, r.clock_events),
            (Rule::Xid, r.xid),
            (Rule::Ecc, r.ecc),
            (Rule::DeviceLost, r.device_lost),
            (Rule::MemoryFull, r.memory_full),
            (Rule::IdleHeld, r.idle_held),
            (Rule::GpuFree, r.gpu_free),
            (Rule::ReservationIntruder, r.reservation_intruder),
            (Rule::Oom, r.oom),
        ];
        for (rule, entry) in entries {
            if let Some(entry) = entry {
                let header = format!("[rules.{}]", rule.as_str());
                load_rule(&mut rules, rule, entry).map_err(|what| range(at_line(text, &header, 0, what)))?;
            }
        }
        let webhooks = (file.webhook.iter().enumerate())
            .map(|(i, w)| load_webhook(w).map_err(|what| range(at_line(text, "[[webhook]]", i, what))))
            .collect::<Result<_, _>>()?;
        Ok(AlertsConfig { rules, webhooks })
    }
}

/// toml's message and where it points, without the line of the file it quotes (a webhook's URL
/// there holds its token; the refusal is shown to every signed-in viewer), URLs in it shown as
/// their targets.
fn toml_reason(text: &str, e: &toml::de::Error) -> String {
    let at = e.span().and_then(|span| text.get(..span.start)).map(|before| {
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
        format!(" (line {line}, column {column})")
    });
    let message = e.message().trim().replace('\n', "; ");
    redact_urls(&format!("{message}{}", at.unwrap_or_default()))
}

/// `what` with the line it is about: the key it names (the word after the table, or the one quoted in
/// "has no key 'KEY'") inside the `nth` table called `header`, or the table's own line.
fn at_line(text: &str, header: &str, nth: usize, what: String) -> String {
    let rest = what.split_once("] ").map_or("", |(_, rest)| rest);
    let key = match rest.strip_prefix("has no key '") {
        Some(quoted) => quoted.split('\'').next().unwrap_or_default(),
        None => rest.split([' ', '=', ':']).next().unwrap_or_default(),
    };
    let mut seen = 0;
    let mut table_line = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            if table_line.is_some() {
                break;
            }
            if line == header {
                if seen == nth {
                    table_line = Some(i + 1);
                }
                seen += 1;
            }
        } else if table_line.is_some()
            && !key.is_empty()
            && line.strip_prefix(key).is_some_and(|after| after.trim_start().starts_with('='))
        {
            return format!("{what} (line {})", i + 1);
        }
    }
    match table_line {
        Some(line) => format!("{what} (line {line})"),
        None => what,
    }
}

/// Durations in the file: zero to a week.
fn duration(rule: &str, key: &str, value: &str) -> Result<Duration, String> {
    let parsed = humantime::parse_duration(value.trim()).map_err(|e| {
        format!("[rules.{rule}] {key} = '{value}' is not a duration ({e}); use e.g. \"30s\", \"5m\", \"0s\"")
    })?;
    if parsed > Duration::from_secs(7 * 24 * 3600) {
        return Err(format!("[rules.{rule}] {key} = '{value}' is too long; use at most 7d"));
    }
    Ok(parsed)
}

fn load_rule(rules: &mut Rules, rule: Rule, entry: FileRule) -> Result<(), String> {
    let name = rule.as_str();
    let allowed: &[&str] = match rule {
        Rule::Temperature => &["celsius"],
        Rule::ClockEvents => &["reasons"],
        Rule::Xid => &["quiet", "ignore"],
        Rule::Oom => &["quiet"],
        Rule::MemoryFull => &["percent"],
        Rule::Ecc | Rule::DeviceLost | Rule::IdleHeld | Rule::GpuFree | Rule::ReservationIntruder => &[],
    };
    let given = [
        ("celsius", entry.celsius.is_some()),
        ("percent", entry.percent.is_some()),
        ("reasons", entry.reasons.is_some()),
        ("quiet", entry.quiet.is_some()),
        ("ignore", entry.ignore.is_some()),
    ];
    if let Some((key, _)) = given.iter().find(|(key, set)| *set && !allowed.contains(key)) {
        let mut keys = vec!["enabled", "severity", "for"];
        keys.extend_from_slice(allowed);
        return Err(format!("[rules.{name}] has no key '{key}'; it takes {}", keys.join(", ")));
    }
    if rule == Rule::Oom && entry.hold.is_some() {
        return Err("[rules.oom] for does not apply: an out-of-memory error fires when the process reports it; \
                    quiet sets how long it stays firing without another"
            .to_owned());
    }
    if rule == Rule::Xid && entry.hold.is_some() {
        // An XID is an event, not a state that holds: it fires when the driver reports it.
        return Err("[rules.xid] for does not apply: an XID fires when the driver reports it; quiet sets how long \
                    it stays firing without a new one"
            .to_owned());
    }
    let mut common = rules.rule(rule).clone();
    if let Some(enabled) = entry.enabled {
        common.enabled = enabled;
    }
    if let Some(severity) = &entry.severity {
        common.severity = Severity::parse(severity).ok_or_else(|| {
            format!("[rules.{name}] severity = '{severity}' is not a severity; use info, warning or critical")
        })?;
    }
    if let Some(hold) = &entry.hold {
        common.hold = duration(name, "for", hold)?;
    }
    match rule {
        Rule::Temperature => rules.temperature = common,
        Rule::ClockEvents => rules.clock_events = common,
        Rule::Xid => rules.xid = common,
        Rule::Ecc => rules.ecc = common,
        Rule::DeviceLost => rules.device_lost = common,
        Rule::MemoryFull => rules.memory_full = common,
        Rule::IdleHeld => rules.idle_held = common,
        Rule::GpuFree => rules.gpu_free = common,
        Rule::ReservationIntruder => rules.reservation_intruder = common,
        Rule::Oom => rules.oom = common,
    }
    if let Some(celsius) = entry.celsius {
        if !(30..=120).contains(&celsius) {
            return Err(format!("[rules.temperature] celsius = {celsius} is out of range; use 30 to 120"));
        }
        rules.temperature_celsius = celsius;
    }
    if let Some(percent) = entry.percent {
        if !(50.0..=100.0).contains(&percent) {
            return Err(format!("[rules.memory_full] percent = {percent} is out of range; use 50 to 100"));
        }
        rules.memory_full_percent = percent;
    }
    if let Some(reasons) = entry.reasons {
        let known = shared::telemetry::CLOCK_EVENT_NAMES;
        if let Some(bad) = reasons.iter().find(|r| !known.contains(&r.as_str())) {
            return Err(format!(
                "[rules.clock_events] reasons: '{bad}' is not a clock event; use {}",
                known.join(", ")
            ));
        }
        if reasons.is_empty() {
            return Err("[rules.clock_events] reasons is empty; name at least one, or set enabled = false".to_owned());
        }
        rules.clock_event_reasons = reasons;
    }
    if let Some(quiet) = &entry.quiet {
        let quiet = duration(name, "quiet", quiet)?;
        if quiet.is_zero() {
            return Err(format!("[rules.{name}] quiet = '0s' would resolve every alert at once; use at least 1s"));
        }
        *(if rule == Rule::Oom { &mut rules.oom_quiet } else { &mut rules.xid_quiet }) = quiet;
    }
    if let Some(ignore) = entry.ignore {
        rules.xid_ignore = ignore;
    }
    Ok(())
}

fn load_webhook(entry: &FileWebhook) -> Result<Webhook, String> {
    let url = parse_webhook_url(&entry.url).map_err(|e| format!("[[webhook]] {e}"))?;
    let min_severity = match &entry.min_severity {
        None => Severity::Info,
        Some(s) => Severity::parse(s).ok_or_else(|| {
            format!("[[webhook]] min_severity = '{s}' is not a severity; use info, warning or critical")
        })?,
    };
    let timeout = match &entry.timeout {
        None => Webhook::DEFAULT_TIMEOUT,
        Some(t) => {
            let parsed = humantime::parse_duration(t.trim())
                .map_err(|e| format!("[[webhook]] timeout = '{t}' is not a duration ({e}); use e.g. \"5s\""))?;
            if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&parsed) {
                return Err(format!("[[webhook]] timeout = '{t}' is out of range; use 100ms to 60s"));
            }
            parsed
        }
    };
    Ok(Webhook { url, format: entry.format, min_severity, timeout })
}

/// A webhook URL: http or https with a host (also what `--alert-webhook` takes). A refusal shows
/// the URL as the webhook status does ([`target_text`]): its path and query may be its token.
pub fn parse_webhook_url(text: &str) -> Result<url::Url, String> {
    let shown = target_text(text);
    let url = url::Url::parse(text.trim())
        .map_err(|e| format!("url = '{shown}' is not a URL ({e}); use e.g. https://hooks.example.org/gpus"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "url = '{shown}' is not an http(s) URL with a host; use e.g. https://hooks.example.org/gpus"
        ));
    }
    Ok(url)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
