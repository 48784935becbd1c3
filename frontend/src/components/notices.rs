//! Notices above the cards: the simulator banner, the "no GPUs" explanation,
//! the warning that anyone on the network may use the dashboard, and on every tab the
//! lost connection (with how old the figures are) and a degraded server.

use std::time::Duration;

use leptos::prelude::*;
use shared::status::degraded_reasons;

use crate::hooks::telemetry::{ConnectionStatus, Telemetry};

/// `#simulated-banner`: says plainly that no figure on the page is real.
#[component]
pub fn SimulatedBanner() -> impl IntoView {
    view! {
        <div id="simulated-banner" class="notice notice-warn" role="status">
            <strong>"Simulated GPUs"</strong>
            " — figures come from gpudash's simulator, not hardware."
        </div>
    }
}

/// `#no-gpus`: why there is nothing to show, in the words of the driver, and what to try.
#[component]
pub fn NoGpus(gpu_error: Option<String>) -> impl IntoView {
    view! {
        <section id="no-gpus" class="notice notice-empty">
            <h2>"No GPUs to show"</h2>
            {gpu_error.map(|error| view! { <pre class="gpu-error">{error}</pre> })}
            <p>
                "To see the dashboard without NVIDIA hardware, start the simulator: "
                <code>"gpudash --simulate 4"</code>
            </p>
        </section>
    }
}

/// `#anonymous-banner`: the server listens beyond this machine and lets anyone do anything.
#[component]
pub fn AnonymousBanner() -> impl IntoView {
    view! {
        <div id="anonymous-banner" class="notice notice-danger" role="alert">
            "This dashboard is open to anyone on the network: no tokens are configured (--allow-anonymous)."
        </div>
    }
}

/// `#stale-banner`: the socket is down, so every figure on the page is as old as it says
/// (counted live from the last update's arrival); the figures are greyed meanwhile.
#[component]
pub fn StaleBanner(telemetry: Telemetry) -> impl IntoView {
    let down = move || telemetry.status.get() == ConnectionStatus::Reconnecting;
    let now = RwSignal::new(js_sys::Date::now());
    // Ticks only while down: a live page redraws nothing for it.
    let clock = set_interval_with_handle(
        move || {
            if telemetry.status.get_untracked() == ConnectionStatus::Reconnecting {
                now.set(js_sys::Date::now());
            }
        },
        Duration::from_secs(1),
    )
    .ok();
    on_cleanup(move || {
        if let Some(clock) = clock {
            clock.clear();
        }
    });
    let ago = move || {
        let seconds = telemetry.last_update.get().map(|last| ((now.get() - last) / 1000.0).max(0.0).floor() as u64);
        match seconds {
            Some(seconds) => format!("last update {seconds} s ago"),
            None => "no update received yet".to_owned(),
        }
    };
    view! {
        <Show when=down>
            <div id="stale-banner" class="notice notice-danger stale-banner" role="alert">
                <strong>"Connection lost"</strong>
                " — "
                <span class="stale-age">{ago}</span>
                ". The figures shown are not current; reconnecting…"
            </div>
        </Show>
    }
}

/// `#degraded-notice`: the server runs, but no driver was found or a GPU is lost (what
/// `/healthz` calls "degraded", by the same rule).
#[component]
pub fn DegradedNotice(telemetry: Telemetry) -> impl IntoView {
    let state = telemetry.state;
    let reasons = Memo::new(move |_| {
        state.with(|s| {
            s.host.as_ref().map(|host| {
                degraded_reasons(host, s.devices.iter().filter_map(|d| d.latest.as_ref()), &s.workload_problems)
            })
        })
    });
    move || {
        let reasons = reasons.get().unwrap_or_default();
        (!reasons.is_empty()).then(|| {
            view! {
                <div id="degraded-notice" class="notice notice-warn degraded-notice" role="status">
                    <strong>"Degraded"</strong>
                    " — "
                    <span class="degraded-reasons">{reasons.join("; ")}</span>
                </div>
            }
        })
    }
}
