//! One history chart: a metric of every GPU over the picked range, a line per GPU
//! in the shared palette, its legend under the plot (a button per GPU drills down
//! to it), and on hover a crosshair with the time and every line's value.

use leptos::{ev, html, logging, prelude::*};
use shared::{
    chart::SERIES_COLORS,
    history::Metric,
    time_axis::{Civil, moment},
    units::three_digits,
};

use super::history_plot::{Drawn, display_unit, draw, nearest, y_ceiling, zone_offset_ms};
use crate::{
    components::chart::LivePacer,
    hooks::{
        history::HistoryFeed,
        theme::Theme,
        visible::{use_box_size, use_on_screen},
    },
    state::{
        DashboardState,
        history::{HistoryRange, LineColors, TOP_LINES},
    },
};

/// Live-only redraws are spaced at least this far apart (a week's chart gains nothing from 5 a second).
const MIN_REDRAW_MS: f64 = 900.0;
/// A bucket still filling (a long range's) is redrawn this often for its moving mean.
const OPEN_BUCKET_REDRAW_MS: f64 = 5000.0;

/// What the pointer is over: where, when, and each shown GPU's value then.
#[derive(Debug, Clone, PartialEq)]
struct Hover {
    /// CSS pixels from the canvas's left edge: the crosshair's and the tooltip's place.
    x: f64,
    width: f64,
    time: String,
    values: Vec<(u32, String)>,
}

