//! A run's result drawn on a canvas with plotters, the way its `chart` says:
//! curves with reference lines (log axes as the spec asks), bars with min–max
//! whiskers, a per-stream timeline, or P2P heatmaps. The previous run of the
//! same experiment is drawn faintly underneath.
//!
//! Every chart uses the same f64 × f64 coordinates with explicit ticks (log
//! axes are drawn in log10 units), so plotters' generic code is in the wasm once.

use std::ops::Range;

use plotters::{
    chart::{ChartBuilder, ChartContext},
    coord::{Shift, cartesian::Cartesian2d, combinators::WithKeyPoints, types::RangedCoordi64},
    drawing::{DrawingArea, IntoDrawingArea},
    element::{Circle, PathElement, Polygon, Rectangle, Text},
    prelude::BindKeyPoints,
    style::{
        Color, IntoFont, RGBColor, ShapeStyle, TextStyle,
        text_anchor::{HPos, Pos, VPos},
    },
};
use plotters_canvas::CanvasBackend;
use shared::lab::{ChartSpec, Matrix, RunResult};
use web_sys::HtmlCanvasElement;

use crate::{
    components::chart::{Palette, fit_to_css_box, parse_hex_color},
    state::lab_form::bytes_text,
};

type Error = Box<dyn std::error::Error>;
type Area = DrawingArea<CanvasBackend, Shift>;
/// Integer axes: plotters binds custom ticks and labels only to axes with default formatting, which f64 lacks.
type Axis = WithKeyPoints<RangedCoordi64>;
type Chart<'a> = ChartContext<'a, CanvasBackend, Cartesian2d<Axis, Axis>>;

/// Chart units per unit of value on the integer axes.
const FIXED: f64 = 10_000.0;

fn fixed(v: f64) -> i64 {
    (v * FIXED).round() as i64
}

fn at((x, y): (f64, f64)) -> (i64, i64) {
    (fixed(x), fixed(y))
}

/// A chart drawn in f64 values; every element goes through one of these few calls.
struct Plot<'a>(Chart<'a>);

impl Plot<'_> {
    fn path(&mut self, points: &[(f64, f64)], style: ShapeStyle) -> Result<(), Error> {
        let points: Vec<(i64, i64)> = points.iter().copied().map(at).collect();
        self.0.draw_series(std::iter::once(PathElement::new(points, style)))?;
        Ok(())
    }

    fn polygon(&mut self, points: &[(f64, f64)], style: ShapeStyle) -> Result<(), Error> {
        let points: Vec<(i64, i64)> = points.iter().copied().map(at).collect();
        self.0.draw_series(std::iter::once(Polygon::new(points, style)))?;
        Ok(())
    }

    fn rect(&mut self, from: (f64, f64), to: (f64, f64), style: ShapeStyle) -> Result<(), Error> {
        self.0.draw_series(std::iter::once(Rectangle::new([at(from), at(to)], style)))?;
        Ok(())
    }

    fn dots(&mut self, points: &[(f64, f64)], radius: u32, style: ShapeStyle) -> Result<(), Error> {
        self.0.draw_series(points.iter().map(|&p| Circle::new(at(p), radius, style)))?;
        Ok(())
    }

    fn text(&mut self, text: String, point: (f64, f64), style: &TextStyle<'_>) -> Result<(), Error> {
        self.0.draw_series(std::iter::once(Text::new(text, at(point), style.clone())))?;
        Ok(())
    }
}

/// Colors of the series, in order; they read on the dark and the light theme.
pub const SERIES_COLORS: [&str; 8] =
    ["#4c9aff", "#f0883e", "#3fb950", "#d2a8ff", "#f85149", "#e3b341", "#39c5cf", "#db61a2"];

pub fn series_color(i: usize) -> RGBColor {
    parse_hex_color(SERIES_COLORS[i % SERIES_COLORS.len()]).unwrap_or(RGBColor(76, 154, 255))
}

/// What is drawn and how it looks.
pub struct RunChart<'a> {
    pub result: &'a RunResult,
    /// The previous run's result, drawn faintly.
    pub previous: Option<&'a RunResult>,
    pub simulated: bool,
}

/// Pixel sizes scaled by the device pixel ratio.
#[derive(Clone, Copy)]
struct Scale(f64);

impl Scale {
    fn px(self, css: f64) -> u32 {
        (css * self.0).round() as u32
    }
}

