//! What the canvas charts share: colors from the page's CSS, a sharp pixel
//! buffer, and one way of drawing a line over a band against time. (One
//! drawing routine for every chart also keeps plotters' generic code in the
//! wasm once.)

use std::ops::Range;

use leptos::{ev, prelude::*};
use plotters::{
    chart::ChartBuilder,
    drawing::IntoDrawingArea,
    element::{PathElement, Polygon},
    prelude::BindKeyPoints,
    series::LineSeries,
    style::{Color, IntoFont, RGBColor, ShapeStyle, TextStyle},
};
use plotters_canvas::CanvasBackend;
use shared::chart::{Palette, parse_hex_color, pow2_ticks};
use web_sys::HtmlCanvasElement;

/// A point of a banded line: the band spans `low..high`, the line runs through `mid`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandPoint {
    /// Time, in whatever milliseconds the chart's x range uses.
    pub x: i64,
    pub low: f64,
    pub mid: f64,
    pub high: f64,
}

/// How a time chart looks: axes, labels and size class.
pub struct TimeChart<'a> {
    /// Integer milliseconds: plotters binds custom ticks only to axes with default formatting.
    pub x_range: Range<i64>,
    pub x_ticks: Vec<i64>,
    pub x_label: &'a dyn Fn(i64) -> String,
    pub x_desc: Option<&'a str>,
    pub y_max: f64,
    pub y_desc: &'a str,
    /// Where the y labels go, in the y axis's units (e.g. `shared::chart::pow2_ticks` for bytes).
    pub y_ticks: Vec<f64>,
    /// Small charts: tighter margins and smaller text.
    pub compact: bool,
    /// Opacity of the band's fill.
    pub band_opacity: f64,
    /// Times (in the x range's unit) to mark with a short tick under the top edge, e.g. PyTorch spans.
    pub markers: &'a [i64],
    /// The canvas's CSS box, `(width, height)`, as [`crate::hooks::visible::use_box_size`] last saw it.
    pub box_size: (f64, f64),
}

/// One line of a time chart: its color, whether its min–max band is filled, and the
/// runs of points (no gaps within one) it is drawn through.
pub struct ChartLine<'a> {
    pub color: RGBColor,
    pub band: bool,
    pub segments: Vec<&'a [BandPoint]>,
}

