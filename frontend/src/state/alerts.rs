//! What the page knows about alerts: every alert it has seen (from `GET /api/alerts`
//! and `alert` events), the silences, webhooks and rules, and the caller's
//! subscriptions; which alerts the Alerts tab shows, what the header badge says,
//! and which events raise a browser notification.
//!
//! Pure data, so those rules are tested here.

use shared::alerts::{
    Alert, AlertEvent, AlertState, AlertsResponse, RuleSummary, Severity, Silence, Subscription, SubscriptionKind,
    SubscriptionsResponse, WebhookStatus, sort_for_display,
};
use shared::firing::FiringCounts;

/// Resolved alerts the page keeps at most (firing ones are always kept).
pub const KEPT_RESOLVED: usize = 1000;

/// Which alerts the Alerts tab lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateFilter {
    Firing,
    Resolved,
    #[default]
    All,
}

impl StateFilter {
    pub const ALL: [StateFilter; 3] = [StateFilter::Firing, StateFilter::Resolved, StateFilter::All];

    /// The `state=` value of `GET /api/alerts`, and the select's value.
    pub fn as_str(self) -> &'static str {
        match self {
            StateFilter::Firing => "firing",
            StateFilter::Resolved => "resolved",
            StateFilter::All => "all",
        }
    }

    pub fn parse(text: &str) -> StateFilter {
        StateFilter::ALL.into_iter().find(|s| s.as_str() == text).unwrap_or_default()
    }
}

/// The Alerts tab's filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlertFilter {
    pub state: StateFilter,
    /// One GPU by index, or every GPU.
    pub gpu: Option<u32>,
}

impl AlertFilter {
    /// True when the tab lists `alert` under this filter (the server's `state=` and `gpu=` rules).
    pub fn matches(&self, alert: &Alert) -> bool {
        let state = match self.state {
            StateFilter::Firing => alert.state() == AlertState::Firing,
            StateFilter::Resolved => alert.state() == AlertState::Resolved,
            StateFilter::All => true,
        };
        state && self.gpu.is_none_or(|gpu| alert.gpu_index == gpu)
    }

    /// `GET /api/alerts?…` for this filter.
    pub fn url(&self) -> String {
        let mut url = format!("/api/alerts?state={}", self.state.as_str());
        if let Some(gpu) = self.gpu {
            url.push_str(&format!("&gpu={gpu}"));
        }
        url
    }
}

/// The header badge: the firing alerts nobody silenced, by severity ("2 critical · 8 warning"),
/// coloured by the worst; silenced ones only in its tooltip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Badge {
    pub counts: FiringCounts,
}

impl Badge {
    /// Firing alerts nobody silenced: the badge's number and the tab title's.
    pub fn count(&self) -> u32 {
        self.counts.unsilenced()
    }

    /// The worst severity among them; `None` when none fire unsilenced.
    pub fn worst(&self) -> Option<Severity> {
        self.counts.worst()
    }

    /// Its words, worst first: "1 critical · 8 warning".
    pub fn parts(&self) -> Vec<(Severity, String)> {
        self.counts.parts().into_iter().map(|(s, n)| (s, format!("{n} {}", s.as_str()))).collect()
    }

    /// The badge's accessible label: "10 alerts firing: 2 critical, 8 warning (1 silenced)",
    /// "1 alert firing: 1 critical", "no alerts firing".
    pub fn label(&self) -> String {
        let parts: Vec<String> = self.parts().into_iter().map(|(_, words)| words).collect();
        let firing = match self.count() {
            0 => "no alerts firing".to_owned(),
            1 => format!("1 alert firing: {}", parts.join(", ")),
            n => format!("{n} alerts firing: {}", parts.join(", ")),
        };
        match self.counts.silenced {
            0 => firing,
            n => format!("{firing} ({n} silenced)"),
        }
    }

    /// The CSS class of its colour: `sev-critical`, `sev-warning`, `sev-info`, or `sev-none`.
    pub fn class(&self) -> &'static str {
        severity_class(self.worst())
    }
}

