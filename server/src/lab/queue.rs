//! The queue every viewer sees: runs waiting or running, in submission order,
//! one at a time per GPU.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use shared::lab::{QueueEntry, Run, RunStatus};

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
    use crate::lab::store::tests::run;
    use shared::lab::ExperimentKind;

    #[test]
    fn positions_count_per_gpu_from_the_running_run() {
        let mut book = QueueBook::default();
        book.push(run(1, 0, ExperimentKind::Memory, RunStatus::Running), None);
        book.push(run(2, 1, ExperimentKind::Latency, RunStatus::Queued), None);
        book.push(run(3, 0, ExperimentKind::Transfer, RunStatus::Queued), None);
        book.push(run(4, 0, ExperimentKind::Latency, RunStatus::Queued), None);
        let shown: Vec<(u64, u32, u32)> = book.entries().iter().map(|e| (e.run.id, e.run.device, e.position)).collect();
        assert_eq!(shown, vec![(1, 0, 0), (3, 0, 1), (4, 0, 2), (2, 1, 1)]);
        assert_eq!(book.pending_on(0), 3);
        let mut p2p = run(5, 0, ExperimentKind::P2p, RunStatus::Queued);
        p2p.summary.devices = vec![0, 1];
        book.push(p2p, None);
        assert_eq!(book.pending_on(1), 2, "a p2p run occupies both of its GPUs");
        book.remove(1);
        assert_eq!(book.entries()[0].position, 1);
    }
}
