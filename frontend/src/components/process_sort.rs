//! How the process table sorts: by any column, figures biggest first, names from A, ties by PID.

use std::cmp::Ordering;

use shared::processes::GpuProcess;

/// A column the table can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Gpu,
    Pid,
    User,
    Command,
    Memory,
    Sm,
    Runtime,
    Workload,
}

impl Column {
    pub const ALL: [Self; 8] =
        [Self::Gpu, Self::Pid, Self::User, Self::Command, Self::Memory, Self::Sm, Self::Runtime, Self::Workload];

    pub fn label(self) -> &'static str {
        match self {
            Self::Gpu => "GPU",
            Self::Pid => "PID",
            Self::User => "Owner",
            Self::Command => "Command",
            Self::Memory => "GPU memory",
            Self::Sm => "SM util (NVML)",
            Self::Runtime => "Running",
            Self::Workload => "Workload",
        }
    }

    /// What the header's tooltip explains, where its name needs it.
    pub fn title(self) -> Option<&'static str> {
        match self {
            Self::Sm => Some(
                "NVML's per-process SM utilization: the share of time any kernel of this process ran, however small. \
                 Idle is judged by the GPU's SM activity (next column), not by this",
            ),
            _ => None,
        }
    }

    /// The `data-sort` of the header and the class of the column's cells.
    pub fn key(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Pid => "pid",
            Self::User => "user",
            Self::Command => "command",
            Self::Memory => "memory",
            Self::Sm => "sm",
            Self::Runtime => "runtime",
            Self::Workload => "workload",
        }
    }

    /// Figures start biggest first, names from A.
    fn starts_descending(self) -> bool {
        matches!(self, Self::Memory | Self::Sm | Self::Runtime)
    }

    fn compare(self, a: &GpuProcess, b: &GpuProcess) -> Ordering {
        match self {
            Self::Gpu => a.device.cmp(&b.device),
            Self::Pid => a.pid.cmp(&b.pid),
            Self::User => a.owner_name().cmp(&b.owner_name()),
            Self::Command => a.command.as_ref().or(a.name.as_ref()).cmp(&b.command.as_ref().or(b.name.as_ref())),
            Self::Memory => a.used_memory.cmp(&b.used_memory),
            Self::Sm => a.sm_util.cmp(&b.sm_util),
            // Running longer means started earlier; unknown starts count as shortest.
            Self::Runtime => match (a.started_ms, b.started_ms) {
                (Some(a), Some(b)) => b.cmp(&a),
                (a, b) => a.is_some().cmp(&b.is_some()),
            },
            Self::Workload => {
                let name = |p: &GpuProcess| p.workload.as_ref().and_then(shared::workload::short_name);
                name(a).cmp(&name(b))
            }
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

    /// Sorts `processes`, ties broken by PID (then GPU) so rows do not jump between updates.
    pub fn sort(self, processes: &mut [GpuProcess]) {
        shared::order::sort_by(processes, |a, b| {
            let order = self.column.compare(a, b).then_with(|| a.pid.cmp(&b.pid)).then_with(|| a.device.cmp(&b.device));
            if self.descending { order.reverse() } else { order }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, user: Option<&str>, memory: Option<u64>, started_ms: Option<u64>) -> GpuProcess {
        GpuProcess {
            used_memory: memory,
            user: user.map(str::to_owned),
            started_ms,
            ..shared::testing::process(0, pid)
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

    #[test]
    fn the_gpu_column_sorts_lowest_first_then_by_pid() {
        let mut rows = vec![process(7, None, None, None), process(3, None, None, None), process(5, None, None, None)];
        rows[0].device = 1;
        rows[2].device = 1;
        let order = SortOrder::default().clicked(Column::Gpu);
        assert!(!order.descending);
        assert_eq!(pids(order, &mut rows), [3, 5, 7]);
        assert_eq!(pids(order.clicked(Column::Gpu), &mut rows), [7, 5, 3]);
    }
}
