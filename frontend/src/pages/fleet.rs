//! The Fleet tab: every host the server's Prometheus scrapes, one line each with its counts
//! (`GET /api/fleet?gpus=none`: small at a thousand hosts); a host's GPUs load when it is opened
//! (`GET /api/fleet/host/{instance}`), and a filter (host, model, user) lists the GPUs that pass
//! (`GET /api/fleet?host=…`), free ones first. Refreshed every 5 s while shown.

use std::collections::BTreeMap;
use std::time::Duration;

use leptos::{html, prelude::*, task::spawn_local};
use shared::{
    activity::GpuState,
    fleet::{FleetFilter, FleetGpu, FleetNode, FleetResponse},
    units::{format_bytes, or_na},
};

use crate::{
    components::format,
    hooks::{api::get_json, poll::use_poll},
    pages::Tab,
};

/// How often the fleet is asked for while the tab is shown (the server caches answers 5 s).
const FLEET_PERIOD: Duration = Duration::from_secs(5);

/// Asks `/api/fleet` once (hosts only): true unless the server answers 503 (no `--fleet-prometheus`).
pub async fn fleet_configured() -> bool {
    match get_json::<FleetResponse>("/api/fleet?gpus=none").await {
        Ok(_) => true,
        Err(failure) => failure.status != 503 && failure.status != 0 && failure.status != 404,
    }
}

/// What the page asks for: hosts only without a filter, else the GPUs that pass.
fn fleet_url(filter: &FleetFilter) -> String {
    if filter.is_empty() {
        "/api/fleet?gpus=none".to_owned()
    } else {
        format!("/api/fleet?{}", serde_urlencoded::to_string(filter).unwrap_or_default())
    }
}

/// `/api/fleet/host/{instance}`, the instance escaped for a path segment.
fn host_url(instance: &str) -> String {
    format!("/api/fleet/host/{}", String::from(js_sys::encode_uri_component(instance)))
}

