//! The Fleet tab's tables across hosts (`GET /api/fleet/owners?range=24h`): hosts with a free GPU
//! now (reservations honoured, a link to each host's gpudash), owners holding GPUs idle, and
//! usage per owner over the last 24 hours summed across hosts. Refreshed every 15 s while shown.

use std::time::Duration;

use leptos::{prelude::*, task::spawn_local};
use shared::fleet_owners::FleetOwners;
use shared::units::{format_bytes, three_digits};

use crate::{
    components::format,
    hooks::{api::get_json, poll::use_poll},
    pages::Tab,
};

const PERIOD: Duration = Duration::from_secs(15);

#[component]
pub fn FleetOwnersTables() -> impl IntoView {
    let tab = expect_context::<ReadSignal<Tab>>();
    let owners = RwSignal::new(None::<FleetOwners>);
    let load = move || {
        spawn_local(async move {
            if let Ok(answer) = get_json::<FleetOwners>("/api/fleet/owners?range=24h").await {
                owners.try_set(Some(answer));
            }
        });
    };
    use_poll(Memo::new(move |_| tab.get() == Tab::Fleet), PERIOD, load);
    let free = move || {
        owners.with(|o| {
            o.iter()
                .flat_map(|o| &o.free)
                .map(|h| {
                    let name = h.hostname.clone();
                    let host = match &h.url {
                        Some(url) => view! { <a href=url.clone() title=h.instance.clone()>{name}</a> }.into_any(),
                        None => view! { <span title=h.instance.clone()>{name}</span> }.into_any(),
                    };
                    view! {
                        <tr class="fleet-free-host" data-host=h.hostname.clone()>
                            <td>{host}</td>
                            <td>{format::indexes(&h.gpus)}</td>
                            <td>{h.models.join(", ")}</td>
                        </tr>
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    let idle = move || {
        owners.with(|o| {
            o.iter()
                .flat_map(|o| &o.idle)
                .map(|h| {
                    view! {
                        <tr class="fleet-idle-owner" data-owner=h.owner.clone()>
                            <td>{h.owner.clone()}</td>
                            <td>{format_bytes(h.memory_bytes)}</td>
                            <td>{h.gpus}</td>
                            <td>{h.hosts}</td>
                            <td>{format::duration(h.longest_idle_s * 1000)}</td>
                        </tr>
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    let usage = move || {
        owners.with(|o| {
            o.iter()
                .flat_map(|o| &o.usage)
                .map(|u| {
                    view! {
                        <tr class="fleet-usage-owner" data-owner=u.owner.clone()>
                            <td>{u.owner.clone()}</td>
                            <td>{three_digits(u.gpu_seconds / 3600.0)}</td>
                            <td>{three_digits(u.memory_gib_seconds / 3600.0)}</td>
                            <td>{three_digits(u.idle_gib_seconds / 3600.0)}</td>
                            <td>{three_digits(u.energy_joules / 3.6e6)}</td>
                            <td>{u.hosts}</td>
                        </tr>
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    let error = move || owners.with(|o| o.as_ref().and_then(|o| o.error.clone()));
    view! {
        <section class="fleet-owners" aria-label="Across hosts">
            <Show when=move || error().is_some()>
                <p class="notice notice-warn">{move || format!("Part of this is missing: {}", error().unwrap_or_default())}</p>
            </Show>
            <h3 class="section-title">"Free now"</h3>
            <div class="table-scroll">
                <table id="fleet-free-table" class="fleet-table">
                    <thead><tr><th>"Host"</th><th>"Free GPUs"</th><th>"Model"</th></tr></thead>
                    <tbody>{free}</tbody>
                </table>
            </div>
            <h3 class="section-title">"Held idle, per owner"</h3>
            <div class="table-scroll">
                <table id="fleet-idle-table" class="fleet-table">
                    <thead><tr><th>"Owner"</th><th>"Memory"</th><th>"GPUs"</th><th>"Hosts"</th><th>"Longest"</th></tr></thead>
                    <tbody>{idle}</tbody>
                </table>
            </div>
            <h3 class="section-title">"Usage, last 24 h, all hosts"</h3>
            <div class="table-scroll">
                <table id="fleet-usage-table" class="fleet-table">
                    <thead>
                        <tr>
                            <th>"Owner"</th>
                            <th>"GPU-hours"</th>
                            <th>"GiB-hours"</th>
                            <th>"Idle GiB-hours"</th>
                            <th>"kWh"</th>
                            <th>"Hosts"</th>
                        </tr>
                    </thead>
                    <tbody>{usage}</tbody>
                </table>
            </div>
        </section>
    }
}
