//! `use_theme()`: dark or light, from localStorage or else the system preference, applied as `data-theme` on `<html>`.

use leptos::prelude::*;
use send_wrapper::SendWrapper;
use wasm_bindgen::{JsCast, prelude::Closure};
use web_sys::Event;

/// localStorage key holding the reader's explicit choice.
const STORAGE_KEY: &str = "gpudash-theme";
/// Dark is the default when the system states no preference.
const LIGHT_QUERY: &str = "(prefers-color-scheme: light)";

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

/// Applies the stored or system theme now, before the first paint of the app,
/// and follows the system's changes for as long as the reader made no choice.
pub fn use_theme() -> ThemeControl {
    let initial = stored().unwrap_or_else(system_theme);
    apply(initial);
    let (theme, set_theme) = signal(initial);
    follow_system(set_theme);
    ThemeControl { theme, set_theme }
}

fn follow_system(set_theme: WriteSignal<Theme>) {
    let Ok(Some(query)) = window().match_media(LIGHT_QUERY) else {
        return;
    };
    let on_change = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
        if stored().is_none() {
            let theme = system_theme();
            apply(theme);
            set_theme.set(theme);
        }
    });
    query.set_onchange(Some(on_change.as_ref().unchecked_ref()));
    // The browser is single-threaded; the wrapper only satisfies `on_cleanup`'s bounds.
    let listener = SendWrapper::new((query, on_change));
    on_cleanup(move || {
        let (query, _on_change) = listener.take();
        query.set_onchange(None);
    });
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
