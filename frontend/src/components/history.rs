//! `#history`: the range picker and, per GPU, a row of history charts; or a
//! notice when the server keeps no history.

use leptos::prelude::*;

use crate::{
    components::history_chart::HistoryChart,
    hooks::theme::Theme,
    state::{
        DashboardState,
        history::{CHARTED, HistoryRange},
    },
};

/// The history section, under the cards.
#[component]
pub fn HistorySection(
    state: ReadSignal<DashboardState>,
    indices: Memo<Vec<u32>>,
    theme: ReadSignal<Theme>,
) -> impl IntoView {
    let history_on = Memo::new(move |_| state.with(|s| s.host.as_ref().is_some_and(|h| h.history)));
    let (range, set_range) = signal(HistoryRange::FiveMinutes);

    view! {
        <section id="history" class="section" aria-labelledby="history-title">
            <div class="section-head">
                <h2 id="history-title" class="section-title">"History"</h2>
                <Show when=move || history_on.get()>
                    <RangePicker range=range set_range=set_range />
                </Show>
            </div>
            <Show
                when=move || history_on.get()
                fallback=|| {
                    view! {
                        <p id="history-off" class="notice">
                            "History is off on this server (" <code>"--no-history"</code> ")."
                        </p>
                    }
                }
            >
                <For each=move || indices.get() key=|index| *index let:index>
                    <HistoryRow state=state index=index range=range theme=theme />
                </For>
            </Show>
        </section>
    }
}

/// `#range-picker`: one button per range, the picked one `.active`.
#[component]
fn RangePicker(range: ReadSignal<HistoryRange>, set_range: WriteSignal<HistoryRange>) -> impl IntoView {
    view! {
        <div id="range-picker" class="range-picker" role="group" aria-label="Time range">
            {HistoryRange::ALL
                .into_iter()
                .map(|choice| {
                    let active = move || range.get() == choice;
                    view! {
                        <button
                            type="button"
                            data-range=choice.key()
                            class:active=active
                            aria-pressed=move || active().to_string()
                            on:click=move |_| set_range.set(choice)
                        >
                            {choice.key()}
                        </button>
                    }
                })
                .collect_view()}
        </div>
    }
}

/// The charts of GPU `index`, side by side on wide screens, stacked on phones.
#[component]
fn HistoryRow(
    state: ReadSignal<DashboardState>,
    index: u32,
    range: ReadSignal<HistoryRange>,
    theme: ReadSignal<Theme>,
) -> impl IntoView {
    let name = Memo::new(move |_| state.with(|s| s.device(index).map(|d| d.info.name.clone()).unwrap_or_default()));
    view! {
        <div class="history-row" data-index=index>
            <h3 class="history-gpu">
                <span class="gpu-index">{format!("GPU {index}")}</span>
                " "
                <span>{move || name.get()}</span>
            </h3>
            <div class="history-charts">
                {CHARTED
                    .into_iter()
                    .map(|metric| view! { <HistoryChart state=state index=index metric=metric range=range theme=theme /> })
                    .collect_view()}
            </div>
        </div>
    }
}
