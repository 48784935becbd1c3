//! The chart kinds a [`ChartSpec`](crate::lab::ChartSpec) names: curves with
//! reference lines, bars with min–max whiskers, a per-stream timeline, and
//! P2P heatmaps. Each lays out its [`Axes`] and draws through a [`Plot`].

use std::ops::Range;

use plotters::{
    coord::Shift,
    drawing::DrawingArea,
    element::{PathElement, Text},
    prelude::DrawingBackend,
    style::{
        Color, ShapeStyle,
        text_anchor::{HPos, Pos, VPos},
    },
};

use super::{
    DrawError, Look, RunChart,
    axes::{
        Axes, bounds, decade_ticks, from_axis, label_area, linear_ticks, lines_bounds, log_ticks_at, pow2_ticks,
        row_label, shorten, snap, tick_count, to_axis,
    },
    plot::Plot,
    series_color,
};
use crate::lab::Matrix;
use crate::units::{exact_bytes, three_digits};

type Area<DB> = DrawingArea<DB, Shift>;

impl RunChart<'_> {
    /// Curves; with `LEGEND`, named in a legend (a constant, so the page's wasm,
    /// which never draws one, has no legend code: about 5.6 KB).
    pub(super) fn lines<DB: DrawingBackend, const LEGEND: bool>(
        &self,
        root: &Area<DB>,
        look: &Look,
        (x_desc, y_desc): (&str, &str),
        (log_x, log_y): (bool, bool),
    ) -> Result<(), DrawError> {
        let result = self.result;
        let (x, y) = lines_bounds(result, self.previous, (log_x, log_y));
        let max_x_ticks = tick_count(look.width, 10.0);
        let measured: Vec<f64> = std::iter::once(result)
            .chain(self.previous)
            .flat_map(|r| r.series.iter().flat_map(|s| s.points.iter().map(|p| p.x)))
            .collect();
        // The memory experiment's x is its steps: named ("alloc 3", "free all", "empty_cache"), one tick each.
        let steps: Vec<String> =
            result.memory_steps.iter().map(|s| step_label(&s.label, look.width, result.memory_steps.len())).collect();
        let bytes = x_desc.contains("bytes");
        let x_ticks = if !steps.is_empty() && !log_x {
            (0..steps.len()).map(|i| i as f64).collect()
        } else if log_x {
            log_ticks_at(measured.iter().copied(), x.clone(), max_x_ticks)
        } else if bytes {
            pow2_ticks(x.start.max(0.0), x.end, max_x_ticks)
        } else {
            linear_ticks(x.start, x.end, max_x_ticks)
        };
        let y_ticks = if log_y { decade_ticks(y.start, y.end) } else { linear_ticks(y.start, y.end, 6) };
        let x_label = |t: f64| {
            if let Some(step) = usize::try_from(t.round() as i64).ok().and_then(|i| steps.get(i)).filter(|_| !log_x) {
                return step.clone();
            }
            let v = if log_x { snap(from_axis(t, true), &measured) } else { t };
            if bytes { exact_bytes(v.round() as u64) } else { three_digits(v) }
        };
        let y_label = |t: f64| three_digits(from_axis(t, log_y));
        let (x_lo, x_hi, y_lo, y_hi) = (x.start, x.end, y.start, y.end);
        // Wide enough for the longest y label ("0.0125", "1.20e+03"), so none is cut off.
        let y_labels: Vec<String> = y_ticks.iter().map(|&t| y_label(t)).collect();
        let y_area = label_area(&y_labels, look.width).max(52.0);
        let axes = Axes { x, x_ticks, x_label: &x_label, x_desc, y, y_ticks, y_label: &y_label, y_desc, y_area };
        // The legend goes in a strip under the plot, off the data.
        let mut entries: Vec<(String, ShapeStyle)> = Vec::new();
        if LEGEND {
            for series in self.previous.iter().flat_map(|p| &p.series) {
                let color = series_color(self.series_index(&series.name));
                let style = ShapeStyle::from(color.mix(0.35)).stroke_width(look.px(1.0));
                let name = match self.previous_id {
                    Some(id) => format!("{} (run {id})", series.name),
                    None => format!("{} (previous run)", series.name),
                };
                entries.push((name, style));
            }
            for (i, series) in result.series.iter().enumerate() {
                entries.push((series.name.clone(), ShapeStyle::from(series_color(i)).stroke_width(look.px(2.0))));
            }
        }
        let (plot_area, legend_area) = legend_split(root, look, &entries);
        let mut chart = Plot::frame(&plot_area, look, &axes)?;
        let on_axes = |points: &[crate::lab::Point]| -> Vec<(f64, f64)> {
            points.iter().map(|p| (to_axis(p.x, log_x), to_axis(p.y.median, log_y))).collect()
        };

        if let Some(l2) = result.l2_bytes.filter(|_| bytes) {
            l2_band(&mut chart, look, to_axis((l2 / 2) as f64, log_x), l2, (x_lo..x_hi, y_lo..y_hi))?;
        }
        for reference in &result.references {
            let y = to_axis(reference.value, log_y);
            let style = ShapeStyle::from(look.palette.text.mix(0.8)).stroke_width(look.px(1.0));
            chart.path(&[(x_lo, y), (x_hi, y)], style)?;
            let text = format!("{} {} {}", reference.name, three_digits(reference.value), result.unit);
            let font = look.font(10.5).color(&look.palette.text).pos(Pos::new(HPos::Left, VPos::Bottom));
            chart.text(text, (x_lo, y), &font)?;
        }
        if let Some(previous) = self.previous {
            for series in &previous.series {
                let color = series_color(self.series_index(&series.name));
                let style = ShapeStyle::from(color.mix(0.35)).stroke_width(look.px(1.0));
                chart.path(&on_axes(&series.points), style)?;
            }
        }
        for (i, series) in result.series.iter().enumerate() {
            let color = series_color(i);
            if series.points.iter().any(|p| p.y.max > p.y.min) {
                let mut band: Vec<(f64, f64)> =
                    series.points.iter().map(|p| (to_axis(p.x, log_x), to_axis(p.y.max, log_y))).collect();
                band.extend(series.points.iter().rev().map(|p| (to_axis(p.x, log_x), to_axis(p.y.min, log_y))));
                chart.polygon(&band, color.mix(0.15).filled())?;
            }
            let line = on_axes(&series.points);
            // The memory curves meet (reserved follows allocated up, NVML's change follows reserved): each
            // earlier one is drawn wider, so one that runs under another still shows at its edges.
            let nested = if steps.is_empty() { 0 } else { result.series.len() - 1 - i };
            let width = look.px(2.0 + 2.5 * nested as f64);
            chart.path(&line, ShapeStyle::from(color).stroke_width(width))?;
            chart.dots(&line, look.px(2.5), color.filled())?;
        }
        if let Some(area) = legend_area {
            legend_strip(&area, look, &entries)?;
        }
        Ok(())
    }

    /// The color index of a series by name, so the previous run's curves match this run's.
    fn series_index(&self, name: &str) -> usize {
        self.result.series.iter().position(|s| s.name == name).unwrap_or(0)
    }

    pub(super) fn bars<DB: DrawingBackend>(&self, root: &Area<DB>, look: &Look, unit: &str) -> Result<(), DrawError> {
        let figures = &self.result.figures;
        let n = figures.len().max(1);
        let row = |i: usize| (n - 1 - i) as f64;
        let previous =
            |name: &str| self.previous.and_then(|p| p.figures.iter().find(|f| f.name == name)).map(|f| f.stats.median);
        let x_hi =
            figures.iter().flat_map(|f| [Some(f.stats.max), previous(&f.name)]).flatten().fold(0.0, f64::max).max(1e-9)
                * 1.15;
        let names: Vec<String> = figures.iter().map(|f| shorten(&f.name, 30)).collect();
        let y_label = |t: f64| row_label(&names, t);
        let axes = Axes {
            x: 0.0..x_hi,
            x_ticks: linear_ticks(0.0, x_hi, tick_count(look.width, 8.0)),
            x_label: &three_digits,
            x_desc: unit,
            y: -0.5..n as f64 - 0.5,
            y_ticks: (0..n).map(|i| i as f64).collect(),
            y_label: &y_label,
            y_desc: "",
            y_area: label_area(&names, look.width),
        };
        let mut chart = Plot::frame(root, look, &axes)?;
        let color = look.palette.line;
        let whisker = ShapeStyle::from(look.palette.text).stroke_width(look.px(1.5));
        for (i, figure) in figures.iter().enumerate() {
            let (y, s) = (row(i), figure.stats);
            chart.rect((0.0, y - 0.3), (s.median, y + 0.3), color.mix(0.75).filled())?;
            chart.path(&[(s.min, y), (s.max, y)], whisker)?;
            chart.path(&[(s.min, y - 0.15), (s.min, y + 0.15)], whisker)?;
            chart.path(&[(s.max, y - 0.15), (s.max, y + 0.15)], whisker)?;
            if let Some(before) = previous(&figure.name) {
                let style = ShapeStyle::from(look.palette.text.mix(0.5)).stroke_width(look.px(2.0));
                chart.path(&[(before, y - 0.4), (before, y + 0.4)], style)?;
            }
            let font = look.font(10.5).color(&look.palette.text).pos(Pos::new(HPos::Left, VPos::Center));
            let text = format!(" {} {}", three_digits(s.median), figure.unit);
            chart.text(text, (s.max, y), &font)?;
        }
        Ok(())
    }

    pub(super) fn gantt<DB: DrawingBackend>(&self, root: &Area<DB>, look: &Look) -> Result<(), DrawError> {
        let spans = &self.result.timeline;
        let mut rows: Vec<(&str, u32)> = Vec::new();
        let mut kinds: Vec<&str> = Vec::new();
        for span in spans {
            if !rows.contains(&(span.phase.as_str(), span.stream)) {
                rows.push((span.phase.as_str(), span.stream));
            }
            if !kinds.contains(&span_kind(&span.label)) {
                kinds.push(span_kind(&span.label));
            }
        }
        let n = rows.len().max(1);
        let names: Vec<String> =
            rows.iter().map(|(phase, stream)| format!("{} · s{stream}", shorten(phase, 26))).collect();
        let y_label = |t: f64| row_label(&names, t);
        let x_hi = spans.iter().map(|s| s.end_ms).fold(0.0, f64::max).max(1e-6) * 1.02;
        let axes = Axes {
            x: 0.0..x_hi,
            x_ticks: linear_ticks(0.0, x_hi, tick_count(look.width, 10.0)),
            x_label: &three_digits,
            x_desc: "ms from the phase's start",
            y: -0.5..n as f64 - 0.5,
            y_ticks: (0..n).map(|i| i as f64).collect(),
            y_label: &y_label,
            y_desc: "",
            y_area: label_area(&names, look.width),
        };
        let mut chart = Plot::frame(root, look, &axes)?;
        for span in spans {
            let Some(row) = rows.iter().position(|r| *r == (span.phase.as_str(), span.stream)) else { continue };
            let y = (n - 1 - row) as f64;
            let color = series_color(kinds.iter().position(|k| *k == span_kind(&span.label)).unwrap_or(0));
            let end = span.end_ms.max(span.start_ms + x_hi * 0.002);
            chart.rect((span.start_ms, y - 0.35), (end, y + 0.35), color.mix(0.85).filled())?;
        }
        Ok(())
    }
}

