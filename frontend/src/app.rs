//! The root component: asks who the page talks as, starts the telemetry socket,
//! the lab, alerts and the theme, and lays out the header and the current tab.

use leptos::{ev, prelude::*, task::spawn_local};
use shared::auth::Role;

use crate::{
    components::{
        header::Header,
        notices::{AnonymousBanner, DegradedNotice, StaleBanner},
    },
    hooks::{alerts::use_alerts, lab::use_lab, session::use_session, telemetry::use_telemetry, theme::use_theme},
    pages::{
        Tab,
        alerts::AlertsPage,
        audit::AuditPage,
        dashboard::Dashboard,
        fleet::{FleetPage, fleet_configured},
        lab::LabPage,
        login::LoginRequired,
        usage::UsagePage,
    },
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
    let tab = RwSignal::new(Tab::from_fragment(&window().location().hash().unwrap_or_default()));
    provide_context(session);
    provide_context(lab);
    provide_context(alerts);
    provide_context(tab.read_only());
    let follow = window_event_listener(ev::hashchange, move |_| {
        tab.set(Tab::from_fragment(&window().location().hash().unwrap_or_default()));
    });
    on_cleanup(move || follow.remove());

    let can_view = Memo::new(move |_| session.can_view());
    let exposed = move || session.me.with(|m| m.as_ref().is_some_and(|m| m.exposed_without_auth));
    let admin = Memo::new(move |_| session.allows(Role::Admin));
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
        <Header telemetry=telemetry theme=theme tab=tab />
        <Show when=exposed>
            <AnonymousBanner />
        </Show>
        <StaleBanner telemetry=telemetry />
        <DegradedNotice telemetry=telemetry />
        {move || match can_view.get() {
            None => view! { <p class="placeholder page-placeholder">"Connecting…"</p> }.into_any(),
            Some(false) => view! { <LoginRequired /> }.into_any(),
            Some(true) => view! {
                // The dashboard stays mounted (its charts keep their history); the audit log is built when shown.
                <div class="tab-panel" hidden=move || tab.get() != Tab::Dashboard>
                    <Dashboard telemetry=telemetry theme=theme.theme />
                </div>
                <Show when=move || lab_visited.get()>
                    <div class="tab-panel" hidden=move || tab.get() != Tab::Lab>
                        <LabPage telemetry=telemetry theme=theme.theme />
                    </div>
                </Show>
                <Show when=move || fleet_visited.get()>
                    <div class="tab-panel" hidden=move || tab.get() != Tab::Fleet>
                        <FleetPage />
                    </div>
                </Show>
                <Show when=move || alerts_visited.get()>
                    <div class="tab-panel" hidden=move || tab.get() != Tab::Alerts>
                        <AlertsPage telemetry=telemetry />
                    </div>
                </Show>
                // Built each time it is shown, so it asks for the figures of now.
                <Show when=move || tab.get() == Tab::Usage>
                    <UsagePage />
                </Show>
                <Show when=move || tab.get() == Tab::Audit && admin.get()>
                    <AuditPage />
                </Show>
            }
            .into_any(),
        }}
    }
}

/// Whether the server answers `/api/fleet` (the header shows `#tab-fleet` then).
#[derive(Debug, Clone, Copy)]
pub struct FleetTab(pub ReadSignal<bool>);
