//! The queue every viewer sees: runs waiting or running, in submission order,
//! one at a time per GPU.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use shared::lab::{QueueEntry, Run, RunStatus};

use super::experiments::footprint;
use super::gang::Gate;

/// A run that has not ended, and the flag that cancels it.
#[derive(Debug, Clone)]
pub struct Active {
    pub run: Run,
    pub cancel: Arc<AtomicBool>,
    /// Multi-GPU runs only: where it meets the other GPUs' workers.
    pub gate: Option<Arc<Gate>>,
}

/// Queued and running runs of every GPU.
#[derive(Debug, Default)]
pub struct QueueBook {
    active: Vec<Active>,
}

impl QueueBook {
    pub fn push(&mut self, run: Run, gate: Option<Arc<Gate>>) -> Arc<AtomicBool> {
        let cancel = Arc::new(AtomicBool::new(false));
        self.active.push(Active { run, cancel: cancel.clone(), gate });
        cancel
    }

    pub fn get(&self, id: u64) -> Option<&Active> {
        self.active.iter().find(|a| a.run.summary.id == id)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Active> {
        self.active.iter_mut().find(|a| a.run.summary.id == id)
    }

    pub fn remove(&mut self, id: u64) -> Option<Active> {
        let index = self.active.iter().position(|a| a.run.summary.id == id)?;
        Some(self.active.remove(index))
    }

    /// Asks every run to stop (shutdown).
    pub fn cancel_all(&self) {
        for a in &self.active {
            a.cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Runs queued or running that occupy `device` (a p2p run occupies every GPU of its pairs).
    pub fn pending_on(&self, device: u32) -> usize {
        self.active.iter().filter(|a| a.run.summary.device == device || a.run.summary.devices.contains(&device)).count()
    }

    /// Runs queued or running in all.
    pub fn total(&self) -> usize {
        self.active.len()
    }

    /// Runs `user` has queued or running.
    pub fn count_by(&self, user: &str) -> usize {
        self.active.iter().filter(|a| a.run.summary.requested_by == user).count()
    }

    /// Host memory (page-locked and ordinary) the running runs other than `except` planned.
    pub fn host_bytes_running(&self, except: Option<u64>) -> u64 {
        self.active
            .iter()
            .filter(|a| a.run.summary.status == RunStatus::Running && Some(a.run.summary.id) != except)
            // A run whose parameters do not read never starts (its guard refuses it): it holds nothing.
            .filter_map(|a| footprint(&a.run.params).ok())
            .map(|f| f.host_total())
            .fold(0, u64::saturating_add)
    }

    /// The queue as a status lists it: every running run and at most `waiting` waiting ones, the next
    /// to start on each GPU first (every GPU's position 1, then every GPU's 2, …), in order per GPU.
    pub fn listed(&self, waiting: usize) -> Vec<QueueEntry> {
        let (mut listed, mut queued): (Vec<QueueEntry>, Vec<QueueEntry>) =
            self.entries().into_iter().partition(|e| e.position == 0);
        queued.sort_by_key(|e| (e.position, e.run.device));
        queued.truncate(waiting);
        listed.append(&mut queued);
        listed.sort_by_key(|e| (e.run.device, e.position));
        listed
    }

    /// The queue as shown: per GPU, the running run at position 0, then the waiting ones from 1.
    pub fn entries(&self) -> Vec<QueueEntry> {
        let mut next_position = std::collections::HashMap::<u32, u32>::new();
        let mut entries: Vec<QueueEntry> = self
            .active
            .iter()
            .filter(|a| a.run.summary.status == RunStatus::Running)
            .map(|a| {
                next_position.insert(a.run.summary.device, 1);
                QueueEntry { run: a.run.summary.clone(), position: 0, progress: a.run.progress.clone() }
            })
            .collect();
        for a in self.active.iter().filter(|a| a.run.summary.status == RunStatus::Queued) {
            let position = next_position.entry(a.run.summary.device).or_insert(1);
            entries.push(QueueEntry { run: a.run.summary.clone(), position: *position, progress: None });
            *position += 1;
        }
        entries.sort_by_key(|e| (e.run.device, e.position));
        entries
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use shared::lab::ExperimentKind;
    use store::runs::testing::run;

    #[test]
    fn positions_count_per_gpu_from_the_running_run() {
        let mut book = QueueBook::default();
        book.push(run(1, 0, ExperimentKind::named("memory"), RunStatus::Running), None);
        book.push(run(2, 1, ExperimentKind::named("latency"), RunStatus::Queued), None);
        book.push(run(3, 0, ExperimentKind::named("transfer"), RunStatus::Queued), None);
        book.push(run(4, 0, ExperimentKind::named("latency"), RunStatus::Queued), None);
        let shown: Vec<(u64, u32, u32)> = book.entries().iter().map(|e| (e.run.id, e.run.device, e.position)).collect();
        assert_eq!(shown, vec![(1, 0, 0), (3, 0, 1), (4, 0, 2), (2, 1, 1)]);
        assert_eq!(book.pending_on(0), 3);
        let mut p2p = run(5, 0, ExperimentKind::named("p2p"), RunStatus::Queued);
        p2p.summary.devices = vec![0, 1];
        book.push(p2p, None);
        assert_eq!(book.pending_on(1), 2, "a p2p run occupies both of its GPUs");
        book.remove(1);
        assert_eq!(book.entries()[0].position, 1);
    }

    #[test]
    fn a_long_queue_lists_the_running_runs_and_the_next_to_start_on_each_gpu() {
        let mut book = QueueBook::default();
        book.push(run(1, 0, ExperimentKind::named("latency"), RunStatus::Running), None);
        for id in 2..=100 {
            book.push(run(id, 0, ExperimentKind::named("latency"), RunStatus::Queued), None);
        }
        book.push(run(101, 1, ExperimentKind::named("latency"), RunStatus::Queued), None);
        let shown: Vec<(u64, u32, u32)> = book.listed(3).iter().map(|e| (e.run.id, e.run.device, e.position)).collect();
        assert_eq!(shown, vec![(1, 0, 0), (2, 0, 1), (3, 0, 2), (101, 1, 1)], "GPU 1's next run is not crowded out");
        assert_eq!(book.total(), 101);
        assert_eq!(book.listed(1000).len(), 101);
    }

    #[test]
    fn runs_are_counted_per_user_and_running_ones_hold_host_memory() {
        let mut book = QueueBook::default();
        book.push(run(1, 0, ExperimentKind::named("streams"), RunStatus::Running), None);
        let mut queued = run(2, 1, ExperimentKind::named("streams"), RunStatus::Queued);
        queued.summary.requested_by = "bob".into();
        book.push(queued, None);
        let held = footprint(&crate::experiments::find(&ExperimentKind::named("streams")).unwrap().defaults())
            .unwrap()
            .host_total();
        assert!(held > 0);
        assert_eq!(book.host_bytes_running(Some(2)), held, "only running runs hold host memory");
        assert_eq!(book.host_bytes_running(Some(1)), 0, "a run does not count itself");
        assert_eq!((book.count_by("bob"), book.count_by("nobody")), (1, 0));
    }
}
