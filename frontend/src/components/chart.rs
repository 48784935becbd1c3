//! What the canvas charts share: colors from the page's CSS and a sharp pixel buffer.

use leptos::{ev, prelude::*};
use plotters::style::RGBColor;
use web_sys::HtmlCanvasElement;

/// Colors of the chart, read from the page's CSS custom properties so they follow the theme.
pub struct Palette {
    pub background: RGBColor,
    pub line: RGBColor,
    pub grid: RGBColor,
    pub axis: RGBColor,
    pub text: RGBColor,
}

impl Palette {
    pub fn from_css(canvas: &HtmlCanvasElement) -> Self {
        let style = window().get_computed_style(canvas).ok().flatten();
        let color = |name: &str, fallback: RGBColor| {
            style
                .as_ref()
                .and_then(|style| style.get_property_value(name).ok())
                .and_then(|value| parse_hex_color(&value))
                .unwrap_or(fallback)
        };
        // Fallbacks are mid-tones that read on dark and light backgrounds alike.
        Self {
            background: color("--chart-bg", RGBColor(128, 128, 128)),
            line: color("--accent", RGBColor(61, 139, 253)),
            grid: color("--chart-grid", RGBColor(110, 110, 110)),
            axis: color("--chart-axis", RGBColor(140, 140, 140)),
            text: color("--text-muted", RGBColor(150, 150, 150)),
        }
    }
}

/// Parses `#rgb` or `#rrggbb` (what main.css uses for its chart colors).
pub fn parse_hex_color(value: &str) -> Option<RGBColor> {
    let hex = value.trim().strip_prefix('#')?;
    let channel = |at: usize, len: usize| {
        let digits = hex.get(at..at + len)?;
        let value = u8::from_str_radix(digits, 16).ok()?;
        Some(if len == 1 { value * 17 } else { value })
    };
    match hex.len() {
        3 => Some(RGBColor(channel(0, 1)?, channel(1, 1)?, channel(2, 1)?)),
        6 => Some(RGBColor(channel(0, 2)?, channel(2, 2)?, channel(4, 2)?)),
        _ => None,
    }
}

/// Sizes the canvas's pixel buffer to its CSS box times the device pixel ratio,
/// so lines and text stay sharp; returns that ratio.
pub fn fit_to_css_box(canvas: &HtmlCanvasElement) -> f64 {
    let ratio = window().device_pixel_ratio().max(1.0);
    let rect = canvas.get_bounding_client_rect();
    // A canvas not laid out yet (hidden tab, detached) keeps its current size.
    if rect.width() >= 1.0 && rect.height() >= 1.0 {
        let width = (rect.width() * ratio).round() as u32;
        let height = (rect.height() * ratio).round() as u32;
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
    fn hex_colors_parse_in_short_and_long_form() {
        assert_eq!(parse_hex_color(" #3d8bfd"), Some(RGBColor(0x3d, 0x8b, 0xfd)));
        assert_eq!(parse_hex_color("#fff"), Some(RGBColor(255, 255, 255)));
        assert_eq!(parse_hex_color("rgb(1, 2, 3)"), None);
        assert_eq!(parse_hex_color("#12345"), None);
    }
}
