//! One attached process: what the registry keeps of it, how its report's results and
//! pending command are handled, when it turns stale or expires, and how the page sees it.

use shared::DeviceInfo;
use shared::bridge::{AttachedDevice, AttachedProcess, Command, CommandResult, EmptyCacheState, Report, TorchMemory};
use shared::processes::GpuProcess;

use super::allocator::AllocatorState;
use super::spans::SpanLog;
use super::{EXPIRE_AFTER_MAX_MS, EXPIRE_AFTER_MS, Notice};

/// How much of an allocator map a view carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MapDetail {
    /// Each device's totals only: no segments, no histogram (the list, reloaded every 2 s).
    Totals,
    /// Every segment (one process's detail).
    Whole,
}

#[derive(Debug)]
pub(super) struct Attached {
    pub(super) id: u64,
    /// Whose process it is: the PID's Unix user when this host shows the process, else the token
    /// user whose report created the entry. Only they (or an admin) may report for it.
    pub(super) owner: String,
    /// The token user whose report created the entry (the per-user caps count these).
    pub(super) reporter: String,
    /// The latest report without its spans and results (what the page shows).
    pub(super) report: Report,
    first_seen_ms: u64,
    pub(super) last_seen_ms: u64,
    spans: SpanLog,
    /// An empty_cache waiting for the next report.
    pub(super) pending: Option<u64>,
    /// An empty_cache handed to the process whose result has not come back.
    delivered: Option<u64>,
    pub(super) empty_cache: Option<EmptyCacheState>,
    pub(super) refusal_audited_ms: Option<u64>,
    /// Its allocator maps and out-of-memory errors.
    pub(super) allocator: AllocatorState,
}

impl Attached {
    /// The entry a process's first report creates.
    pub(super) fn new(id: u64, owner: &str, reporter: &str, report: &Report, now_ms: u64) -> Self {
        Attached {
            id,
            owner: owner.to_owned(),
            reporter: reporter.to_owned(),
            report: without_spans(report.clone()),
            first_seen_ms: now_ms,
            last_seen_ms: now_ms,
            spans: SpanLog::default(),
            pending: None,
            delivered: None,
            empty_cache: None,
            refusal_audited_ms: None,
            allocator: AllocatorState::default(),
        }
    }

    /// Takes a report's command results, spans and figures; returns the commands to hand back.
    pub(super) fn take(&mut self, report: Report, now_ms: u64, notices: &mut Vec<Notice>) -> Vec<Command> {
        self.take_results(&report.command_results, now_ms, notices);
        for span in &report.spans {
            self.spans.push(span);
        }
        let mut commands = self.hand_over_pending(report.allow_remote_empty_cache, now_ms, notices);
        commands.extend(self.allocator.hand_over(report.share_allocator_map));
        self.last_seen_ms = now_ms;
        self.report = without_spans(report);
        commands
    }

    /// Only the result of the command this entry was handed counts.
    fn take_results(&mut self, results: &[CommandResult], now_ms: u64, notices: &mut Vec<Notice>) {
        for result in results {
            if self.delivered != Some(result.id) {
                continue;
            }
            self.delivered = None;
            let released_bytes = if result.ok { result.released_bytes } else { 0 };
            if let Some(state) = self.empty_cache.as_mut().filter(|s| s.id == result.id) {
                state.done_ms = Some(now_ms);
                state.released_bytes = Some(released_bytes);
            }
            notices.push(Notice::Done { command: result.id, ok: result.ok, released_bytes });
        }
    }

    /// Hands a queued empty_cache over, unless the report withdrew consent since the request.
    fn hand_over_pending(&mut self, allow: bool, now_ms: u64, notices: &mut Vec<Notice>) -> Vec<Command> {
        let Some(command) = self.pending.take() else {
            return Vec::new();
        };
        if allow {
            self.delivered = Some(command);
            notices.push(Notice::Delivered { command });
            return vec![Command::EmptyCache { id: command }];
        }
        if let Some(state) = self.empty_cache.as_mut().filter(|s| s.id == command) {
            state.refused = true;
            state.done_ms = Some(now_ms);
        }
        notices.push(Notice::Withheld { command });
        Vec::new()
    }

