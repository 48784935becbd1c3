//! WCAG 2 contrast between two colors, and the check that each theme's main text and fill pairs
//! in `style/00-base.css` (the colors the page and its charts read) reach 4.5:1.

use plotters::style::RGBColor;

use super::style::parse_hex_color;

/// The least contrast WCAG 2 (AA) asks of normal text.
pub const TEXT_CONTRAST: f64 = 4.5;

/// WCAG 2's relative luminance of an sRGB color, 0 (black) to 1 (white).
pub fn relative_luminance(color: RGBColor) -> f64 {
    let linear = |channel: u8| {
        let c = f64::from(channel) / 255.0;
        if c <= 0.040_45 { c / 12.92 } else { ((c + 0.055) / 1.055).powf(2.4) }
    };
    0.2126 * linear(color.0) + 0.7152 * linear(color.1) + 0.0722 * linear(color.2)
}

/// The contrast ratio of two colors, 1 (the same) to 21 (black on white), in either order.
pub fn contrast_ratio(a: RGBColor, b: RGBColor) -> f64 {
    let (la, lb) = (relative_luminance(a), relative_luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// [`contrast_ratio`] of two `#rgb`/`#rrggbb` colors; `None` if either is not one.
pub fn hex_contrast(a: &str, b: &str) -> Option<f64> {
    Some(contrast_ratio(parse_hex_color(a)?, parse_hex_color(b)?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const BASE_CSS: &str = include_str!("../../../style/00-base.css");

    /// The custom properties of the first block that `selector` opens in the stylesheet.
    fn properties(selector: &str) -> BTreeMap<&'static str, &'static str> {
        let start = BASE_CSS.find(selector).unwrap_or_else(|| panic!("no '{selector}' in 00-base.css"));
        let body = &BASE_CSS[start..];
        let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
        body.lines()
            .filter_map(|line| line.trim().strip_prefix("--")?.strip_suffix(';')?.split_once(':'))
            .map(|(name, value)| (name.trim(), value.trim()))
            .collect()
    }

    /// Text (or a control's label) against what it sits on.
    const PAIRS: [(&str, &str); 17] = [
        ("text", "bg"),
        ("text", "panel"),
        ("text", "panel-raised"),
        ("text-muted", "bg"),
        ("text-muted", "panel"),
        ("text-muted", "panel-raised"),
        ("accent", "bg"),
        ("accent", "panel"),
        ("ok", "bg"),
        ("ok", "panel"),
        ("warn", "bg"),
        ("warn", "panel"),
        ("bad", "bg"),
        ("bad", "panel"),
        ("warn-text", "warn-bg"),
        ("on-fill", "accent-fill"),
        ("on-fill", "bad-fill"),
    ];

    #[test]
    fn the_ratio_matches_wcag_figures() {
        let ratio = |a, b| (hex_contrast(a, b).unwrap() * 100.0).round() / 100.0;
        assert_eq!(ratio("#000", "#fff"), 21.0);
        assert_eq!(ratio("#fff", "#fff"), 1.0);
        // The dark theme's old active tab, white on #4c9aff, as issue 19 measured it.
        assert_eq!(ratio("#ffffff", "#4c9aff"), 2.85);
        assert_eq!(hex_contrast("#fff", "blue"), None);
    }

    #[test]
    fn both_themes_reach_4_5_to_1_for_text_and_filled_controls() {
        let mut weak = Vec::new();
        for (theme, selector) in [("dark", ":root[data-theme=\"dark\"]"), ("light", ":root[data-theme=\"light\"]")] {
            let colors = properties(selector);
            for (fg, bg) in PAIRS {
                let (Some(a), Some(b)) = (colors.get(fg), colors.get(bg)) else {
                    panic!("{theme}: --{fg} or --{bg} missing from 00-base.css");
                };
                let ratio = hex_contrast(a, b).unwrap_or_else(|| panic!("{theme}: '{a}' or '{b}' is not #rrggbb"));
                if ratio < TEXT_CONTRAST {
                    weak.push(format!("{theme}: --{fg} {a} on --{bg} {b} is {ratio:.2}:1"));
                }
            }
        }
        assert!(weak.is_empty(), "below {TEXT_CONTRAST}:1:\n{}", weak.join("\n"));
    }

    #[test]
    fn the_system_light_theme_is_the_light_theme() {
        let media = BASE_CSS.find("@media (prefers-color-scheme: light)").expect("the system-preference block");
        let system = &BASE_CSS[media..];
        let start = system.find(":root:not([data-theme])").unwrap();
        let body = &system[start..];
        let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
        let system: BTreeMap<_, _> = body
            .lines()
            .filter_map(|line| line.trim().strip_prefix("--")?.strip_suffix(';')?.split_once(':'))
            .map(|(name, value)| (name.trim(), value.trim()))
            .collect();
        assert_eq!(system, properties(":root[data-theme=\"light\"]"));
    }
}
