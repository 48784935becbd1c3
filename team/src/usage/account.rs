//! The charging rules, pure arithmetic over consecutive process readings of one GPU (see
//! docs/ACCOUNTING.md): who is charged how many GPU-seconds, GiB-seconds, idle GiB-seconds
//! and joules for the interval that ends at each reading.

use std::collections::HashMap;

use shared::processes::GpuProcess;
use shared::usage::UNKNOWN_USER;

const GIB: f64 = (1u64 << 30) as f64;
/// The shortest gap that is never charged, whatever the reading period.
pub const MIN_GAP_CAP_MS: u64 = 10_000;
/// Readings a gap may miss before it is not charged.
pub const GAP_READINGS: u64 = 5;

/// Sums charged to one user on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    pub gpu_s: f64,
    pub memory_gib_s: f64,
    pub idle_gib_s: f64,
    pub energy_j: f64,
}

impl Totals {
    pub fn add(&mut self, other: &Totals) {
        self.gpu_s += other.gpu_s;
        self.memory_gib_s += other.memory_gib_s;
        self.idle_gib_s += other.idle_gib_s;
        self.energy_j += other.energy_j;
    }
}

/// One process reading of one GPU.
#[derive(Debug, Clone)]
pub struct Reading<'a> {
    pub device: u32,
    /// When the process list was read, ms since the epoch.
    pub at_ms: u64,
    /// The GPU's energy counter at that moment, mJ.
    pub energy_mj: Option<u64>,
    /// The GPU's utilization at that moment (its latest gauge reading).
    pub gpu_util: Option<u32>,
    pub processes: Vec<&'a GpuProcess>,
}

/// What one reading charges one user on its GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub user: String,
    /// The workload it ran in, as `shared::workload::usage_key` writes it.
    pub workload: String,
    pub device: u32,
    /// The end of the interval charged (its reading's time).
    pub at_ms: u64,
    pub totals: Totals,
}

/// The last reading of each GPU, to charge the next interval from.
#[derive(Debug)]
pub struct Accountant {
    last: HashMap<u32, (u64, Option<u64>)>,
    gap_cap_ms: u64,
}

impl Accountant {
    /// An accountant for readings about every `period_ms`: a longer gap than
    /// [`GAP_READINGS`] periods (and at least [`MIN_GAP_CAP_MS`]) is not charged.
    pub fn new(period_ms: u64) -> Self {
        Self { last: HashMap::new(), gap_cap_ms: (period_ms.saturating_mul(GAP_READINGS)).max(MIN_GAP_CAP_MS) }
    }

    pub fn gap_cap_ms(&self) -> u64 {
        self.gap_cap_ms
    }

    /// Charges the interval since the GPU's previous reading to the processes of `reading`, one
    /// charge per user and workload. A first reading, a repeated one and one after too long a gap
    /// charge nothing.
    pub fn charge(&mut self, reading: &Reading<'_>) -> Vec<Charge> {
        let Some(interval) = self.charge_each(reading) else { return Vec::new() };
        let mut by_user: Vec<Charge> = Vec::new();
        for each in interval.charges {
            let process = each.process;
            let user = user_of(process);
            let workload =
                if process.redacted { String::new() } else { shared::workload::usage_key(process.workload.as_ref()) };
            match by_user.iter_mut().find(|c| c.user == user && c.workload == workload) {
                Some(charge) => charge.totals.add(&each.totals),
                None => by_user.push(Charge {
                    user,
                    workload,
                    device: reading.device,
                    at_ms: reading.at_ms,
                    totals: each.totals,
                }),
            }
        }
        by_user
    }

