//! `#who-uses-what`: per user, the GPUs and memory they hold, and which GPUs are free.

use leptos::prelude::*;
use shared::{
    activity::{GpuState, gpu_state},
    processes::{UserUsage, usage_by_user},
    reservations::free_note,
    units::format_bytes,
    usability::UnhealthyDevice,
};

use crate::{
    components::{format, processes::use_show_processes},
    hooks::reservations::Reservations,
    state::{DashboardState, process_filter::ProcessFilter},
};

/// The overview a team reads first: who holds which GPUs, and which are free.
#[component]
pub fn WhoUsesWhat(state: ReadSignal<DashboardState>) -> impl IntoView {
    let users = Memo::new(move |_| state.with(|s| usage_by_user(&s.processes)));
    // The server left out who runs them: say so, rather than "no processes".
    let hidden = Memo::new(move |_| state.with(|s| s.processes.iter().any(|p| p.redacted)));
    // "Free" leaves out GPUs reserved now, by the rule the server applies.
    let reservations = use_context::<Reservations>();
    let free = Memo::new(move |_| {
        let (list, now) = reservations.map(|r| r.list.with(|l| (l.reservations.clone(), l.now_ms))).unwrap_or_default();
        state.with(|s| s.free_devices(&list, now))
    });
    let held_idle = Memo::new(move |_| {
        state.with(|s| {
            let latest = |i: u32| s.device(i).and_then(|d| d.latest.as_ref());
            s.devices
                .iter()
                .map(|d| d.info.index)
                .filter(|&i| gpu_state(i, latest(i), &s.processes) == GpuState::HeldIdle)
                .collect::<Vec<_>>()
        })
    });
    // Beside "Free:", what keeps a GPU out of it that no process explains (lost ones have their own line).
    let unhealthy = Memo::new(move |_| {
        state.with(|s| {
            s.unhealthy_devices().into_iter().filter(|u| s.lost_reason(u.index).is_none()).collect::<Vec<_>>()
        })
    });
    let lost = Memo::new(move |_| {
        state.with(|s| {
            s.devices.iter().map(|d| d.info.index).filter(|&i| s.lost_reason(i).is_some()).collect::<Vec<_>>()
        })
    });

    view! {
        <section id="who-uses-what" class="section usage" aria-labelledby="usage-title">
            <h2 id="usage-title" class="section-title">"Who uses what"</h2>
            <div class="usage-body">
                <Show when=move || hidden.get()>
                    <p id="usage-hidden" class="usage-nobody">
                        "Sign in to see who uses which GPU."
                    </p>
                </Show>
                <Show
                    when=move || !users.with(Vec::is_empty)
                    fallback=move || {
                        (!hidden.get())
                            .then(|| {
                                view! {
                                    <p class="usage-nobody">
                                        "No GPU processes right now. Each user of a GPU appears here with their GPUs and memory."
                                    </p>
                                }
                            })
                    }
                >
                    <div class="table-scroll">
                        <table class="usage-table">
                            <thead>
                                <tr>
                                    <th scope="col">"User"</th>
                                    <th scope="col">"GPUs"</th>
                                    <th scope="col">"Memory"</th>
                                    <th scope="col">"Processes"</th>
                                    <th scope="col" title="Memory held by processes flagged idle">"Held idle"</th>
                                </tr>
                            </thead>
                            <tbody>
                                // Keyed by user: a row is built once, and at each tick only its changed
                                // cells are written (rebuilding every row at every tick cost style and layout).
                                <For each=move || users.with(|u| u.iter().map(|u| u.user.clone()).collect::<Vec<_>>())
                                    key=|user| user.clone() let:user>
                                    <UserRow users=users user=user />
                                </For>
                            </tbody>
                        </table>
                    </div>
                </Show>
                <p id="free-gpus" class="free-gpus" class:none-free=move || free.with(Vec::is_empty)>
                    "Free: "
                    // Keyed by GPU: as GPUs come free and get taken, only those links come and go.
                    <Show when=move || !free.with(Vec::is_empty) fallback=|| "none">
                        <For each=move || free.get() key=|index| *index let:index>
                            {move || free.with(|f| f.first() != Some(&index)).then_some(", ")}
                            <FreeGpuLink index=index reservations=reservations />
                        </For>
                    </Show>
                </p>
                <Show when=move || !unhealthy.with(Vec::is_empty)>
                    <p id="unhealthy-gpus" class="unhealthy-gpus">
                        "Unhealthy: "
                        {move || {
                            unhealthy
                                .get()
                                .into_iter()
                                .enumerate()
                                .map(|(i, u)| {
                                    let title = format!("Not free: {}", u.reason);
                                    view! {
                                        {(i > 0).then_some(", ")}
                                        <span class="unhealthy-gpu" data-index=u.index title=title>
                                            {unhealthy_entry(&u)}
                                        </span>
                                    }
                                })
                                .collect_view()
                        }}
                    </p>
                </Show>
                <Show when=move || !held_idle.with(Vec::is_empty)>
                    <p id="held-idle-gpus" class="held-idle-gpus" title="Memory held by processes that compute nothing">
                        {move || format!("Held idle: {}", gpu_list(&held_idle.get()))}
                    </p>
                </Show>
                <Show when=move || !lost.with(Vec::is_empty)>
                    <p id="lost-gpus" class="lost-gpus">{move || format!("Lost: {}", gpu_list(&lost.get()))}</p>
                </Show>
            </div>
        </section>
    }
}

