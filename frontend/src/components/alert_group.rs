//! `li.alert-group`: one owner's "Held but idle" alerts as one card (the grouping rule is
//! `state::alert_groups`): the processes listed by GPU, "Silence all…" for operators (one silence
//! of the rule per GPU, through `POST /api/alerts/silences`), and each alert's own card, with its
//! Stop, folded beneath.

use leptos::{prelude::*, task::spawn_local};
use shared::{
    alerts::{Alert, Rule, SilenceRequest},
    auth::Role,
};

use crate::{
    components::{
        alert_panels::{SilenceDraft, SilenceFields},
        format,
    },
    hooks::{alerts::Alerts, session::Session},
    state::alert_groups,
};

/// "GPU 2 · pid 4242 · fired 14:05 — message".
fn item_text(alert: &Alert) -> String {
    let pid = alert.pid.map(|p| format!(" · pid {p}")).unwrap_or_default();
    format!(
        "GPU {}{pid} · fired {} — {}",
        alert.gpu_index,
        format::stamp(alert.fired_ms as f64),
        format::server_text(&alert.message)
    )
}

/// The card of `owner`'s grouped alerts; `children` are the alerts' own cards. `draft` is the
/// "Silence all…" form's state, kept by the page across the card's rebuilds.
#[component]
pub fn AlertGroup(owner: String, alerts: Vec<Alert>, draft: SilenceDraft, children: Children) -> impl IntoView {
    let session = expect_context::<Session>();
    let rule = alerts.first().map_or(Rule::IdleHeld, |a| a.rule);
    let severity = alerts.first().map_or("warning", |a| a.severity.as_str());
    let gpus = alert_groups::gpus(&alerts);
    let summary = alert_groups::summary(&alerts);
    let count = alerts.len();
    let items = alerts
        .into_iter()
        .map(|a| {
            view! {
                <li class="alert-group-item" data-id=a.id data-gpu=a.gpu_index data-pid=a.pid>
                    {item_text(&a)}
                </li>
            }
        })
        .collect_view();
    let owner_attr = owner.clone();
    view! {
        <li
            class=format!("alert-group alert-firing sev-{severity}")
            data-rule=rule.as_str()
            data-owner=owner_attr
            data-count=count
        >
            <div class="alert-head">
                <span class=format!("alert-severity sev-{severity}")>{severity}</span>
                <strong class="alert-title">{rule.title()}</strong>
                <span class="alert-who">{owner}</span>
                <span class="alert-group-summary">{summary}</span>
            </div>
            <ul class="alert-group-items">{items}</ul>
            <Show when=move || session.may_change(Role::Operator)>
                <BulkSilence rule=rule gpus=gpus.clone() draft=draft />
            </Show>
            <details class="alert-group-each">
                <summary>{format!("Each of the {count} alerts, with Stop")}</summary>
                <ul class="alerts-list">{children()}</ul>
            </details>
        </li>
    }
}

/// "Silence all…": for how long and why, then one silence of `rule` on each of `gpus`.
#[component]
fn BulkSilence(rule: Rule, gpus: Vec<u32>, draft: SilenceDraft) -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let session = expect_context::<Session>();
    let SilenceDraft { open, duration, reason, error, working } = draft;
    let names = gpus.iter().map(|g| format!("GPU {g}")).collect::<Vec<_>>().join(", ");
    let label = format!("Silence all on {names}…");
    let scope = format!("One silence of \"{}\" per GPU ({names}): it covers everyone's processes there.", rule.title());
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (duration, reason) = (duration.get_untracked(), reason.get_untracked());
        let gpus = gpus.clone();
        working.set(true);
        spawn_local(async move {
            let mut failures = Vec::new();
            for gpu in gpus {
                let request = SilenceRequest { rule, gpu, duration: duration.clone(), reason: reason.clone() };
                if let Err(failure) = alerts.silence(request).await {
                    session.unauthorized(&failure);
                    failures.push(format!("GPU {gpu}: {}", failure.message));
                }
            }
            alerts.load_list();
            if failures.is_empty() {
                open.try_set(false);
                error.try_set(None);
            } else {
                error.try_set(Some(failures.join("; ")));
            }
            working.try_set(false);
        });
    };
    view! {
        <div class="alert-silence alert-group-silence">
            <button type="button" class="small-button alert-silence-all" on:click=move |_| open.update(|o| *o = !*o)>
                {label}
            </button>
            <Show when=move || open.get()>
                <form class="alert-silence-form alert-silence-all-form" on:submit=submit.clone()>
                    <p class="alert-silence-scope">{scope.clone()}</p>
                    <SilenceFields draft=draft />
                    <button type="submit" class="small-button alert-silence-all-submit" disabled=move || working.get()>
                        "Silence all"
                    </button>
                </form>
            </Show>
            {draft.error_view()}
        </div>
    }
}
