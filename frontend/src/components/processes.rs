//! Who runs what on each GPU: a sortable process table per device.

use std::cmp::Ordering;

use leptos::prelude::*;
use shared::{
    processes::{GpuProcess, shorten},
    units::{format_bytes, or_na},
};

use crate::{
    components::activity::idle_text,
    components::format::{self, percent},
    components::signals::{SignalButtons, SignalControl, SignalPanel},
    state::DashboardState,
};

/// Command lines longer than this are cut in the table (the full one is the cell's tooltip).
const COMMAND_CHARS: usize = 40;

/// What a cell the server left out says (a blank or "?" would read as unknown to the server too).
const REDACTED: &str = "sign in to see";
/// The tooltip of such a cell.
const REDACTED_TITLE: &str = "Who runs what is shown to signed-in viewers";

/// A column the table can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Pid,
    User,
    Command,
    Memory,
    Sm,
    Runtime,
    Container,
}

impl Column {
    const ALL: [Self; 7] =
        [Self::Pid, Self::User, Self::Command, Self::Memory, Self::Sm, Self::Runtime, Self::Container];

    fn label(self) -> &'static str {
        match self {
            Self::Pid => "PID",
            Self::User => "User",
            Self::Command => "Command",
            Self::Memory => "GPU memory",
            Self::Sm => "SM",
            Self::Runtime => "Running",
            Self::Container => "Container",
        }
    }

    /// The `data-sort` of the header and the class of the column's cells.
    fn key(self) -> &'static str {
        match self {
            Self::Pid => "pid",
            Self::User => "user",
            Self::Command => "command",
            Self::Memory => "memory",
            Self::Sm => "sm",
            Self::Runtime => "runtime",
            Self::Container => "container",
        }
    }

    /// Figures start biggest first, names from A.
    fn starts_descending(self) -> bool {
        matches!(self, Self::Memory | Self::Sm | Self::Runtime)
    }

    fn compare(self, a: &GpuProcess, b: &GpuProcess) -> Ordering {
        match self {
            Self::Pid => a.pid.cmp(&b.pid),
            Self::User => a.user.cmp(&b.user),
            Self::Command => a.command.as_ref().or(a.name.as_ref()).cmp(&b.command.as_ref().or(b.name.as_ref())),
            Self::Memory => a.used_memory.cmp(&b.used_memory),
            Self::Sm => a.sm_util.cmp(&b.sm_util),
            // Running longer means started earlier; unknown starts count as shortest.
            Self::Runtime => match (a.started_ms, b.started_ms) {
                (Some(a), Some(b)) => b.cmp(&a),
                (a, b) => a.is_some().cmp(&b.is_some()),
            },
            Self::Container => a.container.cmp(&b.container),
        }
    }
}

/// How a table is sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortOrder {
    pub column: Column,
    pub descending: bool,
}

impl Default for SortOrder {
    fn default() -> Self {
        Self { column: Column::Memory, descending: true }
    }
}

impl SortOrder {
    /// After a click on `column`'s header: the same column reverses, another starts in its natural order.
    pub fn clicked(self, column: Column) -> Self {
        if column == self.column {
            Self { column, descending: !self.descending }
        } else {
            Self { column, descending: column.starts_descending() }
        }
    }

    /// Sorts `processes`, ties broken by PID so rows do not jump between updates.
    pub fn sort(self, processes: &mut [GpuProcess]) {
        processes.sort_by(|a, b| {
            let order = self.column.compare(a, b).then_with(|| a.pid.cmp(&b.pid));
            if self.descending { order.reverse() } else { order }
        });
    }
}

/// `#processes`: one table per GPU, under the cards.
#[component]
pub fn ProcessTables(state: ReadSignal<DashboardState>, indices: Memo<Vec<u32>>) -> impl IntoView {
    view! {
        <section id="processes" class="section" aria-labelledby="processes-title">
            <h2 id="processes-title" class="section-title">"Processes"</h2>
            <div class="process-grid">
                <For each=move || indices.get() key=|index| *index let:index>
                    <ProcessTable state=state index=index />
                </For>
            </div>
        </section>
    }
}

