//! What the page knows about the GPU lab: its status and queue (`GET /api/lab`
//! and `lab` events), recent runs, and the latest empty_cache per GPU.
//!
//! Pure data, so the rules (a status replaces the queue, progress moves one
//! entry, a run event updates the recent list) are tested here.

use shared::lab::{LabEvent, LabStatus, QueueEntry, RunStatus, RunSummary, TrimOutcome};

/// How many runs the recent list keeps.
pub const RECENT_RUNS: usize = 20;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabState {
    /// `None` until `GET /api/lab` answered.
    pub status: Option<LabStatus>,
    /// Newest first, at most [`RECENT_RUNS`].
    pub recent: Vec<RunSummary>,
    /// The latest trim of each GPU's pool (empty_cache or the idle release).
    pub trims: Vec<TrimOutcome>,
}

impl LabState {
    /// Applies one WebSocket `lab` event.
    pub fn apply(&mut self, event: LabEvent) {
        match event {
            LabEvent::Status(status) => self.set_status(status),
            LabEvent::Run(run) => self.upsert(run),
            LabEvent::Progress { id, progress, .. } => {
                if let Some(entry) = self.queue_entry_mut(id) {
                    entry.progress = Some(progress);
                }
            }
            LabEvent::Trimmed(trim) => {
                self.trims.retain(|t| t.device != trim.device);
                self.trims.push(trim);
            }
        }
    }

    /// Replaces status and queue, keeping the recent list's entries for queued runs up to date.
    pub fn set_status(&mut self, status: LabStatus) {
        for entry in &status.queue {
            if let Some(known) = self.recent.iter_mut().find(|r| r.id == entry.run.id) {
                *known = entry.run.clone();
            }
        }
        self.status = Some(status);
    }

    /// Replaces the recent list with `GET /api/runs` (newest first).
    pub fn set_recent(&mut self, mut runs: Vec<RunSummary>) {
        runs.truncate(RECENT_RUNS);
        self.recent = runs;
    }

    /// A run changed state: it enters or moves in the recent list, and leaves the queue once final.
    pub fn upsert(&mut self, run: RunSummary) {
        if let Some(status) = &mut self.status {
            if run.status.is_final() {
                let listed = status.queue.len();
                status.queue.retain(|e| e.run.id != run.id);
                if status.queue.len() < listed {
                    // Counted too: keep "… and K more" and busy GPUs right until the next status.
                    status.queue_total = status.queue_total.saturating_sub(1);
                    for device in status.devices.iter_mut().filter(|d| run.devices.contains(&d.index)) {
                        device.pending = device.pending.saturating_sub(1);
                    }
                }
            } else if let Some(entry) = status.queue.iter_mut().find(|e| e.run.id == run.id) {
                entry.run = run.clone();
            }
        }
        match self.recent.iter_mut().find(|r| r.id == run.id) {
            Some(known) => *known = run,
            None => {
                let at = self.recent.partition_point(|r| r.id > run.id);
                self.recent.insert(at, run);
                self.recent.truncate(RECENT_RUNS);
            }
        }
    }

    pub fn queue(&self) -> &[QueueEntry] {
        self.status.as_ref().map_or(&[], |s| &s.queue)
    }

    pub fn queue_entry(&self, id: u64) -> Option<&QueueEntry> {
        self.queue().iter().find(|e| e.run.id == id)
    }

    fn queue_entry_mut(&mut self, id: u64) -> Option<&mut QueueEntry> {
        self.status.as_mut()?.queue.iter_mut().find(|e| e.run.id == id)
    }

    /// The latest known state of run `id`, from the queue or the recent list.
    pub fn run_status(&self, id: u64) -> Option<RunStatus> {
        self.queue_entry(id).map(|e| e.run.status).or_else(|| self.recent.iter().find(|r| r.id == id).map(|r| r.status))
    }

    /// True while GPU `device` has runs queued or running (empty_cache is refused then): the status counts
    /// them, since its queue lists only the first.
    pub fn busy(&self, device: u32) -> bool {
        let counted = self.status.as_ref().and_then(|s| s.devices.iter().find(|d| d.index == device));
        counted.is_some_and(|d| d.pending > 0)
            || self.queue().iter().any(|e| e.run.device == device || e.run.devices.contains(&device))
    }

    /// Queued runs the status counts but does not list.
    pub fn unlisted(&self) -> u32 {
        self.status.as_ref().map_or(0, LabStatus::unlisted)
    }

    pub fn trim(&self, device: u32) -> Option<&TrimOutcome> {
        self.trims.iter().find(|t| t.device == device)
    }

    pub fn available(&self) -> Option<bool> {
        self.status.as_ref().map(|s| s.available)
    }
}

/// Notes longer than this collapse to their first sentence.
pub const LONG_NOTE: usize = 160;

