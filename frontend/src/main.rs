//! gpudash's browser app: mounts [`app::App`] on the page's `<body>`.

mod app;
mod components;
mod hooks;
mod pages;
mod state;

fn main() {
    leptos::mount::mount_to_body(app::App);
}
