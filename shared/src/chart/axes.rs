//! Axes of the run chart: ranges (the bounds rule), where ticks go, how they read.
//!
//! Pure arithmetic, apart from any backend. Log axes are in log10 units.

use std::ops::Range;

use crate::lab::RunResult;

/// Both axes of a chart: range, where the ticks go and how they read.
pub struct Axes<'a> {
    pub x: Range<f64>,
    pub x_ticks: Vec<f64>,
    pub x_label: &'a dyn Fn(f64) -> String,
    pub x_desc: &'a str,
    pub y: Range<f64>,
    pub y_ticks: Vec<f64>,
    pub y_label: &'a dyn Fn(f64) -> String,
    pub y_desc: &'a str,
    /// Width of the y labels, CSS pixels.
    pub y_area: f64,
}

/// `v` on an axis: log10 of it on a log axis (never of zero or less).
pub fn to_axis(v: f64, log: bool) -> f64 {
    if log { v.max(1e-12).log10() } else { v }
}

/// An axis position back in the value's units.
pub fn from_axis(t: f64, log: bool) -> f64 {
    if log { 10f64.powf(t) } else { t }
}

/// The ranges of a curves chart, in axis units: every point of this run and the
/// previous one (medians and their min–max bands) and every reference line fits.
/// x gets 3% on each side; a linear y starts at zero (or below, for negative
/// values) and gets 8% on top; a log y gets 8% on each side.
pub fn lines_bounds(result: &RunResult, previous: Option<&RunResult>, logs: (bool, bool)) -> (Range<f64>, Range<f64>) {
    let (log_x, log_y) = logs;
    let points = || std::iter::once(result).chain(previous).flat_map(|r| r.series.iter().flat_map(|s| &s.points));
    let (x_lo, x_hi) = bounds(points().map(|p| to_axis(p.x, log_x)));
    let ys = points().flat_map(|p| [p.y.min, p.y.max]).chain(result.references.iter().map(|r| r.value));
    let (y_lo, y_hi) = bounds(ys.map(|y| to_axis(y, log_y)));
    let (x_lo, x_hi) = pad(x_lo, x_hi, 0.03);
    let (y_lo, y_hi) =
        if log_y { pad(y_lo, y_hi, 0.08) } else { (y_lo.min(0.0), y_hi + (y_hi - y_lo.min(0.0)) * 0.08) };
    (x_lo..x_hi, y_lo..y_hi)
}

/// Smallest and largest of the finite `values`, or 0..1 when there are none.
pub fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) =
        values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
}

/// Widens `lo..hi` by `fraction` of its span on each side (by 0.5 when it has none).
pub fn pad(lo: f64, hi: f64, fraction: f64) -> (f64, f64) {
    let span = hi - lo;
    if span <= 0.0 { (lo - 0.5, hi + 0.5) } else { (lo - span * fraction, hi + span * fraction) }
}

/// How many ticks fit across `width` CSS pixels, within `2..=max`.
pub fn tick_count(width: f64, max: f64) -> usize {
    (width / 90.0).clamp(2.0, max) as usize
}

/// Round ticks (1, 2 or 5 × a power of ten apart) over `lo..hi`, at most `max` of them.
pub fn linear_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let span = hi - lo;
    if span <= 0.0 || !span.is_finite() {
        return vec![lo];
    }
    let rough = span / max.max(1) as f64;
    let power = 10f64.powf(rough.log10().floor());
    let step =
        [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|s| span / s <= max as f64).unwrap_or(10.0 * power);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// Byte ticks over `lo..hi` (bytes) a power of two apart, at most `max` of them:
/// 256 MiB, 512 MiB, 768 MiB… or 1 GiB, 2 GiB…, so each reads as a whole binary unit.
pub fn pow2_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let span = hi - lo;
    if span <= 0.0 || !span.is_finite() {
        return vec![lo];
    }
    let mut step = 1.0f64;
    while span / step > max.max(1) as f64 {
        step *= 2.0;
    }
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// Log-axis ticks (log10 units) at the measured x values, thinned to at most `max`.
pub fn log_ticks_at(values: impl Iterator<Item = f64>, range: Range<f64>, max: usize) -> Vec<f64> {
    let mut ticks: Vec<f64> = values.filter(|v| *v > 0.0).map(f64::log10).filter(|t| range.contains(t)).collect();
    crate::order::sort_by(&mut ticks, f64::total_cmp);
    ticks.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    let stride = ticks.len().div_ceil(max.max(1)).max(1);
    ticks.into_iter().step_by(stride).collect()
}

/// Log-axis ticks (log10 units) at powers of ten, with 2 and 5 between when the range is short.
pub fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (lo.floor() as i64)..=(hi.ceil() as i64);
    let short = hi - lo < 3.0;
    let multiples: &[f64] = if short { &[1.0, 2.0, 5.0] } else { &[1.0] };
    decades
        .flat_map(|d| multiples.iter().map(move |m| (m * 10f64.powi(d as i32)).log10()))
        .filter(|t| *t >= lo && *t <= hi)
        .collect()
}

/// The value of `measured` within 0.1% of `v`, else `v`: a log axis's ticks sit at
/// measured sizes, and reading them back through the axis's fixed-point units is a
/// little off ("16383" for 16 KiB).
pub fn snap(v: f64, measured: &[f64]) -> f64 {
    measured.iter().copied().find(|m| (m - v).abs() <= m.abs() * 1e-3).unwrap_or(v)
}

/// Width of a column of labels, CSS pixels: about 6.2 per character, at most 45% of the chart.
pub fn label_area(labels: &[String], width: f64) -> f64 {
    let longest = labels.iter().map(|n| n.chars().count()).max().unwrap_or(4) as f64;
    (longest * 6.2 + 12.0).min(width * 0.45)
}

