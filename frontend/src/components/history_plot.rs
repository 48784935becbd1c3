//! Drawing a history chart: display units, the y ceiling, time ticks on round
//! local times, gaps split out, and the [`TimeChart`] call.

use shared::history::Metric;
use web_sys::HtmlCanvasElement;

use crate::{
    components::{
        chart::{BandPoint, TimeChart},
        format,
    },
    state::{
        DashboardState,
        history::{HistoryRange, HistorySeries},
    },
};

const GIB: f64 = (1u64 << 30) as f64;

/// The unit a metric is drawn in and what divides the API's values into it.
pub fn display_unit(metric: Metric) -> (&'static str, f64) {
    match metric {
        Metric::MemoryUsed => ("GiB", GIB),
        other => (other.unit(), 1.0),
    }
}

/// The top of the y axis in display units, where the device says what its most is.
pub fn y_ceiling(state: &DashboardState, index: u32, metric: Metric) -> Option<f64> {
    let device = state.device(index)?;
    let latest = device.latest.as_ref();
    match metric {
        Metric::MemoryUsed => (device.info.memory_total > 0).then(|| device.info.memory_total as f64 / GIB),
        Metric::GpuUtil | Metric::MemUtil | Metric::SmActive | Metric::TensorActive => Some(100.0),
        Metric::PowerDraw => latest?.power_limit_mw.map(|mw| f64::from(mw) / 1000.0),
        Metric::Temperature => Some(100.0),
        Metric::SmClock => device.info.max_clocks.sm_mhz.map(f64::from),
        Metric::MemClock => device.info.max_clocks.memory_mhz.map(f64::from),
    }
}

/// Steps the time axis may take, in ms: round minutes, hours and days.
const TIME_STEPS: [u64; 14] = [
    15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000,
    21_600_000, 43_200_000, 86_400_000,
];

/// Tick times between `from` and `to` at the smallest round step that gives at
/// most `max_ticks`, aligned on the local clock (`offset_ms` east of UTC); and that step.
fn time_ticks(from: u64, to: u64, max_ticks: u64, offset_ms: i64) -> (Vec<u64>, u64) {
    let span = to.saturating_sub(from);
    let step = TIME_STEPS.into_iter().find(|step| span / step <= max_ticks.max(1)).unwrap_or(86_400_000);
    let local = |t: u64| t as i64 + offset_ms;
    let first = local(from).div_euclid(step as i64) * step as i64 + step as i64 - offset_ms;
    let ticks = (0..).map(|k| first + k * step as i64).take_while(|&t| t <= to as i64).map(|t| t as u64).collect();
    (ticks, step)
}

/// A tick's label: seconds on short steps, the weekday on day steps.
fn time_label(ms: f64, step: u64) -> String {
    if step < 60_000 {
        format::time_of_day(ms, true)
    } else if step >= 43_200_000 {
        format::day_and_time(ms)
    } else {
        format::time_of_day(ms, false)
    }
}

/// Splits points where buckets are missing (the server was down), so no line bridges the gap.
fn segments(points: &[BandPoint], gap_ms: u64) -> Vec<&[BandPoint]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..points.len() {
        if (points[i].x - points[i - 1].x) as u64 > gap_ms {
            out.push(&points[start..i]);
            start = i;
        }
    }
    if start < points.len() {
        out.push(&points[start..]);
    }
    out
}

/// Draws the chart; returns how many buckets it drew.
pub fn draw(
    canvas: &HtmlCanvasElement,
    box_size: (f64, f64),
    series: &HistorySeries,
    metric: Metric,
    range: HistoryRange,
    ceiling: Option<f64>,
    now_ms: f64,
) -> Result<usize, Box<dyn std::error::Error>> {
    let (unit, divisor) = display_unit(metric);
    let to = now_ms.max(series.points().last().map_or(0.0, |p| p.t as f64)) as u64;
    let from = to.saturating_sub(range.millis());
    let first = series.points().partition_point(|p| p.t < from);
    let visible = &series.points()[first..];
    let data_max = visible.iter().map(|p| p.max / divisor).fold(0.0, f64::max);

    let max_ticks = (box_size.0 / 80.0).clamp(2.0, 8.0) as u64;
    let offset_ms = -js_sys::Date::new_0().get_timezone_offset() as i64 * 60_000;
    let (ticks, step) = time_ticks(from, to, max_ticks, offset_ms);
    let points: Vec<BandPoint> = visible
        .iter()
        .map(|p| BandPoint { x: p.t as i64, low: p.min / divisor, mid: p.avg / divisor, high: p.max / divisor })
        .collect();
    let gap_ms = (series.bucket_ms() * 3).max(5_000);
    TimeChart {
        x_range: from as i64..to as i64,
        x_ticks: ticks.into_iter().map(|t| t as i64).collect(),
        x_label: &|x| time_label(x as f64, step),
        x_desc: None,
        y_max: ceiling.unwrap_or(0.0).max(data_max * 1.05).max(1.0),
        y_desc: unit,
        y_labels: 4,
        compact: true,
        markers: &[],
        band_opacity: 0.25,
        box_size,
    }
    .draw(canvas, &segments(&points, gap_ms))?;
    Ok(visible.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(x: i64) -> BandPoint {
        BandPoint { x, low: 0.0, mid: 0.0, high: 0.0 }
    }

    #[test]
    fn ticks_fall_on_round_local_times() {
        // One hour from 10:07 UTC: every 15 minutes at most 4 ticks, on the quarter hour.
        let from = 10 * 3_600_000 + 7 * 60_000;
        let (ticks, step) = time_ticks(from, from + 3_600_000, 4, 0);
        assert_eq!(step, 900_000);
        assert_eq!(
            ticks,
            [10 * 3_600_000 + 900_000, 10 * 3_600_000 + 1_800_000, 10 * 3_600_000 + 2_700_000, 11 * 3_600_000]
        );
        // Half an hour east of UTC, hour ticks land on local hours.
        let (ticks, _) = time_ticks(0, 3 * 3_600_000, 3, 1_800_000);
        assert_eq!(ticks, [1_800_000, 5_400_000, 9_000_000]);
    }

    #[test]
    fn gaps_split_the_series() {
        let points = [point(0), point(1000), point(9000), point(10_000)];
        let parts = segments(&points, 5000);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], [point(9000), point(10_000)]);
        assert!(segments(&[], 5000).is_empty());
    }
}
