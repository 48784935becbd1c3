//! Drawing a history chart: display units, the y ceiling, time ticks on round
//! local times (`shared::time_axis`), gaps split out, a line per GPU in the shared
//! palette, and reading the pointer back as a time.

use shared::{
    chart::{linear_ticks, series_color},
    history::{HistoryPoint, Metric},
    time_axis::TimeTicks,
};
use web_sys::HtmlCanvasElement;

use crate::{
    components::chart::{BandPoint, ChartLine, TimeChart, gib_ticks},
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

/// Where the y labels go, in display units: memory at whole binary steps (the Lab's and the memory
/// chart's rule), the rest at 1, 2 or 5 × a power of ten.
fn y_ticks(metric: Metric, y_max: f64) -> Vec<f64> {
    if metric == Metric::MemoryUsed { gib_ticks(y_max, 4) } else { linear_ticks(0.0, y_max, 4) }
}

/// The offset of the browser's zone at `ms`, ms east of UTC.
pub fn zone_offset_ms(ms: f64) -> i64 {
    -(js_sys::Date::new(&ms.into()).get_timezone_offset() as i64) * 60_000
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

/// What a draw showed: the time range, the plot area's left and right edges (CSS
/// pixels) and how many buckets of all lines were drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drawn {
    pub from: u64,
    pub to: u64,
    pub plot: (f64, f64),
    pub points: usize,
}

impl Drawn {
    /// The time under CSS pixel `x` of the canvas, if it is over the plot area.
    pub fn time_at(&self, x: f64) -> Option<u64> {
        let (left, right) = self.plot;
        (right > left && (left..=right).contains(&x))
            .then(|| self.from + ((x - left) / (right - left) * (self.to - self.from) as f64) as u64)
    }

    /// CSS pixel x of time `t` on the canvas.
    pub fn x_of(&self, t: u64) -> f64 {
        let (left, right) = self.plot;
        left + (t.saturating_sub(self.from)) as f64 / (self.to - self.from).max(1) as f64 * (right - left)
    }
}

/// The bucket of `points` (oldest first) whose start is nearest `t`.
pub fn nearest(points: &[HistoryPoint], t: u64) -> Option<&HistoryPoint> {
    let at = points.partition_point(|p| p.t < t);
    let after = points.get(at);
    let before = at.checked_sub(1).and_then(|i| points.get(i));
    match (before, after) {
        (Some(b), Some(a)) => Some(if t - b.t <= a.t - t { b } else { a }),
        (b, a) => b.or(a),
    }
}

/// Draws one line per `(colour slot, series)` in the slot's palette color (`state::history::color_slot`) (with the
/// min–max band when only one GPU is shown) over the last `range`.
pub fn draw(
    canvas: &HtmlCanvasElement,
    box_size: (f64, f64),
    lines: &[(u32, &HistorySeries)],
    metric: Metric,
    range: HistoryRange,
    ceiling: Option<f64>,
    now_ms: f64,
) -> Result<Drawn, Box<dyn std::error::Error>> {
    let (unit, divisor) = display_unit(metric);
    let newest = lines.iter().filter_map(|(_, s)| s.points().last()).map(|p| p.t as f64).fold(0.0, f64::max);
    let to = now_ms.max(newest) as u64;
    let from = to.saturating_sub(range.millis());
    let visible: Vec<(u32, &[HistoryPoint], u64)> = lines
        .iter()
        .map(|(index, s)| (*index, &s.points()[s.points().partition_point(|p| p.t < from)..], s.bucket_ms()))
        .collect();
    let data_max = visible.iter().flat_map(|(_, points, _)| points.iter()).map(|p| p.max / divisor).fold(0.0, f64::max);

    let max_ticks = (box_size.0 / 95.0).clamp(2.0, 8.0) as u64;
    let ticks = TimeTicks::new(from, to, max_ticks, zone_offset_ms(to as f64));
    let band_points: Vec<(u32, Vec<BandPoint>, u64)> = visible
        .iter()
        .map(|(index, points, bucket_ms)| {
            let points = points
                .iter()
                .map(|p| BandPoint { x: p.t as i64, low: p.min / divisor, mid: p.avg / divisor, high: p.max / divisor })
                .collect();
            (*index, points, (bucket_ms * 3).max(5_000))
        })
        .collect();
    let band = band_points.len() == 1;
    let chart_lines: Vec<ChartLine<'_>> = band_points
        .iter()
        .map(|(index, points, gap_ms)| ChartLine {
            color: series_color(*index as usize),
            band,
            segments: segments(points, *gap_ms),
        })
        .collect();
    let y_max = ceiling.unwrap_or(0.0).max(data_max * 1.05).max(1.0);
    let plot = TimeChart {
        x_range: from as i64..to as i64,
        x_ticks: ticks.ticks.iter().map(|&t| t as i64).collect(),
        x_label: &|x| ticks.label(x.max(0) as u64),
        x_desc: None,
        y_max,
        y_desc: unit,
        y_ticks: y_ticks(metric, y_max),
        compact: true,
        markers: &[],
        band_opacity: 0.2,
        box_size,
    }
    .draw_lines(canvas, &chart_lines)?;
    // The tick labels, for tests and screen readers that cannot read the canvas.
    let labels: Vec<String> = ticks.ticks.iter().map(|&t| ticks.label(t)).collect();
    let _ = canvas.set_attribute("data-x-ticks", &labels.join("|"));
    Ok(Drawn { from, to, plot, points: visible.iter().map(|(_, p, _)| p.len()).sum() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(x: i64) -> BandPoint {
        BandPoint { x, low: 0.0, mid: 0.0, high: 0.0 }
    }

    #[test]
    fn the_pointer_reads_back_as_a_time_and_finds_the_nearest_bucket() {
        let drawn = Drawn { from: 1000, to: 2000, plot: (50.0, 150.0), points: 0 };
        assert_eq!(drawn.time_at(100.0), Some(1500));
        assert_eq!(drawn.time_at(10.0), None, "over the y labels");
        assert_eq!(drawn.x_of(1500), 100.0);
        let p = |t| HistoryPoint { t, min: 0.0, avg: 0.0, max: 0.0 };
        let points = [p(1000), p(1200), p(1400)];
        assert_eq!(nearest(&points, 1290).map(|p| p.t), Some(1200));
        assert_eq!(nearest(&points, 1310).map(|p| p.t), Some(1400));
        assert_eq!(nearest(&points, 9999).map(|p| p.t), Some(1400));
        assert_eq!(nearest(&[], 5), None);
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