/// Shades the copy sizes whose source and destination both fit in the GPU's L2 (from the left edge to
/// `x`, half the L2 on the axis) and draws a line there, labelled "src + dst fit in L2 (60 MiB)".
/// Nothing when every size is larger.
fn l2_band<'a, DB: DrawingBackend + 'a>(
    chart: &mut Plot<'a, DB>,
    look: &Look,
    x: f64,
    l2: u64,
    (xs, ys): (Range<f64>, Range<f64>),
) -> Result<(), DrawError> {
    if x.is_nan() || x <= xs.start {
        return Ok(());
    }
    let edge = x.min(xs.end);
    chart.rect((xs.start, ys.start), (edge, ys.end), look.palette.line.mix(0.07).filled())?;
    if x <= xs.end {
        let style = ShapeStyle::from(look.palette.text.mix(0.6)).stroke_width(look.px(1.0));
        chart.path(&[(x, ys.start), (x, ys.end)], style)?;
    }
    let font = look.font(10.5).color(&look.palette.text).pos(Pos::new(HPos::Right, VPos::Top));
    chart.text(format!("{L2_LABEL} ({}) ", exact_bytes(l2)), (edge, ys.end), &font)
}

/// How the chart names the sizes that fit in L2.
pub const L2_LABEL: &str = "src + dst fit in L2";

