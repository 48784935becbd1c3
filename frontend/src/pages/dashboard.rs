//! The dashboard page: notices, who uses what, one row per GPU (each opens into its
//! card), the process tables and the history charts.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::{
    components::{
        bridge::BridgePanel,
        gpu_grid::is_compact,
        history::HistorySection,
        notices::{NoGpus, SimulatedBanner},
        overview::Overview,
        processes::ProcessTable,
        reservations::ReservationsPanel,
        usage::WhoUsesWhat,
    },
    hooks::{
        bridge::use_bridge,
        telemetry::{ConnectionStatus, Telemetry},
        theme::Theme,
        url::ViewSignals,
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
    // The one process table's filter, which "Who uses what" (and the overview) set, and its order:
    // the view's, kept in the URL.
    let view = expect_context::<ViewSignals>();
    let process_filter = view.filter;
    provide_context(process_filter);
    provide_context(view.sort);
    // Many GPUs: the overview becomes the grid and comes first, so every GPU's state is on the first screen.
    let compact = Memo::new(move |_| is_compact(view.layout.get(), indices.with(Vec::len)));
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
                    <Show when=move || !compact.get()>
                        <WhoUsesWhat state=state />
                    </Show>
                    <Overview state=state indices=indices theme=theme compact=compact />
                    <Show when=move || compact.get()>
                        <WhoUsesWhat state=state />
                    </Show>
                    // For many GPUs the long sections start folded, so the grid and "Who uses what" lead.
                    <Fold compact=compact key="reservations" title="Reservations">
                        <ReservationsPanel state=state />
                    </Fold>
                    <Fold compact=compact key="processes" title="Processes">
                        <ProcessTable state=state filter=process_filter />
                    </Fold>
                    <Fold compact=compact key="pytorch" title="PyTorch">
                        <BridgePanel state=state bridge=bridge />
                    </Fold>
                    <Fold compact=compact key="history" title="History">
                        <HistorySection state=state indices=indices theme=theme />
                    </Fold>
                </Show>
            </Show>
        </main>
    }
}

/// `details#fold-<key>`: open, its summary hidden, for a few GPUs; folded under its summary for many,
/// its content built only while it is open (a folded process table does no work at each tick).
#[component]
fn Fold(compact: Memo<bool>, key: &'static str, title: &'static str, children: ChildrenFn) -> impl IntoView {
    let open = RwSignal::new(!compact.get_untracked());
    let toggled = move |ev: leptos::ev::Event| {
        let details = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlDetailsElement>().ok());
        if let Some(details) = details {
            open.set(details.open());
        }
    };
    view! {
        <details class="dash-fold" id=format!("fold-{key}") prop:open=move || !compact.get() on:toggle=toggled>
            <summary class="dash-fold-summary" hidden=move || !compact.get()>{title}</summary>
            <Show when=move || open.get()>{children()}</Show>
        </details>
    }
}
