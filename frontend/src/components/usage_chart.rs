//! The Usage tab's chart and tables: GPU-hours per day stacked by user, with a value axis
//! ("GPU-hours") and the days under the bars; tables whose columns sort on a click. Every figure
//! follows one precision rule ([`figure`]): one decimal, "<0.1" for a little above nothing.

use leptos::prelude::*;
use shared::time_axis::Civil;
use shared::usage::UsageRow;

/// Colours of the stacked bars, one per user in turn.
const PALETTE: [&str; 8] = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"];
/// The whole drawing, and the plot inside it (room on the left for values, below for days).
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 200.0;
const LEFT: f64 = 52.0;
const BOTTOM: f64 = 22.0;
const TOP: f64 = 8.0;
const PLOT_W: f64 = WIDTH - LEFT - 4.0;
const PLOT_H: f64 = HEIGHT - BOTTOM - TOP;
/// At most this many day labels under the bars (every n-th day on long ranges).
const MAX_DAY_LABELS: usize = 10;

/// GPU-hours, GiB-hours and kWh as the Usage tab writes them all: one decimal; "<0.1" for a
/// value above zero that would read "0.0".
pub fn figure(value: f64) -> String {
    if value > 0.0 && value < 0.05 { "<0.1".to_owned() } else { format!("{value:.1}") }
}

/// A round step for about four ticks up to `most`: 1, 2 or 5 times a power of ten.
fn tick_step(most: f64) -> f64 {
    if most <= 0.0 || !most.is_finite() {
        return 1.0;
    }
    let rough = most / 4.0;
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|s| *s >= rough).unwrap_or(10.0 * power)
}

/// A tick's value with as many decimals as its step needs: "0", "0.5", "0.02", "20".
fn tick_label(value: f64, step: f64) -> String {
    if value == 0.0 {
        return "0".to_owned();
    }
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{value:.decimals$}")
}

/// One bar segment of the stacked chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
    pub colour: &'static str,
    pub title: String,
}

/// What the chart draws: users in order (most GPU-hours first), the bars, the value ticks
/// (y, label) and the day labels (x, label).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stacked {
    pub users: Vec<String>,
    pub segments: Vec<Segment>,
    pub values: Vec<(f64, String)>,
    pub days: Vec<(f64, String)>,
}

/// The chart of `user_day` rows, days named in the zone `utc_offset` minutes east of UTC.
pub fn stack(rows: &[UsageRow], utc_offset: i32) -> Stacked {
    let mut users: Vec<(String, f64)> = Vec::new();
    let mut days: Vec<u64> = Vec::new();
    for row in rows {
        let user = row.user.clone().unwrap_or_default();
        match users.iter_mut().find(|(u, _)| *u == user) {
            Some((_, hours)) => *hours += row.gpu_hours,
            None => users.push((user, row.gpu_hours)),
        }
        if let Some(day) = row.day.filter(|d| !days.contains(d)) {
            days.push(day);
        }
    }
    shared::order::sort_by(&mut users, |a, b| b.1.total_cmp(&a.1));
    shared::order::sort(&mut days);
    let day_total = |day: u64| rows.iter().filter(|r| r.day == Some(day)).map(|r| r.gpu_hours).sum::<f64>();
    let most = days.iter().map(|&d| day_total(d)).fold(0.0, f64::max);
    let step = tick_step(most);
    let top = (most / step).ceil().max(1.0) * step;
    let y_of = |v: f64| TOP + PLOT_H - v / top * PLOT_H;
    let slot = PLOT_W / days.len().max(1) as f64;
    let offset_ms = i64::from(utc_offset) * 60_000;
    let mut segments = Vec::new();
    for (n, &day) in days.iter().enumerate() {
        let mut stacked = 0.0;
        for (u, (user, _)) in users.iter().enumerate() {
            let Some(row) = rows.iter().find(|r| r.day == Some(day) && r.user.as_deref() == Some(user)) else {
                continue;
            };
            let (low, high) = (y_of(stacked), y_of(stacked + row.gpu_hours));
            stacked += row.gpu_hours;
            segments.push(Segment {
                x: LEFT + n as f64 * slot + slot * 0.15,
                y: high,
                width: slot * 0.7,
                height: low - high,
                colour: PALETTE[u % PALETTE.len()],
                title: format!("{user}, {}: {} GPU-hours", Civil::at(day, offset_ms).date(), figure(row.gpu_hours)),
            });
        }
    }
    let ticks = (top / step).round() as usize;
    let values = (0..=ticks).map(|n| n as f64 * step).map(|v| (y_of(v), tick_label(v, step))).collect();
    let every = days.len().div_ceil(MAX_DAY_LABELS).max(1);
    let days = days
        .iter()
        .enumerate()
        .filter(|(n, _)| n % every == 0)
        .map(|(n, &day)| (LEFT + (n as f64 + 0.5) * slot, Civil::at(day, offset_ms).date()))
        .collect();
    Stacked { users: users.into_iter().map(|(u, _)| u).collect(), segments, values, days }
}

