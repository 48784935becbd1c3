//! Alerts: what needs someone's attention, as the server's rules decided it
//! (`team/src/alerts/`), and what each user asked to be told about.

use serde::{Deserialize, Serialize};

use crate::auth::Role;

mod wire;
pub use wire::*;

/// Generates [`Rule`] from one line per rule: its doc, variant, name (in the alerts file, the API
/// and the metrics) and title (on the page). What a rule does is its unit on the server
/// (`team/src/alerts/rules/<name>.rs`), registered there in one line too.
macro_rules! rules {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal, $title:literal;)*) => {
        /// The rules gpudash evaluates on every sample.
        #[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[serde(rename_all = "snake_case")]
        pub enum Rule {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Rule {
            pub const ALL: [Rule; [$($name),*].len()] = [$(Rule::$variant),*];

            /// The rule's name in the alerts file, the API and the metrics.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Rule::$variant => $name,)*
                }
            }

            /// A short title for the page, e.g. "GPU free".
            pub fn title(self) -> &'static str {
                match self {
                    $(Rule::$variant => $title,)*
                }
            }
        }
    };
}

rules! {
    /// Temperature at or above a threshold for a while.
    Temperature = "temperature", "Hot";
    /// Clocks held down by a thermal slowdown or the power brake for a while.
    ClockEvents = "clock_events", "Clocks held down";
    /// The driver reported an XID error.
    Xid = "xid", "XID error";
    /// An uncorrectable ECC error, a failed row remap, or a remap pending a reset.
    Ecc = "ecc", "ECC error";
    /// The GPU stopped answering (fell off the bus).
    DeviceLost = "device_lost", "GPU lost";
    /// Memory used at or above a share of the total for a while.
    MemoryFull = "memory_full", "Memory full";
    /// A process holds memory on a GPU that computes nothing.
    IdleHeld = "idle_held", "Held but idle";
    /// A GPU that was in use has no process left.
    GpuFree = "gpu_free", "GPU free";
    /// Someone else's process runs on a GPU during its (advisory) reservation; the alert's
    /// `user` is the holder, so their "my processes" subscription hears of it.
    ReservationIntruder = "reservation_intruder", "On a reserved GPU";
    /// An attached PyTorch process raised `torch.cuda.OutOfMemoryError` (reported by the Python client).
    Oom = "oom", "Out of memory";
}

impl Rule {
    /// The rule named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|rule| rule.as_str() == name)
    }

    /// True for rules that report a broken GPU (an XID, an uncorrectable ECC error, a GPU off the
    /// bus): silencing one hides a failure from everyone, so operators may do it only briefly
    /// (see [`longest_silence_ms`]).
    pub fn hardware_fault(self) -> bool {
        matches!(self, Rule::Xid | Rule::Ecc | Rule::DeviceLost)
    }
}

/// How urgent an alert is.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Good to know (a GPU came free).
    #[default]
    Info,
    /// Someone should look (hot, throttled, memory full, idle holder).
    Warning,
    /// Something is broken (XID, ECC, lost GPU).
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    pub fn parse(name: &str) -> Option<Severity> {
        [Severity::Info, Severity::Warning, Severity::Critical].into_iter().find(|s| s.as_str() == name)
    }
}

/// Whether an alert is still going on.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    Firing,
    Resolved,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// One alert: a rule that held on a GPU (and process) from `fired_ms` until `resolved_ms`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Alert {
    /// Unique on this server, increasing.
    pub id: u64,
    pub rule: Rule,
    pub severity: Severity,
    pub gpu_index: u32,
    pub gpu_uuid: String,
    /// The process involved, for per-process rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Whose process it is, or who last used a GPU that came free; `None` when unknown or
    /// left out for the viewer (see `redacted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// What happened, e.g. "GPU 2 at 91 °C for 2 min (threshold 85 °C for 1 min)".
    pub message: String,
    /// What to do about it, e.g. "check the fans and the airflow; clocks will drop".
    pub action: String,
    pub fired_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_ms: Option<u64>,
    /// Set while someone silenced it (no deliveries, shown apart on the page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silenced: Option<Silence>,
    /// The GPU is one of the simulator's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
    /// True when the server left out names for this viewer (the user; who silenced it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