#[component]
pub fn FleetPage() -> impl IntoView {
    let tab = expect_context::<ReadSignal<Tab>>();
    let fleet = RwSignal::new(None::<FleetResponse>);
    let failed = RwSignal::new(None::<String>);
    // Opened hosts and their GPUs (None while loading).
    let opened = RwSignal::new(BTreeMap::<String, Option<FleetResponse>>::new());
    let started = StoredValue::new(0.0f64);
    let table_ref = NodeRef::<html::Table>::new();
    let host = RwSignal::new(String::new());
    let model = RwSignal::new(String::new());
    let user = RwSignal::new(String::new());
    let filter = Memo::new(move |_| {
        let some = |s: String| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        FleetFilter { host: some(host.get()), model: some(model.get()), user: some(user.get()), free: false }
    });
    let load_host = move |instance: String| {
        spawn_local(async move {
            let answer = get_json::<FleetResponse>(&host_url(&instance)).await.ok();
            opened.try_update(|o| {
                if let Some(entry) = o.get_mut(&instance) {
                    *entry = answer;
                }
            });
        });
    };
    let load = move || {
        let wanted = filter.get_untracked();
        spawn_local(async move {
            let answer = get_json::<FleetResponse>(&fleet_url(&wanted)).await;
            // An answer to a filter since changed is dropped: the newer one is on its way.
            if filter.try_get_untracked().is_none_or(|now| now != wanted) {
                return;
            }
            match answer {
                Ok(answer) => {
                    started.try_set_value(now());
                    fleet.try_set(Some(answer));
                    failed.try_set(None);
                    // Effects flush in a microtask; a zero timeout runs once the rows are in the DOM.
                    set_timeout(
                        move || {
                            if let (Some(table), Some(t0)) = (table_ref.get_untracked(), started.try_get_value()) {
                                let _ = table.set_attribute("data-render-ms", &format!("{:.1}", now() - t0));
                            }
                        },
                        Duration::ZERO,
                    );
                }
                Err(failure) => drop(failed.try_set(Some(failure.message))),
            }
        });
        opened.with_untracked(|o| o.keys().cloned().for_each(load_host));
    };
    use_poll(Memo::new(move |_| tab.get() == Tab::Fleet), FLEET_PERIOD, load);
    // A new filter asks at once rather than at the next poll.
    Effect::new(move |was: Option<FleetFilter>| {
        let now = filter.get();
        if was.is_some_and(|was| was != now) {
            load();
        }
        now
    });
    let toggle = move |instance: String| {
        let open = opened.with_untracked(|o| o.contains_key(&instance));
        opened.update(|o| {
            if open {
                o.remove(&instance);
            } else {
                o.insert(instance.clone(), None);
            }
        });
        if !open {
            load_host(instance);
        }
    };

    let error = move || failed.get().or_else(|| fleet.with(|f| f.as_ref().and_then(|f| f.error.clone())));
    let summary = move || {
        fleet.with(|f| {
            f.as_ref().map(|f| {
                let s = f.summary;
                format!(
                    "{} hosts ({} stale) · {} GPUs: {} free, {} busy, {} held idle, {} reserved, {} lost · {} · queried in {} ms",
                    s.nodes, s.stale_nodes, s.gpus, s.free_gpus, s.busy_gpus, s.idle_gpus, s.reserved_gpus,
                    s.lost_gpus, f.prometheus, f.query_ms
                )
            })
        })
    };
    let rows = move || {
        let filtered = !filter.with(FleetFilter::is_empty);
        fleet.with(|f| {
            let Some(f) = f.as_ref() else { return Vec::new() };
            if filtered {
                let gpus = f.gpus.iter().map(|g| fleet_row(g, node_of(&f.nodes, g)));
                // Down hosts with no GPU figures get a row of their own rather than none.
                let down = f.nodes.iter().filter(|n| n.gpus == 0).map(down_row);
                return gpus.chain(down).collect::<Vec<_>>();
            }
            opened.with(|opened| host_rows(f, opened, toggle))
        })
    };
    let shown = move || {
        fleet.with(|f| {
            f.as_ref().map(|f| {
                if filter.with(FleetFilter::is_empty) {
                    format!("{} hosts", f.nodes.len())
                } else {
                    format!("{} GPUs shown", f.gpus.len())
                }
            })
        })
    };

    view! {
        <main class="fleet-page">
            <div class="section-head">
                <h2 class="section-title">"Fleet"</h2>
                <span id="fleet-summary" class="fleet-summary">{summary}</span>
            </div>
            <Show when=move || error().is_some()>
                <p id="fleet-error" class="notice notice-warn" role="alert">
                    {move || format!("Prometheus unreachable: {}", error().unwrap_or_default())}
                </p>
            </Show>
            <Show when=move || fleet.with(|f| f.as_ref().is_some_and(|f| !f.warnings.is_empty()))>
                <p id="fleet-partial" class="notice notice-warn" role="status">
                    {move || fleet.with(|f| f.as_ref().map(|f| format!("A partial answer, hosts may be missing: {}", f.warnings.join("; "))))}
                </p>
            </Show>
            <div class="fleet-filters">
                <FilterInput id="fleet-filter-host" label="Host" value=host />
                <FilterInput id="fleet-filter-model" label="Model" value=model />
                <FilterInput id="fleet-filter-user" label="User" value=user />
                <span class="fleet-count">{shown}</span>
            </div>
            <div class="table-scroll">
                <table id="fleet-table" class="fleet-table" node_ref=table_ref>
                    <thead>
                        <tr>
                            <th>"Host"</th>
                            <th>"GPU"</th>
                            <th>"Model"</th>
                            <th>"Util"</th>
                            <th>"Memory"</th>
                            <th>"Temp"</th>
                            <th>"Power"</th>
                            <th>"Users"</th>
                            <th>"State"</th>
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
            <Show when=move || fleet.with(Option::is_none) && failed.with(Option::is_none)>
                <p class="placeholder">"Asking Prometheus…"</p>
            </Show>
            <crate::pages::fleet_owners::FleetOwnersTables />
        </main>
    }
}

