//! The top bar: product name, host facts, connection status and the theme toggle.

use leptos::prelude::*;
use shared::{HostInfo, units::or_na};

use crate::{
    hooks::{
        telemetry::{ConnectionStatus, Telemetry},
        theme::{Theme, ThemeControl},
    },
    state::DashboardState,
};

/// Header for the whole page; host facts appear once the first snapshot arrived.
#[component]
pub fn Header(telemetry: Telemetry, theme: ThemeControl) -> impl IntoView {
    let state = telemetry.state;
    let host = Memo::new(move |_| state.with(|s: &DashboardState| s.host.clone()));
    let host_text = move |f: fn(&HostInfo) -> String| move || host.with(|h| h.as_ref().map_or_else(String::new, f));
    let has_host = move || host.with(Option::is_some);

    view! {
        <header class="topbar">
            <div class="brand">
                <span class="brand-mark" aria-hidden="true"></span>
                <h1>"gpudash"</h1>
            </div>
            <Show when=has_host>
                <dl class="host-facts">
                    <div>
                        <dt>"host"</dt>
                        <dd id="hostname">{host_text(|h| h.hostname.clone())}</dd>
                    </div>
                    <div>
                        <dt>"driver"</dt>
                        <dd id="driver-version">{host_text(|h| or_na(h.driver_version.clone(), |v| v))}</dd>
                    </div>
                    <div>
                        <dt>"CUDA"</dt>
                        <dd id="cuda-version">{host_text(|h| or_na(h.cuda_driver_version.clone(), |v| v))}</dd>
                    </div>
                </dl>
            </Show>
            <div class="topbar-end">
                <ConnectionBadge status=telemetry.status />
                <ThemeToggle theme=theme />
            </div>
        </header>
    }
}

/// `#conn-status`: exactly "live", "connecting" or "reconnecting", colored by class.
#[component]
fn ConnectionBadge(status: ReadSignal<ConnectionStatus>) -> impl IntoView {
    let label = move || status.get().label();
    view! {
        <span class="conn" title="Connection to the gpudash server">
            <span class=move || format!("conn-dot conn-{}", label()) aria-hidden="true"></span>
            <span id="conn-status" class=move || format!("conn-status conn-{}", label()) aria-live="polite">
                {label}
            </span>
        </span>
    }
}

/// `#theme-toggle`: flips between dark and light and remembers the choice.
#[component]
fn ThemeToggle(theme: ThemeControl) -> impl IntoView {
    let next = move || theme.theme.get().toggled();
    let title = move || match next() {
        Theme::Dark => "Switch to dark theme",
        Theme::Light => "Switch to light theme",
    };
    view! {
        <button
            id="theme-toggle"
            type="button"
            class="theme-toggle"
            title=title
            aria-label=title
            on:click=move |_| theme.toggle()
        >
            {move || match next() {
                Theme::Dark => "☾ dark",
                Theme::Light => "☀ light",
            }}
        </button>
    }
}