impl RunChart<'_> {
    /// Draws on `canvas`, sized to its CSS box.
    pub fn draw(&self, canvas: &HtmlCanvasElement) -> Result<(), Error> {
        let scale = Scale(fit_to_css_box(canvas));
        let palette = Palette::from_css(canvas);
        let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("the canvas has no 2d context")?;
        let root = backend.into_drawing_area();
        root.fill(&palette.background)?;
        let width = f64::from(canvas.width()) / scale.0;
        let look = Look { scale, palette: &palette, width };
        match &self.result.chart {
            ChartSpec::Lines { x_label, y_label, log_x, log_y } => {
                self.lines(&root, &look, (x_label, y_label), (*log_x, *log_y))?;
            }
            ChartSpec::Bars { y_label } => self.bars(&root, &look, y_label)?,
            ChartSpec::Gantt => self.gantt(&root, &look)?,
            ChartSpec::Heatmap { row_label, col_label } => {
                heatmaps(&root, &look, &self.result.matrices, (row_label, col_label))?;
            }
        }
        if self.simulated {
            let warn = parse_hex_color("#d29922").unwrap_or(palette.text);
            let style = look.font(12.0).color(&warn).pos(Pos::new(HPos::Right, VPos::Top));
            root.draw(&Text::new("SIMULATED", (scale.px(width - 12.0) as i32, scale.px(6.0) as i32), style))?;
        }
        root.present()?;
        Ok(())
    }

    fn lines(
        &self,
        root: &Area,
        look: &Look<'_>,
        (x_desc, y_desc): (&str, &str),
        logs: (bool, bool),
    ) -> Result<(), Error> {
        let (log_x, log_y) = logs;
        let tx = |x: f64| if log_x { x.max(1e-12).log10() } else { x };
        let ty = |y: f64| if log_y { y.max(1e-12).log10() } else { y };
        let results: Vec<&RunResult> = std::iter::once(self.result).chain(self.previous).collect();
        let points = || results.iter().flat_map(|r| r.series.iter().flat_map(|s| s.points.iter()));
        let xs: Vec<f64> = points().map(|p| p.x).collect();
        let ys = points().flat_map(|p| [p.y.min, p.y.max]).chain(self.result.references.iter().map(|r| r.value));
        let (x_lo, x_hi) = bounds(xs.iter().map(|&x| tx(x)));
        let (y_lo, y_hi) = bounds(ys.map(ty));
        let (x_lo, x_hi) = pad(x_lo, x_hi, 0.03);
        let (y_lo, y_hi) =
            if log_y { pad(y_lo, y_hi, 0.08) } else { (y_lo.min(0.0), y_hi + (y_hi - y_lo.min(0.0)) * 0.08) };

        let bytes = x_desc.contains("bytes");
        let max_x_ticks = (look.width / 90.0).clamp(2.0, 10.0) as usize;
        let x_ticks =
            if log_x { log_ticks_at(&xs, x_lo..x_hi, max_x_ticks) } else { linear_ticks(x_lo, x_hi, max_x_ticks) };
        let y_ticks = if log_y { decade_ticks(y_lo, y_hi) } else { linear_ticks(y_lo, y_hi, 6) };
        let x_label = move |t: f64| {
            let v = if log_x { 10f64.powf(t) } else { t };
            if bytes { bytes_text(v.round() as u64) } else { number(v) }
        };
        let y_label = move |t: f64| number(if log_y { 10f64.powf(t) } else { t });
        let axes = Axes {
            x: x_lo..x_hi,
            x_ticks,
            x_label: &x_label,
            x_desc,
            y: y_lo..y_hi,
            y_ticks,
            y_label: &y_label,
            y_desc,
            y_area: 52.0,
        };
        let mut chart = look.frame(root, &axes)?;
        let px = |css: f64| look.scale.px(css);

        for reference in &self.result.references {
            let y = ty(reference.value);
            let style = ShapeStyle::from(look.palette.text.mix(0.8)).stroke_width(px(1.0));
            chart.path(&[(x_lo, y), (x_hi, y)], style)?;
            let text = format!("{} {} {}", reference.name, number(reference.value), self.result.unit);
            let font = look.font(10.5).color(&look.palette.text).pos(Pos::new(HPos::Left, VPos::Bottom));
            chart.text(text, (x_lo, y), &font)?;
        }
        if let Some(previous) = self.previous {
            for series in &previous.series {
                let color = series_color(self.series_index(&series.name));
                let line = series.points.iter().map(|p| (tx(p.x), ty(p.y.median))).collect::<Vec<_>>();
                let style = ShapeStyle::from(color.mix(0.35)).stroke_width(px(1.0));
                chart.path(&line, style)?;
            }
        }
        for (i, series) in self.result.series.iter().enumerate() {
            let color = series_color(i);
            if series.points.iter().any(|p| p.y.max > p.y.min) {
                let mut band: Vec<(f64, f64)> = series.points.iter().map(|p| (tx(p.x), ty(p.y.max))).collect();
                band.extend(series.points.iter().rev().map(|p| (tx(p.x), ty(p.y.min))));
                chart.polygon(&band, color.mix(0.15).filled())?;
            }
            let line: Vec<(f64, f64)> = series.points.iter().map(|p| (tx(p.x), ty(p.y.median))).collect();
            chart.path(&line, ShapeStyle::from(color).stroke_width(px(2.0)))?;
            chart.dots(&line, px(2.5), color.filled())?;
        }
        Ok(())
    }

    /// The color index of a series by name, so the previous run's curves match this run's.
    fn series_index(&self, name: &str) -> usize {
        self.result.series.iter().position(|s| s.name == name).unwrap_or(0)
    }

    fn bars(&self, root: &Area, look: &Look<'_>, unit: &str) -> Result<(), Error> {
        let figures = &self.result.figures;
        let n = figures.len().max(1);
        let row = |i: usize| (n - 1 - i) as f64;
        let previous =
            |name: &str| self.previous.and_then(|p| p.figures.iter().find(|f| f.name == name)).map(|f| f.stats.median);
        let x_hi =
            figures.iter().flat_map(|f| [Some(f.stats.max), previous(&f.name)]).flatten().fold(0.0, f64::max).max(1e-9)
                * 1.15;
        let names: Vec<String> = figures.iter().map(|f| shorten(&f.name, 30)).collect();
        let y_label = |t: f64| {
            let i = n as i64 - 1 - t.round() as i64;
            usize::try_from(i).ok().and_then(|i| names.get(i).cloned()).unwrap_or_default()
        };
        let x_label = |t: f64| number(t);
        let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(4) as f64;
        let axes = Axes {
            x: 0.0..x_hi,
            x_ticks: linear_ticks(0.0, x_hi, (look.width / 90.0).clamp(2.0, 8.0) as usize),
            x_label: &x_label,
            x_desc: unit,
            y: -0.5..n as f64 - 0.5,
            y_ticks: (0..n).map(|i| i as f64).collect(),
            y_label: &y_label,
            y_desc: "",
            y_area: (longest * 6.2 + 12.0).min(look.width * 0.45),
        };
        let mut chart = look.frame(root, &axes)?;
        let px = |css: f64| look.scale.px(css);
        let color = look.palette.line;
        for (i, figure) in figures.iter().enumerate() {
            let (y, s) = (row(i), figure.stats);
            chart.rect((0.0, y - 0.3), (s.median, y + 0.3), color.mix(0.75).filled())?;
            let whisker = ShapeStyle::from(look.palette.text).stroke_width(px(1.5));
            chart.path(&[(s.min, y), (s.max, y)], whisker)?;
            chart.path(&[(s.min, y - 0.15), (s.min, y + 0.15)], whisker)?;
            chart.path(&[(s.max, y - 0.15), (s.max, y + 0.15)], whisker)?;
            if let Some(before) = previous(&figure.name) {
                let style = ShapeStyle::from(look.palette.text.mix(0.5)).stroke_width(px(2.0));
                chart.path(&[(before, y - 0.4), (before, y + 0.4)], style)?;
            }
            let font = look.font(10.5).color(&look.palette.text).pos(Pos::new(HPos::Left, VPos::Center));
            let text = format!(" {} {}", number(s.median), figure.unit);
            chart.text(text, (s.max, y), &font)?;
        }
        Ok(())
    }

    fn gantt(&self, root: &Area, look: &Look<'_>) -> Result<(), Error> {
        let spans = &self.result.timeline;
        let mut rows: Vec<(&str, u32)> = Vec::new();
        for span in spans {
            if !rows.contains(&(span.phase.as_str(), span.stream)) {
                rows.push((span.phase.as_str(), span.stream));
            }
        }
        let mut kinds: Vec<&str> = Vec::new();
        for span in spans {
            let kind = span_kind(&span.label);
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        let n = rows.len().max(1);
        let names: Vec<String> =
            rows.iter().map(|(phase, stream)| format!("{} · s{stream}", shorten(phase, 26))).collect();
        let y_label = |t: f64| {
            let i = n as i64 - 1 - t.round() as i64;
            usize::try_from(i).ok().and_then(|i| names.get(i).cloned()).unwrap_or_default()
        };
        let x_hi = spans.iter().map(|s| s.end_ms).fold(0.0, f64::max).max(1e-6) * 1.02;
        let x_label = |t: f64| number(t);
        let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(4) as f64;
        let axes = Axes {
            x: 0.0..x_hi,
            x_ticks: linear_ticks(0.0, x_hi, (look.width / 90.0).clamp(2.0, 10.0) as usize),
            x_label: &x_label,
            x_desc: "ms from the phase's start",
            y: -0.5..n as f64 - 0.5,
            y_ticks: (0..n).map(|i| i as f64).collect(),
            y_label: &y_label,
            y_desc: "",
            y_area: (longest * 6.2 + 12.0).min(look.width * 0.45),
        };
        let mut chart = look.frame(root, &axes)?;
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

/// The kind of a timeline bar, for its color: "kernel 3" → "kernel".
pub fn span_kind(label: &str) -> &str {
    label.trim_end_matches(|c: char| c.is_ascii_digit() || c == ' ' || c == '#')
}

/// One heatmap per matrix, side by side.
fn heatmaps(
    root: &Area,
    look: &Look<'_>,
    matrices: &[Matrix],
    (row_desc, col_desc): (&str, &str),
) -> Result<(), Error> {
    if matrices.is_empty() {
        return Ok(());
    }
    let columns = if look.width < 700.0 { 1 } else { matrices.len().min(2) };
    let rows = matrices.len().div_ceil(columns);
    let areas = root.split_evenly((rows, columns));
    for (matrix, area) in matrices.iter().zip(&areas) {
        heatmap(area, look, matrix, (row_desc, col_desc))?;
    }
    Ok(())
}

fn heatmap(area: &Area, look: &Look<'_>, matrix: &Matrix, (row_desc, col_desc): (&str, &str)) -> Result<(), Error> {
    let n = matrix.devices.len().max(1);
    let gpu = |t: f64, top_down: bool| {
        let i = if top_down { n as i64 - 1 - t.round() as i64 } else { t.round() as i64 };
        usize::try_from(i).ok().and_then(|i| matrix.devices.get(i)).map(|d| format!("GPU {d}")).unwrap_or_default()
    };
    let x_label = |t: f64| gpu(t, false);
    let y_label = |t: f64| gpu(t, true);
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
    area.draw(&Text::new(caption, (look.scale.px(8.0) as i32, look.scale.px(4.0) as i32), font))?;
    let inner = area.margin(look.scale.px(18.0), 0, 0, 0);
    let mut chart = look.frame(&inner, &axes)?;
    let values = matrix.cells.iter().flatten().flatten().copied();
    let (lo, hi) = bounds(values);
    for (r, cells) in matrix.cells.iter().enumerate() {
        let y = (n - 1 - r) as f64;
        for (c, cell) in cells.iter().enumerate() {
            let x = c as f64;
            let (fill, text) = match cell {
                Some(v) => {
                    let t = if hi > lo { (v - lo) / (hi - lo) } else { 1.0 };
                    let t = if matrix.higher_is_better { t } else { 1.0 - t };
                    (look.palette.line.mix(0.15 + 0.75 * t), number(*v))
                }
                None => (look.palette.grid.mix(0.25), "—".to_owned()),
            };
            chart.rect((x - 0.48, y - 0.48), (x + 0.48, y + 0.48), fill.filled())?;
            let style = look.font(11.0).color(&look.palette.text).pos(Pos::new(HPos::Center, VPos::Center));
            chart.text(text, (x, y), &style)?;
        }
    }
    Ok(())
}

/// Sizes and colors shared by the chart types.
struct Look<'a> {
    scale: Scale,
    palette: &'a Palette,
    /// Canvas width in CSS pixels.
    width: f64,
}

/// Both axes of a chart: range, where the ticks go and how they read.
struct Axes<'a> {
    x: Range<f64>,
    x_ticks: Vec<f64>,
    x_label: &'a dyn Fn(f64) -> String,
    x_desc: &'a str,
    y: Range<f64>,
    y_ticks: Vec<f64>,
    y_label: &'a dyn Fn(f64) -> String,
    y_desc: &'a str,
    /// Width of the y labels, CSS pixels.
    y_area: f64,
}