/// The kind of a timeline bar, for its color: "kernel 3" → "kernel".
pub fn span_kind(label: &str) -> &str {
    label.trim_end_matches(|c: char| c.is_ascii_digit() || c == ' ' || c == '#')
}

/// One heatmap per matrix, two side by side on a wide chart.
pub(super) fn heatmaps<DB: DrawingBackend>(
    root: &Area<DB>,
    look: &Look,
    matrices: &[Matrix],
    descs: (&str, &str),
) -> Result<(), DrawError> {
    if matrices.is_empty() {
        return Ok(());
    }
    let columns = if look.width < 700.0 { 1 } else { matrices.len().min(2) };
    let rows = matrices.len().div_ceil(columns);
    let areas = root.split_evenly((rows, columns));
    for (matrix, area) in matrices.iter().zip(&areas) {
        heatmap(area, look, matrix, descs)?;
    }
    Ok(())
}

/// A GPU × GPU grid, each cell colored within its matrix (darker is better) and labelled.
fn heatmap<DB: DrawingBackend>(
    area: &Area<DB>,
    look: &Look,
    matrix: &Matrix,
    (row_desc, col_desc): (&str, &str),
) -> Result<(), DrawError> {
    let n = matrix.devices.len().max(1);
    let gpus: Vec<String> = matrix.devices.iter().map(|d| format!("GPU {d}")).collect();
    let x_label =
        |t: f64| usize::try_from(t.round() as i64).ok().and_then(|i| gpus.get(i).cloned()).unwrap_or_default();
    let y_label = |t: f64| row_label(&gpus, t);
    let ticks: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let axes = Axes {
        x: -0.5..n as f64 - 0.5,
        x_ticks: ticks.clone(),
        x_label: &x_label,
        x_desc: col_desc,
        y: -0.5..n as f64 - 0.5,
        y_ticks: ticks,
        y_label: &y_label,
        y_desc: row_desc,
        y_area: 64.0,
    };
    let caption = format!("{} ({})", matrix.name, matrix.unit);
    let font = look.font(11.5).color(&look.palette.text);
    area.draw(&Text::new(caption, (look.px(8.0) as i32, look.px(4.0) as i32), font))?;
    let inner = area.margin(look.px(18.0), 0, 0, 0);
    let mut chart = Plot::frame(&inner, look, &axes)?;
    let (_, hi) = bounds(matrix.cells.iter().flatten().flatten().copied());
    let style = look.font(11.0).color(&look.palette.text).pos(Pos::new(HPos::Center, VPos::Center));
    for (r, cells) in matrix.cells.iter().enumerate() {
        let y = (n - 1 - r) as f64;
        for (c, cell) in cells.iter().enumerate() {
            let x = c as f64;
            let (fill, text) = match cell {
                Some(v) => {
                    let t = shade(*v, hi, matrix.higher_is_better);
                    (look.palette.line.mix(0.15 + 0.75 * t), three_digits(*v))
                }
                None => (look.palette.grid.mix(0.25), "—".to_owned()),
            };
            chart.rect((x - 0.48, y - 0.48), (x + 0.48, y + 0.48), fill.filled())?;
            chart.text(text, (x, y), &style)?;
        }
    }
    Ok(())
}

