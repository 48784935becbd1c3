//! A lab run's chart, drawn the same way on the server (an SVG) and on the page
//! (a canvas): [`RunChart`] says what is shown, [`RunChart::draw`] draws it on any
//! plotters backend. Curves with reference lines (log axes as the result's
//! [`ChartSpec`] asks), bars with min–max whiskers, a per-stream timeline, or
//! P2P heatmaps; the previous run of the same experiment is drawn faintly underneath.
//!
//! Behind the `chart` feature: it brings plotters (without its default features,
//! the backend is the caller's). No I/O here; the callers own the SVG string or the canvas.

mod axes;
mod contrast;
mod kinds;
mod plot;
mod style;

use std::fmt;

use plotters::{
    coord::Shift,
    drawing::{DrawingArea, DrawingAreaErrorKind},
    element::Text,
    prelude::DrawingBackend,
    style::text_anchor::{HPos, Pos, VPos},
};

pub use axes::{
    Axes, bounds, decade_ticks, from_axis, linear_ticks, lines_bounds, log_ticks_at, pad, pow2_ticks, shorten, to_axis,
};
pub use contrast::{TEXT_CONTRAST, contrast_ratio, hex_contrast, relative_luminance};
pub use kinds::{L2_LABEL, span_kind};
pub use style::{Look, Palette, SERIES_COLORS, parse_hex_color, series_color};

use crate::lab::{ChartSpec, RunResult};

/// What a run's chart shows.
#[derive(Debug, Clone, Copy)]
pub struct RunChart<'a> {
    pub result: &'a RunResult,
    /// The previous run's result on the same GPU, drawn faintly.
    pub previous: Option<&'a RunResult>,
    /// The previous run's id, for the legend.
    pub previous_id: Option<u64>,
    /// Marks the chart "SIMULATED" in its top right corner.
    pub simulated: bool,
    /// A caption over the chart (the page has its own heading and leaves it out).
    pub title: Option<&'a str>,
}

/// Why a chart could not be drawn: the backend's error, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawError(String);

impl fmt::Display for DrawError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "drawing the chart failed: {}", self.0)
    }
}

impl std::error::Error for DrawError {}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for DrawError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        Self(e.to_string())
    }
}

/// Color of the "SIMULATED" mark: the page's warning amber.
const SIMULATED_COLOR: &str = "#d29922";

impl RunChart<'_> {
    /// Draws the chart on `root`, filling it, and presents it. The curves are not
    /// named on the chart: the page lists them beside it.
    pub fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, look: &Look) -> Result<(), DrawError> {
        self.draw_as::<DB, false>(root, look)
    }

    /// [`draw`](Self::draw), with a legend naming the curves (and the previous run's).
    pub fn draw_with_legend<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        look: &Look,
    ) -> Result<(), DrawError> {
        self.draw_as::<DB, true>(root, look)
    }

    fn draw_as<DB: DrawingBackend, const LEGEND: bool>(
        &self,
        root: &DrawingArea<DB, Shift>,
        look: &Look,
    ) -> Result<(), DrawError> {
        root.fill(&look.palette.background)?;
        let titled;
        let area = match self.title {
            Some(title) => {
                titled = root.titled(title, look.font(16.0).color(&look.palette.text))?;
                &titled
            }
            None => root,
        };
        match &self.result.chart {
            ChartSpec::Lines { x_label, y_label, log_x, log_y } => {
                self.lines::<DB, LEGEND>(area, look, (x_label, y_label), (*log_x, *log_y))?;
            }
            ChartSpec::Bars { y_label } => self.bars(area, look, y_label)?,
            ChartSpec::Gantt => self.gantt(area, look)?,
            ChartSpec::Heatmap { row_label, col_label } => {
                kinds::heatmaps(area, look, &self.result.matrices, (row_label, col_label))?;
            }
        }
        if self.simulated {
            let warn = parse_hex_color(SIMULATED_COLOR).unwrap_or(look.palette.text);
            let style = look.font(12.0).color(&warn).pos(Pos::new(HPos::Right, VPos::Top));
            root.draw(&Text::new("SIMULATED", (look.px(look.width - 12.0) as i32, look.px(6.0) as i32), style))?;
        }
        root.present()?;
        Ok(())
    }
}
