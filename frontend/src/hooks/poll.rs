//! `use_poll()`: calls a loader now and then every `period` while a condition
//! holds (e.g. its tab is shown), and stops with the calling component.

use std::time::Duration;

use leptos::prelude::*;

/// Runs `load` whenever `active` becomes true and every `period` while it stays true.
pub fn use_poll(active: Memo<bool>, period: Duration, load: impl Fn() + Clone + 'static) {
    Effect::new({
        let load = load.clone();
        move |_| {
            if active.get() {
                load();
            }
        }
    });
    let handle = set_interval_with_handle(
        move || {
            if active.get_untracked() && !document_hidden() {
                load();
            }
        },
        period,
    );
    if let Ok(handle) = handle {
        on_cleanup(move || handle.clear());
    }
}

fn document_hidden() -> bool {
    web_sys::window().and_then(|w| w.document()).is_some_and(|d| d.hidden())
}
