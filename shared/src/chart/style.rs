//! How a chart looks: colors, the pixel scale, and the series colors.

use plotters::style::{IntoFont, RGBColor, TextStyle};

/// Colors of a chart. The page reads them from its CSS so they follow the theme;
/// the server's SVG uses [`Palette::LIGHT`], the page's light theme.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Palette {
    pub background: RGBColor,
    /// The accent: bars, heatmap cells, a live line.
    pub line: RGBColor,
    pub grid: RGBColor,
    pub axis: RGBColor,
    pub text: RGBColor,
}

impl Palette {
    /// The light theme of style/00-base.css.
    pub const LIGHT: Palette = Palette {
        background: RGBColor(0xff, 0xff, 0xff),
        line: RGBColor(0x1f, 0x6f, 0xeb),
        grid: RGBColor(0xc9, 0xce, 0xd6),
        axis: RGBColor(0x8c, 0x93, 0x9f),
        text: RGBColor(0x59, 0x61, 0x70),
    };
}

/// Colors of the series, in order; they read on the dark and the light theme.
pub const SERIES_COLORS: [&str; 8] =
    ["#4c9aff", "#f0883e", "#3fb950", "#d2a8ff", "#f85149", "#e3b341", "#39c5cf", "#db61a2"];

/// The color of series `i` (they repeat after [`SERIES_COLORS`]).
pub fn series_color(i: usize) -> RGBColor {
    parse_hex_color(SERIES_COLORS[i % SERIES_COLORS.len()]).unwrap_or(RGBColor(76, 154, 255))
}

/// Parses `#rgb` or `#rrggbb` (what style/00-base.css uses for its chart colors).
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

/// Sizes and colors of one drawing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Look {
    /// Device pixels per CSS pixel (1 for the SVG).
    pub scale: f64,
    /// Width of the drawing in CSS pixels: narrow charts get fewer ticks.
    pub width: f64,
    pub palette: Palette,
}

impl Look {
    /// `css` pixels in device pixels.
    pub fn px(&self, css: f64) -> u32 {
        (css * self.scale).round() as u32
    }

    /// The sans-serif font at `css_px` CSS pixels.
    pub fn font(&self, css_px: f64) -> TextStyle<'static> {
        ("sans-serif", f64::from(self.px(css_px))).into_font().into()
    }
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
        assert_eq!(series_color(9), series_color(1));
    }

    #[test]
    fn sizes_scale_with_the_pixel_ratio() {
        let look = Look { scale: 2.0, width: 800.0, palette: Palette::LIGHT };
        assert_eq!(look.px(10.5), 21);
    }
}