impl TimeChart<'_> {
    /// Draws `segments` (each a run of points without gaps) on `canvas`, sized to its CSS box,
    /// in the accent color with its band.
    pub fn draw(
        &self,
        canvas: &HtmlCanvasElement,
        segments: &[&[BandPoint]],
    ) -> Result<(), Box<dyn std::error::Error>> {
        let line = ChartLine { color: cached_palette(canvas).line, band: true, segments: segments.to_vec() };
        self.draw_lines(canvas, &[line]).map(|_| ())
    }

    /// Draws every line on `canvas`, sized to its CSS box; returns the plot area's left
    /// and right edges in CSS pixels, for a pointer's x to be read back as a time.
    pub fn draw_lines(
        &self,
        canvas: &HtmlCanvasElement,
        lines: &[ChartLine<'_>],
    ) -> Result<(f64, f64), Box<dyn std::error::Error>> {
        let ratio = fit_to_size(canvas, self.box_size);
        let px = |css_px: f64| (css_px * ratio).round() as u32;
        let palette = cached_palette(canvas);
        let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("the canvas has no 2d context")?;
        let root = backend.into_drawing_area();
        root.fill(&palette.background)?;

        let (font, margin, x_area, y_area, width) =
            if self.compact { (10.5, 6.0, 20.0, 48.0, 1.5) } else { (11.0, 8.0, 30.0, 40.0, 2.0) };
        let label: TextStyle<'_> = ("sans-serif", f64::from(px(font))).into_font().color(&palette.text);
        let mut chart = ChartBuilder::on(&root)
            .margin(px(margin))
            .margin_left(px(4.0))
            .margin_right(px(10.0))
            .x_label_area_size(px(x_area))
            .y_label_area_size(px(y_area))
            .build_cartesian_2d(
                self.x_range.clone().with_key_points(self.x_ticks.clone()),
                (0..fixed(self.y_max)).with_key_points(self.y_ticks.iter().map(|&t| fixed(t)).collect()),
            )?;
        let y_max = self.y_max;
        let x_label = |x: &i64| (self.x_label)(*x);
        let y_label = |y: &i64| value_tick(*y as f64 / FIXED, y_max);
        let mut mesh = chart.configure_mesh();
        mesh.x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .y_desc(self.y_desc)
            .label_style(label.clone())
            .axis_desc_style(label)
            .axis_style(ShapeStyle::from(palette.axis).stroke_width(px(1.0)))
            .bold_line_style(ShapeStyle::from(palette.grid.mix(0.45)).stroke_width(px(1.0)))
            .light_line_style(ShapeStyle::from(palette.grid.mix(0.0)))
            .set_all_tick_mark_size(px(3.0));
        if let Some(desc) = self.x_desc {
            mesh.x_desc(desc);
        }
        mesh.draw()?;

        for line in lines {
            for segment in &line.segments {
                if line.band {
                    // The band: along the highs, then back along the lows.
                    let mut band: Vec<(i64, i64)> = segment.iter().map(|p| (p.x, fixed(p.high))).collect();
                    band.extend(segment.iter().rev().map(|p| (p.x, fixed(p.low))));
                    chart
                        .draw_series(std::iter::once(Polygon::new(band, line.color.mix(self.band_opacity).filled())))?;
                }
                chart.draw_series(LineSeries::new(
                    segment.iter().map(|p| (p.x, fixed(p.mid))),
                    ShapeStyle::from(line.color).stroke_width(px(width)),
                ))?;
            }
        }
        let marker = ShapeStyle::from(palette.text).stroke_width(px(1.0));
        let (top, bottom) = (fixed(self.y_max), fixed(self.y_max * 0.92));
        chart.draw_series(
            self.markers
                .iter()
                .filter(|x| self.x_range.contains(x))
                .map(|&x| PathElement::new(vec![(x, top), (x, bottom)], marker)),
        )?;
        let (x_pixels, _) = chart.plotting_area().get_pixel_range();
        root.present()?;
        Ok((f64::from(x_pixels.start) / ratio, f64::from(x_pixels.end) / ratio))
    }
}

thread_local! {
    /// Redraws for live samples one tick allows, memory and history charts together, whatever
    /// the number of GPUs: two, and a third for a chart that has waited too long.
    static LIVE_SLOTS: DrawSlots = const { DrawSlots::new(2, 1) };
}

/// How long a due chart waits before it may also take the tick's slot for late charts: when
/// more charts are due than slots free up, none falls far behind.
const MAX_WAIT_MS: f64 = 1000.0;

/// When a live chart redraws: at once when what it shows besides live samples changed (its
/// key: range, theme, size…) or it came back on screen; for new samples only once they are
/// due and the tick gives it a turn.
#[derive(Debug)]
pub struct LivePacer<K> {
    /// What the last draw showed besides live samples, and when.
    last: Option<(K, f64)>,
    /// The chart was off screen since its last draw.
    missed: bool,
    turn: LiveTurn,
}

impl<K> Default for LivePacer<K> {
    fn default() -> Self {
        Self { last: None, missed: false, turn: LiveTurn::default() }
    }
}

impl<K: PartialEq> LivePacer<K> {
    /// The chart is off screen and skips this change: it draws once shown again.
    pub fn off_screen(&mut self) {
        self.missed = true;
    }

    /// Whether to draw now, at `now_ms` in tick `seq`. `due` is asked, with the ms since the
    /// last draw, only when nothing but live samples changed.
    pub fn draw_now(&mut self, key: K, now_ms: f64, seq: u64, due: impl FnOnce(f64) -> bool) -> bool {
        let samples_only = match &self.last {
            Some((last, at)) if *last == key && !self.missed => Some(now_ms - at),
            _ => None,
        };
        match samples_only {
            Some(elapsed) if !due(elapsed) || !self.turn.take(seq, now_ms) => false,
            _ => {
                self.missed = false;
                self.turn.reset();
                self.last = Some((key, now_ms));
                true
            }
        }
    }
}

/// One chart's place among the charts waiting for live redraws.
#[derive(Debug, Default)]
struct LiveTurn {
    /// Since when the chart has been due and told to wait.
    waiting_since: Option<f64>,
}