impl Look<'_> {
    fn font(&self, css_px: f64) -> TextStyle<'static> {
        ("sans-serif", f64::from(self.scale.px(css_px))).into_font().into()
    }

    fn frame<'a>(&self, area: &'a Area, axes: &Axes<'_>) -> Result<Plot<'a>, Error> {
        let px = |css: f64| self.scale.px(css);
        let mut chart = ChartBuilder::on(area)
            .margin(px(10.0))
            .margin_left(px(6.0))
            .margin_right(px(16.0))
            .x_label_area_size(px(if axes.x_desc.is_empty() { 24.0 } else { 38.0 }))
            .y_label_area_size(px(axes.y_area + if axes.y_desc.is_empty() { 0.0 } else { 14.0 }))
            .build_cartesian_2d(
                (fixed(axes.x.start)..fixed(axes.x.end))
                    .with_key_points(axes.x_ticks.iter().map(|&t| fixed(t)).collect()),
                (fixed(axes.y.start)..fixed(axes.y.end))
                    .with_key_points(axes.y_ticks.iter().map(|&t| fixed(t)).collect()),
            )?;
        let label = self.font(11.0).color(&self.palette.text);
        let x_label = |x: &i64| (axes.x_label)(*x as f64 / FIXED);
        let y_label = |y: &i64| (axes.y_label)(*y as f64 / FIXED);
        let mut mesh = chart.configure_mesh();
        mesh.x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .label_style(label.clone())
            .axis_desc_style(label)
            .axis_style(ShapeStyle::from(self.palette.axis).stroke_width(px(1.0)))
            .bold_line_style(ShapeStyle::from(self.palette.grid.mix(0.45)).stroke_width(px(1.0)))
            .light_line_style(ShapeStyle::from(self.palette.grid.mix(0.0)))
            .set_all_tick_mark_size(px(3.0));
        if !axes.x_desc.is_empty() {
            mesh.x_desc(axes.x_desc);
        }
        if !axes.y_desc.is_empty() {
            mesh.y_desc(axes.y_desc);
        }
        mesh.draw()?;
        Ok(Plot(chart))
    }
}

