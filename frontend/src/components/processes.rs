//! Who runs what: one process table for every GPU, with a GPU column, sortable by any column,
//! filtered by user and GPU ([`ProcessFilter`], which "Who uses what" sets too), each row's full
//! command line behind a disclosure button.

use std::collections::HashSet;

use leptos::prelude::*;
use shared::{
    processes::{GpuProcess, shorten},
    units::{format_bytes, or_na},
};

use crate::{
    components::activity::idle_text,
    components::format::{self, percent},
    components::process_sort::{Column, SortOrder},
    components::signals::{SignalButtons, SignalControl, SignalPanel},
    state::{DashboardState, process_filter::ProcessFilter},
};

/// Command lines longer than this are cut in the table (the full one opens under the row).
const COMMAND_CHARS: usize = 40;

/// What the table says when no GPU runs a process.
pub const NO_PROCESSES: &str =
    "No GPU processes. Processes using a GPU appear here with their user, memory and command.";

/// What a cell the server left out says (a blank or "?" would read as unknown to the server too).
const REDACTED: &str = "sign in to see";
/// The tooltip of such a cell.
const REDACTED_TITLE: &str = "Who runs what is shown to signed-in viewers";

/// The tooltip of the "SM activity" column.
const SM_ACTIVITY_TITLE: &str = "The GPU's SM activity (GPM): how much of its SMs kernels keep busy. A process is judged \
     idle when this stays below 1% while it holds memory, even if util (NVML) reads high";

/// GPU `index`'s util and SM activity now, for the rows on it.
fn gpu_figures(state: &DashboardState, index: u32) -> GpuFigures {
    let latest = state.device(index).and_then(|d| d.latest.as_ref());
    let activity = latest.and_then(|l| l.activity.as_ref());
    GpuFigures {
        util: latest.and_then(|l| l.gpu_util),
        sm_active: activity.filter(|a| a.unavailable.is_none()).and_then(|a| a.sm_active),
        unavailable: activity.and_then(|a| a.unavailable.clone()),
    }
}

/// What a row shows of its GPU: util, SM activity, or why there is none.
#[derive(Debug, Clone, Default)]
struct GpuFigures {
    util: Option<u32>,
    sm_active: Option<f64>,
    unavailable: Option<String>,
}

/// What a click on a user's name or a GPU calls: sets the process table's filter (where the
/// dashboard provides one) and scrolls the table into view. Called while a component is built
/// (event handlers run outside it, where there is no context to read).
pub fn use_show_processes() -> impl Fn(ProcessFilter) + Copy + 'static {
    let signal = use_context::<RwSignal<ProcessFilter>>();
    move |filter| {
        if let Some(signal) = signal {
            signal.set(filter);
        }
        // Folded on the dashboard of many GPUs: unfolded first.
        if let Some(fold) = document().get_element_by_id("fold-processes") {
            let _ = fold.set_attribute("open", "");
        }
        if let Some(table) = document().get_element_by_id("processes") {
            table.scroll_into_view();
        }
    }
}