/// The label of row tick `t` on an axis whose rows are listed top down.
pub fn row_label(labels: &[String], t: f64) -> String {
    let i = labels.len() as i64 - 1 - t.round() as i64;
    usize::try_from(i).ok().and_then(|i| labels.get(i).cloned()).unwrap_or_default()
}

/// `text` cut to `max` characters with an ellipsis.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars().take(max - 1).chain(std::iter::once('…')).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::{ChartSpec, Point, ReferenceLine, Series, Stats};
    use crate::units::{exact_bytes, three_digits};

    #[test]
    fn linear_ticks_are_round() {
        assert_eq!(linear_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(linear_ticks(0.0, 1.0, 2), [0.0, 0.5, 1.0]);
        assert_eq!(linear_ticks(3.0, 3.0, 4), [3.0]);
    }

    #[test]
    fn log_ticks_follow_the_measured_sizes_and_decades() {
        let sizes: Vec<f64> = (0..10).map(|i| f64::from(4096u32) * 4f64.powi(i)).collect();
        let ticks = log_ticks_at(sizes.into_iter(), 3.0..10.0, 5);
        assert_eq!(ticks.len(), 5);
        assert_eq!(exact_bytes(from_axis(ticks[0], true).round() as u64), "4 KiB");
        let decades: Vec<String> = decade_ticks(-0.2, 3.4).into_iter().map(|t| three_digits(10f64.powf(t))).collect();
        assert_eq!(decades, ["1.00", "10.0", "100", "1000"]);
        assert_eq!(decade_ticks(0.0, 1.0).len(), 4, "1, 2, 5, 10 on a short axis");
        assert_eq!(snap(16_383.4, &[4096.0, 16_384.0]), 16_384.0);
        assert_eq!(snap(10_000.0, &[4096.0, 16_384.0]), 10_000.0);
    }

    fn stats(min: f64, median: f64, max: f64) -> Stats {
        Stats { min, median, max, n: 3 }
    }

    fn result(points: &[(f64, Stats)], references: &[f64]) -> RunResult {
        RunResult {
            chart: ChartSpec::Lines { x_label: "bytes".into(), y_label: "GB/s".into(), log_x: true, log_y: false },
            unit: "GB/s".into(),
            series: vec![Series { name: "h2d".into(), points: points.iter().map(|&(x, y)| Point { x, y }).collect() }],
            references: references.iter().map(|&value| ReferenceLine { name: "peak".into(), value }).collect(),
            figures: vec![],
            checks: vec![],
            memory_steps: vec![],
            timeline: vec![],
            matrices: vec![],
            l2_bytes: None,
            notes: vec![],
        }
    }

    #[test]
    fn curves_fit_bands_references_and_the_previous_run_from_zero() {
        let run = result(&[(1e3, stats(4.0, 5.0, 6.0)), (1e6, stats(10.0, 20.0, 30.0))], &[50.0]);
        let before = result(&[(1e9, stats(1.0, 2.0, 3.0))], &[]);
        let (x, y) = lines_bounds(&run, Some(&before), (true, false));
        assert!((x.start - (3.0 - 0.18)).abs() < 1e-9 && (x.end - (9.0 + 0.18)).abs() < 1e-9, "{x:?}");
        assert_eq!(y.start, 0.0, "a linear y axis starts at zero");
        assert!((y.end - 54.0).abs() < 1e-9, "the reference line fits, with 8% over it: {y:?}");
        let (_, log_y) = lines_bounds(&run, None, (true, true));
        assert!(log_y.start < 4f64.log10() && log_y.end > 50f64.log10(), "{log_y:?}");
    }

    #[test]
    fn empty_and_flat_ranges_still_have_a_width() {
        let (x, y) = lines_bounds(&result(&[], &[]), None, (false, false));
        assert_eq!((x.start, x.end), (-0.03, 1.03), "no points: 0..1, padded");
        assert_eq!((y.start, y.end), (0.0, 1.08));
        assert_eq!(pad(2.0, 2.0, 0.1), (1.5, 2.5));
    }

    #[test]
    fn rows_read_top_down_and_labels_stay_short() {
        let rows = vec!["first".to_owned(), "second".to_owned()];
        assert_eq!(row_label(&rows, 1.0), "first");
        assert_eq!(row_label(&rows, 0.0), "second");
        assert_eq!(row_label(&rows, 5.0), "");
        assert_eq!(shorten("launch + synchronize (host)", 10), "launch + …");
        assert_eq!(label_area(&rows, 1000.0), 6.0 * 6.2 + 12.0);
    }

    #[test]
    fn byte_ticks_fall_on_powers_of_two() {
        const MIB: f64 = (1u64 << 20) as f64;
        let read = |ticks: Vec<f64>| ticks.into_iter().map(|t| exact_bytes(t as u64)).collect::<Vec<_>>();
        assert_eq!(read(pow2_ticks(0.0, 1100.0 * MIB, 5)), ["0", "256 MiB", "512 MiB", "768 MiB", "1 GiB"]);
        assert_eq!(
            read(pow2_ticks(0.0, 80.0 * 1024.0 * MIB, 6)),
            ["0", "16 GiB", "32 GiB", "48 GiB", "64 GiB", "80 GiB"]
        );
        // An H200's 141 GiB: the dashboard's memory chart ticks there by this rule too.
        assert_eq!(read(pow2_ticks(0.0, 141.0 * 1024.0 * MIB, 5)), ["0", "32 GiB", "64 GiB", "96 GiB", "128 GiB"]);
        assert_eq!(pow2_ticks(5.0, 5.0, 4), [5.0]);
    }
}
