//! The Alerts tab: firing alerts first, then history (`GET /api/alerts`, kept current by
//! the socket's `alert` events), filtered by state and GPU; an operator silences a
//! firing alert from its row, and an idle process's card offers Stop (SIGTERM, after a
//! confirmation) where the caller may signal it. Beside the list: the caller's notification
//! subscriptions, the active silences, the webhooks' deliveries and the rules as they run.

use std::time::Duration;

use leptos::prelude::*;
use shared::{
    alerts::{Alert, Rule},
    auth::Role,
};

use crate::{
    components::{
        alert_group::AlertGroup,
        alert_notify::NotifyPanel,
        alert_panels::{ReloadError, RulesPanel, SilenceDraft, SilenceForm, SilencesPanel, WebhooksPanel},
        format,
        signals::{SignalControl, SignalPanel, stop_button},
    },
    hooks::{alerts::Alerts, poll::use_poll, session::Session, telemetry::Telemetry},
    pages::Tab,
    state::{
        alert_groups::{self, Entry},
        alerts::{AlertFilter, StateFilter},
    },
};

/// How often the tab asks again while shown: webhook figures are not pushed.
const ALERTS_PERIOD: Duration = Duration::from_secs(10);

#[component]
pub fn AlertsPage(telemetry: Telemetry) -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let tab = expect_context::<ReadSignal<Tab>>();
    let now = RwSignal::new(js_sys::Date::now());
    use_poll(Memo::new(move |_| tab.get() == Tab::Alerts), ALERTS_PERIOD, move || {
        now.try_set(js_sys::Date::now());
        alerts.load_list();
    });
    let gpus = Memo::new(move |_| telemetry.state.with(|s| s.devices.iter().map(|d| d.info.index).collect::<Vec<_>>()));
    let signals = SignalControl::for_table();
    let set_filter = move |change: &dyn Fn(&mut AlertFilter)| {
        alerts.filter.update(|f| change(f));
        alerts.load_list();
    };
    // The list's entries, each keyed by all it shows (`entry_key`): when another alert fires, or the
    // list is fetched again, a card that did not change keeps its DOM: its open silence form and a
    // half-typed reason, a Stop's question. "Firing for" follows `now` within the card.
    let entries = Memo::new(move |_| {
        let filter = alerts.filter.get();
        alert_groups::group(alerts.state.with(|s| s.shown(&filter)))
    });
    let row = move |alert: Alert| view! { <AlertRow alert=alert now=now telemetry=telemetry signals=signals /> };
    // A group's card is rebuilt when an alert joins or leaves it (its key is all it shows), so its
    // "Silence all…" draft (open, duration, a half-typed reason) belongs to the page, one per owner and
    // rule, and the rebuilt card takes it up again.
    let group_drafts = GroupDrafts::default();
    let entry_view = move |entry: Entry| match entry {
        Entry::One(alert) => row(alert).into_any(),
        Entry::Group { owner, alerts } => {
            let each = alerts.clone();
            let draft = group_drafts.of(&owner, alerts.first().map_or(Rule::IdleHeld, |a| a.rule));
            view! {
                <AlertGroup owner=owner alerts=alerts draft=draft>
                    {each.into_iter().map(row).collect_view()}
                </AlertGroup>
            }
            .into_any()
        }
    };
    view! {
        <main class="alerts-page">
            <ReloadError />
            <div class="section-head">
                <h2 class="section-title">"Alerts"</h2>
                <span id="alerts-firing" class="alerts-firing">
                    {move || alerts.state.with(|s| s.badge().label())}
                </span>
                <span class="times-zone alerts-zone">{format::zone_caption()}</span>
            </div>
            <Show when=move || alerts.load_error.with(Option::is_some)>
                <p id="alerts-load-error" class="notice notice-warn" role="alert">
                    {move || alerts.load_error.get().unwrap_or_default()}
                </p>
            </Show>
            <div class="alerts-layout">
                <section class="alerts-column">
                    <div class="alerts-filters">
                        <label class="audit-filter">
                            "State"
                            <select
                                id="alerts-filter-state"
                                prop:value=move || alerts.filter.with(|f| f.state.as_str())
                                on:change=move |ev| {
                                    let state = StateFilter::parse(&event_target_value(&ev));
                                    set_filter(&|f| f.state = state);
                                }
                            >
                                {StateFilter::ALL
                                    .into_iter()
                                    .map(|s| view! { <option value=s.as_str()>{s.as_str()}</option> })
                                    .collect_view()}
                            </select>
                        </label>
                        <label class="audit-filter">
                            "GPU"
                            <select
                                id="alerts-filter-gpu"
                                prop:value=move || alerts.filter.with(|f| f.gpu.map(|g| g.to_string()).unwrap_or_default())
                                on:change=move |ev| {
                                    let gpu = event_target_value(&ev).parse::<u32>().ok();
                                    set_filter(&|f| f.gpu = gpu);
                                }
                            >
                                <option value="">"any"</option>
                                {move || gpus.get().into_iter().map(|i| view! { <option value=i.to_string()>{format!("GPU {i}")}</option> }).collect_view()}
                            </select>
                        </label>
                    </div>
                    <ul id="alerts-list" class="alerts-list">
                        <Show when=move || entries.with(Vec::is_empty)>
                            <li class="placeholder alerts-empty">"No alerts match."</li>
                        </Show>
                        <For each=move || entries.get() key=entry_key children=entry_view />
                    </ul>
                </section>
                <aside class="alerts-column alerts-side">
                    <NotifyPanel telemetry=telemetry />
                    <SilencesPanel telemetry=telemetry now=now />
                    <WebhooksPanel />
                    <RulesPanel />
                </aside>
            </div>
        </main>
    }
}

