//! The Lab view: where experiments are started on a GPU, the queue every
//! viewer shares, the selected run's result and the recent runs.

use leptos::prelude::*;

use crate::{
    components::lab::{
        forms::{ExperimentForm, RunTarget, offered},
        queue::LabQueue,
        run_view::RunView,
        runs::RecentRuns,
        topology::TopologyMatrix,
    },
    hooks::{lab::Lab, telemetry::Telemetry, theme::Theme},
};

#[component]
pub fn LabPage(telemetry: Telemetry, theme: ReadSignal<Theme>) -> impl IntoView {
    let lab = expect_context::<Lab>();
    let state = telemetry.state;
    let device = RwSignal::new(0u32);
    let force = RwSignal::new(false);
    // Memos: the view below is rebuilt only when availability changes, not at every lab event.
    let available = Memo::new(move |_| lab.state.with(|s| s.available()));
    let reason = Memo::new(move |_| {
        lab.state.with(|s| s.status.as_ref().and_then(|s| s.reason.clone())).unwrap_or_else(|| "no reason given".into())
    });
    let simulated = Memo::new(move |_| lab.state.with(|s| s.status.as_ref().is_some_and(|s| s.simulated)));
    let gpus = Memo::new(move |_| state.with(|s| s.devices.len()));
    // The forms are built again only when the list changes, so edits survive lab events.
    let experiments = Memo::new(move |_| {
        let gpus = gpus.get();
        lab.experiments.get().into_iter().filter(|e| offered(e.kind, gpus)).collect::<Vec<_>>()
    });
    let experiments = move || experiments.get();
    view! {
        <main class="lab-page">
            <Show when=move || lab.load_error.with(Option::is_some)>
                <p class="notice lab-error">{move || lab.load_error.get().unwrap_or_default()}</p>
            </Show>
            {move || match available.get() {
                None => view! { <p class="placeholder">"Loading the lab…"</p> }.into_any(),
                Some(false) => view! {
                    <section id="lab-unavailable" class="notice notice-warn" role="status">
                        <strong>"Lab unavailable: "</strong>
                        {reason}
                    </section>
                }
                .into_any(),
                Some(true) => view! {
                    <Show when=move || simulated.get()>
                        <div class="notice notice-warn lab-simulated" role="status">
                            <strong>"SIMULATED lab"</strong>
                            " — experiments run on gpudash's model of an H200; no figure is measured."
                        </div>
                    </Show>
                    <div class="lab-layout">
                        <div class="lab-column">
                            <RunTarget state=state device=device force=force />
                            <div class="lab-forms">
                                {move || {
                                    experiments()
                                        .into_iter()
                                        .map(|info| view! { <ExperimentForm info=info device=device force=force /> })
                                        .collect_view()
                                }}
                            </div>
                            <TopologyMatrix />
                        </div>
                        <div class="lab-column">
                            <LabQueue />
                            <RunView theme=theme />
                            <RecentRuns />
                        </div>
                    </div>
                }
                .into_any(),
            }}
        </main>
    }
}
