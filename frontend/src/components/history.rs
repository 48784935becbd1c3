//! `#history`: the range picker and GPU picker (sticky while the charts scroll by),
//! then one chart per metric with every GPU as a line; or a notice when the
//! server keeps no history.

use leptos::prelude::*;
use shared::history::Metric;

use crate::{
    components::history_chart::HistoryChart,
    hooks::{history::use_history, theme::Theme, url::ViewSignals},
    state::{
        DashboardState,
        history::{CHARTED, HistoryRange, LineColors, RANK_BY, TOP_LINES, charted, top_lines},
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
    // The range and the one GPU drilled down to (or every GPU): the view's, kept in the URL.
    let view = use_context::<ViewSignals>();
    let range_signal = view.map_or_else(|| RwSignal::new(HistoryRange::FiveMinutes), |v| v.range);
    let (range, set_range) = (range_signal.read_only(), range_signal.write_only());
    let shown = view.map_or_else(|| RwSignal::new(None::<u32>), |v| v.drill);
    let rank_by = view.map_or_else(|| RwSignal::new(RANK_BY), |v| v.rank);
    let feed = use_history(state, range, history_on);
    // The lines every chart draws: every GPU, or past eight the top ones by `rank_by`'s latest
    // figure (the GPU picker reaches the others), or the one drilled down to. One set for every
    // chart, so that a colour means one GPU all down the section.
    let lines = Memo::new(move |_| match shown.get() {
        Some(one) => vec![one],
        None => {
            let metric = rank_by.get();
            indices.with(|all| {
                feed.set.with(|set| top_lines(all, |i| set.series(i, metric)?.points().last().map(|p| p.avg)))
            })
        }
    });
    let colors = Memo::new(move |before: Option<&LineColors>| {
        before.cloned().unwrap_or_default().next(&lines.get(), indices.with(Vec::len))
    });

    view! {
        <section id="history" class="section" aria-labelledby="history-title">
            <div class="section-head history-head">
                <h2 id="history-title" class="section-title">"History"</h2>
                <Show when=move || history_on.get()>
                    <RangePicker range=range set_range=set_range />
                    <GpuPicker indices=indices shown=shown />
                    <Show when=move || { indices.with(Vec::len) > TOP_LINES }>
                        <RankPicker rank_by=rank_by />
                    </Show>
                    // The time axes' zone, named once for every chart.
                    <span class="times-zone history-zone">{crate::components::format::zone_caption()}</span>
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
                <Show when=move || feed.error.with(Option::is_some)>
                    <p class="history-error" role="alert">{move || feed.error.get().unwrap_or_default()}</p>
                </Show>
                <div class="history-charts" data-requests=move || feed.requests.get().to_string()>
                    {CHARTED
                        .into_iter()
                        .map(|metric| {
                            view! {
                                <HistoryChart
                                    state=state
                                    indices=indices
                                    metric=metric
                                    range=range
                                    theme=theme
                                    feed=feed
                                    shown=shown
                                    lines=lines
                                    colors=colors
                                    rank_by=rank_by.read_only()
                                />
                            }
                        })
                        .collect_view()}
                </div>
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

/// `#history-gpu`: every GPU, or one to drill down to (the legends' buttons set it too).
#[component]
fn GpuPicker(indices: Memo<Vec<u32>>, shown: RwSignal<Option<u32>>) -> impl IntoView {
    let value = move || shown.get().map_or_else(|| "all".to_owned(), |i| i.to_string());
    view! {
        <label class="history-gpu-picker">
            "GPU "
            <select
                id="history-gpu"
                prop:value=value
                on:change=move |ev| shown.set(event_target_value(&ev).parse().ok())
            >
                <option value="all">"all"</option>
                <For each=move || indices.get() key=|index| *index let:index>
                    <option value=index.to_string()>{index.to_string()}</option>
                </For>
            </select>
        </label>
    }
}

/// `#history-rank`: past eight GPUs, which figure picks the lines every chart draws.
#[component]
fn RankPicker(rank_by: RwSignal<Metric>) -> impl IntoView {
    view! {
        <label class="history-rank-picker">
            {format!("Lines: top {TOP_LINES} by ")}
            <select
                id="history-rank"
                prop:value=move || rank_by.get().name()
                on:change=move |ev| {
                    let name = event_target_value(&ev);
                    if let Some(metric) = charted(&name) {
                        rank_by.set(metric);
                    }
                }
            >
                {CHARTED
                    .into_iter()
                    .map(|metric| view! { <option value=metric.name()>{metric.label()}</option> })
                    .collect_view()}
            </select>
        </label>
    }
}
