//! A device's memory used over the last five minutes, drawn with plotters on a `<canvas>`.

use leptos::{html, logging, prelude::*};
use plotters::{
    chart::ChartBuilder,
    drawing::IntoDrawingArea,
    series::AreaSeries,
    style::{Color, IntoFont, ShapeStyle, TextStyle},
};
use plotters_canvas::CanvasBackend;
use web_sys::HtmlCanvasElement;

use crate::{
    components::chart_style::{Palette, fit_to_css_box, use_resize_counter},
    hooks::theme::Theme,
    state::{DashboardState, HISTORY_WINDOW_MS, MemoryRing},
};

const GIB: f64 = (1u64 << 30) as f64;
const WINDOW_SECONDS: f64 = (HISTORY_WINDOW_MS / 1000) as f64;

/// Memory used by GPU `index`; redrawn when its points, the theme or the window size change.
#[component]
pub fn MemoryChart(state: ReadSignal<DashboardState>, index: u32, theme: ReadSignal<Theme>) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    // Only this device's revision: other GPUs' ticks do not redraw this chart.
    let revision =
        Memo::new(move |_| state.with(|s| s.device(index).map(|d| (d.memory_revision, d.info.memory_total))));
    let resized = use_resize_counter();

    let mut draws = 0u32;
    Effect::new(move |_| {
        // `get`, not `track`: tracking a memo does not run it, so it would
        // never subscribe to `state` and never change.
        let _ = revision.get();
        theme.track();
        resized.track();
        let Some(canvas) = canvas_ref.get() else {
            return;
        };
        let drawn = state.with_untracked(|s| {
            let device = s.device(index)?;
            Some(draw(&canvas, &device.memory, device.info.memory_total))
        });
        match drawn {
            Some(Ok(())) => {
                draws += 1;
                let _ = canvas.set_attribute("data-draws", &draws.to_string());
            }
            Some(Err(err)) => {
                logging::warn!("gpudash: cannot draw the memory chart of GPU {index}: {err}");
            }
            None => {}
        }
    });

    view! {
        <canvas
            node_ref=canvas_ref
            class="mem-chart"
            role="img"
            aria-label=format!("Memory used by GPU {index} over the last 5 minutes")
        ></canvas>
    }
}

fn draw(canvas: &HtmlCanvasElement, memory: &MemoryRing, memory_total: u64) -> Result<(), Box<dyn std::error::Error>> {
    let ratio = fit_to_css_box(canvas);
    let px = |css_px: f64| (css_px * ratio).round() as u32;
    let palette = Palette::from_css(canvas);
    let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("the canvas has no 2d context")?;
    let root = backend.into_drawing_area();
    root.fill(&palette.background)?;

    let newest = memory.newest_ms().unwrap_or_default();
    let points: Vec<(f64, f64)> = memory
        .iter()
        .map(|p| {
            let seconds_ago = (p.timestamp_ms as f64 - newest as f64) / 1000.0;
            (seconds_ago, p.memory_used as f64 / GIB)
        })
        .collect();
    // A device without a reported total still gets a usable scale.
    let y_max =
        if memory_total > 0 { memory_total as f64 / GIB } else { points.iter().map(|&(_, y)| y).fold(1.0, f64::max) };

    let label: TextStyle<'_> = ("sans-serif", f64::from(px(11.0))).into_font().color(&palette.text);
    let mut chart = ChartBuilder::on(&root)
        .margin(px(8.0))
        .margin_left(px(4.0))
        .x_label_area_size(px(30.0))
        .y_label_area_size(px(40.0))
        .build_cartesian_2d(-WINDOW_SECONDS..0.0, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds ago")
        .y_desc("GiB")
        .x_labels(7)
        .y_labels(5)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format_gib_tick(*y, y_max))
        .label_style(label.clone())
        .axis_desc_style(label)
        .axis_style(ShapeStyle::from(palette.axis).stroke_width(px(1.0)))
        .bold_line_style(ShapeStyle::from(palette.grid.mix(0.45)).stroke_width(px(1.0)))
        .light_line_style(ShapeStyle::from(palette.grid.mix(0.0)))
        .set_all_tick_mark_size(px(3.0))
        .draw()?;
    chart.draw_series(
        AreaSeries::new(points, 0.0, palette.line.mix(0.18))
            .border_style(ShapeStyle::from(palette.line).stroke_width(px(2.0))),
    )?;
    root.present()?;
    Ok(())
}

/// A y-axis label: whole GiB, with one decimal on small cards where ticks fall between.
fn format_gib_tick(gib: f64, y_max: f64) -> String {
    if y_max < 10.0 { format!("{gib:.1}") } else { format!("{gib:.0}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cards_get_a_decimal_on_the_y_axis() {
        assert_eq!(format_gib_tick(2.5, 4.0), "2.5");
        assert_eq!(format_gib_tick(40.0, 140.0), "40");
    }
}
