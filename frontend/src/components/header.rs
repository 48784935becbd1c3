//! The top bar: product name, the Dashboard | Lab (| Fleet) | Alerts | Usage (| Audit) tabs,
//! the firing alerts' badge, host facts, who is signed in, connection status and the
//! theme toggle.

use leptos::{ev, prelude::*};
use shared::{HostInfo, auth::Role, units::or_na};
use wasm_bindgen::JsCast;

use crate::{
    components::login::LoginForm,
    hooks::{
        alerts::Alerts,
        session::Session,
        telemetry::{ConnectionStatus, Telemetry},
        theme::{Theme, ThemeControl},
    },
    pages::Tab,
    state::{
        DashboardState,
        alerts::{page_title, severity_class},
    },
};

/// Header for the whole page; host facts appear once the first snapshot arrived.
#[component]
pub fn Header(telemetry: Telemetry, theme: ThemeControl, tab: RwSignal<Tab>) -> impl IntoView {
    let session = expect_context::<Session>();
    let state = telemetry.state;
    let host = Memo::new(move |_| state.with(|s: &DashboardState| s.host.clone()));
    let host_text = move |f: fn(&HostInfo) -> String| move || host.with(|h| h.as_ref().map_or_else(String::new, f));
    let has_host = move || host.with(Option::is_some);
    follow_title(host);

    view! {
        <header class="topbar">
            <div class="brand">
                <span class="brand-mark" aria-hidden="true"></span>
                <h1>"gpudash"</h1>
            </div>
            <Show when=move || session.can_view() == Some(true)>
                <Tabs tab=tab />
                <AlertsBadge tab=tab />
            </Show>
            <Show when=has_host>
                // The facts that do not fit the row are cut off (style/00-base.css): all of them on hover.
                <dl
                    class="host-facts"
                    title=host_text(|h| {
                        format!(
                            "host {} · driver {} · CUDA {}",
                            h.hostname,
                            or_na(h.driver_version.clone(), |v| v),
                            or_na(h.cuda_driver_version.clone(), |v| v)
                        )
                    })
                >
                    <div>
                        <dt>"host"</dt>
                        <dd id="hostname">{host_text(|h| h.hostname.clone())}</dd>
                    </div>
                    <div>
                        <dt>"driver"</dt>
                        <dd id="driver-version">{host_text(|h| or_na(h.driver_version.clone(), |v| v))}</dd>
                    </div>
                    <div>
                        <dt>"CUDA"</dt>
                        <dd id="cuda-version">{host_text(|h| or_na(h.cuda_driver_version.clone(), |v| v))}</dd>
                    </div>
                </dl>
            </Show>
            <div class="topbar-end">
                <WhoAmI />
                <ConnectionBadge status=telemetry.status />
                <ThemeToggle theme=theme />
            </div>
        </header>
    }
}

/// `#tab-dashboard`, `#tab-lab`, `#tab-fleet` where there is a fleet, `#tab-alerts`, `#tab-usage`, `#tab-jobs`, and for admins
/// `#tab-audit`: ARIA tabs, each controlling `#panel-<key>`; only the selected one is in the Tab order, and
/// Left/Right (wrapping), Home and End move to and open the others.
#[component]
fn Tabs(tab: RwSignal<Tab>) -> impl IntoView {
    let session = expect_context::<Session>();
    let fleet = use_context::<FleetTab>();
    let fleet_on = move || fleet.is_some_and(|f| f.0.get());
    let shown = move || {
        Tab::ALL
            .into_iter()
            .filter(|t| match t {
                Tab::Fleet => fleet_on(),
                Tab::Audit => session.has(Role::Admin),
                _ => true,
            })
            .collect::<Vec<_>>()
    };
    let on_key = move |ev: ev::KeyboardEvent| {
        let Some(next) = tab_after_key(&shown(), tab.get_untracked(), &ev.key()) else {
            return;
        };
        ev.prevent_default();
        open(tab, next);
        focus_tab(next);
    };
    let button = move |which: Tab| {
        let selected = move || tab.get() == which;
        view! {
            <button
                type="button"
                role="tab"
                id=format!("tab-{}", which.key())
                class="tab"
                class:active=selected
                aria-selected=move || selected().to_string()
                aria-controls=format!("panel-{}", which.key())
                tabindex=move || if selected() { "0" } else { "-1" }
                on:click=move |_| open(tab, which)
            >
                {which.label()}
            </button>
        }
    };
    view! {
        <nav class="tabs" role="tablist" aria-label="Pages" on:keydown=on_key>
            {button(Tab::Dashboard)}
            {button(Tab::Lab)}
            <Show when=fleet_on>
                {button(Tab::Fleet)}
            </Show>
            {button(Tab::Alerts)}
            {button(Tab::Usage)}
            {button(Tab::Jobs)}
            <Show when=move || session.has(Role::Admin)>
                {button(Tab::Audit)}
            </Show>
        </nav>
    }
}

