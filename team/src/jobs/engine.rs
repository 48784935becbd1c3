//! The jobs' thread and their handle. The thread follows the hub: each tick hands on the GPUs'
//! newest GPM windows (a lock and a copy; no NVML call, no SQLite), each slow-loop reading is
//! observed by the tracker. A job is written when it starts, every [`SAVE_EVERY`] while it
//! runs and when it ends, by the jobs store's own writer thread, so sampling never waits on SQLite.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use base::clock::Clock;
use shared::jobs::{EnergyTerms, Job, JobReport, JobsQuery, Outcome, Thresholds};
use store::jobs::{JobStore, JobStoreError};
use telemetry::Telemetry;
use telemetry::Update;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::tracker::{Changes, GpuFacts, Tracker};
use crate::usage::account::Reading;

/// How often running jobs are written: a crash loses at most this much of their figures.
pub const SAVE_EVERY: Duration = Duration::from_secs(10);

/// Ended jobs waiting for the notices (`notify`) to look at them.
const ENDED_QUEUE: usize = 1_024;

/// The jobs: the running ones in memory, every one in the store. Clones share them.
#[derive(Debug, Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    tracker: Mutex<Tracker>,
    store: JobStore,
    limits: Thresholds,
    energy: EnergyTerms,
    /// Every job as it ends, for the notices.
    ended: broadcast::Sender<Job>,
}

impl Jobs {
    /// Jobs over `store` for a server with `gpus`, whose processes are read every `period`.
    pub fn new(store: JobStore, gpus: &[GpuFacts], period: Duration, limits: Thresholds, energy: EnergyTerms) -> Self {
        let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
        let tracker = Tracker::new(period_ms, gpus, store.first_free_id());
        let (ended, _) = broadcast::channel(ENDED_QUEUE);
        Self { inner: Arc::new(Inner { tracker: Mutex::new(tracker), store, limits, energy, ended }) }
    }

    /// The facts the tracker needs of `telemetry`'s GPUs.
    pub fn gpu_facts(telemetry: &Telemetry) -> Vec<GpuFacts> {
        telemetry
            .devices()
            .iter()
            .map(|d| GpuFacts {
                index: d.index,
                memory_total: d.memory_total,
                bf16: d.compute_capability.as_ref().is_some_and(|c| c.major >= 8),
            })
            .collect()
    }

    pub fn persistent(&self) -> bool {
        self.inner.store.persistent()
    }

    /// The jobs' table, with what the notices keep beside it.
    pub fn store(&self) -> &JobStore {
        &self.inner.store
    }

    /// Each job as it ends, from now on.
    pub fn subscribe_ended(&self) -> broadcast::Receiver<Job> {
        self.inner.ended.subscribe()
    }

    pub fn limits(&self) -> &Thresholds {
        &self.inner.limits
    }

    /// `job` with its verdicts and what its energy cost.
    pub fn report(&self, job: Job) -> JobReport {
        JobReport::new(job, &self.inner.limits, &self.inner.energy)
    }

    /// The running jobs now (with their series when `with_series`).
    pub fn running(&self, with_series: bool) -> Vec<Job> {
        base::sync::lock(&self.inner.tracker).running(with_series)
    }

    /// Marks the running job with process `pid` to end as `outcome`, for what happened at
    /// `at_ms` (ms since the epoch); false when none has it or it started later.
    pub fn mark(&self, pid: u32, outcome: Outcome, at_ms: u64) -> bool {
        base::sync::lock(&self.inner.tracker).mark(pid, outcome, at_ms)
    }

    /// The running jobs `/metrics` exports: those that have held GPUs for `--job-verdict-after`,
    /// so a test that touches CUDA for a second makes no series.
    pub fn running_for_metrics(&self) -> Vec<Job> {
        let least = self.inner.limits.min_held_s;
        self.running(false).into_iter().filter(|j| j.figures.held_s >= least).collect()
    }

    /// The running and newest ended jobs as the tracker has them, by id.
    fn live(&self, with_series: bool) -> std::collections::BTreeMap<u64, Job> {
        let tracker = base::sync::lock(&self.inner.tracker);
        let mut live: std::collections::BTreeMap<u64, Job> =
            tracker.recent_ended().map(|j| (j.id, j.clone())).collect();
        live.extend(tracker.running(with_series).into_iter().map(|j| (j.id, j)));
        live
    }

