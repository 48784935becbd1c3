//! A Usage tab table (per owner, per workload, per GPU) whose columns sort on a click: the first
//! click on a figure sorts most first, the next least first; the name column sorts A to Z first.
//! Figures follow the tab's one precision rule (`usage_chart::figure`).

use leptos::prelude::*;
use shared::usage::UsageRow;

use crate::components::usage_chart::figure;

/// The table's columns, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Name,
    GpuHours,
    MemoryHours,
    IdleHours,
    Energy,
}

impl Column {
    const FIGURES: [(Column, &'static str, &'static str); 4] = [
        (Column::GpuHours, "GPU-hours", "col-gpu-hours"),
        (Column::MemoryHours, "Memory GiB-hours", "col-memory"),
        (Column::IdleHours, "Idle-held GiB-hours", "col-idle"),
        (Column::Energy, "Energy kWh", "col-energy"),
    ];

    fn value(self, row: &UsageRow) -> f64 {
        match self {
            Column::Name => 0.0,
            Column::GpuHours => row.gpu_hours,
            Column::MemoryHours => row.memory_gib_hours,
            Column::IdleHours => row.idle_gib_hours,
            Column::Energy => row.energy_kwh,
        }
    }
}

/// A row's name: its user, its GPU, its workload, or "(outside one)".
pub fn name(row: &UsageRow) -> String {
    row.user
        .clone()
        .or(row.gpu.map(|g| format!("GPU {g}")))
        .or(row.workload.clone())
        .unwrap_or_else(|| "(outside one)".to_owned())
}

/// `rows` sorted by `column` (`None`: as the server listed them), `descending` or not; GPUs by
/// number, not as text.
pub fn sorted(mut rows: Vec<UsageRow>, by: Option<(Column, bool)>) -> Vec<UsageRow> {
    let Some((column, descending)) = by else { return rows };
    shared::order::sort_by(&mut rows, |a, b| {
        let order = match column {
            Column::Name => match (a.gpu, b.gpu) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => name(a).to_lowercase().cmp(&name(b).to_lowercase()),
            },
            _ => column.value(a).total_cmp(&column.value(b)),
        };
        if descending { order.reverse() } else { order }
    });
    rows
}

/// The next sort after a click on `column`: a new figure column sorts most first, the name
/// column A to Z first; a second click turns it round.
fn clicked(now: Option<(Column, bool)>, column: Column) -> Option<(Column, bool)> {
    match now {
        Some((c, descending)) if c == column => Some((column, !descending)),
        _ => Some((column, column != Column::Name)),
    }
}

#[component]
pub fn UsageTable(id: &'static str, key: &'static str, rows: Signal<Vec<UsageRow>>) -> impl IntoView {
    let sort = RwSignal::new(None::<(Column, bool)>);
    let aria = move |column: Column| match sort.get() {
        Some((c, true)) if c == column => "descending",
        Some((c, false)) if c == column => "ascending",
        _ => "none",
    };
    let header = move |column: Column, label: &'static str, class: &'static str| {
        view! {
            <th scope="col" class=class aria-sort=move || aria(column)>
                <button type="button" class="sort-button" title=format!("Sort by {label}")
                    on:click=move |_| sort.update(|s| *s = clicked(*s, column))>
                    {label}
                    <span class="sort-mark" aria-hidden="true">
                        {move || match aria(column) { "descending" => " ▼", "ascending" => " ▲", _ => "" }}
                    </span>
                </button>
            </th>
        }
    };
    view! {
        <div class="table-scroll">
            <table id=id class="usage-table sortable">
                <thead>
                    <tr>
                        {header(Column::Name, key, "col-name")}
                        {Column::FIGURES.map(|(c, label, class)| header(c, label, class)).collect_view()}
                    </tr>
                </thead>
                <tbody>
                    {move || sorted(rows.get(), sort.get()).into_iter().map(|r| {
                        view! {
                            <tr class="usage-row">
                                <td class="usage-key">{name(&r)}</td>
                                <td class="usage-gpu-hours">{figure(r.gpu_hours)}</td>
                                <td class="usage-memory-hours">{figure(r.memory_gib_hours)}</td>
                                <td class="usage-idle-hours">{figure(r.idle_gib_hours)}</td>
                                <td class="usage-energy">{figure(r.energy_kwh)}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(gpu: Option<u32>, user: Option<&str>, gpu_hours: f64) -> UsageRow {
        UsageRow { gpu, user: user.map(str::to_owned), gpu_hours, ..UsageRow::default() }
    }

    #[test]
    fn columns_sort_both_ways_and_gpus_by_number() {
        let rows = vec![row(None, Some("bo"), 1.0), row(None, Some("Ana"), 3.0), row(None, Some("cy"), 2.0)];
        let names = |by| sorted(rows.clone(), by).iter().map(name).collect::<Vec<_>>();
        assert_eq!(names(None), ["bo", "Ana", "cy"], "as listed");
        let first = clicked(None, Column::GpuHours);
        assert_eq!(names(first), ["Ana", "cy", "bo"], "most first");
        assert_eq!(names(clicked(first, Column::GpuHours)), ["bo", "cy", "Ana"]);
        assert_eq!(names(clicked(first, Column::Name)), ["Ana", "bo", "cy"], "A to Z, case aside");
        let gpus = vec![row(Some(10), None, 0.0), row(Some(2), None, 0.0)];
        let order: Vec<String> = sorted(gpus, Some((Column::Name, false))).iter().map(name).collect();
        assert_eq!(order, ["GPU 2", "GPU 10"]);
    }
}
