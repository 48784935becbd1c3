//! The alerts' bodies on the wire: `GET /api/alerts` and its counts, webhook and rule summaries,
//! subscriptions, and the WebSocket's alert event. The rules for counting are `crate::firing`.

use serde::{Deserialize, Serialize};

use super::{Alert, Rule, Severity, Silence};

/// What a webhook delivery looks like right now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct WebhookStatus {
    /// The receiver, with any user info, query and path after the host left out.
    pub target: String,
    /// "generic", "slack" or "ntfy".
    pub format: String,
    pub delivered: u64,
    pub failed: u64,
    /// Alerts dropped because the queue was full.
    pub dropped: u64,
    pub queued: u64,
    /// The latest failure, e.g. "HTTP 500 after 3 tries" and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_ms: Option<u64>,
}

/// Body of `GET /api/alerts`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct AlertsResponse {
    /// Firing first (most severe, then newest), then resolved ones, newest first.
    pub alerts: Vec<Alert>,
    /// How many are firing (silenced ones included), whatever the query's filter.
    pub firing: u32,
    /// The firing ones by severity, silenced ones apart, whatever the query's filter.
    #[serde(default)]
    pub counts: FiringCounts,
    pub silences: Vec<Silence>,
    pub webhooks: Vec<WebhookStatus>,
    /// Every rule as it runs now, in [`Rule::ALL`] order.
    #[serde(default)]
    pub rules: Vec<RuleSummary>,
    /// Why the alerts file was refused at the last reload (SIGHUP); the rules before it keep running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload_error: Option<String>,
}

/// A rule as it runs now, for the Alerts tab.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RuleSummary {
    pub rule: Rule,
    pub enabled: bool,
    pub severity: Severity,
    /// When it fires, e.g. "temperature ≥ 85 °C for 1m".
    pub condition: String,
}

/// What a user asked to be told about (the page raises a browser notification).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SubscriptionKind {
    /// Any GPU comes free.
    AnyGpuFree {},
    /// GPU `gpu` (by UUID) comes free.
    GpuFree { gpu_uuid: String },
    /// Anything about my own processes.
    MyProcesses {},
    /// Every critical alert.
    Critical {},
    /// Every alert.
    Everything {},
}

impl SubscriptionKind {
    /// True when `alert` firing is something this subscription asked for, for user `me`.
    /// Silenced alerts are never notified.
    pub fn matches(&self, alert: &Alert, me: &str) -> bool {
        if alert.silenced.is_some() {
            return false;
        }
        match self {
            SubscriptionKind::AnyGpuFree {} => alert.rule == Rule::GpuFree,
            SubscriptionKind::GpuFree { gpu_uuid } => alert.rule == Rule::GpuFree && &alert.gpu_uuid == gpu_uuid,
            SubscriptionKind::MyProcesses {} => alert.rule != Rule::GpuFree && alert.user.as_deref() == Some(me),
            SubscriptionKind::Critical {} => alert.severity == Severity::Critical,
            SubscriptionKind::Everything {} => true,
        }
    }
}

/// A stored subscription of one user.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub id: u64,
    pub user: String,
    #[serde(flatten)]
    pub kind: SubscriptionKind,
}

/// Body of `GET /api/alerts/subscriptions`: the caller's own.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct SubscriptionsResponse {
    /// The name the server knows the caller by ("my processes" match this user).
    pub user: String,
    pub subscriptions: Vec<Subscription>,
}

/// A change to alerts, pushed on the WebSocket (`{"type":"alert",...}`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AlertEvent {
    /// The alert as it is now (just fired, resolved, or silenced).
    pub alert: Alert,
    /// How many alerts are firing after this change.
    pub firing: u32,
}

/// How many alerts fire, by severity; silenced ones are counted apart and in no severity.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FiringCounts {
    pub critical: u32,
    pub warning: u32,
    pub info: u32,
    /// Firing, but someone silenced them: not in the counts above.
    pub silenced: u32,
}
