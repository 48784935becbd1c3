//! `use_theme()`: dark or light, from localStorage or else the system preference, applied as `data-theme` on `<html>`.

use leptos::prelude::*;

/// localStorage key holding the reader's explicit choice.
const STORAGE_KEY: &str = "gpudash-theme";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Theme {
    Dark,
    Light,
}

impl Theme {
    /// The value of `data-theme` and of the stored choice.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dark => "dark",
            Self::Light => "light",
        }
    }

    pub fn toggled(self) -> Self {
        match self {
            Self::Dark => Self::Light,
            Self::Light => Self::Dark,
        }
    }

    fn parse(value: &str) -> Option<Self> {
        match value {
            "dark" => Some(Self::Dark),
            "light" => Some(Self::Light),
            _ => None,
        }
    }
}

/// The current theme and the way to flip it.
#[derive(Debug, Clone, Copy)]
pub struct ThemeControl {
    pub theme: ReadSignal<Theme>,
    set_theme: WriteSignal<Theme>,
}

impl ThemeControl {
    /// Switches theme and remembers the choice for the next visit.
    pub fn toggle(self) {
        let next = self.theme.get_untracked().toggled();
        // Applied before the signal changes, so charts redrawing on the new
        // value already read the new theme's CSS colors.
        apply(next);
        store(next);
        self.set_theme.set(next);
    }
}

/// Applies the stored or system theme now, before the first paint of the app.
pub fn use_theme() -> ThemeControl {
    let initial = stored().unwrap_or_else(system_theme);
    apply(initial);
    let (theme, set_theme) = signal(initial);
    ThemeControl { theme, set_theme }
}

fn stored() -> Option<Theme> {
    let storage = window().local_storage().ok()??;
    Theme::parse(&storage.get_item(STORAGE_KEY).ok()??)
}

fn store(theme: Theme) {
    // Private browsing may refuse storage; the toggle still works for this visit.
    if let Ok(Some(storage)) = window().local_storage() {
        let _ = storage.set_item(STORAGE_KEY, theme.as_str());
    }
}

fn system_theme() -> Theme {
    let prefers_light =
        window().match_media("(prefers-color-scheme: light)").ok().flatten().is_some_and(|query| query.matches());
    if prefers_light { Theme::Light } else { Theme::Dark }
}

fn apply(theme: Theme) {
    if let Some(html) = document().document_element() {
        let _ = html.set_attribute("data-theme", theme.as_str());
    }
}