/// Every host's line, each opened host followed by its GPUs (or "Loading…").
fn host_rows(
    fleet: &FleetResponse,
    opened: &BTreeMap<String, Option<FleetResponse>>,
    toggle: impl Fn(String) + Copy + 'static,
) -> Vec<AnyView> {
    let mut rows = Vec::new();
    for node in &fleet.nodes {
        let open = opened.get(&node.instance);
        rows.push(host_row(node, open.is_some(), toggle));
        match open {
            Some(Some(answer)) => rows.extend(answer.gpus.iter().map(|g| fleet_row(g, node_of(&answer.nodes, g)))),
            Some(None) => {
                rows.push(view! { <tr class="fleet-loading"><td colspan="9">"Loading…"</td></tr> }.into_any());
            }
            None => {}
        }
    }
    rows
}

/// `tr.fleet-host-row` of one host: its counts and owners; its button opens its GPUs.
fn host_row(node: &FleetNode, open: bool, toggle: impl Fn(String) + Copy + 'static) -> AnyView {
    let instance = node.instance.clone();
    let name = node.hostname.clone();
    let host_cell = match &node.url {
        Some(url) => view! { <a href=url.clone() title=node.instance.clone()>{name}</a> }.into_any(),
        None => view! { <span title=node.instance.clone()>{name}</span> }.into_any(),
    };
    let counts = [
        (node.free_gpus, GpuState::Free),
        (node.busy_gpus, GpuState::Busy),
        (node.idle_gpus, GpuState::HeldIdle),
        (node.reserved_gpus, GpuState::Reserved),
        (node.lost_gpus, GpuState::Lost),
        (node.stale_gpus, GpuState::Stale),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {}", what.as_str()))
    .collect::<Vec<_>>()
    .join(", ");
    let down = node.up == Some(false) || (node.stale && node.gpus == 0);
    let state = if down {
        down_text(node)
    } else if node.stale {
        "stale".to_owned()
    } else {
        counts
    };
    let owners = if node.owners.is_empty() { "—".to_owned() } else { node.owners.join(", ") };
    let has_free = node.free_gpus > 0;
    view! {
        <tr
            class="fleet-host-row"
            class:fleet-down=down
            class:fleet-stale=node.stale
            class:fleet-free=has_free
            data-host=node.hostname.clone()
            data-gpus=node.gpus
            data-free=node.free_gpus
        >
            <td class="fleet-host">
                <button
                    class="fleet-open"
                    aria-expanded=if open { "true" } else { "false" }
                    aria-label=format!("{} GPUs of {}", if open { "Hide" } else { "Show" }, node.hostname)
                    on:click=move |_| toggle(instance.clone())
                >
                    {if open { "▾" } else { "▸" }}
                </button>
                " "
                {host_cell}
            </td>
            <td class="fleet-gpu">{node.gpus}</td>
            <td class="fleet-model" colspan="5"></td>
            <td class="fleet-users">{owners}</td>
            <td class="fleet-state">{state}</td>
        </tr>
    }
    .into_any()
}

#[component]
fn FilterInput(id: &'static str, label: &'static str, value: RwSignal<String>) -> impl IntoView {
    view! {
        <label class="fleet-filter">
            {label}
            <input id=id type="search" placeholder="any" prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev)) />
        </label>
    }
}

fn node_of<'a>(nodes: &'a [FleetNode], gpu: &FleetGpu) -> Option<&'a FleetNode> {
    nodes.iter().find(|n| n.instance == gpu.instance)
}