impl Alert {
    pub fn state(&self) -> AlertState {
        if self.resolved_ms.is_some() { AlertState::Resolved } else { AlertState::Firing }
    }

    /// Leaves out who is involved and who silenced it (an anonymous viewer's view).
    pub fn redact(&mut self) {
        let named = self.user.take().is_some();
        let silencer = self.silenced.as_mut().is_some_and(|s| {
            let was_named = s.by != Silence::SOMEONE;
            Silence::SOMEONE.clone_into(&mut s.by);
            was_named
        });
        if named || silencer {
            self.redacted = true;
        }
    }
}

/// Someone asked that a rule on a GPU stay quiet until `until_ms`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Silence {
    pub id: u64,
    pub rule: Rule,
    /// The GPU it covers.
    pub gpu_uuid: String,
    pub by: String,
    pub reason: String,
    pub from_ms: u64,
    pub until_ms: u64,
}

impl Silence {
    /// Who silenced it, as an anonymous viewer reads it.
    pub const SOMEONE: &'static str = "an operator";
}

/// Shortest silence: one minute.
pub const MIN_SILENCE_MS: u64 = 60 * 1000;
/// Longest silence: 30 days (an admin's, or any silence of a rule that is no hardware fault).
pub const MAX_SILENCE_MS: u64 = 30 * 24 * 3600 * 1000;
/// Longest silence an operator may put on a hardware-fault rule ([`Rule::hardware_fault`]): 4 hours,
/// enough for a reset or a reseat; longer takes an admin.
pub const MAX_OPERATOR_FAULT_SILENCE_MS: u64 = 4 * 3600 * 1000;
/// Most silences in force that one user may have set.
pub const MAX_SILENCES_PER_USER: usize = 32;
/// Longest reason for a silence, in characters.
pub const MAX_SILENCE_REASON: usize = 200;

/// Longest silence a caller with `role` may put on `rule`.
pub fn longest_silence_ms(rule: Rule, role: Role) -> u64 {
    if rule.hardware_fault() && role < Role::Admin { MAX_OPERATOR_FAULT_SILENCE_MS } else { MAX_SILENCE_MS }
}

/// Why a silence request is refused (each says what is allowed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SilenceInvalid {
    #[error("'duration' = '{0}' is not a duration from 1m to 30d; use e.g. \"30m\", \"2h\" or \"7d\"")]
    Duration(String),
    #[error(
        "'{rule}' reports a broken GPU (xid, ecc and device_lost do): operators may silence it for at most {}h, \
         not '{given}'; pick {}h or less, or ask an admin (up to 30d)",
        MAX_OPERATOR_FAULT_SILENCE_MS / 3_600_000,
        MAX_OPERATOR_FAULT_SILENCE_MS / 3_600_000
    )]
    FaultTooLong { rule: &'static str, given: String },
    #[error("'reason' must be 1 to {MAX_SILENCE_REASON} characters: say why")]
    Reason,
    #[error("'reason' holds a control character (a newline, a tab or similar); use plain text on one line")]
    ReasonControl,
}

/// Body of `POST /api/alerts/silences`: silence `rule` on a GPU for `duration` (e.g. "2h").
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SilenceRequest {
    pub rule: Rule,
    /// The GPU by index (this host's numbering).
    pub gpu: u32,
    pub duration: String,
    pub reason: String,
}

