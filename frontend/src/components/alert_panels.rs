//! The Alerts tab's side panels: the alerts file's refusal, the silence form and the
//! active silences, the webhooks' deliveries (failures stand out) and the rules as they run.

use leptos::{prelude::*, task::spawn_local};
use shared::{
    alerts::{Rule, SilenceRequest, WebhookStatus},
    auth::Role,
};

use crate::{
    components::format,
    hooks::{alerts::Alerts, session::Session, telemetry::Telemetry},
};

/// The periods a silence is offered for, as the server's duration strings.
const SILENCE_FOR: [&str; 4] = ["1h", "4h", "1d", "7d"];

/// What a silence form is filling in: whether it is open, for how long and why, the last refusal,
/// whether a request is on its way. One alert's "Silence…" and a group's "Silence all…" both keep one.
#[derive(Clone, Copy)]
pub struct SilenceDraft {
    pub open: RwSignal<bool>,
    pub duration: RwSignal<String>,
    pub reason: RwSignal<String>,
    pub error: RwSignal<Option<String>>,
    pub working: RwSignal<bool>,
}

impl Default for SilenceDraft {
    fn default() -> Self {
        Self {
            open: RwSignal::new(false),
            duration: RwSignal::new(SILENCE_FOR[0].to_owned()),
            reason: RwSignal::new(String::new()),
            error: RwSignal::new(None),
            working: RwSignal::new(false),
        }
    }
}

impl SilenceDraft {
    /// The last refusal, under the form.
    pub fn error_view(self) -> impl IntoView {
        move || {
            self.error
                .get()
                .map(|text| view! { <span class="alert-silence-error lab-error" role="alert">{text}</span> })
        }
    }
}

/// The fields every silence form asks: "for" one of [`SILENCE_FOR`], and a required reason.
#[component]
pub fn SilenceFields(draft: SilenceDraft) -> impl IntoView {
    let SilenceDraft { duration, reason, .. } = draft;
    view! {
        <label>
            "for "
            <select class="alert-silence-duration" prop:value=move || duration.get() on:change=move |ev| duration.set(event_target_value(&ev))>
                {SILENCE_FOR.map(|d| view! { <option value=d>{d}</option> }).collect_view()}
            </select>
        </label>
        <input
            type="text"
            class="alert-silence-reason"
            aria-label="Reason"
            placeholder="reason (required)"
            maxlength="200"
            required=true
            prop:value=move || reason.get()
            on:input=move |ev| reason.set(event_target_value(&ev))
        />
    }
}

/// `#alerts-reload-error`: the alerts file was refused at the last reload (SIGHUP).
#[component]
pub fn ReloadError() -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let error = Memo::new(move |_| alerts.state.with(|s| s.reload_error.clone()));
    view! {
        <Show when=move || error.with(Option::is_some)>
            <div id="alerts-reload-error" class="notice notice-danger alerts-banner" role="alert">
                <strong>"The alerts file was refused at the last reload; the rules before it keep running. "</strong>
                <pre class="alerts-reload-text">{move || error.get().unwrap_or_default()}</pre>
            </div>
        </Show>
    }
}

/// "Silence…" on a firing alert: for how long and why → `POST /api/alerts/silences`.
#[component]
pub fn SilenceForm(rule: Rule, gpu: u32) -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let session = expect_context::<Session>();
    let draft = SilenceDraft::default();
    let SilenceDraft { open, duration, reason, error, working } = draft;
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = SilenceRequest { rule, gpu, duration: duration.get_untracked(), reason: reason.get_untracked() };
        working.set(true);
        spawn_local(async move {
            match alerts.silence(request).await {
                Ok(_) => {
                    open.try_set(false);
                    error.try_set(None);
                }
                Err(failure) => {
                    session.unauthorized(&failure);
                    error.try_set(Some(failure.message));
                }
            }
            working.try_set(false);
        });
    };
    view! {
        <div class="alert-silence">
            <button type="button" class="small-button alert-silence-open" on:click=move |_| open.update(|o| *o = !*o)>
                "Silence…"
            </button>
            <Show when=move || open.get()>
                <form class="alert-silence-form" on:submit=submit>
                    <SilenceFields draft=draft />
                    <button type="submit" class="small-button" disabled=move || working.get()>"Silence"</button>
                </form>
            </Show>
            {draft.error_view()}
        </div>
    }
}

