//! gpudash's browser app: mounts [`app::App`] on the page's `<body>`.

mod app;
mod components;
mod hooks;
mod pages;
mod split;
mod state;

fn main() {
    // index.html says "Loading…" until the app runs: the app takes its place.
    if let Some(loading) = leptos::prelude::document().get_element_by_id("app-loading") {
        loading.remove();
    }
    leptos::mount::mount_to_body(app::App);
}