    /// No report for three intervals (at least 5 s): a request would not be seen soon.
    pub(super) fn is_stale(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_seen_ms) > (3 * interval_ms(self.report.interval_s)).max(5_000)
    }

    /// Silent for longer than it is kept.
    pub(super) fn is_expired(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_seen_ms) > expiry_ms(self.report.interval_s)
    }

    /// The page's view, joined with NVML's rows for its PID, with the `recent` newest spans and
    /// as much of its allocator map as `map` says.
    pub(super) fn view(
        &self,
        devices: &[DeviceInfo],
        nvml: &[GpuProcess],
        now_ms: u64,
        recent: usize,
        map: MapDetail,
    ) -> AttachedProcess {
        let (allocator, map_request, ooms) = self.allocator.view(map);
        let rows: Vec<&GpuProcess> = nvml.iter().filter(|row| row.pid == self.report.pid).collect();
        let attached = self.report.devices.iter().map(|torch| attached_device(torch, devices, &rows)).collect();
        AttachedProcess {
            id: self.id,
            pid: self.report.pid,
            host: self.report.host.clone(),
            process_name: self.report.process_name.clone(),
            torch_version: self.report.torch_version.clone(),
            cuda_version: self.report.cuda_version.clone(),
            allow_remote_empty_cache: self.report.allow_remote_empty_cache,
            first_seen_ms: self.first_seen_ms,
            last_seen_ms: self.last_seen_ms,
            stale: self.is_stale(now_ms),
            pid_matched: !rows.is_empty(),
            user: rows.first().and_then(|row| row.user.clone()),
            devices: attached,
            spans: self.spans.summaries(),
            recent_spans: self.spans.recent(recent),
            empty_cache: self.empty_cache,
            share_allocator_map: self.report.share_allocator_map,
            allocator,
            map_request,
            ooms,
        }
    }
}

/// One torch device joined with its GPU (by UUID when reported) and NVML's figure for it.
fn attached_device(torch: &TorchMemory, devices: &[DeviceInfo], rows: &[&GpuProcess]) -> AttachedDevice {
    let gpu =
        torch.uuid.as_ref().and_then(|uuid| devices.iter().find(|d| &d.uuid == uuid)).map_or(torch.device, |d| d.index);
    let nvml_used = rows.iter().find(|row| row.device == gpu).and_then(|row| row.used_memory);
    AttachedDevice {
        torch: torch.clone(),
        gpu,
        nvml_used,
        overhead: nvml_used.map(|used| used.saturating_sub(torch.reserved)),
    }
}

/// A report as kept: its spans and results are taken apart.
fn without_spans(report: Report) -> Report {
    Report { spans: Vec::new(), command_results: Vec::new(), ..report }
}

fn interval_ms(interval_s: f64) -> u64 {
    (interval_s * 1000.0) as u64
}

/// How long a silent process is kept: ten intervals, at least [`EXPIRE_AFTER_MS`], at most [`EXPIRE_AFTER_MAX_MS`].
fn expiry_ms(interval_s: f64) -> u64 {
    (10 * interval_ms(interval_s)).clamp(EXPIRE_AFTER_MS, EXPIRE_AFTER_MAX_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_ten_intervals_within_bounds() {
        assert_eq!(expiry_ms(1.0), EXPIRE_AFTER_MS);
        assert_eq!(expiry_ms(120.0), 1_200_000);
        assert_eq!(expiry_ms(3_600.0), EXPIRE_AFTER_MAX_MS);
    }

    #[test]
    fn a_command_without_consent_is_withheld_and_marked_refused() {
        let report: Report = serde_json::from_value(serde_json::json!({
            "version": 1, "pid": 1, "host": "h", "process_name": "p", "torch_version": "2", "cuda_version": null,
            "interval_s": 1.0, "allow_remote_empty_cache": false, "devices": []
        }))
        .unwrap();
        let mut entry = Attached::new(1, "ana", "ana", &report, 0);
        entry.pending = Some(7);
        entry.empty_cache =
            Some(EmptyCacheState { id: 7, requested_ms: 0, done_ms: None, released_bytes: None, refused: false });
        let mut notices = Vec::new();
        assert!(entry.take(report, 10, &mut notices).is_empty());
        assert_eq!(notices, [Notice::Withheld { command: 7 }]);
        assert!(entry.empty_cache.unwrap().refused && entry.pending.is_none());
    }
}
