//! `#alerts-notify`: "Notify me" — the caller's own subscriptions (any GPU free, GPU N
//! free, my processes, every critical alert, everything), and what the browser lets the
//! page do with notifications.

use leptos::prelude::*;
use shared::alerts::SubscriptionKind;

use crate::hooks::{alerts::Alerts, notify::Permission, telemetry::Telemetry};

#[component]
pub fn NotifyPanel(telemetry: Telemetry) -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let gpus = Memo::new(move |_| {
        telemetry.state.with(|s| s.devices.iter().map(|d| (d.info.index, d.info.uuid.clone())).collect::<Vec<_>>())
    });
    let user = Memo::new(move |_| alerts.state.with(|s| s.subscriptions.as_ref().map(|s| s.user.clone())));
    let permission = alerts.permission;
    let secure = secure_context();
    view! {
        <section id="alerts-notify" class="alerts-panel">
            <h3>"Notify me"</h3>
            <Show when=move || !secure>
                <p id="alerts-notify-insecure" class="notice notice-warn" role="alert">
                    "Browser notifications need HTTPS or localhost: this page is served over plain http, so the \
                     browser will not show them. Serve gpudash over HTTPS (--tls-cert, --tls-key) or open it on \
                     localhost, or have alerts sent to a webhook (ntfy reaches phones; the "
                    <a href="#alerts-webhooks">"Webhooks"</a>
                    " panel below lists them, docs/ALERTS.md says how)."
                </p>
            </Show>
            <p
                id="alerts-notify-permission"
                class="alerts-permission"
                class:notice=move || permission.get() == Permission::Denied
                class:notice-warn=move || permission.get() == Permission::Denied
                role=move || if permission.get() == Permission::Denied { "alert" } else { "status" }
                data-permission=move || permission.get().key()
            >
                {move || permission.get().describe()}
            </p>
            <Show when=move || alerts.subscribe_error.with(Option::is_some)>
                <p id="alerts-notify-error" class="lab-error" role="alert">
                    {move || alerts.subscribe_error.get().unwrap_or_default()}
                </p>
            </Show>
            <div class="alerts-subscriptions">
                <Toggle id="notify-any-gpu-free".into() label="Any GPU comes free".into() kind=SubscriptionKind::AnyGpuFree {} />
                {move || gpus.get().into_iter().map(|(index, uuid)| view! {
                    <Toggle
                        id=format!("notify-gpu-free-{index}")
                        label=format!("GPU {index} comes free")
                        kind=SubscriptionKind::GpuFree { gpu_uuid: uuid }
                    />
                }).collect_view()}
                <Toggle
                    id="notify-my-processes".into()
                    label=user.get_untracked().map_or_else(|| "My processes".to_owned(), |u| format!("My processes ({u})"))
                    kind=SubscriptionKind::MyProcesses {}
                />
                <Toggle id="notify-critical".into() label="Every critical alert".into() kind=SubscriptionKind::Critical {} />
                <Toggle id="notify-everything".into() label="Everything".into() kind=SubscriptionKind::Everything {} />
            </div>
        </section>
    }
}

/// Whether the page runs in a secure context (HTTPS, or localhost over http), the only place a
/// browser shows notifications.
fn secure_context() -> bool {
    web_sys::window().is_none_or(|w| w.is_secure_context())
}

/// One subscription's checkbox: on subscribes (and asks for the permission), off unsubscribes.
/// Outside a secure context it is unticked and disabled: the browser would never notify.
#[component]
fn Toggle(id: String, label: String, kind: SubscriptionKind) -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let secure = secure_context();
    let checked = Memo::new({
        let kind = kind.clone();
        move |_| secure && alerts.state.with(|s| s.subscription(&kind).is_some())
    });
    let loaded = Memo::new(move |_| secure && alerts.state.with(|s| s.subscriptions.is_some()));
    view! {
        <label class="alerts-subscription">
            <input
                type="checkbox"
                id=id
                prop:checked=move || checked.get()
                disabled=move || !loaded.get()
                on:change=move |ev| alerts.toggle(kind.clone(), event_target_checked(&ev))
            />
            {label}
        </label>
    }
}