/// `tr.fleet-row` (and `.fleet-stale`, `.fleet-free`, `.fleet-lost`, `.fleet-unhealthy`) of one GPU.
fn fleet_row(gpu: &FleetGpu, node: Option<&FleetNode>) -> AnyView {
    let link = node.and_then(|n| n.url.clone());
    let host = gpu.hostname.clone();
    let host_cell = match link {
        Some(url) => view! { <a href=url title=gpu.instance.clone()>{host}</a> }.into_any(),
        None => view! { <span title=gpu.instance.clone()>{host}</span> }.into_any(),
    };
    let memory = match (gpu.memory_used, gpu.memory_total) {
        (None, None) => format::na(),
        (used, total) => format!("{} / {}", or_na(used, format_bytes), or_na(total, format_bytes)),
    };
    let users = match &gpu.users {
        None => format::na(),
        Some(users) if users.is_empty() => "—".to_owned(),
        Some(users) => users
            .iter()
            .map(|u| match u.memory {
                Some(bytes) => format!("{} ({})", u.user, format_bytes(bytes)),
                None => u.user.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
    };
    // The state its host's line counts it as (`FleetGpu::state`), said with what the row knows more.
    let state = match (gpu.state(), node.filter(|n| n.up == Some(false)), &gpu.unhealthy) {
        (GpuState::Lost, ..) => GpuState::Lost.as_str().to_owned(),
        (_, Some(down), _) => down_text(down),
        (GpuState::Stale, ..) => match node.and_then(|n| n.last_seen_ms) {
            Some(ms) => format!("stale since {}", format::stamp_seconds(ms as f64)),
            None => GpuState::Stale.as_str().to_owned(),
        },
        (_, _, Some(reason)) => format!("unhealthy: {reason}"),
        (GpuState::Reserved, ..) => format!("reserved by {}", gpu.reserved_by.as_deref().unwrap_or_default()),
        (state, ..) => state.as_str().to_owned(),
    };
    view! {
        <tr
            class="fleet-row"
            class:fleet-stale=gpu.stale
            class:fleet-free=gpu.free
            class:fleet-lost=gpu.lost
            class:fleet-unhealthy=gpu.unhealthy.is_some()
            data-host=gpu.hostname.clone()
            data-gpu=gpu.gpu
        >
            <td class="fleet-host">{host_cell}</td>
            <td class="fleet-gpu">{gpu.gpu}</td>
            <td class="fleet-model">{gpu.model.clone().unwrap_or_else(format::na)}</td>
            <td class="fleet-util">{or_na(gpu.gpu_util, |u| format!("{u:.0}%"))}</td>
            <td class="fleet-memory">{memory}</td>
            <td class="fleet-temp">{or_na(gpu.temperature_c, |c| format!("{c:.0} °C"))}</td>
            <td class="fleet-power">{or_na(gpu.power_w, |w| format!("{w:.0} W"))}</td>
            <td class="fleet-users">{users}</td>
            <td class="fleet-state">{state}</td>
        </tr>
    }
    .into_any()
}

/// "down since 14:02:11: connection refused", "down (never scraped): …".
fn down_text(node: &FleetNode) -> String {
    let since = node.last_seen_ms.map_or_else(
        || "down (no good scrape in the window)".to_owned(),
        |ms| format!("down since {}", format::stamp(ms as f64)),
    );
    match &node.last_error {
        Some(error) => format!("{since}: {error}"),
        None => since,
    }
}

/// `tr.fleet-row.fleet-down` of a host whose target is down and whose GPUs Prometheus never saw in the window.
fn down_row(node: &FleetNode) -> AnyView {
    view! {
        <tr class="fleet-row fleet-stale fleet-down" data-host=node.hostname.clone()>
            <td class="fleet-host"><span title=node.instance.clone()>{node.hostname.clone()}</span></td>
            <td class="fleet-gpu">"—"</td>
            <td class="fleet-model" colspan="6">"no GPU figures: Prometheus cannot scrape this host"</td>
            <td class="fleet-state">{down_text(node)}</td>
        </tr>
    }
    .into_any()
}

fn now() -> f64 {
    window().performance().map_or(0.0, |p| p.now())
}
