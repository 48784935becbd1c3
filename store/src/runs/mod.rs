//! Where the GPU lab's runs are kept: a [`RunStore`] trait over the wire's
//! [`Run`]. Servers with history keep runs in SQLite ([`SqliteRunStore`]);
//! `--no-history` and `gpudash bench` use the in-memory store here.
//!
//! Storage knows no lab: everything here is in terms of `shared::lab` types.

mod sqlite;

use std::collections::BTreeMap;
use std::sync::Mutex;

use shared::lab::{ExperimentKind, Run, RunStatus, RunSummary};

pub use sqlite::{INTERRUPTED, SqliteRunStore};

/// A run store that failed; the message says what to fix (disk full, permissions).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run store: {0}")]
pub struct RunStoreError(pub String);

/// Which runs to list, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub device: Option<u32>,
    pub kind: Option<ExperimentKind>,
    pub status: Option<RunStatus>,
    /// Only runs with a smaller id.
    pub before: Option<u64>,
    pub limit: usize,
}

impl RunFilter {
    fn matches(&self, run: &Run) -> bool {
        let s = &run.summary;
        self.device.is_none_or(|d| s.device == d)
            && self.kind.as_ref().is_none_or(|k| s.kind == *k)
            && self.status.is_none_or(|st| s.status == st)
            && self.before.is_none_or(|b| s.id < b)
    }
}

/// Keeps every run: parameters, GPU, driver, figures and correctness outcome.
/// Blocking: called from worker threads and `spawn_blocking`.
pub trait RunStore: Send + Sync {
    /// A fresh id, larger than any stored.
    fn next_id(&self) -> Result<u64, RunStoreError>;
    /// Inserts or replaces the run with this id.
    fn save(&self, run: &Run) -> Result<(), RunStoreError>;
    fn get(&self, id: u64) -> Result<Option<Run>, RunStoreError>;
    fn list(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, RunStoreError>;
}

/// Runs in memory, the newest `capacity` kept; lost when the server stops.
#[derive(Debug)]
pub struct MemoryRunStore {
    runs: Mutex<(u64, BTreeMap<u64, Run>)>,
    capacity: usize,
}

impl MemoryRunStore {
    pub fn new(capacity: usize) -> Self {
        Self { runs: Mutex::new((0, BTreeMap::new())), capacity: capacity.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Run>)> {
        base::sync::lock(&self.runs)
    }
}

impl Default for MemoryRunStore {
    fn default() -> Self {
        Self::new(1000)
    }
}

impl RunStore for MemoryRunStore {
    fn next_id(&self) -> Result<u64, RunStoreError> {
        let mut runs = self.lock();
        runs.0 += 1;
        Ok(runs.0)
    }

    fn save(&self, run: &Run) -> Result<(), RunStoreError> {
        let mut runs = self.lock();
        runs.1.insert(run.summary.id, run.clone());
        while runs.1.len() > self.capacity {
            runs.1.pop_first();
        }
        Ok(())
    }

    fn get(&self, id: u64) -> Result<Option<Run>, RunStoreError> {
        Ok(self.lock().1.get(&id).cloned())
    }

    fn list(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, RunStoreError> {
        let runs = self.lock();
        let limit = if filter.limit == 0 { usize::MAX } else { filter.limit };
        Ok(runs.1.values().rev().filter(|r| filter.matches(r)).take(limit).map(|r| r.summary.clone()).collect())
    }
}

/// Fixtures for tests here and in other crates (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;
    use shared::lab::{RunEnvironment, RunPlan};

    /// A run with default parameters and no result, as the wire types make it.
    pub fn run(id: u64, device: u32, kind: ExperimentKind, status: RunStatus) -> Run {
        Run {
            summary: RunSummary {
                id,
                device,
                devices: vec![device],
                kind: kind.clone(),
                status,
                requested_by: "t".into(),
                submitted_ms: id,
                started_ms: None,
                finished_ms: None,
                simulated: true,
                passed: None,
                error: None,
            },
            params: shared::lab::ExperimentParams::defaults(kind),
            force: false,
            forced_by_admin: false,
            plan: RunPlan::default(),
            environment: RunEnvironment::default(),
            progress: None,
            result: None,
            previous_id: None,
            takeaway: None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::testing::run;
    use super::*;

    #[test]
    fn lists_newest_first_with_filters_and_a_cap() {
        let store = MemoryRunStore::new(3);
        for id in 1..=4 {
            assert_eq!(store.next_id().unwrap(), id);
            let kind = if id % 2 == 0 { ExperimentKind::named("memory") } else { ExperimentKind::named("latency") };
            store.save(&run(id, 0, kind, RunStatus::Succeeded)).unwrap();
        }
        assert!(store.get(1).unwrap().is_none(), "the oldest is dropped past capacity");
        let all: Vec<u64> = store.list(&RunFilter::default()).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(all, vec![4, 3, 2]);
        let filter =
            RunFilter { kind: Some(ExperimentKind::named("memory")), before: Some(4), limit: 1, ..Default::default() };
        assert_eq!(store.list(&filter).unwrap()[0].id, 2);
    }
}