/// Shows `which` and names it in the URL.
fn open(tab: RwSignal<Tab>, which: Tab) {
    tab.set(which);
    let _ = window().location().set_hash(which.key());
}

/// Moves the keyboard focus to `which`'s tab button.
fn focus_tab(which: Tab) {
    let button = document().get_element_by_id(&format!("tab-{}", which.key()));
    if let Some(button) = button.and_then(|b| b.dyn_into::<web_sys::HtmlElement>().ok()) {
        let _ = button.focus();
    }
}

/// The tab an arrow, Home or End `key` moves to from `current` among the `shown` tabs, in their
/// order (Left and Right wrap around); `None` for any other key.
fn tab_after_key(shown: &[Tab], current: Tab, key: &str) -> Option<Tab> {
    let at = shown.iter().position(|t| *t == current).unwrap_or(0);
    let last = shown.len().checked_sub(1)?;
    let to = match key {
        "ArrowRight" => {
            if at == last {
                0
            } else {
                at + 1
            }
        }
        "ArrowLeft" => {
            if at == 0 {
                last
            } else {
                at - 1
            }
        }
        "Home" => 0,
        "End" => last,
        _ => return None,
    };
    shown.get(to).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrows_wrap_and_home_end_jump() {
        let shown = [Tab::Dashboard, Tab::Lab, Tab::Alerts, Tab::Usage];
        assert_eq!(tab_after_key(&shown, Tab::Dashboard, "ArrowRight"), Some(Tab::Lab));
        assert_eq!(tab_after_key(&shown, Tab::Usage, "ArrowRight"), Some(Tab::Dashboard));
        assert_eq!(tab_after_key(&shown, Tab::Dashboard, "ArrowLeft"), Some(Tab::Usage));
        assert_eq!(tab_after_key(&shown, Tab::Alerts, "ArrowLeft"), Some(Tab::Lab));
        assert_eq!(tab_after_key(&shown, Tab::Alerts, "Home"), Some(Tab::Dashboard));
        assert_eq!(tab_after_key(&shown, Tab::Lab, "End"), Some(Tab::Usage));
        assert_eq!(tab_after_key(&shown, Tab::Lab, "Enter"), None);
        assert_eq!(tab_after_key(&[], Tab::Lab, "End"), None);
    }
}

/// `#alerts-badge`: the firing alerts nobody silenced, by severity ("2 critical · 8 warning"),
/// coloured by the worst, linking to the Alerts tab; hidden while none fire unsilenced.
#[component]
fn AlertsBadge(tab: RwSignal<Tab>) -> impl IntoView {
    let alerts = expect_context::<Alerts>();
    let badge = Memo::new(move |_| alerts.state.with(|s| s.badge()));
    let worst = move || badge.get().worst().map_or("none", |s| s.as_str());
    view! {
        <Show when=move || { badge.get().count() > 0 }>
            <a
                id="alerts-badge"
                href="#alerts"
                class=move || format!("alerts-badge {}", badge.get().class())
                aria-label=move || badge.get().label()
                title=move || badge.get().label()
                data-count=move || badge.get().count()
                data-critical=move || badge.get().counts.critical
                data-warning=move || badge.get().counts.warning
                data-silenced=move || badge.get().counts.silenced
                data-severity=worst
                on:click=move |_| tab.set(Tab::Alerts)
            >
                {move || {
                    badge
                        .get()
                        .parts()
                        .into_iter()
                        .enumerate()
                        .map(|(i, (severity, words))| {
                            view! {
                                {(i > 0).then_some(view! { <span class="alerts-badge-sep" aria-hidden="true">"·"</span> })}
                                <span
                                    class=format!("alerts-badge-part {}", severity_class(Some(severity)))
                                    data-severity=severity.as_str()
                                    aria-hidden="true"
                                >
                                    {words}
                                </span>
                            }
                        })
                        .collect_view()
                }}
            </a>
        </Show>
    }
}