/// GPU-hours per day (in the viewer's zone), stacked by user, with both axes and a legend.
#[component]
pub fn UsageChart(rows: Signal<Vec<UsageRow>>, zone: RwSignal<i32>) -> impl IntoView {
    let chart = Memo::new(move |_| rows.with(|r| stack(r, zone.get())));
    let (base, mid) = (TOP + PLOT_H, TOP + PLOT_H / 2.0);
    view! {
        <figure id="usage-chart" class="usage-chart">
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img" aria-label="GPU-hours per day by user">
                <text class="usage-axis-title" x="12" y=mid transform=format!("rotate(-90 12 {mid})") text-anchor="middle">
                    "GPU-hours"
                </text>
                {move || chart.get().values.into_iter().map(|(y, label)| view! {
                    <line class="usage-grid" x1=LEFT x2=WIDTH - 4.0 y1=y y2=y></line>
                    <text class="usage-value" x=LEFT - 4.0 y=y + 3.5 text-anchor="end">{label}</text>
                }).collect_view()}
                {move || chart.get().segments.into_iter().map(|s| view! {
                    <rect class="usage-bar" x=s.x y=s.y width=s.width height=s.height fill=s.colour>
                        <title>{s.title}</title>
                    </rect>
                }).collect_view()}
                <line class="usage-axis" x1=LEFT x2=WIDTH - 4.0 y1=base y2=base></line>
                {move || chart.get().days.into_iter().map(|(x, label)| view! {
                    <text class="usage-day" x=x y=base + 15.0 text-anchor="middle">{label}</text>
                }).collect_view()}
            </svg>
            <figcaption class="usage-legend">
                {move || chart.get().users.into_iter().enumerate().map(|(n, user)| view! {
                    <span class="usage-legend-item">
                        <span class="swatch" style=format!("background:{}", PALETTE[n % PALETTE.len()])></span>
                        {user}
                    </span>
                }).collect_view()}
            </figcaption>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::usage::DAY_MS;

    #[test]
    fn one_precision_rule() {
        let shown = [figure(0.0), figure(0.004), figure(0.05), figure(12.345)];
        assert_eq!(shown, ["0.0", "<0.1", "0.1", "12.3"]);
    }

    #[test]
    fn value_ticks_are_round_and_reach_the_busiest_day() {
        assert_eq!((tick_step(7.0), tick_step(0.03), tick_step(100.0), tick_step(0.0)), (2.0, 0.01, 50.0, 1.0));
        let labels = [tick_label(0.5, 0.5), tick_label(0.02, 0.01), tick_label(20.0, 5.0), tick_label(0.0, 0.0005)];
        assert_eq!(labels, ["0.5", "0.02", "20", "0"]);
    }

    #[test]
    fn bars_stack_users_per_day_under_labelled_axes() {
        let row = |user: &str, day: u64, gpu_hours: f64| UsageRow {
            user: Some(user.into()),
            day: Some(day * DAY_MS),
            gpu_hours,
            ..UsageRow::default()
        };
        let chart = stack(&[row("bo", 1, 1.0), row("ana", 1, 3.0), row("ana", 2, 2.0)], 0);
        assert_eq!(chart.users, ["ana", "bo"]);
        assert_eq!(chart.segments.len(), 3);
        let day1: f64 = chart.segments.iter().filter(|s| s.x < LEFT + PLOT_W / 2.0).map(|s| s.height).sum();
        assert!((day1 - PLOT_H).abs() < 1e-9, "the busiest day (4 h) reaches the top tick: {day1}");
        let labels: Vec<&str> = chart.values.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0", "1", "2", "3", "4"]);
        let days: Vec<&str> = chart.days.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(days, ["2 Jan", "3 Jan"]);
        assert_eq!(chart.segments[0].title, "ana, 2 Jan: 3.0 GPU-hours");
        let month: Vec<UsageRow> = (0..30).map(|d| row("ana", d, 1.0)).collect();
        assert_eq!(stack(&month, 0).days.len(), 10, "every third day on 30 days");
        assert!(stack(&[], 0).segments.is_empty());
    }
}