/// `table.process-table[data-index]`: the processes of GPU `index`, sortable by any column.
#[component]
fn ProcessTable(state: ReadSignal<DashboardState>, index: u32) -> impl IntoView {
    let order = RwSignal::new(SortOrder::default());
    let control = SignalControl::for_table();
    let signals = move || control.filter(|c| c.enabled());
    let processes = Memo::new(move |_| state.with(|s| s.processes_on(index).cloned().collect::<Vec<_>>()));
    let lost = Memo::new(move |_| state.with(|s| s.lost_reason(index).is_some()));
    let name = Memo::new(move |_| state.with(|s| s.device(index).map(|d| d.info.name.clone()).unwrap_or_default()));
    let rows = move || {
        let mut rows = processes.get();
        order.get().sort(&mut rows);
        let now = js_sys::Date::now() as u64;
        let signals = signals();
        rows.into_iter().map(|p| view! { <ProcessRow process=p now_ms=now signals=signals /> }).collect_view()
    };
    let columns = move || Column::ALL.len() + usize::from(signals().is_some());
    let empty_text = move || if lost.get() { "GPU lost" } else { "No processes" };

    view! {
        <div class="process-block" data-index=index>
            <h3 class="process-title">
                <span class="gpu-index">{format!("GPU {index}")}</span>
                " "
                <span class="process-gpu-name">{move || name.get()}</span>
            </h3>
            <div class="table-scroll">
                <table class="process-table" data-index=index>
                    <thead>
                        <tr>
                            {Column::ALL
                                .into_iter()
                                .map(|column| view! { <SortHeader column=column order=order /> })
                                .collect_view()}
                            {move || signals().map(|_| view! { <th class="col-actions" scope="col">"Signal"</th> })}
                        </tr>
                    </thead>
                    <tbody>
                        {rows}
                        <Show when=move || processes.with(Vec::is_empty)>
                            <tr class="empty-row">
                                <td colspan=columns>{empty_text}</td>
                            </tr>
                        </Show>
                    </tbody>
                </table>
            </div>
            {move || signals().map(|control| view! { <SignalPanel control=control /> })}
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
            <button type="button" class="sort-button" data-sort=column.key() on:click=move |_| order.update(|o| *o = o.clicked(column))>
                {column.label()}
                <span class="sort-arrow" aria-hidden="true">{arrow}</span>
            </button>
        </th>
    }
}

#[component]
fn ProcessRow(process: GpuProcess, now_ms: u64, signals: Option<SignalControl>) -> impl IntoView {
    if process.redacted {
        return view! { <RedactedRow process=process now_ms=now_ms signals=signals.is_some() /> }.into_any();
    }
    let actions = signals.map(|control| view! { <SignalButtons control=control process=process.clone() /> });
    let command = process.command.clone().or_else(|| process.name.clone());
    let container = process.container.clone();
    let short = command.as_deref().map_or_else(|| "?".to_owned(), |c| shorten(c, COMMAND_CHARS));
    let runtime = or_na(process.started_ms, |started| format::duration(now_ms.saturating_sub(started)));
    let idle = process.idle.map(|hold| {
        let title = format!("Flagged idle: {}", hold.signal.describe());
        view! { <span class="idle-flag" title=title>{idle_text(&process, hold, now_ms)}</span> }
    });
    view! {
        <tr class="process-row" class:idle=process.idle.is_some() data-pid=process.pid>
            <td class="pid">{process.pid}</td>
            <td class="user">{process.user.unwrap_or_else(|| "?".to_owned())}</td>
            <td class="command" title=command>{short}</td>
            <td class="memory">{or_na(process.used_memory, format_bytes)}</td>
            <td class="sm">{or_na(process.sm_util, percent)} {idle}</td>
            <td class="runtime">{runtime}</td>
            <td class="container" title=container>
                {process.container.unwrap_or_else(|| "—".to_owned())}
            </td>
            {actions}
        </tr>
    }
    .into_any()
}

/// A row whose user, command and container the server left out (an anonymous viewer of a server with tokens).
#[component]
fn RedactedRow(process: GpuProcess, now_ms: u64, signals: bool) -> impl IntoView {
    let runtime = or_na(process.started_ms, |started| format::duration(now_ms.saturating_sub(started)));
    view! {
        <tr class="process-row redacted" data-pid=process.pid>
            <td class="pid">{process.pid}</td>
            <td class="user redacted" title=REDACTED_TITLE>{REDACTED}</td>
            <td class="command redacted" title=REDACTED_TITLE>{REDACTED}</td>
            <td class="memory">{or_na(process.used_memory, format_bytes)}</td>
            <td class="sm">{or_na(process.sm_util, percent)}</td>
            <td class="runtime">{runtime}</td>
            <td class="container redacted" title=REDACTED_TITLE>{REDACTED}</td>
            {signals.then(|| view! { <td class="actions"></td> })}
        </tr>
    }
}

#[cfg(test)]
mod tests {
    use shared::processes::ProcessKind;

    use super::*;

    fn process(pid: u32, user: Option<&str>, memory: Option<u64>, started_ms: Option<u64>) -> GpuProcess {
        GpuProcess {
            device: 0,
            pid,
            kind: ProcessKind::Compute,
            used_memory: memory,
            sm_util: None,
            sm_util_seen_ms: None,
            user: user.map(str::to_owned),
            name: None,
            command: None,
            started_ms,
            container: None,
            redacted: false,
            idle: None,
        }
    }

    fn pids(order: SortOrder, processes: &mut [GpuProcess]) -> Vec<u32> {
        order.sort(processes);
        processes.iter().map(|p| p.pid).collect()
    }

    #[test]
    fn memory_descending_by_default_and_a_second_click_reverses() {
        let mut rows = vec![
            process(1, Some("bo"), Some(5), Some(100)),
            process(2, Some("ana"), Some(50), Some(300)),
            process(3, None, None, None),
        ];
        let order = SortOrder::default();
        assert_eq!(pids(order, &mut rows), [2, 1, 3]);
        let order = order.clicked(Column::Memory);
        assert_eq!(pids(order, &mut rows), [3, 1, 2]);
        let order = order.clicked(Column::User);
        assert!(!order.descending);
        assert_eq!(pids(order, &mut rows), [3, 2, 1], "unknown users first, then by name");
        let order = order.clicked(Column::Runtime);
        assert_eq!(pids(order, &mut rows), [1, 2, 3], "longest running first");
    }
}
