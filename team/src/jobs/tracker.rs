//! The jobs' bookkeeping, pure: each GPU's GPM windows between two process readings, and each
//! process reading (`usage::account::Reading`) charged as usage charges it, grouped by job
//! (`shared::jobs::identity`). A job starts at the first reading that lists one of its processes
//! and ends at its last, once [`ABSENT_READINGS`] readings in a row list none.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use shared::activity::Activity;
use shared::jobs::{self, Job, JobFigures, JobPoint, Outcome};
use shared::processes::GpuProcess;

use crate::usage::account::{Accountant, Reading, user_of};

/// Readings in a row without any of a job's processes that end it: one missed listing (NVML
/// can skip a process for a reading) does not split a job; a restart that takes longer is a new job.
pub const ABSENT_READINGS: u32 = 2;
/// The first step of a job's series; it doubles whenever the series outgrows [`jobs::MAX_POINTS`].
pub const FIRST_STEP_MS: u64 = 10_000;
/// Bins of the SM-activity histogram (0 %, 1 %, … 100 %) a job's p95 is read from.
const BINS: usize = 101;

/// What the tracker knows of a GPU that does not change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuFacts {
    pub index: u32,
    pub memory_total: u64,
    /// Compute capability 8.0 or later: bf16 on tensor cores.
    pub bf16: bool,
}

/// What happened to jobs at one reading.
#[derive(Debug, Default)]
pub struct Changes {
    pub started: Vec<Job>,
    pub ended: Vec<Job>,
}

/// GPM windows of one GPU since its last process reading, summed by their length.
#[derive(Debug, Default, Clone, Copy)]
struct Windows {
    last_end_ms: u64,
    sm: (f64, f64),
    tensor: (f64, f64),
    dram: (f64, f64),
}

impl Windows {
    fn add(&mut self, a: &Activity) {
        if a.timestamp_ms <= self.last_end_ms || a.unavailable.is_some() {
            return;
        }
        self.last_end_ms = a.timestamp_ms;
        let w = a.window_ms as f64;
        // GPM's activities are percent; a job's figures are shares (0–1).
        let put = |sum: &mut (f64, f64), percent: Option<f64>| {
            if let Some(v) = percent.filter(|v| v.is_finite()) {
                sum.0 += (v / 100.0).clamp(0.0, 1.0) * w;
                sum.1 += w;
            }
        };
        put(&mut self.sm, a.sm_active);
        put(&mut self.tensor, a.tensor_active);
        put(&mut self.dram, a.dram_active);
    }

    /// The means since the last reading, and a fresh start for the next one.
    fn take(&mut self) -> Means {
        let mean = |(sum, weight): (f64, f64)| (weight > 0.0).then(|| sum / weight);
        let means = Means { sm: mean(self.sm), tensor: mean(self.tensor), dram: mean(self.dram) };
        *self = Self { last_end_ms: self.last_end_ms, ..Self::default() };
        means
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Means {
    sm: Option<f64>,
    tensor: Option<f64>,
    dram: Option<f64>,
}

/// Activity weighted by seconds.
#[derive(Debug, Default, Clone, Copy)]
struct Weighted {
    sum: f64,
    seconds: f64,
}

impl Weighted {
    fn add(&mut self, value: Option<f64>, seconds: f64) {
        if let Some(v) = value {
            self.sum += v * seconds;
            self.seconds += seconds;
        }
    }

    fn mean(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.sum / self.seconds)
    }
}

/// A step of the series being filled.
#[derive(Debug, Default, Clone, Copy)]
struct Step {
    at_ms: u64,
    sm: Weighted,
    tensor: Weighted,
    dram: Weighted,
    memory: u64,
}

impl Step {
    fn point(&self) -> JobPoint {
        JobPoint {
            at_ms: self.at_ms,
            sm_active: self.sm.mean(),
            tensor_active: self.tensor.mean(),
            dram_active: self.dram.mean(),
            memory_bytes: self.memory,
        }
    }