/// Keeps the browser tab's title at "(2) gpudash — host": the firing alerts nobody silenced.
fn follow_title(host: Memo<Option<HostInfo>>) {
    let alerts = expect_context::<Alerts>();
    Effect::new(move |_| {
        let firing = alerts.state.with(|s| s.badge().count());
        let title = host.with(|h| page_title(firing, h.as_ref().map(|h| h.hostname.as_str())));
        document().set_title(&title);
    });
}

/// `#whoami` with `#logout`, or `#login-open` and its form, where the server has tokens.
#[component]
fn WhoAmI() -> impl IntoView {
    let session = expect_context::<Session>();
    let open = RwSignal::new(false);
    let auth_enabled = move || session.me.with(|m| m.as_ref().is_some_and(|m| m.auth_enabled));
    let signed_in = move || session.me.with(|m| m.as_ref().is_some_and(|m| !m.anonymous));
    let who = move || {
        session.me.with(|m| {
            let m = m.as_ref()?;
            Some(format!("{} ({})", m.user.as_deref()?, m.role?.name()))
        })
    };
    view! {
        <Show when=move || session.read_only()>
            <span id="read-only" class="read-only-badge" title="Started with --read-only: no runs, cache trims, silences, signals or bookings, whatever the role">
                "read-only"
            </span>
        </Show>
        <Show when=auth_enabled>
            <Show
                when=signed_in
                fallback=move || view! {
                    <Show when=move || session.can_view() == Some(true)>
                        <div class="login-corner">
                            <button id="login-open" type="button" class="small-button" on:click=move |_| open.update(|o| *o = !*o)>
                                "Log in"
                            </button>
                            <Show when=move || open.get()>
                                <div class="login-popover">
                                    <LoginForm on_done=Callback::new(move |()| open.set(false)) />
                                </div>
                            </Show>
                        </div>
                    </Show>
                }
            >
                <span class="whoami">
                    <span id="whoami">{who}</span>
                    {move || match session.me.with(|m| m.as_ref().map(|m| (m.by_proxy, m.sign_out.clone()))) {
                        // The auth proxy signed them in: its sign-out ends that, if the server names one.
                        Some((true, Some(url))) => view! {
                            <a id="logout" class="small-button" href=url rel="external">"Log out"</a>
                        }.into_any(),
                        Some((true, None)) => ().into_any(),
                        _ => view! {
                            <button id="logout" type="button" class="small-button" on:click=move |_| session.logout()>
                                "Log out"
                            </button>
                        }.into_any(),
                    }}
                </span>
            </Show>
        </Show>
    }
}

/// `#conn-status`: exactly "live", "connecting" or "reconnecting", colored by class.
#[component]
fn ConnectionBadge(status: ReadSignal<ConnectionStatus>) -> impl IntoView {
    let label = move || status.get().label();
    view! {
        <span class="conn" title="Connection to the gpudash server">
            <span class=move || format!("conn-dot conn-{}", label()) aria-hidden="true"></span>
            <span id="conn-status" class=move || format!("conn-status conn-{}", label()) aria-live="polite">
                {label}
            </span>
        </span>
    }
}

/// `#theme-toggle`: flips between dark and light and remembers the choice.
#[component]
fn ThemeToggle(theme: ThemeControl) -> impl IntoView {
    let next = move || theme.theme.get().toggled();
    let title = move || match next() {
        Theme::Dark => "Switch to dark theme",
        Theme::Light => "Switch to light theme",
    };
    view! {
        <button
            id="theme-toggle"
            type="button"
            class="theme-toggle"
            title=title
            aria-label=title
            on:click=move |_| theme.toggle()
        >
            {move || match next() {
                Theme::Dark => "☾ dark",
                Theme::Light => "☀ light",
            }}
        </button>
    }
}

/// Whether the server answers `/api/fleet` (the header shows `#tab-fleet` then).
#[derive(Debug, Clone, Copy)]
pub struct FleetTab(pub ReadSignal<bool>);