    /// The interval since the GPU's previous reading and what it charges each process of
    /// `reading`, one charge per process in the reading's order (the jobs' bookkeeping groups
    /// these by job); `None` for a first reading, a
    /// repeated one, one after too long a gap, or a GPU without processes.
    pub fn charge_each<'a>(&mut self, reading: &Reading<'a>) -> Option<Interval<'a>> {
        let previous = self.last.get(&reading.device).copied();
        if previous.is_some_and(|(at, _)| reading.at_ms <= at) {
            return None;
        }
        self.last.insert(reading.device, (reading.at_ms, reading.energy_mj));
        let (from_ms, energy_from) = previous?;
        if reading.at_ms - from_ms > self.gap_cap_ms || reading.processes.is_empty() {
            return None;
        }
        // A counter that went back (a driver reload) gives no energy for this interval.
        let energy_j = match (energy_from, reading.energy_mj) {
            (Some(from), Some(to)) if to >= from => (to - from) as f64 / 1000.0,
            _ => 0.0,
        };
        let shares = sm_shares(&reading.processes);
        let idle_gpu = gpu_idle(reading);
        let charges = reading
            .processes
            .iter()
            .zip(shares)
            .map(|(&process, share)| {
                // A process that started within the interval is charged from its start.
                let start = process.started_ms.map_or(from_ms, |s| s.clamp(from_ms, reading.at_ms));
                let seconds = (reading.at_ms - start) as f64 / 1000.0;
                let gib = process.used_memory.unwrap_or(0) as f64 / GIB;
                let idle = idle_gpu || process.idle.is_some();
                let totals = Totals {
                    gpu_s: share * seconds,
                    memory_gib_s: gib * seconds,
                    idle_gib_s: if idle { gib * seconds } else { 0.0 },
                    energy_j: share * energy_j,
                };
                ProcessCharge { process, seconds, share, idle, totals }
            })
            .collect();
        Some(Interval { from_ms, to_ms: reading.at_ms, charges })
    }
}

/// What one reading charges one process.
#[derive(Debug, Clone)]
pub struct ProcessCharge<'a> {
    pub process: &'a GpuProcess,
    /// Its part of the interval (from its start when it started within it), seconds.
    pub seconds: f64,
    /// Its SM share of the GPU (see [`sm_shares`]).
    pub share: f64,
    /// The GPU did nothing over the interval, or the idle rule flagged the process.
    pub idle: bool,
    pub totals: Totals,
}

/// One GPU's interval between two readings and what it charges each process.
#[derive(Debug, Clone)]
pub struct Interval<'a> {
    pub from_ms: u64,
    pub to_ms: u64,
    pub charges: Vec<ProcessCharge<'a>>,
}

/// Who a process is charged to: its owner by the owner rule (a job's user, a container's owner
/// label... or its Unix user), or [`UNKNOWN_USER`].
pub fn user_of(process: &GpuProcess) -> String {
    match process.owner_name() {
        Some(owner) if !process.redacted && !owner.is_empty() => owner.to_owned(),
        _ => UNKNOWN_USER.to_owned(),
    }
}

/// Each process's share of the GPU: its SM utilization over the sum of all, or equal shares
/// when none reports a utilization above 0. NVML reports no sample for a process that ran no
/// kernel, so beside processes that did, one without a figure gets no share.
pub fn sm_shares(processes: &[&GpuProcess]) -> Vec<f64> {
    let total: u32 = processes.iter().filter_map(|p| p.sm_util).sum();
    if total == 0 {
        let n = processes.len().max(1) as f64;
        return vec![1.0 / n; processes.len()];
    }
    processes.iter().map(|p| f64::from(p.sm_util.unwrap_or(0)) / f64::from(total)).collect()
}