impl SilenceRequest {
    /// Checks the request of a caller with `role`, its `duration` read as `duration_ms` (`None`
    /// when it is not a duration), and returns the reason as it is kept (trimmed, format
    /// characters dropped: [`crate::text::typed_line`]).
    pub fn validate(&self, duration_ms: Option<u64>, role: Role) -> Result<String, SilenceInvalid> {
        let given = self.duration.trim();
        let ms = duration_ms
            .filter(|ms| (MIN_SILENCE_MS..=MAX_SILENCE_MS).contains(ms))
            .ok_or_else(|| SilenceInvalid::Duration(self.duration.clone()))?;
        if ms > longest_silence_ms(self.rule, role) {
            return Err(SilenceInvalid::FaultTooLong { rule: self.rule.as_str(), given: given.to_owned() });
        }
        let reason = crate::text::typed_line(&self.reason).map_err(|_| SilenceInvalid::ReasonControl)?;
        if reason.is_empty() || reason.chars().count() > MAX_SILENCE_REASON {
            return Err(SilenceInvalid::Reason);
        }
        Ok(reason)
    }
}

/// Firing first (most severe, then newest), then resolved, newest first: the order of the Alerts tab.
pub fn sort_for_display(alerts: &mut [Alert]) {
    crate::order::sort_by(alerts, |a, b| {
        let firing = |x: &Alert| x.resolved_ms.is_none();
        firing(b)
            .cmp(&firing(a))
            .then(b.severity.cmp(&a.severity))
            .then(b.resolved_ms.unwrap_or(b.fired_ms).cmp(&a.resolved_ms.unwrap_or(a.fired_ms)))
            .then(b.id.cmp(&a.id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(id: u64, rule: Rule, severity: Severity, resolved: Option<u64>) -> Alert {
        Alert {
            id,
            rule,
            severity,
            gpu_index: 0,
            gpu_uuid: "GPU-0".into(),
            pid: None,
            user: Some("ana".into()),
            message: String::new(),
            action: String::new(),
            fired_ms: id * 10,
            resolved_ms: resolved,
            silenced: None,
            simulated: false,
            redacted: false,
        }
    }

    #[test]
    fn names_round_trip() {
        for rule in Rule::ALL {
            assert_eq!(Rule::parse(rule.as_str()), Some(rule));
            let json = serde_json::to_string(&rule).unwrap();
            assert_eq!(json, format!("\"{}\"", rule.as_str()));
        }
        assert_eq!(Rule::parse("hot"), None);
        assert_eq!(Severity::parse("critical"), Some(Severity::Critical));
    }

    #[test]
    fn display_order_is_firing_then_severity_then_newest() {
        let mut alerts = vec![
            alert(1, Rule::GpuFree, Severity::Info, Some(100)),
            alert(2, Rule::Temperature, Severity::Warning, None),
            alert(3, Rule::Xid, Severity::Critical, None),
            alert(4, Rule::GpuFree, Severity::Info, None),
            alert(5, Rule::Ecc, Severity::Critical, Some(200)),
        ];
        sort_for_display(&mut alerts);
        assert_eq!(alerts.iter().map(|a| a.id).collect::<Vec<_>>(), [3, 2, 4, 5, 1]);
    }

    #[test]
    fn subscriptions_match_what_they_say() {
        let free = alert(1, Rule::GpuFree, Severity::Info, None);
        let hot = alert(2, Rule::Temperature, Severity::Warning, None);
        let xid = alert(3, Rule::Xid, Severity::Critical, None);
        assert!(SubscriptionKind::AnyGpuFree {}.matches(&free, "bo"));
        assert!(!SubscriptionKind::AnyGpuFree {}.matches(&hot, "bo"));
        assert!(SubscriptionKind::GpuFree { gpu_uuid: "GPU-0".into() }.matches(&free, "bo"));
        assert!(!SubscriptionKind::GpuFree { gpu_uuid: "GPU-1".into() }.matches(&free, "bo"));
        assert!(SubscriptionKind::MyProcesses {}.matches(&hot, "ana"));
        assert!(!SubscriptionKind::MyProcesses {}.matches(&hot, "bo"));
        assert!(!SubscriptionKind::MyProcesses {}.matches(&free, "ana"), "a GPU coming free is not about my process");
        assert!(
            SubscriptionKind::Critical {}.matches(&xid, "bo") && !SubscriptionKind::Critical {}.matches(&hot, "bo")
        );
        let mut quiet = xid;
        quiet.silenced = Some(Silence {
            id: 1,
            rule: Rule::Xid,
            gpu_uuid: "GPU-0".into(),
            by: "root".into(),
            reason: "known".into(),
            from_ms: 0,
            until_ms: 1,
        });
        assert!(!SubscriptionKind::Everything {}.matches(&quiet, "bo"));
        let mut seen = quiet;
        seen.user = None;
        seen.redact();
        assert_eq!(seen.silenced.as_ref().map(|s| s.by.as_str()), Some(Silence::SOMEONE));
        assert!(seen.redacted, "a silence's author is a name too, even on an alert that names no user");
    }

    #[test]
    fn operators_silence_hardware_faults_briefly_and_admins_for_up_to_30_days() {
        const H: u64 = 3_600_000;
        let request = |rule: Rule, duration: &str| SilenceRequest {
            rule,
            gpu: 0,
            duration: duration.into(),
            reason: " fan\u{200B} swap ".into(),
        };
        assert_eq!(request(Rule::DeviceLost, "4h").validate(Some(4 * H), Role::Operator), Ok("fan swap".into()));
        let refused = request(Rule::DeviceLost, "5h").validate(Some(5 * H), Role::Operator).unwrap_err();
        assert_eq!(refused, SilenceInvalid::FaultTooLong { rule: "device_lost", given: "5h".into() });
        let message = refused.to_string();
        assert!(message.contains("at most 4h, not '5h'") && message.contains("ask an admin"), "{message}");
        for rule in [Rule::Xid, Rule::Ecc] {
            assert!(request(rule, "1d").validate(Some(24 * H), Role::Operator).is_err(), "{rule:?}");
        }
        assert!(request(Rule::Xid, "30d").validate(Some(MAX_SILENCE_MS), Role::Admin).is_ok());
        assert!(request(Rule::Temperature, "30d").validate(Some(MAX_SILENCE_MS), Role::Operator).is_ok());
        let too_short = request(Rule::Temperature, "30s").validate(Some(30_000), Role::Admin);
        assert!(too_short.unwrap_err().to_string().contains("from 1m to 30d"));
        assert_eq!(
            request(Rule::Temperature, "soon").validate(None, Role::Admin),
            Err(SilenceInvalid::Duration("soon".into()))
        );
        let blank = SilenceRequest { reason: "\u{200B} ".into(), ..request(Rule::Temperature, "1h") };
        assert_eq!(blank.validate(Some(H), Role::Admin), Err(SilenceInvalid::Reason));
        let newline = SilenceRequest { reason: "a\nb".into(), ..request(Rule::Temperature, "1h") };
        assert_eq!(newline.validate(Some(H), Role::Admin), Err(SilenceInvalid::ReasonControl));
        let hardware: Vec<Rule> = Rule::ALL.into_iter().filter(|r| r.hardware_fault()).collect();
        assert_eq!(hardware, [Rule::Xid, Rule::Ecc, Rule::DeviceLost]);
    }

    #[test]
    fn subscription_kinds_are_tagged_and_strict() {
        let json = serde_json::to_string(&SubscriptionKind::GpuFree { gpu_uuid: "GPU-3".into() }).unwrap();
        assert_eq!(json, r#"{"kind":"gpu_free","gpu_uuid":"GPU-3"}"#);
        assert!(serde_json::from_str::<SubscriptionKind>(r#"{"kind":"gpu_free"}"#).is_err());
        assert!(serde_json::from_str::<SubscriptionKind>(r#"{"kind":"critical","x":1}"#).is_err());
    }
}