/// `#processes`: every GPU's processes in one table with a GPU column, sortable by any column,
/// filtered by user and GPU.
#[component]
pub fn ProcessTable(state: ReadSignal<DashboardState>, filter: RwSignal<ProcessFilter>) -> impl IntoView {
    // The view's order (kept in the URL) where the app provides one.
    let order = use_context::<RwSignal<SortOrder>>().unwrap_or_else(|| RwSignal::new(SortOrder::default()));
    // Rows whose full command line is open, by (GPU, PID): kept across the redraws of every update.
    let expanded = RwSignal::new(HashSet::<(u32, u32)>::new());
    let control = SignalControl::for_table();
    let signals = move || control.filter(|c| c.enabled());
    let all = Memo::new(move |_| state.with(|s| s.processes.clone()));
    let shown = Memo::new(move |_| {
        let mut rows: Vec<GpuProcess> =
            filter.with(|f| all.with(|all| all.iter().filter(|p| f.matches(p)).cloned().collect()));
        order.get().sort(&mut rows);
        rows
    });
    let rows = move || {
        let now = js_sys::Date::now() as u64;
        let signals = signals();
        let open = expanded.get();
        shown
            .get()
            .into_iter()
            .map(|p| {
                let is_open = open.contains(&(p.device, p.pid));
                let gpu = state.with_untracked(|s| gpu_figures(s, p.device));
                view! { <ProcessRow process=p gpu=gpu now_ms=now signals=signals expanded=expanded open=is_open /> }
            })
            .collect_view()
    };
    let columns = move || Column::ALL.len() + 2 + usize::from(signals().is_some());
    let empty_text = move || empty_text(state, &filter.get());
    let count = move || {
        let (shown, all) = (shown.with(Vec::len), all.with(Vec::len));
        if shown == all { format!("{all} processes") } else { format!("{shown} of {all} processes") }
    };

    view! {
        <section id="processes" class="section" aria-labelledby="processes-title" tabindex="-1">
            <h2 id="processes-title" class="section-title">
                "Processes"
                {move || filter.with(ProcessFilter::describe).map(|what| view! { <span class="process-filtered">{format!(" — {what}")}</span> })}
            </h2>
            <ProcessFilters state=state filter=filter count=Signal::derive(count) />
            <div class="table-scroll">
                <table class="process-table" id="process-table">
                    <thead>
                        <tr>
                            <th class="col-expand" scope="col"><span class="visually-hidden">"Full command"</span></th>
                            {Column::ALL
                                .into_iter()
                                .map(|column| view! {
                                    <SortHeader column=column order=order />
                                    {(column == Column::Sm).then(|| view! {
                                        <th class="col-activity" scope="col" title=SM_ACTIVITY_TITLE>"SM activity"</th>
                                    })}
                                })
                                .collect_view()}
                            {move || signals().map(|_| view! { <th class="col-actions" scope="col">"Signal"</th> })}
                        </tr>
                    </thead>
                    <tbody>
                        {rows}
                        <Show when=move || shown.with(Vec::is_empty)>
                            <tr class="empty-row">
                                <td colspan=columns>{empty_text}</td>
                            </tr>
                        </Show>
                    </tbody>
                </table>
            </div>
            {move || signals().map(|control| view! { <SignalPanel control=control /> })}
        </section>
    }
}

/// What an empty table says: what would appear, and why nothing does.
fn empty_text(state: ReadSignal<DashboardState>, filter: &ProcessFilter) -> String {
    if let Some(gpu) = filter.gpu
        && filter.user.is_none()
        && state.with(|s| s.lost_reason(gpu).is_some())
    {
        return format!("GPU {gpu} is lost: its processes cannot be read.");
    }
    match filter.describe() {
        None => NO_PROCESSES.to_owned(),
        Some(what) => format!("No GPU processes of {what}. Clear the filter to see every process."),
    }
}

/// `.process-filters`: the user and GPU selects and "Clear filter".
#[component]
fn ProcessFilters(
    state: ReadSignal<DashboardState>,
    filter: RwSignal<ProcessFilter>,
    count: Signal<String>,
) -> impl IntoView {
    let users = Memo::new(move |_| {
        state.with(|s| {
            let mut users: Vec<String> =
                s.processes.iter().filter(|p| !p.redacted).map(|p| p.user_name().to_owned()).collect();
            shared::order::sort(&mut users);
            users.dedup();
            users
        })
    });
    let gpus = Memo::new(move |_| state.with(|s| s.devices.iter().map(|d| d.info.index).collect::<Vec<_>>()));
    let user_options = move || {
        // A user chosen elsewhere (a link) stays listed even when they have no process now.
        let mut names = users.get();
        if let Some(chosen) = filter.with(|f| f.user.clone())
            && !names.contains(&chosen)
        {
            names.push(chosen);
        }
        names
            .into_iter()
            .map(|name| {
                let selected = filter.with(|f| f.user.as_deref() == Some(name.as_str()));
                let value = name.clone();
                view! { <option value=value selected=selected>{name}</option> }
            })
            .collect_view()
    };
    let gpu_options = move || {
        gpus.get()
            .into_iter()
            .map(|index| {
                let selected = filter.with(|f| f.gpu == Some(index));
                view! { <option value=index.to_string() selected=selected>{format!("GPU {index}")}</option> }
            })
            .collect_view()
    };
    view! {
        <div class="process-filters" role="group" aria-label="Filter the processes">
            <label>
                "User "
                <select
                    id="process-filter-user"
                    prop:value=move || filter.with(|f| f.user.clone().unwrap_or_default())
                    on:change=move |ev| {
                        let value = event_target_value(&ev);
                        filter.update(|f| f.user = (!value.is_empty()).then_some(value));
                    }
                >
                    <option value="" selected=move || filter.with(|f| f.user.is_none())>"everyone"</option>
                    {user_options}
                </select>
            </label>
            <label>
                "GPU "
                <select
                    id="process-filter-gpu"
                    prop:value=move || filter.with(|f| f.gpu.map(|g| g.to_string()).unwrap_or_default())
                    on:change=move |ev| {
                        let value = event_target_value(&ev);
                        filter.update(|f| f.gpu = value.parse().ok());
                    }
                >
                    <option value="" selected=move || filter.with(|f| f.gpu.is_none())>"every GPU"</option>
                    {gpu_options}
                </select>
            </label>
            <button
                type="button"
                id="process-filter-clear"
                class="small-button"
                disabled=move || filter.with(ProcessFilter::is_empty)
                on:click=move |_| filter.set(ProcessFilter::default())
            >
                "Clear filter"
            </button>
            <span class="process-count" role="status">{count}</span>
        </div>
    }
}