    /// The jobs `query` asks for, newest first, and whether more match (blocking: it reads the
    /// store). The tracker's jobs win over their rows (a stored running row may be up to
    /// [`SAVE_EVERY`] old, or the row of a job that just ended still be queued), and a running
    /// job whose row is not written yet is listed too.
    pub fn list(&self, query: &JobsQuery) -> Result<(Vec<Job>, bool), JobStoreError> {
        let (mut jobs, mut more) = self.inner.store.list(query.clone())?;
        let mut live = self.live(false);
        for job in jobs.iter_mut().filter(|j| j.ended_ms.is_none()) {
            if let Some(fresh) = live.remove(&job.id) {
                *job = fresh;
            }
        }
        // Filters are checked again: a row's state may have changed since it was written.
        jobs.retain(|j| query.matches(j));
        let oldest = jobs.last().map(|j| j.id);
        let listed: std::collections::BTreeSet<u64> = jobs.iter().map(|j| j.id).collect();
        let full = jobs.len() >= query.limit as usize;
        jobs.extend(
            live.into_values()
                .filter(|j| !listed.contains(&j.id) && query.matches(j) && (!full || oldest.is_none_or(|o| j.id > o))),
        );
        shared::order::sort_by(&mut jobs, |a, b| b.id.cmp(&a.id));
        if jobs.len() > query.limit as usize {
            jobs.truncate(query.limit as usize);
            more = true;
        }
        Ok((jobs, more))
    }

    /// One job with its series: the tracker's as it stands, else the stored one (blocking).
    pub fn get(&self, id: u64) -> Result<Option<Job>, JobStoreError> {
        if let Some(live) = self.live(true).remove(&id) {
            return Ok(Some(live));
        }
        self.inner.store.get(id)
    }

    /// Writes every running job as it stands and waits for the writer (blocking; at shutdown).
    pub fn sync(&self) {
        self.inner.store.save(self.running(true));
        self.inner.store.sync();
    }

    /// One tick's GPM windows.
    fn windows(&self, samples: &[shared::DeviceSample]) {
        let mut tracker = base::sync::lock(&self.inner.tracker);
        for sample in samples {
            if let Some(activity) = &sample.activity {
                tracker.window(sample.index, activity);
            }
        }
    }

    /// One slow-loop reading; stores the jobs it started and ended.
    fn observe(&self, details: &shared::Details, utilization: &[(u32, Option<u32>)]) {
        let readings: Vec<Reading<'_>> = details
            .health
            .iter()
            .map(|health| Reading {
                device: health.index,
                at_ms: health.timestamp_ms,
                energy_mj: health.energy_mj,
                gpu_util: utilization.iter().find(|(i, _)| *i == health.index).and_then(|(_, u)| *u),
                processes: details.processes.iter().filter(|p| p.device == health.index).collect(),
            })
            .collect();
        let Changes { started, ended } = base::sync::lock(&self.inner.tracker).observe(&readings);
        for job in &ended {
            tracing::debug!(job = job.id, owner = %job.owner, "job {} ended ({})", job.name, job.outcome.name());
            // None listening (no notices) is fine.
            let _ = self.inner.ended.send(job.clone());
        }
        self.inner.store.save(started.into_iter().chain(ended).collect());
    }
}

/// Starts the jobs' thread; it saves the running jobs and ends when `shutdown` turns true or the
/// hub goes away.
pub fn spawn(
    jobs: Jobs,
    telemetry: &Arc<Telemetry>,
    clock: &Clock,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let clock = clock.clone();
    let runtime = tokio::runtime::Handle::current();
    let mut updates = telemetry.subscribe();
    std::thread::Builder::new().name("gpudash-jobs".into()).spawn(move || {
        let mut saved = clock.now();
        let mut utilization: Vec<(u32, Option<u32>)> = Vec::new();
        loop {
            let woke = runtime.block_on(async {
                tokio::select! {
                    update = tokio::time::timeout(SAVE_EVERY, updates.recv()) => Some(update),
                    _ = shutdown.changed() => None,
                }
            });
            match woke {
                None | Some(Ok(Err(RecvError::Closed))) => break,
                Some(Ok(Ok(Update::Tick(tick)))) => {
                    utilization = tick.samples.iter().map(|s| (s.index, s.gpu_util)).collect();
                    jobs.windows(&tick.samples);
                }
                Some(Ok(Ok(Update::Details(details)))) => jobs.observe(&details, &utilization),
                // Behind: the next reading's interval covers what was skipped (the gap cap bounds it).
                Some(Ok(Err(RecvError::Lagged(_)))) | Some(Err(_)) => {}
            }
            if *shutdown.borrow() {
                break;
            }
            if clock.now().saturating_duration_since(saved) >= SAVE_EVERY {
                saved = clock.now();
                // The running jobs as they stand, and the ended ones written again (a save a
                // full queue dropped, or a busy database refused, is not lost for good).
                let ended: Vec<Job> = base::sync::lock(&jobs.inner.tracker).recent_ended().cloned().collect();
                jobs.inner.store.save(jobs.running(true).into_iter().chain(ended).collect());
            }
        }
        jobs.sync();
    })
}