/// Smallest and largest of `values`, or 0..1 when there are none.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) =
        values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
}

/// Widens `lo..hi` by `fraction` of its span on each side (by 0.5 when it has none).
fn pad(lo: f64, hi: f64, fraction: f64) -> (f64, f64) {
    let span = hi - lo;
    if span <= 0.0 { (lo - 0.5, hi + 0.5) } else { (lo - span * fraction, hi + span * fraction) }
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

/// Log-axis ticks (log10 units) at the measured x values, thinned to at most `max`.
fn log_ticks_at(values: &[f64], range: Range<f64>, max: usize) -> Vec<f64> {
    let mut ticks: Vec<f64> =
        values.iter().filter(|v| **v > 0.0).map(|v| v.log10()).filter(|t| range.contains(t)).collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    let stride = ticks.len().div_ceil(max.max(1)).max(1);
    ticks.into_iter().step_by(stride).collect()
}

/// Log-axis ticks (log10 units) at powers of ten, with 2 and 5 between when the range is short.
fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (lo.floor() as i64)..=(hi.ceil() as i64);
    let short = hi - lo < 3.0;
    let multiples: &[f64] = if short { &[1.0, 2.0, 5.0] } else { &[1.0] };
    decades
        .flat_map(|d| multiples.iter().map(move |m| (m * 10f64.powi(d as i32)).log10()))
        .filter(|t| *t >= lo && *t <= hi)
        .collect()
}