#[component]
fn SortHeader(column: Column, order: RwSignal<SortOrder>) -> impl IntoView {
    let sorted = move || order.get().column == column;
    let aria = move || match order.get() {
        o if o.column != column => "none",
        o if o.descending => "descending",
        _ => "ascending",
    };
    let arrow = move || match aria() {
        "descending" => " ▾",
        "ascending" => " ▴",
        _ => "",
    };
    view! {
        <th class=format!("col-{}", column.key()) class:sorted=sorted aria-sort=aria scope="col">
            <button type="button" class="sort-button" data-sort=column.key() title=column.title() on:click=move |_| order.update(|o| *o = o.clicked(column))>
                {column.label()}
                <span class="sort-arrow" aria-hidden="true">{arrow}</span>
            </button>
        </th>
    }
}

/// The button that opens or closes a row's full command line.
#[component]
fn ExpandButton(process: GpuProcess, expanded: RwSignal<HashSet<(u32, u32)>>, open: bool) -> impl IntoView {
    let key = (process.device, process.pid);
    let label = if open { "Hide the full command" } else { "Show the full command" };
    view! {
        <td class="expand">
            <button
                type="button"
                class="expand-button"
                aria-expanded=open.to_string()
                aria-controls=command_row_id(key)
                aria-label=format!("{label} of PID {}", process.pid)
                title=label
                on:click=move |_| expanded.update(|open| {
                    if !open.remove(&key) {
                        open.insert(key);
                    }
                })
            >
                {if open { "▾" } else { "▸" }}
            </button>
        </td>
    }
}

fn command_row_id((device, pid): (u32, u32)) -> String {
    format!("command-{device}-{pid}")
}