/// `figure.history-cell[data-metric]`: `canvas.history-chart`, `.history-legend`, `.history-tooltip`.
#[component]
pub fn HistoryChart(
    state: ReadSignal<DashboardState>,
    indices: Memo<Vec<u32>>,
    metric: Metric,
    range: ReadSignal<HistoryRange>,
    theme: ReadSignal<Theme>,
    feed: HistoryFeed,
    shown: RwSignal<Option<u32>>,
    /// The GPUs every chart draws now, in their colours (`HistorySection` picks them).
    lines: Memo<Vec<u32>>,
    colors: Memo<LineColors>,
    rank_by: ReadSignal<Metric>,
) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    let box_size = use_box_size(canvas_ref);
    let ceiling_of = move |lines: &[u32]| {
        state.with_untracked(|s| lines.iter().filter_map(|&i| y_ceiling(s, i, metric)).reduce(f64::max))
    };
    // What redraws at once when it changes (a device's limit); each draw scales to the lines it draws.
    let ceiling = Memo::new(move |_| {
        state.track();
        lines.with(|lines| ceiling_of(lines))
    });
    let drawn = StoredValue::new(None::<Drawn>);
    // The lines the canvas shows, set at each draw: the legend and the tooltip name these, not the
    // top lines of the latest tick (which change between draws, and rebuilt the legend at every tick);
    // until the chart draws (below the fold it may not for long) its legend names the top lines. Their
    // colours too are those of the draw: a chart off screen keeps the lines and colours it drew.
    let drawn_lines = RwSignal::new(None::<(Vec<u32>, LineColors)>);
    let shown_lines =
        Memo::new(move |_| drawn_lines.with(|d| d.as_ref().map(|(l, _)| l.clone())).unwrap_or_else(|| lines.get()));
    let shown_colors =
        Memo::new(move |_| drawn_lines.with(|d| d.as_ref().map(|(_, c)| c.clone())).unwrap_or_else(|| colors.get()));
    let hover = RwSignal::new(None::<Hover>);
    // A drill-down or another range redraws the chart: the crosshair's time and values no longer
    // hold, and with the pointer resting on the plot no mouseleave would ever clear them.
    Effect::new(move |_| {
        shown.track();
        range.track();
        hover.set(None);
    });
    // Off screen (below the fold, or the dashboard tab hidden) the chart waits, then draws once shown.
    let on_screen = use_on_screen(canvas_ref);
    let mut draws = 0u32;
    let mut pacer = LivePacer::<DrawKey>::default();
    let mut drawn_bucket: Option<u64> = None;
    Effect::new(move |_| {
        let key = DrawKey {
            range: range.get(),
            theme: theme.get(),
            size: box_size.get(),
            ceiling: ceiling.get(),
            answers: feed.answers.get(),
            shown: shown.get(),
            rank: rank_by.get(),
        };
        feed.set.track();
        // The top lines of this tick: what a draw now shows, and whose newest bucket says if one is due.
        let lines = lines.get();
        if !on_screen.get() {
            pacer.off_screen();
            return;
        }
        let (Some(canvas), Some(size)) = (canvas_ref.get(), key.size) else {
            return;
        };
        let now = js_sys::Date::now();
        let newest = feed.set.with_untracked(|set| {
            lines.iter().filter_map(|&i| set.series(i, metric)?.points().last().map(|p| p.t)).max()
        });
        // New samples are due when a bucket closed (or the open one has been moving a while);
        // the pacer then has the charts take turns instead of all redrawing in one tick.
        let due =
            |elapsed: f64| elapsed >= MIN_REDRAW_MS && (drawn_bucket != newest || elapsed >= OPEN_BUCKET_REDRAW_MS);
        if !pacer.draw_now(key, now, state.with_untracked(|s| s.seq), due) {
            return;
        }
        drawn_bucket = newest;
        let colors_now = colors.get_untracked();
        let result = feed.set.with_untracked(|set| {
            // Each line in its colour slot (distinct among the lines drawn, the same in every chart).
            let slot = |i: u32| colors_now.of(i) as u32;
            let series: Vec<_> = lines.iter().filter_map(|&i| Some((slot(i), set.series(i, metric)?))).collect();
            draw(&canvas, size, &series, metric, key.range, ceiling_of(&lines), now)
        });
        match result {
            Ok(done) => {
                draws += 1;
                drawn.set_value(Some(done));
                let _ = canvas.set_attribute("data-draws", &draws.to_string());
                let _ = canvas.set_attribute("data-points", &done.points.to_string());
                let _ = canvas.set_attribute("data-lines", &lines.len().to_string());
                let now_drawn = (lines, colors_now);
                if drawn_lines.with_untracked(|d| d.as_ref() != Some(&now_drawn)) {
                    drawn_lines.set(Some(now_drawn));
                }
            }
            Err(err) => logging::warn!("gpudash: cannot draw the {} history: {err}", metric.name()),
        }
    });

    let on_move = move |ev: ev::MouseEvent| {
        let x = f64::from(ev.offset_x());
        let Some(done) = drawn.get_value() else { return };
        let Some(t) = done.time_at(x) else {
            hover.set(None);
            return;
        };
        let (unit, divisor) = display_unit(metric);
        let values = feed.set.with_untracked(|set| {
            shown_lines
                .get_untracked()
                .into_iter()
                .filter_map(|i| {
                    let point = nearest(set.series(i, metric)?.points(), t)?;
                    Some((i, format!("{} {unit}", three_digits(point.avg / divisor))))
                })
                .collect()
        });
        let offset = zone_offset_ms(t as f64);
        let time = if range.get_untracked().millis() <= 3_600_000 {
            Civil::at(t, offset).time(true)
        } else {
            moment(t, js_sys::Date::now() as u64, offset, false)
        };
        let width = box_size.get_untracked().map_or(0.0, |(w, _)| w);
        hover.set(Some(Hover { x: done.x_of(t), width, time, values }));
    };

    let (unit, _) = display_unit(metric);
    view! {
        <figure class="history-cell" data-metric=metric.name()>
            <figcaption class="history-caption">
                {metric.label()}
                <span class="history-unit">{format!(" ({unit})")}</span>
            </figcaption>
            <div class="history-plot">
                <canvas
                    node_ref=canvas_ref
                    class="history-chart"
                    data-metric=metric.name()
                    role="img"
                    aria-label=move || {
                        let who = shown.get().map_or_else(|| "every GPU".to_owned(), |i| format!("GPU {i}"));
                        format!("{} of {who} over the last {}", metric.label(), range.get().key())
                    }
                    on:mousemove=on_move
                    on:mouseleave=move |_| hover.set(None)
                ></canvas>
                {move || {
                    let slot = |i: u32| shown_colors.with_untracked(|c| c.of(i));
                    hover.get().map(|h| tooltip(&h, &slot))
                }}
            </div>
            <Legend indices=indices visible=shown_lines colors=shown_colors shown=shown metric=metric rank_by=rank_by />
        </figure>
    }
}