/// A GPU is idle over an interval when none of its processes ran a kernel (no SM utilization
/// above 0) and its utilization gauge reads 0 or nothing.
pub fn gpu_idle(reading: &Reading<'_>) -> bool {
    reading.processes.iter().all(|p| p.sm_util.unwrap_or(0) == 0) && reading.gpu_util.unwrap_or(0) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(user: Option<&str>, gib: u64, sm: Option<u32>, started_ms: u64) -> GpuProcess {
        GpuProcess {
            used_memory: Some(gib << 30),
            sm_util: sm,
            user: user.map(str::to_owned),
            started_ms: Some(started_ms),
            ..shared::testing::process(0, 1)
        }
    }

    fn reading<'a>(at_ms: u64, energy_mj: u64, util: u32, processes: &'a [GpuProcess]) -> Reading<'a> {
        Reading {
            device: 0,
            at_ms,
            energy_mj: Some(energy_mj),
            gpu_util: Some(util),
            processes: processes.iter().collect(),
        }
    }

    fn totals_of(charges: &[Charge], user: &str) -> Totals {
        charges.iter().find(|c| c.user == user).map(|c| c.totals).unwrap_or_default()
    }

    #[test]
    fn one_user_is_charged_the_whole_interval_from_the_process_start() {
        let mut accountant = Accountant::new(1000);
        let p = [process(Some("ana"), 4, Some(90), 500)];
        assert!(accountant.charge(&reading(1_000, 0, 90, &p)).is_empty(), "a first reading only sets the baseline");
        let charges = accountant.charge(&reading(3_000, 200_000, 90, &p));
        assert_eq!(
            totals_of(&charges, "ana"),
            Totals { gpu_s: 2.0, memory_gib_s: 8.0, idle_gib_s: 0.0, energy_j: 200.0 }
        );
        // A process that started within the interval is charged from its start only.
        let late = [process(Some("bo"), 2, Some(50), 3_500)];
        let charges = accountant.charge(&reading(4_000, 300_000, 50, &late));
        assert_eq!(totals_of(&charges, "bo").gpu_s, 0.5);
        assert_eq!(totals_of(&charges, "bo").memory_gib_s, 1.0);
    }

    #[test]
    fn a_shared_gpu_splits_by_sm_share_and_equally_without_one() {
        let mut accountant = Accountant::new(1000);
        let p = [process(Some("ana"), 1, Some(60), 0), process(Some("bo"), 1, Some(20), 0)];
        accountant.charge(&reading(1_000, 0, 80, &p));
        let charges = accountant.charge(&reading(2_000, 4_000, 80, &p));
        assert_eq!(totals_of(&charges, "ana").gpu_s, 0.75);
        assert_eq!(totals_of(&charges, "bo").gpu_s, 0.25);
        assert_eq!(totals_of(&charges, "ana").energy_j, 3.0);
        assert_eq!(totals_of(&charges, "bo").energy_j, 1.0);
        let unknown = [process(Some("ana"), 1, None, 0), process(Some("bo"), 1, Some(0), 0)];
        let charges = accountant.charge(&reading(3_000, 6_000, 0, &unknown));
        assert_eq!((totals_of(&charges, "ana").gpu_s, totals_of(&charges, "bo").gpu_s), (0.5, 0.5));
        assert_eq!(totals_of(&charges, "bo").energy_j, 1.0);
    }

    #[test]
    fn two_processes_of_one_user_add_up_and_hidden_users_are_unknown() {
        let mut accountant = Accountant::new(1000);
        let mut hidden = process(Some("cy"), 1, None, 0);
        hidden.redacted = true;
        let p = [process(Some("ana"), 1, None, 0), process(Some("ana"), 1, None, 0), process(None, 1, None, 0), hidden];
        accountant.charge(&reading(1_000, 0, 0, &p));
        let charges = accountant.charge(&reading(2_000, 0, 0, &p));
        assert_eq!(charges.len(), 2, "{charges:?}");
        assert_eq!(totals_of(&charges, "ana").gpu_s, 0.5);
        assert_eq!(totals_of(&charges, UNKNOWN_USER).memory_gib_s, 2.0);
    }

    #[test]
    fn memory_is_idle_held_only_while_the_gpu_does_nothing() {
        let mut accountant = Accountant::new(1000);
        let idle = [process(Some("ana"), 6, None, 0)];
        accountant.charge(&reading(1_000, 0, 0, &idle));
        assert_eq!(totals_of(&accountant.charge(&reading(2_000, 0, 0, &idle)), "ana").idle_gib_s, 6.0);
        // The gauge says the GPU worked (a driver without per-process figures): not idle.
        assert_eq!(totals_of(&accountant.charge(&reading(3_000, 0, 40, &idle)), "ana").idle_gib_s, 0.0);
        let busy = [process(Some("ana"), 6, Some(30), 0)];
        assert_eq!(totals_of(&accountant.charge(&reading(4_000, 0, 0, &busy)), "ana").idle_gib_s, 0.0);
    }

    #[test]
    fn gaps_repeats_and_counters_that_go_back_are_not_charged() {
        let mut accountant = Accountant::new(1000);
        assert_eq!(accountant.gap_cap_ms(), MIN_GAP_CAP_MS);
        let p = [process(Some("ana"), 1, Some(10), 0)];
        accountant.charge(&reading(1_000, 5_000, 10, &p));
        assert!(accountant.charge(&reading(1_000, 5_000, 10, &p)).is_empty(), "the same reading twice");
        assert!(accountant.charge(&reading(12_000, 9_000, 10, &p)).is_empty(), "an 11 s gap");
        let charges = accountant.charge(&reading(13_000, 1_000, 10, &p));
        assert_eq!(
            totals_of(&charges, "ana"),
            Totals { gpu_s: 1.0, memory_gib_s: 1.0, idle_gib_s: 0.0, energy_j: 0.0 }
        );
        // A GPU without processes charges nobody, but its reading is the next baseline.
        assert!(accountant.charge(&reading(14_000, 2_000, 0, &[])).is_empty());
        assert_eq!(totals_of(&accountant.charge(&reading(15_000, 3_000, 10, &p)), "ana").energy_j, 1.0);
        assert_eq!(Accountant::new(4_000).gap_cap_ms(), 20_000);
    }
}