/// A result note as the page shows it: whole when short; a long one as its first sentence,
/// with the rest (or, with no sentence early on, the whole note) behind it.
pub fn note_parts(note: &str) -> (String, Option<String>) {
    if note.chars().count() <= LONG_NOTE {
        return (note.to_owned(), None);
    }
    let sentence_end = note.match_indices(". ").map(|(i, _)| i + 1).find(|&i| i >= 20);
    match sentence_end.filter(|&i| note[..i].chars().count() <= LONG_NOTE) {
        Some(end) => (note[..end].to_owned(), Some(note[end..].trim_start().to_owned())),
        None => {
            let cut: String = note.chars().take(100).collect();
            let cut = cut.rsplit_once(' ').map_or(cut.as_str(), |(head, _)| head).to_owned();
            (format!("{cut}…"), Some(note.to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use shared::lab::{ExperimentKind, Progress};

    use super::*;

    #[test]
    fn long_notes_collapse_to_their_first_sentence() {
        assert_eq!(note_parts("Short."), ("Short.".to_owned(), None));
        let long = format!("Host buffers are written before they are timed. {}", "More words here. ".repeat(12));
        let (summary, rest) = note_parts(&long);
        assert_eq!(summary, "Host buffers are written before they are timed.");
        assert!(rest.unwrap().starts_with("More words here."));
        let run_on = "word ".repeat(60);
        let (summary, rest) = note_parts(&run_on);
        assert!(summary.ends_with("word…") && summary.chars().count() <= 101, "{summary}");
        assert_eq!(rest.as_deref(), Some(run_on.as_str()), "no sentence: the whole note behind it");
    }

    fn run(id: u64, device: u32, status: RunStatus) -> RunSummary {
        RunSummary {
            id,
            device,
            devices: vec![device],
            kind: ExperimentKind::named("latency"),
            status,
            requested_by: "ana".into(),
            submitted_ms: 1,
            started_ms: None,
            finished_ms: None,
            simulated: true,
            passed: None,
            error: None,
        }
    }

    fn status(queue: Vec<RunSummary>) -> LabStatus {
        LabStatus {
            available: true,
            reason: None,
            simulated: true,
            devices: vec![],
            queue_total: queue.len() as u32,
            queue_per_user: 8,
            queue: queue
                .into_iter()
                .enumerate()
                .map(|(i, run)| QueueEntry { run, position: i as u32, progress: None })
                .collect(),
            time_limit_ms: 120_000,
            idle_release_ms: 60_000,
        }
    }

    #[test]
    fn progress_moves_its_entry_and_a_final_run_leaves_the_queue() {
        let mut lab = LabState::default();
        lab.apply(LabEvent::Status(status(vec![run(7, 0, RunStatus::Running), run(8, 0, RunStatus::Queued)])));
        assert!(lab.busy(0));
        assert!(!lab.busy(1));
        let progress = Progress { fraction: 0.4, message: "h2d".into() };
        lab.apply(LabEvent::Progress { id: 7, device: 0, progress: progress.clone() });
        assert_eq!(lab.queue_entry(7).and_then(|e| e.progress.clone()), Some(progress));

        lab.apply(LabEvent::Run(run(7, 0, RunStatus::Succeeded)));
        assert_eq!(lab.queue().len(), 1);
        assert_eq!(lab.run_status(7), Some(RunStatus::Succeeded));
        assert_eq!(lab.run_status(8), Some(RunStatus::Queued));
        assert_eq!(lab.run_status(9), None);
    }

    #[test]
    fn a_long_queue_is_counted_beyond_the_runs_listed() {
        let mut lab = LabState::default();
        let mut long = status(vec![run(7, 0, RunStatus::Running)]);
        long.queue_total = 1000;
        long.devices = (0..2)
            .map(|index| shared::lab::LabDevice {
                index,
                context_open: false,
                pool_reserved: 0,
                pool_used: 0,
                pending: if index == 0 { 1 } else { 999 },
            })
            .collect();
        lab.apply(LabEvent::Status(long));
        assert_eq!(lab.unlisted(), 999);
        assert!(lab.busy(1), "GPU 1's runs are counted though none is listed");
        assert!(lab.busy(0));
        // The listed run ends: it leaves the counts too, not only the list.
        lab.apply(LabEvent::Run(run(7, 0, RunStatus::Succeeded)));
        assert_eq!(lab.unlisted(), 999);
        assert!(!lab.busy(0));
    }

    #[test]
    fn recent_runs_stay_newest_first_and_bounded() {
        let mut lab = LabState::default();
        lab.set_recent((1..=30).rev().map(|id| run(id, 0, RunStatus::Succeeded)).collect());
        assert_eq!(lab.recent.len(), RECENT_RUNS);
        lab.upsert(run(31, 1, RunStatus::Queued));
        assert_eq!(lab.recent.first().map(|r| r.id), Some(31));
        assert_eq!(lab.recent.len(), RECENT_RUNS);
        lab.upsert(run(31, 1, RunStatus::Running));
        assert_eq!(lab.recent.iter().filter(|r| r.id == 31).count(), 1);
        assert_eq!(lab.run_status(31), Some(RunStatus::Running));
    }

    #[test]
    fn trims_keep_the_latest_per_gpu() {
        let mut lab = LabState::default();
        let trim =
            |device, released_bytes| TrimOutcome { device, reserved_before: 0, reserved_after: 0, released_bytes };
        lab.apply(LabEvent::Trimmed(trim(0, 5)));
        lab.apply(LabEvent::Trimmed(trim(1, 6)));
        lab.apply(LabEvent::Trimmed(trim(0, 7)));
        assert_eq!(lab.trim(0).map(|t| t.released_bytes), Some(7));
        assert_eq!(lab.trims.len(), 2);
    }
}
