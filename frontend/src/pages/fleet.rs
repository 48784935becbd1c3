//! The Fleet tab: every host and GPU the server's Prometheus scrapes
//! (`GET /api/fleet`), free GPUs first, filtered in the page by host, model
//! and user, refreshed every 5 s while shown.

use std::time::Duration;

use leptos::{html, prelude::*, task::spawn_local};
use shared::{
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

/// Asks `/api/fleet` once: true unless the server answers 503 (no `--fleet-prometheus`).
pub async fn fleet_configured() -> bool {
    match get_json::<FleetResponse>("/api/fleet").await {
        Ok(_) => true,
        Err(failure) => failure.status != 503 && failure.status != 0 && failure.status != 404,
    }
}

#[component]
pub fn FleetPage() -> impl IntoView {
    let tab = expect_context::<ReadSignal<Tab>>();
    let fleet = RwSignal::new(None::<FleetResponse>);
    let failed = RwSignal::new(None::<String>);
    let started = StoredValue::new(0.0f64);
    let table_ref = NodeRef::<html::Table>::new();
    let load = move || {
        spawn_local(async move {
            match get_json::<FleetResponse>("/api/fleet").await {
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
    };
    use_poll(Memo::new(move |_| tab.get() == Tab::Fleet), FLEET_PERIOD, load);

    let host = RwSignal::new(String::new());
    let model = RwSignal::new(String::new());
    let user = RwSignal::new(String::new());
    let filter = Memo::new(move |_| {
        let some = |s: String| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        FleetFilter { host: some(host.get()), model: some(model.get()), user: some(user.get()), free: false }
    });
    let error = move || failed.get().or_else(|| fleet.with(|f| f.as_ref().and_then(|f| f.error.clone())));
    let summary = move || {
        fleet.with(|f| {
            f.as_ref().map(|f| {
                let s = f.summary;
                format!(
                    "{} nodes ({} stale) · {} GPUs, {} free · {} · queried in {} ms",
                    s.nodes, s.stale_nodes, s.gpus, s.free_gpus, f.prometheus, f.query_ms
                )
            })
        })
    };
    let rows = move || {
        let filter = filter.get();
        fleet.with(|f| {
            let Some(f) = f.as_ref() else { return Vec::new() };
            let gpus = f.gpus.iter().filter(|g| filter.matches(g)).map(|g| fleet_row(g, node_of(f, g)));
            // Down hosts with no GPU figures get a row of their own rather than none.
            let down = f.nodes.iter().filter(|n| n.gpus == 0 && filter.matches_node(n)).map(down_row);
            gpus.chain(down).collect::<Vec<_>>()
        })
    };
    let shown =
        move || fleet.with(|f| f.as_ref().map(|f| f.gpus.iter().filter(|g| filter.with(|x| x.matches(g))).count()));

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
            <div class="fleet-filters">
                <FilterInput id="fleet-filter-host" label="Host" value=host />
                <FilterInput id="fleet-filter-model" label="Model" value=model />
                <FilterInput id="fleet-filter-user" label="User" value=user />
                <span class="fleet-count">{move || shown().map(|n| format!("{n} GPUs shown"))}</span>
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
        </main>
    }
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

fn node_of<'a>(fleet: &'a FleetResponse, gpu: &FleetGpu) -> Option<&'a FleetNode> {
    fleet.nodes.iter().find(|n| n.instance == gpu.instance)
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
    let state = if gpu.lost {
        "lost".to_owned()
    } else if let Some(node) = node.filter(|n| n.up == Some(false)) {
        down_text(node)
    } else if gpu.stale {
        match node.and_then(|n| n.last_seen_ms) {
            Some(ms) => format!("stale since {}", format::time_of_day(ms as f64, true)),
            None => "stale".to_owned(),
        }
    } else if let Some(reason) = &gpu.unhealthy {
        format!("unhealthy: {reason}")
    } else if let Some(holder) = &gpu.reserved_by {
        format!("reserved by {holder}")
    } else if gpu.free {
        "free".to_owned()
    } else {
        "busy".to_owned()
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
