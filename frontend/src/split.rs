//! The app's split points: the views not needed to show the dashboard, each `#[lazy]`. The tabs
//! opened now and then (the Lab, the Fleet, Alerts, Usage, Jobs, the audit log), a GPU's card (built when
//! its row is opened), an attached PyTorch process, and the sign-in page (where tokens are needed
//! and none is kept yet). `web/build/assets.rs` cuts the code only they reach out of the first download
//! into modules of their own, which the browser fetches the first time one is shown
//! (docs/BENCHMARKS.md, "Size, issue 39"). Natively (the unit tests) each is an ordinary call.
//!
//! Each is shown through [`Lazily`], which says "Loading…" until its module is in.
// `#[lazy]` declares each module's loader as a wasm import, which Rust spells `unsafe extern`.
#![allow(unsafe_code)]

use leptos::prelude::*;

use crate::{
    components::{bridge::BridgeProcess, device_card::DeviceCard},
    hooks::{bridge::Bridge, telemetry::Telemetry, theme::Theme},
    pages::{
        alerts::AlertsPage, audit::AuditPage, fleet::FleetPage, jobs::JobsPage, lab::LabPage, login::LoginRequired,
        usage::UsagePage,
    },
    state::DashboardState,
};

#[lazy]
pub fn lab(telemetry: Telemetry, theme: ReadSignal<Theme>) -> AnyView {
    view! { <LabPage telemetry=telemetry theme=theme /> }.into_any()
}

#[lazy]
pub fn fleet() -> AnyView {
    view! { <FleetPage /> }.into_any()
}

#[lazy]
pub fn alerts(telemetry: Telemetry) -> AnyView {
    view! { <AlertsPage telemetry=telemetry /> }.into_any()
}

#[lazy]
pub fn usage() -> AnyView {
    view! { <UsagePage /> }.into_any()
}

#[lazy]
pub fn jobs() -> AnyView {
    view! { <JobsPage /> }.into_any()
}

#[lazy]
pub fn audit() -> AnyView {
    view! { <AuditPage /> }.into_any()
}

#[lazy]
pub fn login() -> AnyView {
    view! { <LoginRequired /> }.into_any()
}

#[lazy]
pub fn device_card(state: ReadSignal<DashboardState>, index: u32, theme: ReadSignal<Theme>) -> AnyView {
    view! { <DeviceCard state=state index=index theme=theme /> }.into_any()
}

#[lazy]
pub fn bridge_process(state: ReadSignal<DashboardState>, bridge: Bridge, id: u64) -> AnyView {
    view! { <BridgeProcess state=state bridge=bridge id=id /> }.into_any()
}

/// `page`, once its module is loaded; "Loading…" (`p.split-loading`) until then.
#[component]
pub fn Lazily<F>(page: F) -> impl IntoView
where
    F: Future<Output = AnyView> + Send + 'static,
{
    view! {
        <Suspense fallback=|| view! { <p class="placeholder split-loading">"Loading…"</p> }>
            {Suspend::new(page)}
        </Suspense>
    }
}