/// `tr.user-row`: one user's GPUs, memory, processes and idle memory, read from `users` at each change.
#[component]
fn UserRow(users: Memo<Vec<UserUsage>>, user: String) -> impl IntoView {
    let name = user.clone();
    let row = Memo::new(move |_| users.with(|all| all.iter().find(|u| u.user == name).cloned()));
    let cell = move |text: fn(&UserUsage) -> String| move || row.with(|r| r.as_ref().map(text).unwrap_or_default());
    view! {
        <tr class="user-row">
            <td class="usage-user">
                <UserLink user=user />
            </td>
            <td class="usage-gpus">{cell(|u| format::indexes(&u.devices))}</td>
            <td class="usage-memory">{cell(|u| format_bytes(u.memory))}</td>
            <td class="usage-processes">{cell(|u| u.processes.to_string())}</td>
            <td class="usage-idle">
                {cell(|u| if u.idle_memory > 0 { format_bytes(u.idle_memory) } else { "—".to_owned() })}
            </td>
        </tr>
    }
}

/// A user's name that filters the process table to their processes.
#[component]
fn UserLink(user: String) -> impl IntoView {
    let title = format!("Show {user}'s processes");
    let filter = ProcessFilter::user(&user);
    let show_processes = use_show_processes();
    view! {
        <button type="button" class="link-button filter-user" title=title on:click=move |_| show_processes(filter.clone())>
            {user}
        </button>
    }
}

/// A free GPU: opens its card, where Reserve and Run in the Lab are; "(reserved from 14:00)"
/// after it when a booking is near.
#[component]
fn FreeGpuLink(index: u32, reservations: Option<Reservations>) -> impl IntoView {
    let view = use_context::<crate::hooks::url::ViewSignals>();
    let note = Memo::new(move |_| {
        reservations.and_then(|r| r.list.with(|l| free_note(&l.reservations, index, l.now_ms, format::utc_offset())))
    });
    view! {
        <button
            type="button"
            class="link-button filter-gpu open-card"
            data-index=index
            title=format!("Open GPU {index}'s card: reserve it or run in the Lab")
            on:click=move |_| view.into_iter().for_each(|v| v.open_card(index))
        >
            {format!("GPU {index}")}
        </button>
        {move || note.get().map(|note| view! { <span class="free-soon" data-index=index>{format!(" ({note})")}</span> })}
    }
}

/// "GPU 1 (XID 79)".
fn unhealthy_entry(device: &UnhealthyDevice) -> String {
    format!("GPU {} ({})", device.index, device.reason)
}

/// "GPU 1, GPU 2".
fn gpu_list(devices: &[u32]) -> String {
    devices.iter().map(|i| format!("GPU {i}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_read_as_a_list() {
        assert_eq!(gpu_list(&[1, 2]), "GPU 1, GPU 2");
        assert_eq!(gpu_list(&[]), "");
        let unhealthy = UnhealthyDevice { index: 4, reason: "ECC: 2 uncorrected".into() };
        assert_eq!(unhealthy_entry(&unhealthy), "GPU 4 (ECC: 2 uncorrected)");
    }
}