    fn merge(&mut self, other: &Step) {
        for (a, b) in [(&mut self.sm, other.sm), (&mut self.tensor, other.tensor), (&mut self.dram, other.dram)] {
            a.sum += b.sum;
            a.seconds += b.seconds;
        }
        self.memory = self.memory.max(other.memory);
    }
}

/// A running job and what its figures are summed from.
#[derive(Debug)]
struct Open {
    job: Job,
    absent: u32,
    /// Whether [`Changes::started`] has told of it.
    announced: bool,
    /// Set by [`Tracker::mark`]: how it ends.
    outcome: Option<Outcome>,
    memory_gib_s: f64,
    sm: Weighted,
    tensor: Weighted,
    dram: Weighted,
    histogram: [f64; BINS],
    step_ms: u64,
    steps: Vec<Step>,
    gpus: BTreeSet<u32>,
}

impl Open {
    fn new(job: Job) -> Self {
        Self {
            job,
            absent: 0,
            announced: false,
            outcome: None,
            memory_gib_s: 0.0,
            sm: Weighted::default(),
            tensor: Weighted::default(),
            dram: Weighted::default(),
            histogram: [0.0; BINS],
            step_ms: FIRST_STEP_MS,
            steps: Vec::new(),
            gpus: BTreeSet::new(),
        }
    }

    /// The step that holds `at_ms`, opened when it is new; neighbours merge when the series is full.
    fn step(&mut self, at_ms: u64) -> &mut Step {
        let origin = self.job.watched_from_ms;
        let start = origin + (at_ms.saturating_sub(origin) / self.step_ms) * self.step_ms;
        if self.steps.last().is_none_or(|s| s.at_ms < start) {
            if self.steps.len() >= jobs::MAX_POINTS {
                self.step_ms *= 2;
                // Each step joins the one of its new, twice as long, bucket (by time, not by place:
                // readings further apart than a step leave buckets empty).
                let mut merged: Vec<Step> = Vec::with_capacity(self.steps.len() / 2 + 1);
                for step in &self.steps {
                    let bucket = origin + ((step.at_ms - origin) / self.step_ms) * self.step_ms;
                    match merged.last_mut() {
                        Some(last) if last.at_ms == bucket => last.merge(step),
                        _ => merged.push(Step { at_ms: bucket, ..*step }),
                    }
                }
                self.steps = merged;
                return self.step(at_ms);
            }
            self.steps.push(Step { at_ms: start, ..Step::default() });
        }
        let last = self.steps.len() - 1;
        &mut self.steps[last]
    }

    /// The job as it stands, its figures derived from the sums.
    fn snapshot(&self, with_series: bool) -> Job {
        let mut job = self.job.clone();
        let f = &mut job.figures;
        f.sm_active_mean = self.sm.mean();
        f.tensor_active_mean = self.tensor.mean();
        f.dram_active_mean = self.dram.mean();
        f.sm_active_p95 = p95(&self.histogram);
        f.memory_mean_bytes = if f.held_s > 0.0 { self.memory_gib_s / f.held_s * (1u64 << 30) as f64 } else { 0.0 };
        job.gpus = self.gpus.iter().copied().collect();
        if with_series {
            job.series = self.steps.iter().map(Step::point).collect();
        }
        job
    }
}

/// The 95th percentile of a seconds-weighted histogram of 1 % bins; `None` when empty.
fn p95(histogram: &[f64; BINS]) -> Option<f64> {
    let total: f64 = histogram.iter().sum();
    if total <= 0.0 {
        return None;
    }
    let mut seen = 0.0;
    for (bin, seconds) in histogram.iter().enumerate() {
        seen += seconds;
        if seen >= 0.95 * total {
            return Some(bin as f64 / 100.0);
        }
    }
    Some(1.0)
}

/// What one reading charges one job on one GPU: its processes' charges taken together.
#[derive(Debug, Default)]
struct JobCharge {
    /// The interval the job held the GPU (its longest process's).
    seconds: f64,
    /// Its share of the GPU's SM activity (its processes' shares summed).
    share: f64,
    /// Every process of it idle, on evidence.
    idle: bool,
    gpu_s: f64,
    memory_gib_s: f64,
    energy_j: f64,
}

/// Every running job, the GPUs' windows, and the accountant that charges readings.
#[derive(Debug)]
pub struct Tracker {
    accountant: Accountant,
    gpus: HashMap<u32, GpuFacts>,
    windows: HashMap<u32, Windows>,
    running: BTreeMap<String, Open>,
    /// The newest ended jobs, kept so an answer never shows one as running while its end is
    /// still being written (or was dropped by a full queue); the engine writes them again.
    recent: std::collections::VecDeque<Job>,
    next_id: u64,
}

/// Ended jobs [`Tracker::recent_ended`] keeps.
pub const RECENT: usize = 256;

impl Tracker {
    /// A tracker for readings about every `period_ms`, numbering jobs from `first_id`.
    pub fn new(period_ms: u64, gpus: &[GpuFacts], first_id: u64) -> Self {
        Self {
            accountant: Accountant::new(period_ms),
            gpus: gpus.iter().map(|g| (g.index, *g)).collect(),
            windows: HashMap::new(),
            running: BTreeMap::new(),
            recent: std::collections::VecDeque::new(),
            next_id: first_id.max(1),
        }
    }