/// A memory step's name on the x axis: "alloc block 3" reads "alloc 3", "free 4 blocks" "free 4"; where
/// `count` names do not fit across `width` CSS pixels, the allocations are numbered only ("3") and "free all"
/// reads "freed".
pub fn step_label(label: &str, width: f64, count: usize) -> String {
    let crowded = width / (count.max(1) as f64) < 64.0;
    if let Some(n) = label.strip_prefix("alloc block ") {
        return if crowded { n.to_owned() } else { format!("alloc {n}") };
    }
    if let Some(n) = label.strip_prefix("free ").and_then(|rest| rest.strip_suffix(" blocks")) {
        return format!("free {n}");
    }
    // "free all" beside "empty_cache" overlaps where the names are crowded.
    if crowded && label == "free all" { "freed".to_owned() } else { label.to_owned() }
}

/// How dark a heatmap cell is, 0 to 1 (1 the best): on a scale from 0 to the matrix's largest cell, not
/// from its smallest, so 390 against 395 GB/s reads as nearly equal rather than as worst against best.
pub(super) fn shade(value: f64, largest: f64, higher_is_better: bool) -> f64 {
    let t = if largest > 0.0 { (value / largest).clamp(0.0, 1.0) } else { 1.0 };
    if higher_is_better { t } else { 1.0 - t }
}