/// `#alerts-silences`: silences in force, with "Lift" for operators.
#[component]
pub fn SilencesPanel(telemetry: Telemetry, now: RwSignal<f64>) -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let session = expect_context::<Session>();
    let error = RwSignal::new(None::<String>);
    let lift = move |id: u64| {
        spawn_local(async move {
            match alerts.lift(id).await {
                Ok(()) => drop(error.try_set(None)),
                Err(failure) => {
                    session.unauthorized(&failure);
                    error.try_set(Some(failure.message));
                }
            }
        });
    };
    let rows = move || {
        let active = alerts.state.with(|s| s.active_silences(now.get() as u64));
        if active.is_empty() {
            return view! { <li class="placeholder">"None."</li> }.into_any();
        }
        active
            .into_iter()
            .map(|s| {
                let gpu = telemetry.state.with(|d| d.devices.iter().find(|x| x.info.uuid == s.gpu_uuid).map(|x| x.info.index));
                let gpu = gpu.map_or_else(|| s.gpu_uuid.clone(), |i| format!("GPU {i}"));
                let id = s.id;
                view! {
                    <li class="alerts-silence" data-id=s.id>
                        <span>
                            <strong>{s.rule.title()}</strong>
                            " on "
                            <span title=s.gpu_uuid.clone()>{gpu}</span>
                            {format!(" until {} by {} ({})", format::stamp(s.until_ms as f64), s.by, s.reason)}
                        </span>
                        <Show when=move || session.may_change(Role::Operator)>
                            <button type="button" class="small-button alerts-lift" on:click=move |_| lift(id)>"Lift"</button>
                        </Show>
                    </li>
                }
            })
            .collect_view()
            .into_any()
    };
    view! {
        <section id="alerts-silences" class="alerts-panel">
            <h3>"Silences"</h3>
            {move || error.get().map(|text| view! { <p class="lab-error" role="alert">{text}</p> })}
            <ul class="alerts-silence-list">{rows}</ul>
        </section>
    }
}

/// `#alerts-webhooks`: each receiver's deliveries; failures and drops are shown, not hidden.
#[component]
pub fn WebhooksPanel() -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let webhooks = Memo::new(move |_| alerts.state.with(|s| s.webhooks.clone()));
    let failing =
        move || webhooks.with(|w| w.iter().filter(|w| failing(w)).map(|w| w.target.clone()).collect::<Vec<_>>());
    view! {
        <section id="alerts-webhooks" class="alerts-panel">
            <h3>"Webhooks"</h3>
            <Show when=move || !failing().is_empty()>
                <p id="alerts-webhook-failing" class="notice notice-warn" role="alert">
                    {move || format!("Deliveries are failing or dropped: {}", failing().join(", "))}
                </p>
            </Show>
            <Show
                when=move || webhooks.with(|w| !w.is_empty())
                fallback=|| view! {
                    <p class="placeholder">"No webhooks: add --alert-webhook URL or [[webhook]] to the alerts file."</p>
                }
            >
                <div class="table-scroll">
                    <table class="alerts-webhooks">
                        <thead>
                            <tr>
                                <th>"Receiver"</th>
                                <th>"Delivered"</th>
                                <th>"Failed"</th>
                                <th>"Dropped"</th>
                                <th>"Queued"</th>
                                <th>"Last error"</th>
                            </tr>
                        </thead>
                        <tbody>{move || webhooks.with(|w| w.iter().map(webhook_row).collect_view())}</tbody>
                    </table>
                </div>
            </Show>
        </section>
    }
}

fn failing(webhook: &WebhookStatus) -> bool {
    webhook.dropped > 0
        || match (webhook.last_error_ms, webhook.last_success_ms) {
            (Some(error), Some(success)) => error > success,
            (Some(_), None) => true,
            (None, _) => webhook.failed > 0 && webhook.delivered == 0,
        }
}

fn webhook_row(w: &WebhookStatus) -> impl IntoView + use<> {
    let last_error = match (&w.last_error, w.last_error_ms) {
        (Some(text), Some(ms)) => format!("{text} ({})", format::stamp(ms as f64)),
        (Some(text), None) => text.clone(),
        (None, _) => "—".to_owned(),
    };
    view! {
        <tr class="alerts-webhook" class:webhook-failing=failing(w) data-target=w.target.clone()>
            <td class="mono">{format!("{} ({})", w.target, w.format)}</td>
            <td class="webhook-delivered">{w.delivered}</td>
            <td class="webhook-failed" class:bad={w.failed > 0}>{w.failed}</td>
            <td class="webhook-dropped" class:bad={w.dropped > 0}>{w.dropped}</td>
            <td class="webhook-queued">{w.queued}</td>
            <td class="webhook-error">{last_error}</td>
        </tr>
    }
}

/// `#alerts-rules`: every rule as the server runs it now.
#[component]
pub fn RulesPanel() -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let rules = Memo::new(move |_| alerts.state.with(|s| s.rules.clone()));
    view! {
        <section id="alerts-rules" class="alerts-panel">
            <h3>"Rules"</h3>
            <table class="alerts-rules">
                <tbody>
                    {move || rules.get().into_iter().map(|r| {
                        let severity = r.severity.as_str();
                        view! {
                            <tr class="alerts-rule" class:rule-off=!r.enabled data-rule=r.rule.as_str()>
                                <td>{r.rule.title()}</td>
                                <td>{r.condition}</td>
                                <td><span class=format!("alert-severity sev-{severity}")>{severity}</span></td>
                                <td>{if r.enabled { "on" } else { "off" }}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}