/// The CSS class of a severity's colour; `sev-none` for none.
pub fn severity_class(severity: Option<Severity>) -> &'static str {
    match severity {
        Some(Severity::Critical) => "sev-critical",
        Some(Severity::Warning) => "sev-warning",
        Some(Severity::Info) => "sev-info",
        None => "sev-none",
    }
}

/// The browser tab's title: "(2) gpudash — node1" while two alerts fire unsilenced,
/// "gpudash — node1" while none do, "gpudash" before the host is known.
pub fn page_title(firing: u32, hostname: Option<&str>) -> String {
    let name = match hostname {
        Some(host) => format!("gpudash — {host}"),
        None => "gpudash".to_owned(),
    };
    if firing == 0 { name } else { format!("({firing}) {name}") }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertsState {
    /// Every alert seen, by id, in no particular order.
    pub known: Vec<Alert>,
    /// How many alerts fire, as the server counted them last (silenced ones included).
    pub firing: u32,
    pub silences: Vec<Silence>,
    pub webhooks: Vec<WebhookStatus>,
    pub rules: Vec<RuleSummary>,
    pub reload_error: Option<String>,
    /// `None` until `GET /api/alerts/subscriptions` answered.
    pub subscriptions: Option<SubscriptionsResponse>,
}

impl AlertsState {
    /// Takes in a `GET /api/alerts` answer (whatever its filter): its alerts join the known
    /// ones, and the counts, silences, webhooks and rules replace the page's.
    pub fn apply_response(&mut self, response: AlertsResponse) {
        // `counts` is the rule the badge applies to the alerts it knows, which follow every event.
        let AlertsResponse { alerts, firing, counts: _, silences, webhooks, rules, reload_error } = response;
        for alert in alerts {
            self.merge(alert);
        }
        self.firing = firing;
        self.silences = silences;
        self.webhooks = webhooks;
        self.rules = rules;
        self.reload_error = reload_error;
        self.trim();
    }

    /// Applies one WebSocket `alert` event; returns the alert when it should raise a
    /// browser notification: it has just fired (the page did not know it firing) and one of
    /// the caller's subscriptions asks for it.
    pub fn apply_event(&mut self, event: AlertEvent) -> Option<Alert> {
        let AlertEvent { alert, firing } = event;
        self.firing = firing;
        let was_firing = self.find(alert.id).is_some_and(|a| a.state() == AlertState::Firing);
        let notify = (alert.state() == AlertState::Firing && !was_firing && self.wants(&alert)).then(|| alert.clone());
        if let Some(silence) = &alert.silenced
            && alert.state() == AlertState::Firing
            && !self.silences.iter().any(|s| s.id == silence.id)
        {
            self.silences.push(silence.clone());
        }
        self.merge(alert);
        self.trim();
        notify
    }

    /// True when one of the caller's subscriptions matches `alert`.
    pub fn wants(&self, alert: &Alert) -> bool {
        self.subscriptions.as_ref().is_some_and(|s| s.subscriptions.iter().any(|sub| sub.kind.matches(alert, &s.user)))
    }

    /// The alerts the tab lists under `filter`, firing first, then history, as [`sort_for_display`] orders them.
    pub fn shown(&self, filter: &AlertFilter) -> Vec<Alert> {
        let mut alerts: Vec<Alert> = self.known.iter().filter(|a| filter.matches(a)).cloned().collect();
        sort_for_display(&mut alerts);
        alerts
    }

    /// What the header badge shows: the firing alerts the page knows, by the server's count rule
    /// ([`FiringCounts::of`]; the page loads every firing alert and follows each change).
    pub fn badge(&self) -> Badge {
        Badge { counts: FiringCounts::of(&self.known) }
    }

    /// The caller's subscription of `kind`, if it has one.
    pub fn subscription(&self, kind: &SubscriptionKind) -> Option<&Subscription> {
        self.subscriptions.as_ref()?.subscriptions.iter().find(|s| &s.kind == kind)
    }

    /// Silences still in force at `now_ms`, soonest to end first.
    pub fn active_silences(&self, now_ms: u64) -> Vec<Silence> {
        let mut active: Vec<Silence> = self.silences.iter().filter(|s| s.until_ms > now_ms).cloned().collect();
        shared::order::sort_by_key(&mut active, |s| (s.until_ms, s.id));
        active
    }

    /// A silence was lifted: it leaves the list and the alerts it covered.
    pub fn lift(&mut self, id: u64) {
        self.silences.retain(|s| s.id != id);
        for alert in &mut self.known {
            if alert.silenced.as_ref().is_some_and(|s| s.id == id) {
                alert.silenced = None;
            }
        }
    }

    fn find(&self, id: u64) -> Option<&Alert> {
        self.known.iter().find(|a| a.id == id)
    }

    /// Keeps the newer news of an alert: a resolved copy is never replaced by a firing one
    /// (an answer that left before the event that resolved it).
    fn merge(&mut self, alert: Alert) {
        match self.known.iter_mut().find(|a| a.id == alert.id) {
            Some(known) if known.resolved_ms.is_some() && alert.resolved_ms.is_none() => {}
            Some(known) => *known = alert,
            None => self.known.push(alert),
        }
    }

    /// Drops the oldest resolved alerts past [`KEPT_RESOLVED`].
    fn trim(&mut self) {
        let resolved = self.known.iter().filter(|a| a.resolved_ms.is_some()).count();
        if resolved <= KEPT_RESOLVED {
            return;
        }
        let mut ends: Vec<u64> = self.known.iter().filter_map(|a| a.resolved_ms).collect();
        shared::order::sort(&mut ends);
        let cut = ends[resolved - KEPT_RESOLVED - 1];
        let mut over = resolved - KEPT_RESOLVED;
        self.known.retain(|a| match a.resolved_ms {
            Some(end) if end <= cut && over > 0 => {
                over -= 1;
                false
            }
            _ => true,
        });
    }
}

/// A notification's title and body: "critical: GPU lost on GPU 1", and the alert's message.
pub fn notification_text(alert: &Alert) -> (String, String) {
    let title = format!("{}: {} on GPU {}", alert.severity.as_str(), alert.rule.title(), alert.gpu_index);
    (title, alert.message.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use shared::alerts::Rule;

    use super::*;

    fn alert(id: u64, rule: Rule, severity: Severity, gpu: u32, resolved: Option<u64>) -> Alert {
        Alert {
            id,
            rule,
            severity,
            gpu_index: gpu,
            gpu_uuid: format!("GPU-{gpu}"),
            pid: None,
            user: Some("ana".into()),
            message: format!("alert {id}"),
            action: String::new(),
            fired_ms: id * 10,
            resolved_ms: resolved,
            silenced: None,
            simulated: true,
            redacted: false,
        }
    }

    fn silence(id: u64, until_ms: u64) -> Silence {
        Silence {
            id,
            rule: Rule::Xid,
            gpu_uuid: "GPU-0".into(),
            by: "omar".into(),
            reason: "known".into(),
            from_ms: 0,
            until_ms,
        }
    }

    fn subscribed(kinds: &[SubscriptionKind]) -> AlertsState {
        let subscriptions = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| Subscription { id: i as u64 + 1, user: "ana".into(), kind: kind.clone() })
            .collect();
        AlertsState {
            subscriptions: Some(SubscriptionsResponse { user: "ana".into(), subscriptions }),
            ..AlertsState::default()
        }
    }

    fn event(alert: Alert, firing: u32) -> AlertEvent {
        AlertEvent { alert, firing }
    }

    #[test]
    fn filters_pick_state_and_gpu_and_say_so_in_the_url() {
        let firing = alert(1, Rule::Xid, Severity::Critical, 0, None);
        let resolved = alert(2, Rule::GpuFree, Severity::Info, 1, Some(99));
        let by = |state, gpu| AlertFilter { state, gpu };
        assert!(by(StateFilter::Firing, None).matches(&firing) && !by(StateFilter::Firing, None).matches(&resolved));
        assert!(
            by(StateFilter::Resolved, None).matches(&resolved) && !by(StateFilter::Resolved, None).matches(&firing)
        );
        assert!(by(StateFilter::All, Some(1)).matches(&resolved) && !by(StateFilter::All, Some(1)).matches(&firing));
        assert_eq!(AlertFilter::default().url(), "/api/alerts?state=all");
        assert_eq!(by(StateFilter::Firing, Some(3)).url(), "/api/alerts?state=firing&gpu=3");
        assert_eq!(StateFilter::parse("resolved"), StateFilter::Resolved);
        assert_eq!(StateFilter::parse("nonsense"), StateFilter::All);
    }

    #[test]
    fn the_list_is_firing_first_then_history_and_merges_answers_and_events() {
        let mut state = AlertsState::default();
        state.apply_response(AlertsResponse {
            alerts: vec![
                alert(1, Rule::GpuFree, Severity::Info, 0, Some(100)),
                alert(2, Rule::Temperature, Severity::Warning, 0, None),
            ],
            firing: 1,
            ..AlertsResponse::default()
        });
        state.apply_event(event(alert(3, Rule::Xid, Severity::Critical, 1, None), 2));
        let ids = |s: &AlertsState, f: AlertFilter| s.shown(&f).iter().map(|a| a.id).collect::<Vec<_>>();
        assert_eq!(ids(&state, AlertFilter::default()), [3, 2, 1]);
        assert_eq!(ids(&state, AlertFilter { state: StateFilter::Firing, gpu: Some(0) }), [2]);

        // An event resolves alert 2; a late answer that still has it firing does not bring it back.
        state.apply_event(event(alert(2, Rule::Temperature, Severity::Warning, 0, Some(200)), 1));
        state.apply_response(AlertsResponse {
            alerts: vec![alert(2, Rule::Temperature, Severity::Warning, 0, None)],
            firing: 1,
            ..AlertsResponse::default()
        });
        assert_eq!(ids(&state, AlertFilter { state: StateFilter::Firing, gpu: None }), [3]);
        assert_eq!(state.known.len(), 3, "one entry per alert");
    }

    #[test]
    fn the_badge_counts_by_severity_and_leaves_silenced_alerts_out() {
        let mut state = AlertsState::default();
        assert_eq!(state.badge(), Badge::default());
        assert_eq!(state.badge().label(), "no alerts firing");
        state.apply_event(event(alert(1, Rule::Temperature, Severity::Warning, 0, None), 1));
        assert_eq!(state.badge().label(), "1 alert firing: 1 warning");
        assert_eq!(state.badge().class(), "sev-warning");
        let mut xid = alert(2, Rule::Xid, Severity::Critical, 0, None);
        state.apply_event(event(xid.clone(), 2));
        assert_eq!((state.badge().count(), state.badge().worst()), (2, Some(Severity::Critical)));
        assert_eq!(state.badge().label(), "2 alerts firing: 1 critical, 1 warning");
        let words: Vec<String> = state.badge().parts().into_iter().map(|(_, w)| w).collect();
        assert_eq!(words, ["1 critical", "1 warning"]);
        // Silenced, the critical one no longer counts nor colours the badge; the silence is listed.
        xid.silenced = Some(silence(7, 5_000));
        state.apply_event(event(xid, 2));
        assert_eq!((state.badge().count(), state.badge().worst()), (1, Some(Severity::Warning)));
        assert_eq!(state.badge().label(), "1 alert firing: 1 warning (1 silenced)");
        assert_eq!(state.active_silences(1_000).iter().map(|s| s.id).collect::<Vec<_>>(), [7]);
        assert!(state.active_silences(5_000).is_empty(), "an ended silence is not active");
        state.lift(7);
        assert!(state.silences.is_empty() && state.known.iter().all(|a| a.silenced.is_none()));
        state.apply_event(event(alert(1, Rule::Temperature, Severity::Warning, 0, Some(50)), 1));
        assert_eq!(state.badge().counts, FiringCounts { critical: 1, ..FiringCounts::default() });
        // An alert the overview now rates worse moves to its new severity.
        state.apply_event(event(alert(3, Rule::Temperature, Severity::Warning, 1, None), 2));
        state.apply_event(event(alert(3, Rule::Temperature, Severity::Critical, 1, None), 2));
        assert_eq!(state.badge().counts, FiringCounts { critical: 2, ..FiringCounts::default() });
    }

    #[test]
    fn the_tab_title_carries_the_unsilenced_firing_count() {
        assert_eq!(page_title(2, Some("node1")), "(2) gpudash — node1");
        assert_eq!(page_title(0, Some("node1")), "gpudash — node1");
        assert_eq!(page_title(0, None), "gpudash");
        assert_eq!(page_title(1, None), "(1) gpudash");
    }

    #[test]
    fn only_newly_firing_alerts_a_subscription_asks_for_notify() {
        let mut state = subscribed(&[SubscriptionKind::Critical {}]);
        let xid = alert(1, Rule::Xid, Severity::Critical, 0, None);
        assert_eq!(state.apply_event(event(xid.clone(), 1)).map(|a| a.id), Some(1));
        assert_eq!(state.apply_event(event(xid.clone(), 1)), None, "already firing: once is enough");
        let mut resolved = xid;
        resolved.resolved_ms = Some(500);
        assert_eq!(state.apply_event(event(resolved, 0)), None, "a resolve does not notify");
        let hot = alert(2, Rule::Temperature, Severity::Warning, 0, None);
        assert_eq!(state.apply_event(event(hot, 1)), None, "not critical: not subscribed");

        let mut lost = alert(3, Rule::DeviceLost, Severity::Critical, 1, None);
        lost.silenced = Some(silence(4, u64::MAX));
        assert_eq!(state.apply_event(event(lost, 2)), None, "silenced alerts never notify");

        // Known firing from a GET before the event came: not new.
        let ecc = alert(5, Rule::Ecc, Severity::Critical, 0, None);
        state.apply_response(AlertsResponse { alerts: vec![ecc.clone()], firing: 3, ..AlertsResponse::default() });
        assert_eq!(state.apply_event(event(ecc, 3)), None);

        let mut nobody = AlertsState::default();
        assert_eq!(nobody.apply_event(event(alert(6, Rule::Xid, Severity::Critical, 0, None), 1)), None);

        let mut free = subscribed(&[SubscriptionKind::GpuFree { gpu_uuid: "GPU-1".into() }]);
        assert_eq!(free.apply_event(event(alert(7, Rule::GpuFree, Severity::Info, 0, None), 1)), None);
        assert!(free.apply_event(event(alert(8, Rule::GpuFree, Severity::Info, 1, None), 2)).is_some());
        assert!(free.subscription(&SubscriptionKind::GpuFree { gpu_uuid: "GPU-1".into() }).is_some());
        assert!(free.subscription(&SubscriptionKind::Everything {}).is_none());
    }

    #[test]
    fn history_is_bounded_oldest_resolved_first() {
        let mut state = AlertsState::default();
        let alerts = (0..KEPT_RESOLVED as u64 + 5)
            .map(|id| alert(id, Rule::GpuFree, Severity::Info, 0, Some(1_000 + id)))
            .chain([alert(9_999, Rule::Xid, Severity::Critical, 0, None)])
            .collect();
        state.apply_response(AlertsResponse { alerts, ..AlertsResponse::default() });
        assert_eq!(state.known.len(), KEPT_RESOLVED + 1);
        assert!(state.find(9_999).is_some(), "firing alerts are always kept");
        assert!(state.find(4).is_none() && state.find(5).is_some());
    }

    #[test]
    fn notifications_name_severity_rule_and_gpu() {
        let (title, body) = notification_text(&alert(1, Rule::DeviceLost, Severity::Critical, 1, None));
        assert_eq!(title, "critical: GPU lost on GPU 1");
        assert_eq!(body, "alert 1");
    }
}