/// The crosshair and the tooltip beside it (on the left of the crosshair past the middle).
fn tooltip(hover: &Hover, slot: &dyn Fn(u32) -> usize) -> impl IntoView + use<> {
    let side = if hover.x > hover.width / 2.0 {
        format!("right: {:.0}px", (hover.width - hover.x + 10.0).max(0.0))
    } else {
        format!("left: {:.0}px", hover.x + 10.0)
    };
    let rows = hover
        .values
        .iter()
        .map(|(i, value)| {
            let color = format!("background: {}", SERIES_COLORS[slot(*i) % SERIES_COLORS.len()]);
            view! {
                <li data-index=*i>
                    <span class="history-swatch" style=color></span>
                    {format!("GPU {i}: {value}")}
                </li>
            }
        })
        .collect_view();
    view! {
        <div class="history-crosshair" style=format!("left: {:.0}px", hover.x)></div>
        <div class="history-tooltip" role="status" style=side>
            <div class="history-tooltip-time">{hover.time.clone()}</div>
            <ul>{rows}</ul>
        </div>
    }
}

/// `ul.history-legend`: a button per GPU in its line's color, off the plot; pressing
/// one shows only that GPU (in every chart), pressing it again shows them all.
#[component]
fn Legend(
    indices: Memo<Vec<u32>>,
    visible: Memo<Vec<u32>>,
    colors: Memo<LineColors>,
    shown: RwSignal<Option<u32>>,
    metric: Metric,
    rank_by: ReadSignal<Metric>,
) -> impl IntoView {
    // For many GPUs, a chip per line drawn; the others are counted.
    let chips = Memo::new(move |_| {
        let all = indices.get();
        if all.len() <= TOP_LINES { all } else { visible.get() }
    });
    let others = move || indices.with(Vec::len).saturating_sub(visible.with(Vec::len));
    view! {
        <ul class="history-legend" aria-label=format!("GPUs in the {} chart", metric.label())>
            <For each=move || chips.get() key=|index| *index let:index>
                {
                    let pressed = move || shown.get() == Some(index);
                    let hidden = move || shown.get().is_some_and(|one| one != index);
                    let color = move || {
                        let slot = colors.with(|c| c.of(index));
                        format!("background: {}", SERIES_COLORS[slot % SERIES_COLORS.len()])
                    };
                    view! {
                        <li>
                            <button
                                type="button"
                                data-index=index
                                class:dimmed=hidden
                                aria-pressed=move || pressed().to_string()
                                title="Show only this GPU; press again for all"
                                on:click=move |_| shown.update(|s| *s = if *s == Some(index) { None } else { Some(index) })
                            >
                                <span class="history-swatch" style=color></span>
                                {format!("GPU {index}")}
                            </button>
                        </li>
                    }
                }
            </For>
            <Show when=move || { others() > 0 && shown.get().is_none() }>
                <li class="history-others" title="Pick one in the GPU list above to see it">
                    {move || format!("+ {} others (top {TOP_LINES} by {} shown)", others(), rank_by.get().label())}
                </li>
            </Show>
        </ul>
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
    shown: Option<u32>,
    /// What picks the lines: another choice redraws at once.
    rank: Metric,
}