    /// A GPU's GPM window (each is counted once, however many ticks carry it).
    pub fn window(&mut self, device: u32, activity: &Activity) {
        self.windows.entry(device).or_default().add(activity);
    }

    /// Marks the running job that has process `pid` to end with `outcome` (an OOM or a stop
    /// through gpudash) for what happened at `at_ms`; false when no running job has it, or
    /// when it happened before the job started (an old OOM of a reused PID).
    pub fn mark(&mut self, pid: u32, outcome: Outcome, at_ms: u64) -> bool {
        let open = self.running.values_mut().find(|o| o.job.pids.contains(&pid) && at_ms >= o.job.started_ms);
        match open {
            Some(open) => {
                // An OOM says more than the stop that may follow it.
                if open.outcome != Some(Outcome::Oom) {
                    open.outcome = Some(outcome);
                }
                true
            }
            None => false,
        }
    }

    /// The running jobs now, with their series when `with_series`.
    pub fn running(&self, with_series: bool) -> Vec<Job> {
        self.running.values().map(|o| o.snapshot(with_series)).collect()
    }

    /// The newest ended jobs (at most [`RECENT`]), newest last, with their series.
    pub fn recent_ended(&self) -> impl Iterator<Item = &Job> {
        self.recent.iter()
    }

    /// One reading of every GPU (the slow loop's details): charges each GPU's interval to the
    /// jobs on it, starts the jobs first seen and ends those gone for [`ABSENT_READINGS`] readings.
    pub fn observe(&mut self, readings: &[Reading<'_>]) -> Changes {
        let mut changes = Changes::default();
        // The jobs listed at this reading, each with its memory over all its GPUs.
        let mut memory_now: BTreeMap<String, u64> = BTreeMap::new();
        for reading in readings {
            let means = self.windows.entry(reading.device).or_default().take();
            let facts = self.gpus.get(&reading.device).copied();
            // Each process's job, and new jobs started.
            let mut on_gpu: BTreeMap<String, Vec<&GpuProcess>> = BTreeMap::new();
            // Each process's job key, in the reading's order (its charges come in the same order).
            let mut keys: Vec<String> = Vec::with_capacity(reading.processes.len());
            for &process in &reading.processes {
                let identity = jobs::identity(process);
                keys.push(identity.key.clone());
                if !self.running.contains_key(&identity.key) {
                    let started = process.started_ms.filter(|&s| s <= reading.at_ms).unwrap_or(reading.at_ms);
                    let job = Job {
                        id: self.next_id,
                        key: identity.key.clone(),
                        name: identity.name,
                        owner: user_of(process),
                        runtime: identity.runtime,
                        gpus: Vec::new(),
                        started_ms: started,
                        watched_from_ms: reading.at_ms,
                        last_seen_ms: reading.at_ms,
                        ended_ms: None,
                        outcome: Outcome::Running,
                        figures: JobFigures { bf16_capable: true, ..JobFigures::default() },
                        series: Vec::new(),
                        pids: Vec::new(),
                    };
                    self.next_id += 1;
                    self.running.insert(identity.key.clone(), Open::new(job));
                }
                let open = self.running.get_mut(&identity.key).expect("inserted above");
                if let Some(started) = process.started_ms.filter(|&s| s < open.job.started_ms) {
                    open.job.started_ms = started;
                }
                if !open.job.pids.contains(&process.pid) && open.job.pids.len() < jobs::MAX_PIDS {
                    open.job.pids.push(process.pid);
                }
                on_gpu.entry(identity.key).or_default().push(process);
            }
            for (key, processes) in &on_gpu {
                let open = self.running.get_mut(key).expect("every job on the GPU runs");
                open.gpus.insert(reading.device);
                open.job.last_seen_ms = open.job.last_seen_ms.max(reading.at_ms);
                let f = &mut open.job.figures;
                // Memory NVML could not read (`None`) is unknown, not 0: it sets no peak.
                let known = processes.iter().any(|p| p.used_memory.is_some());
                let memory: u64 = processes.iter().filter_map(|p| p.used_memory).sum();
                match facts {
                    Some(facts) => {
                        f.bf16_capable &= facts.bf16;
                        if known && memory >= f.memory_peak_bytes {
                            f.memory_peak_bytes = memory;
                            f.memory_capacity_bytes = facts.memory_total;
                        }
                    }
                    None => {
                        f.bf16_capable = false;
                        f.memory_peak_bytes = f.memory_peak_bytes.max(memory);
                    }
                }
                *memory_now.entry(key.clone()).or_default() += memory;
            }
            // The interval since the GPU's previous reading, charged to the jobs on it now.
            let Some(interval) = self.accountant.charge_each(reading) else { continue };
            let mut per_job: BTreeMap<String, JobCharge> = BTreeMap::new();
            for (each, key) in interval.charges.iter().zip(&keys) {
                let entry = per_job.entry(key.clone()).or_insert(JobCharge { idle: true, ..JobCharge::default() });
                entry.seconds = entry.seconds.max(each.seconds);
                entry.share += each.share;
                // Idle only on evidence: a utilization gauge that read 0 (usage also counts a GPU
                // that gives none, e.g. under MIG), or the idle rule's flag on the process.
                entry.idle &= each.idle && (reading.gpu_util.is_some() || each.process.idle.is_some());
                entry.gpu_s += each.totals.gpu_s;
                entry.memory_gib_s += each.totals.memory_gib_s;
                entry.energy_j += each.totals.energy_j;
            }
            let shared_gpu = per_job.len() > 1;
            for (key, JobCharge { seconds, share, idle, gpu_s, memory_gib_s, energy_j }) in per_job {
                let Some(open) = self.running.get_mut(&key) else { continue };
                let share = share.clamp(0.0, 1.0);
                let f = &mut open.job.figures;
                f.held_s += seconds;
                f.gpu_s += gpu_s;
                f.energy_j += energy_j;
                if idle {
                    f.idle_s += seconds;
                }
                if shared_gpu {
                    f.shared_s += seconds;
                }
                open.memory_gib_s += memory_gib_s;
                let scaled = |v: Option<f64>| v.map(|v| v * share);
                let (sm, tensor, dram) = (scaled(means.sm), scaled(means.tensor), scaled(means.dram));
                if sm.is_some() {
                    f.activity_s += seconds;
                }
                open.sm.add(sm, seconds);
                open.tensor.add(tensor, seconds);
                open.dram.add(dram, seconds);
                if let Some(sm) = sm {
                    open.histogram[((sm * 100.0).round() as usize).min(BINS - 1)] += seconds;
                }
                let step = open.step(reading.at_ms);
                step.sm.add(sm, seconds);
                step.tensor.add(tensor, seconds);
                step.dram.add(dram, seconds);
            }
        }
        // Jobs gone from every GPU for long enough end at their last reading.
        let mut gone = Vec::new();
        for (key, open) in &mut self.running {
            if let Some(&memory) = memory_now.get(key) {
                let at = open.job.last_seen_ms;
                let step = open.step(at);
                step.memory = step.memory.max(memory);
                open.absent = 0;
                if !open.announced {
                    open.announced = true;
                    changes.started.push(open.snapshot(false));
                }
            } else {
                open.absent += 1;
                if open.absent >= ABSENT_READINGS {
                    gone.push(key.clone());
                }
            }
        }
        for key in gone {
            let open = self.running.remove(&key).expect("listed above");
            let mut job = open.snapshot(true);
            job.ended_ms = Some(job.last_seen_ms);
            job.outcome = open.outcome.unwrap_or(Outcome::Ended);
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back(job.clone());
            changes.ended.push(job);
        }
        changes
    }
}

#[cfg(test)]
mod tests;