#[component]
fn ProcessRow(
    process: GpuProcess,
    gpu: GpuFigures,
    now_ms: u64,
    signals: Option<SignalControl>,
    expanded: RwSignal<HashSet<(u32, u32)>>,
    open: bool,
) -> impl IntoView {
    if process.redacted {
        return view! { <RedactedRow process=process now_ms=now_ms signals=signals.is_some() /> }.into_any();
    }
    let actions = signals.map(|control| view! { <SignalButtons control=control process=process.clone() /> });
    let command = process.command.clone().or_else(|| process.name.clone());
    let workload = process.workload.clone();
    let short = command.as_deref().map_or_else(|| "?".to_owned(), |c| shorten(c, COMMAND_CHARS));
    let runtime = or_na(process.started_ms, |started| format::duration(now_ms.saturating_sub(started)));
    let idle = process.idle.map(|hold| {
        let title = format!("Flagged idle: {}", hold.signal.describe());
        let idle_ms = now_ms.saturating_sub(hold.since_ms);
        let held = format!("for {}", format::duration(idle_ms));
        let why = shared::activity::idle_despite_util(gpu.util, gpu.sm_active, &held)
            .filter(|_| hold.signal == shared::activity::IdleSignal::SmActivity)
            .map(|why| view! { <span class="idle-why">{why}</span> });
        view! { <span class="idle-flag" title=title>{idle_text(&process, hold, now_ms)}</span> {why} }
    });
    let activity = match (gpu.sm_active, gpu.unavailable) {
        (Some(sm), _) => view! { <span>{format!("{sm:.1}%")}</span> }.into_any(),
        (None, Some(why)) => view! { <span title=why>{format::na()}</span> }.into_any(),
        (None, None) => view! { <span>{format::na()}</span> }.into_any(),
    };
    let user = process.user_name().to_owned();
    let by_user = ProcessFilter::user(&user);
    let owner_title = match &process.owner {
        Some(owner) => format!("Only {user}'s processes (owner by {})", owner.source.describe()),
        None => format!("Only {user}'s processes"),
    };
    let unix_user = process.unix_user_if_other().map(|unix| {
        view! { <span class="unix-user" title="The Unix user the process runs as">{format!("({unix})")}</span> }
    });
    let show_processes = use_show_processes();
    let device = process.device;
    let key = (process.device, process.pid);
    let columns = Column::ALL.len() + 2 + usize::from(signals.is_some());
    let full = open.then(|| {
        let text = process.command.clone().or_else(|| process.name.clone()).unwrap_or_else(|| "unknown".to_owned());
        view! {
            <tr class="command-row" id=command_row_id(key) data-pid=process.pid>
                <td colspan=columns>
                    <span class="command-label">"Full command: "</span>
                    <code class="command-full">{text}</code>
                </td>
            </tr>
        }
    });
    view! {
        <tr class="process-row" class:idle=process.idle.is_some() class:open=open data-pid=process.pid data-gpu=device>
            <ExpandButton process=process.clone() expanded=expanded open=open />
            <td class="gpu">
                <button type="button" class="link-button filter-gpu" title=format!("Only GPU {device}'s processes")
                    on:click=move |_| show_processes(ProcessFilter::gpu(device))>
                    {device}
                </button>
            </td>
            <td class="pid">{process.pid}</td>
            <td class="user">
                <button type="button" class="link-button filter-user" title=owner_title
                    on:click=move |_| show_processes(by_user.clone())>
                    {process.owner_name().unwrap_or("?").to_owned()}
                </button>
                " "
                {unix_user}
            </td>
            <td class="command" title=command>{short}</td>
            <td class="memory">{or_na(process.used_memory, format_bytes)}</td>
            <td class="sm">{or_na(process.sm_util, percent)}</td>
            <td class="activity">{activity} {idle}</td>
            <td class="runtime">{runtime}</td>
            <WorkloadCell workload=workload />
            {actions}
        </tr>
        {full}
    }
    .into_any()
}

/// A process's container, pod or Slurm job: its short name, a click filters the table by it, and
/// everything known (image, labels, account...) in the tooltip.
#[component]
fn WorkloadCell(workload: Option<shared::workload::Workload>) -> impl IntoView {
    let show_processes = use_show_processes();
    let Some(workload) = workload else {
        return view! { <td class="workload">"—"</td> }.into_any();
    };
    let name = shared::workload::short_name(&workload).unwrap_or_default();
    let kind = if workload.pod.is_some() {
        "pod"
    } else if workload.container.is_some() {
        "container"
    } else {
        "job"
    };
    let title =
        shared::workload::describe(&workload).into_iter().chain(shared::workload::facts(&workload)).collect::<Vec<_>>();
    let filter = ProcessFilter::workload(&name);
    view! {
        <td class="workload" data-kind=kind title=title.join("\n")>
            <button type="button" class="link-button filter-workload" on:click=move |_| show_processes(filter.clone())>
                {name}
            </button>
        </td>
    }
    .into_any()
}

/// A row whose user, command and container the server left out (an anonymous viewer of a server with tokens).
#[component]
fn RedactedRow(process: GpuProcess, now_ms: u64, signals: bool) -> impl IntoView {
    let runtime = or_na(process.started_ms, |started| format::duration(now_ms.saturating_sub(started)));
    view! {
        <tr class="process-row redacted" data-pid=process.pid data-gpu=process.device>
            <td class="expand"></td>
            <td class="gpu">{process.device}</td>
            <td class="pid">{process.pid}</td>
            <td class="user redacted" title=REDACTED_TITLE>{REDACTED}</td>
            <td class="command redacted" title=REDACTED_TITLE>{REDACTED}</td>
            <td class="memory">{or_na(process.used_memory, format_bytes)}</td>
            <td class="sm">{or_na(process.sm_util, percent)}</td>
            <td class="activity"></td>
            <td class="runtime">{runtime}</td>
            <td class="workload redacted" title=REDACTED_TITLE>{REDACTED}</td>
            {signals.then(|| view! { <td class="actions"></td> })}
        </tr>
    }
}
