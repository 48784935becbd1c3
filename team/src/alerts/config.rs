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
//! jobs = true           # also the job notices and digests (default false)
//! alerts = true         # the alerts (default true; false for a jobs-only webhook)
//! ```
//!
//! `[jobs]` and `[smtp]` say what owners are told about their jobs (`jobs::notify::config`).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use shared::alerts::{Rule, Severity};

use super::deliver::format::{redact_urls, target_text};
use crate::jobs::notify::config::{FileJobs, FileSmtp, NoticeConfig};

/// Why an alerts file was refused; the message names the file, the place and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlertsFileError {
    #[error("cannot read the alerts file {path}: {reason}")]
    Unreadable { path: String, reason: String },
    /// TOML syntax, or the file's shape (an unknown top-level key, a webhook's key or type); toml's
    /// message carries the line and column.
    #[error("the alerts file {path} is not valid: {reason}")]
    Invalid { path: String, reason: String },
    /// A rule's settings (an unknown rule or key, a wrong type, a value out of range) or a webhook's
    /// value, with its line where it can be found.
    #[error("the alerts file {path}: {what}")]
    OutOfRange { path: String, what: String },
}

pub use super::rules::{Configured, RuleConfig, Rules};

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
    /// Takes the alerts.
    pub alerts: bool,
    /// Takes the job notices and digests too (`jobs::notify`).
    pub jobs: bool,
}

impl Webhook {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// A generic webhook for every alert (what `--alert-webhook URL` gives).
    pub fn generic(url: url::Url) -> Self {
        Webhook {
            url,
            format: WebhookFormat::Generic,
            min_severity: Severity::Info,
            timeout: Self::DEFAULT_TIMEOUT,
            alerts: true,
            jobs: false,
        }
    }
}

/// A whole alerts file, validated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AlertsConfig {
    pub rules: Rules,
    pub webhooks: Vec<Webhook>,
    /// What owners are told about their jobs (`[jobs]`, `[smtp]`).
    pub jobs: NoticeConfig,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    /// `[rules.NAME]` tables, each read by its rule (`rules/settings.rs`).
    #[serde(default)]
    rules: toml::Table,
    #[serde(default)]
    webhook: Vec<FileWebhook>,
    jobs: Option<FileJobs>,
    smtp: Option<FileSmtp>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWebhook {
    url: String,
    #[serde(default)]
    format: WebhookFormat,
    min_severity: Option<String>,
    timeout: Option<String>,
    alerts: Option<bool>,
    jobs: Option<bool>,
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
        if let Some(name) = file.rules.keys().find(|name| Rule::parse(name).is_none()) {
            let names: Vec<&str> = Rule::ALL.iter().map(|r| r.as_str()).collect();
            let what = format!("[rules.{name}] is not a rule; use {}", names.join(", "));
            return Err(range(at_line(text, &format!("[rules.{name}]"), 0, what)));
        }
        for rule in Rule::ALL {
            let Some(entry) = file.rules.get(rule.as_str()) else { continue };
            let header = format!("[rules.{}]", rule.as_str());
            let table = entry.as_table().ok_or_else(|| {
                let what = format!("[rules] {} = {entry} is not a table of settings; write {header}", rule.as_str());
                range(at_line(text, "[rules]", 0, what))
            })?;
            rules.load(rule, table).map_err(|what| range(at_line(text, &header, 0, what)))?;
        }
        let webhooks = (file.webhook.iter().enumerate())
            .map(|(i, w)| load_webhook(w).map_err(|what| range(at_line(text, "[[webhook]]", i, what))))
            .collect::<Result<_, _>>()?;
        let jobs = NoticeConfig::load(file.jobs, file.smtp).map_err(|what| {
            let table = if what.starts_with("[smtp]") {
                "[smtp]"
            } else if what.starts_with("[jobs.mail]") {
                "[jobs.mail]"
            } else {
                "[jobs]"
            };
            range(at_line(text, table, 0, what))
        })?;
        Ok(AlertsConfig { rules, webhooks, jobs })
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
            // A header may carry a comment: `[jobs]   # what owners are told`.
            if line.split('#').next().unwrap_or_default().trim_end() == header {
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
    let (alerts, jobs) = (entry.alerts.unwrap_or(true), entry.jobs.unwrap_or(false));
    if !alerts && !jobs {
        return Err(
            "[[webhook]] alerts = false and no jobs = true: it would get nothing; drop it or set jobs = true".into()
        );
    }
    Ok(Webhook { url, format: entry.format, min_severity, timeout, alerts, jobs })
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
