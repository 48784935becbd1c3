//! A run's result drawn on a canvas: the chart the server draws as SVG
//! ([`shared::chart`]), here on plotters' canvas backend, sized to the canvas's
//! CSS box and colored by the page's theme.

use plotters::drawing::IntoDrawingArea;
use plotters_canvas::CanvasBackend;
use shared::chart::{Look, RunChart};
use web_sys::HtmlCanvasElement;

use crate::components::chart::{css_palette, fit_to_css_box};

pub use shared::chart::{SERIES_COLORS, span_kind};

/// Draws `result` (with `previous` faintly under it) on `canvas`. The page names
/// the curves beside the canvas and has its own heading, so the chart has neither.
pub fn draw(
    canvas: &HtmlCanvasElement,
    result: &shared::lab::RunResult,
    previous: Option<&shared::lab::RunResult>,
    simulated: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let scale = fit_to_css_box(canvas);
    let look = Look { scale, width: f64::from(canvas.width()) / scale, palette: css_palette(canvas) };
    let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("the canvas has no 2d context")?;
    let chart = RunChart { result, previous, previous_id: None, simulated, title: None };
    chart.draw(&backend.into_drawing_area(), &look)?;
    Ok(())
}
