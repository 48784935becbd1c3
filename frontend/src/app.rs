//! The root component: starts the telemetry socket and the theme, lays out the page.

use leptos::prelude::*;

use crate::{
    components::header::Header,
    hooks::{telemetry::use_telemetry, theme::use_theme},
    pages::dashboard::Dashboard,
};

/// The whole app, mounted on `<body>`.
#[component]
pub fn App() -> impl IntoView {
    let theme = use_theme();
    let telemetry = use_telemetry();
    view! {
        <Header telemetry=telemetry theme=theme />
        <Dashboard telemetry=telemetry theme=theme.theme />
    }
}