impl LiveTurn {
    /// True when a chart that is due may redraw now, at `now_ms` in tick `seq`: with one of the
    /// tick's slots, or, once it has waited [`MAX_WAIT_MS`], with the slot kept for late charts.
    /// Told no, it asks again at the next tick.
    fn take(&mut self, seq: u64, now_ms: f64) -> bool {
        let since = *self.waiting_since.get_or_insert(now_ms);
        let late = now_ms - since >= MAX_WAIT_MS;
        let granted = LIVE_SLOTS.with(|slots| slots.take(seq, late));
        if granted {
            self.waiting_since = None;
        }
        granted
    }

    /// The chart drew for another reason (new data range, theme, size): it waits for nothing.
    fn reset(&mut self) {
        self.waiting_since = None;
    }
}

/// Redraws one tick allows, so that many charts take turns rather than all redrawing in
/// the same tick: `per_tick` for any chart, `late_per_tick` more for charts that waited long.
pub struct DrawSlots {
    per_tick: u32,
    late_per_tick: u32,
    /// The tick (its sequence number) slots are counted for, and how many of each it has given.
    used: std::cell::Cell<(u64, u32, u32)>,
}

impl DrawSlots {
    pub const fn new(per_tick: u32, late_per_tick: u32) -> Self {
        Self { per_tick, late_per_tick, used: std::cell::Cell::new((0, 0, 0)) }
    }

    /// True when another chart (`late` if it waited long) may redraw for tick `seq`.
    pub fn take(&self, seq: u64, late: bool) -> bool {
        let (tick, used, used_late) = self.used.get();
        let (used, used_late) = if tick == seq { (used, used_late) } else { (0, 0) };
        if used < self.per_tick {
            self.used.set((seq, used + 1, used_late));
            true
        } else if late && used_late < self.late_per_tick {
            self.used.set((seq, used, used_late + 1));
            true
        } else {
            false
        }
    }
}

/// Chart units per unit of value on the y axis: integers underneath, because plotters binds
/// custom ticks only to axes with default formatting, which f64 lacks (as in `shared::chart`).
const FIXED: f64 = 10_000.0;

fn fixed(v: f64) -> i64 {
    (v * FIXED).round() as i64
}

/// Ticks of a GiB axis up to `y_max` GiB at whole binary steps (0, 32, 64, 96, 128 on a 141 GiB
/// H200), at most `max`: `shared::chart::pow2_ticks`, the rule of the Lab's byte axes.
pub fn gib_ticks(y_max: f64, max: usize) -> Vec<f64> {
    const GIB: f64 = (1u64 << 30) as f64;
    pow2_ticks(0.0, y_max * GIB, max).into_iter().map(|bytes| bytes / GIB).collect()
}

/// A y-axis label: whole numbers, with one decimal on short axes where ticks fall between.
pub fn value_tick(value: f64, y_max: f64) -> String {
    if y_max < 10.0 { format!("{value:.1}") } else { format!("{value:.0}") }
}

thread_local! {
    /// The palette read for the `<html data-theme>` value it was read under: reading the
    /// computed style at every draw forced a style recalculation in every tick.
    static PALETTE: std::cell::Cell<Option<(Option<String>, Palette)>> = const { std::cell::Cell::new(None) };
}

/// The page's palette, read again only when the theme changed.
pub fn cached_palette(canvas: &HtmlCanvasElement) -> Palette {
    let theme = document().document_element().and_then(|html| html.get_attribute("data-theme"));
    PALETTE.with(|cell| {
        let cached = cell.take();
        let palette = match cached {
            Some((seen, palette)) if seen == theme => palette,
            _ => css_palette(canvas),
        };
        cell.set(Some((theme, palette)));
        palette
    })
}

/// The chart colors of the page's CSS custom properties, so they follow the theme.
pub fn css_palette(canvas: &HtmlCanvasElement) -> Palette {
    let style = window().get_computed_style(canvas).ok().flatten();
    let color = |name: &str, fallback: RGBColor| {
        style
            .as_ref()
            .and_then(|style| style.get_property_value(name).ok())
            .and_then(|value| parse_hex_color(&value))
            .unwrap_or(fallback)
    };
    // Fallbacks are mid-tones that read on dark and light backgrounds alike.
    Palette {
        background: color("--chart-bg", RGBColor(128, 128, 128)),
        line: color("--accent", RGBColor(61, 139, 253)),
        grid: color("--chart-grid", RGBColor(110, 110, 110)),
        axis: color("--chart-axis", RGBColor(140, 140, 140)),
        text: color("--text-muted", RGBColor(150, 150, 150)),
    }
}

