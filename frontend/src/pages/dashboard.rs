//! The dashboard page: notices, who uses what, one row per GPU (each opens into its
//! card), the process tables and the history charts.

use leptos::prelude::*;

use crate::{
    components::{
        bridge::BridgePanel,
        history::HistorySection,
        notices::{NoGpus, SimulatedBanner},
        overview::Overview,
        processes::{ProcessTable, provide_process_filter},
        reservations::ReservationsPanel,
        usage::WhoUsesWhat,
    },
    hooks::{
        bridge::use_bridge,
        telemetry::{ConnectionStatus, Telemetry},
        theme::Theme,
    },
    pages::Tab,
};

/// Everything below the header. Shows a placeholder until the first snapshot.
#[component]
pub fn Dashboard(telemetry: Telemetry, theme: ReadSignal<Theme>) -> impl IntoView {
    let state = telemetry.state;
    let loaded = move || state.with(|s| s.host.is_some());
    let simulated = move || state.with(|s| s.host.as_ref().is_some_and(|h| h.simulated));
    // The list changes only with a snapshot; ticks leave it (and the cards) alone.
    let indices = Memo::new(move |_| state.with(|s| s.devices.iter().map(|d| d.info.index).collect::<Vec<_>>()));
    // Figures on screen are stale while the socket is down; say so by dimming them.
    let stale = move || telemetry.status.get() != ConnectionStatus::Live;
    let tab = expect_context::<ReadSignal<Tab>>();
    let bridge = use_bridge(Memo::new(move |_| tab.get() == Tab::Dashboard));
    provide_context(bridge);
    // The one process table's filter, which "Who uses what" (and the overview) set.
    let process_filter = provide_process_filter();
    let gpu_error = move || state.with(|s| s.host.as_ref().and_then(|h| h.gpu_error.clone()));

    view! {
        <main class="dashboard" class:stale=stale>
            <Show
                when=loaded
                fallback=|| view! { <p class="placeholder">"Waiting for the first reading from the server…"</p> }
            >
                <Show when=simulated>
                    <SimulatedBanner />
                </Show>
                <Show
                    when=move || !indices.with(Vec::is_empty)
                    fallback=move || view! { <NoGpus gpu_error=gpu_error() /> }
                >
                    <WhoUsesWhat state=state />
                    <Overview state=state indices=indices theme=theme />
                    <ReservationsPanel state=state />
                    <ProcessTable state=state filter=process_filter />
                    <BridgePanel state=state bridge=bridge />
                    <HistorySection state=state indices=indices theme=theme />
                </Show>
            </Show>
        </main>
    }
}
