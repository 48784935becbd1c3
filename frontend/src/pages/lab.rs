//! The Lab view: where experiments are started on a GPU, the queue every
//! viewer shares, the selected run's result and the recent runs.

use leptos::{prelude::*, task::spawn_local};

use crate::{
    components::{
        empty_cache::EmptyCache,
        lab::{
            forms::{ExperimentForm, RunTarget},
            queue::LabQueue,
            run_view::RunView,
            runs::RecentRuns,
            topology::TopologyMatrix,
        },
    },
    hooks::{lab::Lab, reservations::Reservations, telemetry::Telemetry, theme::Theme, url::ViewSignals},
    state::lab_target::{PickedGpu, gpu_choices},
};

#[component]
pub fn LabPage(telemetry: Telemetry, theme: ReadSignal<Theme>) -> impl IntoView {
    let lab = expect_context::<Lab>();
    spawn_local(lab.load_experiments());
    let state = telemetry.state;
    let picked = RwSignal::new(PickedGpu::default());
    let force = RwSignal::new(false);
    // Each GPU with its state and owners, "free" by the rule the dashboard's "Free: GPU …" uses.
    // The one reservations poll, `app.rs`'s, which runs while the Lab is shown.
    let reservations = expect_context::<Reservations>();
    let choices = Memo::new(move |_| {
        let (list, now) = reservations.list.with(|l| (l.reservations.clone(), l.now_ms));
        state.with(|s| gpu_choices(s, &list, now))
    });
    // The picker is on a free GPU until the reader picks one: the default follows each new list (the
    // processes and reservations may be read after the GPUs); the reader's choice is never moved.
    Effect::new(move |_| {
        let next = choices.with(|c| picked.get_untracked().follow(c));
        if next != picked.get_untracked() {
            picked.set(next);
        }
    });
    // A link's or a card's "Run in the Lab" GPU (`#lab?gpu=2`) is picked as the reader's own choice;
    // the reader's later pick goes back into the link.
    let view = expect_context::<ViewSignals>();
    Effect::new(move |_| {
        // A GPU this host does not have is left out, as a bad value in a link is.
        let known = view.lab_gpu.get().filter(|&i| choices.with(|c| c.iter().any(|c| c.index == i)));
        if let Some(index) = known.filter(|&i| picked.get_untracked() != PickedGpu::by_reader(i)) {
            picked.set(PickedGpu::by_reader(index));
        }
    });
    Effect::new(move |_| {
        let index = picked.get().index();
        if view.lab_gpu.get_untracked().is_some_and(|at| at != index) {
            view.lab_gpu.set(Some(index));
        }
    });
    let indexes = Memo::new(move |_| state.with(|s| s.devices.iter().map(|d| d.info.index).collect::<Vec<_>>()));
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
        lab.experiments.get().into_iter().filter(|e| e.offered(gpus)).collect::<Vec<_>>()
    });
    let experiments = move || experiments.get();
    view! {
        <main class="lab-page">
            <Show when=move || lab.load_error.with(Option::is_some)>
                <p class="notice lab-error">{move || lab.load_error.get().unwrap_or_default()}</p>
            </Show>
            {move || match available.get() {
                None => view! { <p class="placeholder">"Loading the lab…"</p> }.into_any(),
                // Each experiment is still listed, greyed out with why it cannot run here.
                Some(false) => view! {
                    <section id="lab-unavailable" class="notice notice-warn" role="status">
                        <strong>"Lab unavailable: "</strong>
                        {reason}
                    </section>
                    <ul class="lab-experiments-off" aria-label="Experiments, unavailable here">
                        {move || lab.experiments.get().into_iter().map(|e| view! {
                            <li class="lab-experiment-off" data-kind=e.kind.name().to_owned()>
                                <span class="lab-form-title">{e.title}</span>
                                <span class="lab-unavailable-reason">{e.unavailable.unwrap_or_default()}</span>
                            </li>
                        }).collect_view()}
                    </ul>
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
                            <RunTarget choices=choices picked=picked force=force />
                            <div class="lab-forms">
                                {move || {
                                    experiments()
                                        .into_iter()
                                        .map(|info| view! { <ExperimentForm info=info choices=choices picked=picked force=force /> })
                                        .collect_view()
                                }}
                            </div>
                            <section id="lab-pool" class="lab-panel lab-pool-panel" aria-labelledby="lab-pool-title">
                                <h3 id="lab-pool-title" class="lab-panel-title">"The lab's memory pool"</h3>
                                <p class="lab-pool-help">
                                    "empty_cache here empties the lab's own pool on that GPU: the memory gpudash's experiments cached. "
                                    "It does not touch your process's cache. For your own, call torch.cuda.empty_cache() in it, "
                                    "or use the PyTorch bridge's remote empty_cache on the Dashboard."
                                </p>
                                <ul class="lab-pool-list">
                                    {move || indexes.get().into_iter().map(|index| view! {
                                        <li class="lab-pool-gpu" data-index=index>
                                            <span class="lab-pool-name">{format!("GPU {index}")}</span>
                                            <EmptyCache index=index />
                                        </li>
                                    }).collect_view()}
                                </ul>
                            </section>
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