/// Sizes the canvas's pixel buffer to its CSS box, read now (which makes the browser
/// lay the page out if anything changed since), times the device pixel ratio.
pub fn fit_to_css_box(canvas: &HtmlCanvasElement) -> f64 {
    let rect = canvas.get_bounding_client_rect();
    fit_to_size(canvas, (rect.width(), rect.height()))
}

/// Sizes the canvas's pixel buffer to `css_size` times the device pixel ratio, so
/// lines and text stay sharp; returns that ratio.
pub fn fit_to_size(canvas: &HtmlCanvasElement, (css_width, css_height): (f64, f64)) -> f64 {
    let ratio = window().device_pixel_ratio().max(1.0);
    // A canvas not laid out yet (hidden tab, detached) keeps its current size.
    if css_width >= 1.0 && css_height >= 1.0 {
        let width = (css_width * ratio).round() as u32;
        let height = (css_height * ratio).round() as u32;
        if canvas.width() != width {
            canvas.set_width(width);
        }
        if canvas.height() != height {
            canvas.set_height(height);
        }
    }
    ratio
}

/// A counter that changes when the window is resized, for charts to redraw on.
pub fn use_resize_counter() -> ReadSignal<u32> {
    let (resized, set_resized) = signal(0u32);
    let resize = window_event_listener(ev::resize, move |_| set_resized.update(|n| *n = n.wrapping_add(1)));
    on_cleanup(move || resize.remove());
    resized
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_that_waited_a_second_takes_the_late_slot() {
        let (mut first, mut second, mut waiting) = (LiveTurn::default(), LiveTurn::default(), LiveTurn::default());
        // Every tick's two slots go to charts that ask first; the third waits...
        for (tick, now) in [(100, 0.0), (101, 100.0), (102, 500.0), (103, 999.0)] {
            assert!(first.take(tick, now) && second.take(tick, now));
            assert!(!waiting.take(tick, now), "tick {tick}");
        }
        // ...until it has waited a second: then it draws, as the tick's one late chart.
        assert!(first.take(104, 1000.0) && second.take(104, 1000.0));
        assert!(waiting.take(104, 1000.0));
        let mut another = LiveTurn::default();
        assert!(!another.take(104, 1000.0), "a tick does three draws at most");
    }

    #[test]
    fn a_pacer_draws_changes_at_once_and_samples_when_due() {
        let mut pacer = LivePacer::default();
        assert!(pacer.draw_now("dark", 0.0, 1, |_| false), "the first draw");
        assert!(!pacer.draw_now("dark", 100.0, 2, |elapsed| elapsed >= 500.0), "samples not due yet");
        assert!(pacer.draw_now("light", 200.0, 3, |_| false), "a new theme draws at once");
        assert!(pacer.draw_now("light", 700.0, 4, |elapsed| elapsed >= 500.0), "due samples draw");
        pacer.off_screen();
        assert!(pacer.draw_now("light", 710.0, 5, |_| false), "back on screen, it draws at once");
    }

    #[test]
    fn draw_slots_are_counted_per_tick() {
        let slots = DrawSlots::new(2, 1);
        assert!(slots.take(7, false) && slots.take(7, false));
        assert!(!slots.take(7, false), "a third chart waits for the next tick");
        assert!(slots.take(7, true) && !slots.take(7, true), "one late chart more");
        assert!(slots.take(8, false), "a new tick has slots again");
    }

    #[test]
    fn memory_axes_tick_at_whole_binary_steps() {
        assert_eq!(gib_ticks(141.0, 5), [0.0, 32.0, 64.0, 96.0, 128.0], "not plotters' 13.97 GiB steps");
        assert_eq!(gib_ticks(80.0, 5), [0.0, 16.0, 32.0, 48.0, 64.0, 80.0]);
        assert_eq!(gib_ticks(1.5, 4), [0.0, 0.5, 1.0, 1.5]);
    }

    #[test]
    fn short_axes_get_a_decimal() {
        assert_eq!(value_tick(2.5, 4.0), "2.5");
        assert_eq!(value_tick(40.0, 140.0), "40");
    }
}