/// A figure with three significant digits: "0.512", "12.3", "4210".
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".to_owned()
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else if magnitude >= 0.001 {
        format!("{value:.3}")
    } else {
        format!("{value:.1e}")
    }
}

/// `text` cut to `max` characters with an ellipsis.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars().take(max - 1).chain(std::iter::once('…')).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_ticks_are_round() {
        assert_eq!(linear_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(linear_ticks(0.0, 1.0, 2), [0.0, 0.5, 1.0]);
        assert_eq!(linear_ticks(3.0, 3.0, 4), [3.0]);
    }

    #[test]
    fn log_ticks_follow_the_measured_sizes_and_decades() {
        let sizes: Vec<f64> = (0..10).map(|i| f64::from(4096u32) * 4f64.powi(i)).collect();
        let ticks = log_ticks_at(&sizes, 3.0..10.0, 5);
        assert_eq!(ticks.len(), 5);
        assert_eq!(bytes_text(10f64.powf(ticks[0]).round() as u64), "4 KiB");
        let decades: Vec<String> = decade_ticks(-0.2, 3.4).into_iter().map(|t| number(10f64.powf(t))).collect();
        assert_eq!(decades, ["1.00", "10.0", "100", "1000"]);
        assert_eq!(decade_ticks(0.0, 1.0).len(), 4, "1, 2, 5, 10 on a short axis");
    }

    #[test]
    fn numbers_and_labels_stay_short() {
        assert_eq!(number(0.5123), "0.512");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(4210.4), "4210");
        assert_eq!(number(0.00002), "2.0e-5");
        assert_eq!(shorten("launch + synchronize (host)", 10), "launch + …");
        assert_eq!(span_kind("kernel 3"), "kernel");
        assert_eq!(span_kind("copy"), "copy");
    }
}