/// `li.alert-row` of one alert: severity in colour and word, what, where, who, when, its silence,
/// and for an idle process, Stop.
#[component]
fn AlertRow(alert: Alert, now: RwSignal<f64>, telemetry: Telemetry, signals: Option<SignalControl>) -> impl IntoView {
    let session = expect_context::<Session>();
    let severity = alert.severity.as_str();
    let firing = alert.resolved_ms.is_none();
    let who = match (alert.pid, alert.user.clone(), alert.redacted) {
        (pid, Some(user), _) => Some(match pid {
            Some(pid) => format!("pid {pid} · {user}"),
            None => user,
        }),
        (Some(pid), None, true) => Some(format!("pid {pid} · user hidden (sign in)")),
        (Some(pid), None, false) => Some(format!("pid {pid}")),
        (None, None, true) => Some("user hidden (sign in)".to_owned()),
        (None, None, false) => None,
    };
    let fired = format::stamp(alert.fired_ms as f64);
    let (fired_ms, resolved_ms) = (alert.fired_ms, alert.resolved_ms);
    let when = move || match resolved_ms {
        None => format!("fired {fired} · firing for {}", format::duration((now.get() as u64).saturating_sub(fired_ms))),
        Some(end) => format!(
            "fired {fired} · resolved {} after {}",
            format::stamp(end as f64),
            format::duration(end.saturating_sub(fired_ms))
        ),
    };
    let silenced = alert
        .silenced
        .as_ref()
        .map(|s| format!("silenced until {} by {} ({})", format::stamp(s.until_ms as f64), s.by, s.reason));
    let can_silence = firing && alert.silenced.is_none();
    let target = (alert.rule, alert.gpu_index);
    let stop = signals.filter(|_| alert.rule == Rule::IdleHeld).zip(alert.pid).map(|(control, pid)| {
        view! { <IdleStop control=control pid=pid gpu=alert.gpu_index firing=firing telemetry=telemetry /> }
    });
    view! {
        <li
            class=format!("alert-row sev-{severity}")
            class:alert-firing=firing
            class:alert-resolved=!firing
            class:alert-silenced=alert.silenced.is_some()
            data-id=alert.id
            data-rule=alert.rule.as_str()
            data-gpu=alert.gpu_index
            data-state=alert.state().as_str()
        >
            <div class="alert-head">
                <span class=format!("alert-severity sev-{severity}")>{severity}</span>
                <strong class="alert-title">{alert.rule.title()}</strong>
                <span class="alert-gpu" title=alert.gpu_uuid.clone()>{format!("GPU {}", alert.gpu_index)}</span>
                {who.map(|who| view! { <span class="alert-who">{who}</span> })}
                <span class="alert-state">{alert.state().as_str()}</span>
                {alert.simulated.then(|| view! { <span class="badge badge-simulated alert-simulated">"simulated"</span> })}
            </div>
            <p class="alert-message">{format::server_text(&alert.message)}</p>
            <p class="alert-action">{alert.action.clone()}</p>
            <p class="alert-time">{when}</p>
            {silenced.map(|text| view! { <p class="alert-silence-note">{text}</p> })}
            <Show when=move || can_silence && session.may_change(Role::Operator)>
                <SilenceForm rule=target.0 gpu=target.1 />
            </Show>
            {stop}
        </li>
    }
}

/// `.alert-signal`: Stop for the idle process of a firing alert, while the process is listed on its
/// GPU and the caller may signal it; the question and the outcome stay on the card once it resolves.
#[component]
fn IdleStop(control: SignalControl, pid: u32, gpu: u32, firing: bool, telemetry: Telemetry) -> impl IntoView {
    let listed =
        move || telemetry.state.with(|s| s.processes.iter().find(|p| p.pid == pid && p.device == gpu).cloned());
    let offered = Memo::new(move |_| {
        firing
            && telemetry
                .state
                .with(|s| s.processes.iter().any(|p| p.pid == pid && p.device == gpu && control.may_signal(p)))
    });
    view! {
        <Show when=move || offered.get()>
            <p class="alert-signal">{stop_button(control, pid, listed)}</p>
        </Show>
        <SignalPanel control=control pid=pid />
    }
}

/// What keys an entry of the list: everything it shows but the time, so that a card is built again
/// exactly when what it says changed (it resolved, was silenced, its group gained an alert).
fn entry_key(entry: &Entry) -> String {
    format!("{entry:?}")
}

/// The group cards' "Silence all…" drafts by owner and rule, made in the page's reactive owner so
/// that they outlive the cards that show them.
#[derive(Clone, Copy)]
struct GroupDrafts {
    page: StoredValue<Owner>,
    drafts: StoredValue<Vec<(String, Rule, SilenceDraft)>>,
}

impl Default for GroupDrafts {
    fn default() -> Self {
        let page = Owner::current().unwrap_or_default();
        Self { page: StoredValue::new(page), drafts: StoredValue::new(Vec::new()) }
    }
}

impl GroupDrafts {
    fn of(self, owner: &str, rule: Rule) -> SilenceDraft {
        let kept = self.drafts.with_value(|d| d.iter().find(|(o, r, _)| o == owner && *r == rule).map(|(_, _, d)| *d));
        kept.unwrap_or_else(|| {
            let draft = self.page.with_value(|page| page.with(SilenceDraft::default));
            self.drafts.update_value(|d| d.push((owner.to_owned(), rule, draft)));
            draft
        })
    }
}
