//! The root component: asks who the page talks as, starts the telemetry socket,
//! the lab, alerts and the theme, and lays out the header and the current tab.

use leptos::{ev, prelude::*, task::spawn_local};
use shared::auth::Role;
use wasm_bindgen::JsCast;

use crate::{
    components::{
        header::{FleetTab, Header},
        notices::{AnonymousBanner, DegradedNotice, StaleBanner},
    },
    hooks::{
        alerts::use_alerts, lab::use_lab, reservations::use_reservations, session::use_session,
        telemetry::use_telemetry, theme::use_theme, url::use_url_view,
    },
    pages::{Tab, dashboard::Dashboard, fleet::fleet_configured},
    split::{self, Lazily},
    state::{alerts::AlertsState, lab::LabState},
};

/// The whole app, mounted on `<body>`.
#[component]
pub fn App() -> impl IntoView {
    let theme = use_theme();
    let session = use_session();
    let lab_state = RwSignal::new(LabState::default());
    let alerts_state = RwSignal::new(AlertsState::default());
    let telemetry = use_telemetry(session, lab_state.write_only(), alerts_state.write_only());
    let lab = use_lab(lab_state, telemetry, session);
    let alerts = use_alerts(alerts_state, telemetry, session);
    // The tab and the rest of the view, kept in the URL so that a link shows the same.
    let view = use_url_view(lab.selected);
    let tab = view.tab;
    provide_context(view);
    provide_context(session);
    provide_context(lab);
    provide_context(alerts);
    provide_context(tab.read_only());
    // One reservations poll for the two tabs that show them (the Dashboard's panel and cards, the Lab's picker).
    provide_context(use_reservations(Memo::new(move |_| matches!(tab.get(), Tab::Dashboard | Tab::Lab))));

    let can_view = Memo::new(move |_| session.can_view());
    let exposed = move || session.me.with(|m| m.as_ref().is_some_and(|m| m.exposed_without_auth));
    let admin = Memo::new(move |_| session.has(Role::Admin));
    // The Fleet tab exists only where the server has a Prometheus to ask (503 otherwise).
    let fleet_on = RwSignal::new(false);
    provide_context(FleetTab(fleet_on.read_only()));
    Effect::new(move |_| {
        if can_view.get() == Some(true) {
            spawn_local(async move {
                let _ = fleet_on.try_set(fleet_configured().await);
            });
        }
    });
    let fleet_visited = Memo::new(move |was: Option<&bool>| {
        was.copied().unwrap_or(false) || (tab.get() == Tab::Fleet && fleet_on.get())
    });
    // Built at the first visit, then kept (hidden) so edited forms survive a look at the dashboard.
    let lab_visited = Memo::new(move |was: Option<&bool>| was.copied().unwrap_or(false) || tab.get() == Tab::Lab);
    let alerts_visited = Memo::new(move |was: Option<&bool>| was.copied().unwrap_or(false) || tab.get() == Tab::Alerts);
    view! {
        <SkipToProcesses tab=tab />
        <Header telemetry=telemetry theme=theme tab=tab />
        <Show when=exposed>
            <AnonymousBanner />
        </Show>
        <StaleBanner telemetry=telemetry />
        <DegradedNotice telemetry=telemetry />
        {move || match can_view.get() {
            None => view! { <p class="placeholder page-placeholder">"Connecting…"</p> }.into_any(),
            Some(false) => view! { <Lazily page=split::login() /> }.into_any(),
            Some(true) => view! {
                // The dashboard stays mounted (its charts keep their history); the audit log is built when shown.
                <TabPanel tab=tab which=Tab::Dashboard>
                    <Dashboard telemetry=telemetry theme=theme.theme />
                </TabPanel>
                <TabPanel tab=tab which=Tab::Lab>
                    <Show when=move || lab_visited.get()>
                        <Lazily page=split::lab(telemetry, theme.theme) />
                    </Show>
                </TabPanel>
                <TabPanel tab=tab which=Tab::Fleet>
                    <Show when=move || fleet_visited.get()>
                        <Lazily page=split::fleet() />
                    </Show>
                </TabPanel>
                <TabPanel tab=tab which=Tab::Alerts>
                    <Show when=move || alerts_visited.get()>
                        <Lazily page=split::alerts(telemetry) />
                    </Show>
                </TabPanel>
                // Built each time it is shown, so it asks for the figures of now.
                <TabPanel tab=tab which=Tab::Usage>
                    <Show when=move || tab.get() == Tab::Usage>
                        <Lazily page=split::usage() />
                    </Show>
                </TabPanel>
                <TabPanel tab=tab which=Tab::Jobs>
                    <Show when=move || tab.get() == Tab::Jobs>
                        <Lazily page=split::jobs() />
                    </Show>
                </TabPanel>
                <TabPanel tab=tab which=Tab::Audit>
                    <Show when=move || tab.get() == Tab::Audit && admin.get()>
                        <Lazily page=split::audit() />
                    </Show>
                </TabPanel>
            }
            .into_any(),
        }}
    }
}

/// `#panel-<key>`, the `tabpanel` that `#tab-<key>` controls; hidden while another tab is shown.
#[component]
fn TabPanel(tab: RwSignal<Tab>, which: Tab, children: Children) -> impl IntoView {
    view! {
        <div
            class="tab-panel"
            role="tabpanel"
            id=format!("panel-{}", which.key())
            aria-labelledby=format!("tab-{}", which.key())
            hidden=move || tab.get() != which
        >
            {children()}
        </div>
    }
}

/// `#skip-to-processes`, the first thing Tab reaches: shown when focused, it opens the dashboard
/// and moves the focus to its process table.
#[component]
fn SkipToProcesses(tab: RwSignal<Tab>) -> impl IntoView {
    let skip = move |ev: ev::MouseEvent| {
        ev.prevent_default();
        tab.set(Tab::Dashboard);
        let _ = window().location().set_hash("processes");
        // After the dashboard's panel is shown again, so that it can be scrolled to.
        request_animation_frame(|| {
            // Folded for many GPUs: unfolded first, the table built at the next frame.
            if let Some(fold) = document().get_element_by_id("fold-processes") {
                let _ = fold.set_attribute("open", "");
            }
            request_animation_frame(|| {
                let target = document().get_element_by_id("processes");
                if let Some(target) = target.and_then(|t| t.dyn_into::<web_sys::HtmlElement>().ok()) {
                    // Focusable by script only, so that Tab goes on from the table.
                    let _ = target.set_attribute("tabindex", "-1");
                    target.scroll_into_view();
                    let _ = target.focus();
                }
            });
        });
    };
    view! {
        <a id="skip-to-processes" class="skip-link" href="#processes" on:click=skip>
            "Skip to processes"
        </a>
    }
}