/// Height of a legend row, CSS pixels.
const LEGEND_ROW: f64 = 18.0;

/// Where each legend entry goes, `(row, x)` in CSS pixels, wrapping at `width`.
fn legend_places(names: &[&str], width: f64) -> Vec<(usize, f64)> {
    let (mut row, mut x) = (0, 12.0);
    names
        .iter()
        .map(|name| {
            let w = 30.0 + name.chars().count() as f64 * 6.5;
            if x + w > width && x > 12.0 {
                row += 1;
                x = 12.0;
            }
            let at = (row, x);
            x += w + 10.0;
            at
        })
        .collect()
}

/// `area` split into the plot and, when there are `entries`, a strip under it for their legend.
fn legend_split<DB: DrawingBackend>(
    area: &Area<DB>,
    look: &Look,
    entries: &[(String, ShapeStyle)],
) -> (Area<DB>, Option<Area<DB>>) {
    if entries.is_empty() {
        return (area.clone(), None);
    }
    let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    let rows = legend_places(&names, look.width).last().map_or(1, |(row, _)| row + 1);
    let height = area.dim_in_pixel().1 as i32 - look.px(LEGEND_ROW * rows as f64 + 6.0) as i32;
    let (plot, strip) = area.split_vertically(height.max(0));
    (plot, Some(strip))
}

/// The legend: a short line in each curve's style and its name, in rows under the plot.
fn legend_strip<DB: DrawingBackend>(
    area: &Area<DB>,
    look: &Look,
    entries: &[(String, ShapeStyle)],
) -> Result<(), DrawError> {
    let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    let font = look.font(11.0).color(&look.palette.text).pos(Pos::new(HPos::Left, VPos::Center));
    for ((name, style), (row, x)) in entries.iter().zip(legend_places(&names, look.width)) {
        let y = look.px(LEGEND_ROW * row as f64 + LEGEND_ROW / 2.0) as i32;
        let x = look.px(x) as i32;
        area.draw(&PathElement::new(vec![(x, y), (x + look.px(18.0) as i32, y)], *style))?;
        area.draw(&Text::new(name.clone(), (x + look.px(24.0) as i32, y), font.clone()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_steps_are_named_on_the_axis() {
        assert_eq!(step_label("alloc block 3", 900.0, 12), "alloc 3");
        assert_eq!(step_label("alloc block 3", 400.0, 12), "3", "crowded");
        assert_eq!(step_label("free 4 blocks", 400.0, 12), "free 4");
        assert_eq!(step_label("free all", 900.0, 12), "free all");
        assert_eq!(step_label("free all", 400.0, 12), "freed");
        assert_eq!(step_label("empty_cache", 900.0, 12), "empty_cache");
    }

    #[test]
    fn heatmaps_scale_from_zero() {
        assert!(shade(390.0, 395.0, true) > 0.98, "near the best, not the lightest");
        assert!((shade(21.0, 395.0, true) - 0.053).abs() < 0.001);
        // Latency: lower is better, so the smaller figure is the darker.
        assert!(shade(2.4, 11.5, false) > shade(11.5, 11.5, false));
        assert_eq!(shade(0.0, 0.0, true), 1.0);
    }

    #[test]
    fn legend_entries_wrap_into_rows_under_the_plot() {
        let places = legend_places(&["h2d_pinned", "h2d_pageable", "d2h_pinned"], 260.0);
        assert_eq!(places[0], (0, 12.0));
        assert_eq!(places[1].0, 0);
        assert_eq!(places[2], (1, 12.0), "the third entry wraps");
    }

    #[test]
    fn span_kinds_drop_their_numbers() {
        assert_eq!(span_kind("kernel 3"), "kernel");
        assert_eq!(span_kind("copy"), "copy");
    }
}
