//! One history chart: a device's metric over the picked range, fetched from
//! `/api/history` and kept moving with the live samples ([`use_history_series`]);
//! min–max band and average line ([`super::history_plot`]).

use leptos::{html, logging, prelude::*};
use shared::history::Metric;

use super::history_plot::{display_unit, draw, y_ceiling};
use crate::{
    components::chart::LivePacer,
    hooks::{
        history::{HistoryFeed, use_history_series},
        theme::Theme,
        visible::{use_box_size, use_on_screen},
    },
    state::{DashboardState, history::HistoryRange},
};

/// Live-only redraws are spaced at least this far apart (a week's chart gains nothing from 5 a second).
const MIN_REDRAW_MS: f64 = 900.0;
/// A bucket still filling (a long range's) is redrawn this often for its moving mean.
const OPEN_BUCKET_REDRAW_MS: f64 = 5000.0;

/// `canvas.history-chart[data-metric]` of GPU `index`.
#[component]
pub fn HistoryChart(
    state: ReadSignal<DashboardState>,
    index: u32,
    metric: Metric,
    range: ReadSignal<HistoryRange>,
    theme: ReadSignal<Theme>,
) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    let box_size = use_box_size(canvas_ref);
    let HistoryFeed { series, error, answers } = use_history_series(state, index, metric, range, canvas_ref);

    let ceiling = Memo::new(move |_| state.with(|s| y_ceiling(s, index, metric)));
    // Off screen (below the fold, or the dashboard tab hidden) the chart waits, then draws once shown.
    let on_screen = use_on_screen(canvas_ref);
    let mut draws = 0u32;
    let mut pacer = LivePacer::<DrawKey>::default();
    // The newest bucket's start at the last draw.
    let mut drawn_bucket: Option<u64> = None;
    Effect::new(move |_| {
        let key = DrawKey {
            range: range.get(),
            theme: theme.get(),
            size: box_size.get(),
            ceiling: ceiling.get(),
            answers: answers.get(),
        };
        series.track();
        if !on_screen.get() {
            pacer.off_screen();
            return;
        }
        let (Some(canvas), Some(size)) = (canvas_ref.get(), key.size) else {
            return;
        };
        let now = js_sys::Date::now();
        let newest = series.with_untracked(|s| s.points().last().map(|p| p.t));
        // New samples are due when a bucket closed (or the open one has been moving a while);
        // the pacer then has the 5 × GPUs charts take turns instead of all redrawing in one tick.
        let due =
            |elapsed: f64| elapsed >= MIN_REDRAW_MS && (drawn_bucket != newest || elapsed >= OPEN_BUCKET_REDRAW_MS);
        if !pacer.draw_now(key, now, state.with_untracked(|s| s.seq), due) {
            return;
        }
        drawn_bucket = newest;
        let drawn = series.with_untracked(|s| draw(&canvas, size, s, metric, key.range, key.ceiling, now));
        match drawn {
            Ok(points) => {
                draws += 1;
                let _ = canvas.set_attribute("data-draws", &draws.to_string());
                let _ = canvas.set_attribute("data-points", &points.to_string());
            }
            Err(err) => logging::warn!("gpudash: cannot draw the {} history of GPU {index}: {err}", metric.name()),
        }
    });

    let (unit, _) = display_unit(metric);
    view! {
        <figure class="history-cell">
            <figcaption class="history-caption">
                {metric.label()}
                <span class="history-unit">{format!(" ({unit})")}</span>
            </figcaption>
            <canvas
                node_ref=canvas_ref
                class="history-chart"
                data-metric=metric.name()
                data-index=index
                role="img"
                aria-label=move || format!("{} of GPU {index} over the last {}", metric.label(), range.get().key())
            ></canvas>
            <Show when=move || error.with(Option::is_some)>
                <p class="history-error">{move || error.get().unwrap_or_default()}</p>
            </Show>
        </figure>
    }
}

/// What, besides new live samples, redraws a chart at once.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DrawKey {
    range: HistoryRange,
    theme: Theme,
    /// The canvas's CSS box.
    size: Option<(f64, f64)>,
    ceiling: Option<f64>,
    answers: u32,
}
