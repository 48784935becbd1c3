//! The PyTorch bridge: attached training processes report their caching
//! allocator's figures and their spans; the registry joins them with NVML's
//! process rows and carries remote `empty_cache` requests back to them.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use shared::DeviceInfo;
use shared::bridge::{
    AttachedDevice, AttachedProcess, Command, EmptyCacheState, Report, ReportAnswer, Span, SpanSummary,
};
use shared::processes::GpuProcess;

/// Spans kept per process for the summaries.
const SPANS_KEPT: usize = 2_000;
/// Newest spans handed to the page for chart annotations.
const RECENT_SPANS: usize = 50;
/// Limits of one report, so a confused client cannot bloat the server.
pub const MAX_DEVICES: usize = 64;
pub const MAX_SPANS_PER_REPORT: usize = 500;
const MAX_NAME: usize = 200;
const MAX_PROCESS_NAME: usize = 1_000;

/// Why a report or request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BridgeError {
    #[error("{0}")]
    Invalid(String),
    #[error("no attached process with id {0}")]
    NoProcess(u64),
    #[error(
        "process {0} did not allow remote empty_cache; it must attach with gpudash.attach(..., allow_remote_empty_cache=True)"
    )]
    NotAllowed(u32),
    #[error("process {0} is stale (no report for a while): it would not see the request")]
    Stale(u32),
}

#[derive(Debug)]
struct Attached {
    id: u64,
    report: Report,
    first_seen_ms: u64,
    last_seen_ms: u64,
    spans: VecDeque<Span>,
    pending: Vec<Command>,
    empty_cache: Option<EmptyCacheState>,
}

/// Every attached process, by (host, pid).
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    processes: HashMap<(String, u32), Attached>,
}

impl Registry {
    /// Takes a report and returns the commands waiting for that process.
    pub fn report(&self, report: Report, now_ms: u64) -> Result<ReportAnswer, BridgeError> {
        validate(&report)?;
        let mut inner = self.lock();
        let key = (report.host.clone(), report.pid);
        let next_id = inner.next_id + 1;
        let entry = inner.processes.entry(key).or_insert_with(|| Attached {
            id: next_id,
            report: report.clone(),
            first_seen_ms: now_ms,
            last_seen_ms: now_ms,
            spans: VecDeque::new(),
            pending: Vec::new(),
            empty_cache: None,
        });
        if entry.id == next_id {
            tracing::info!(pid = report.pid, host = %report.host, "PyTorch process attached: {}", report.process_name);
        }
        let fresh_id = entry.id;
        for result in &report.command_results {
            if let Some(state) = entry.empty_cache.as_mut().filter(|s| s.id == result.id) {
                state.done_ms = Some(now_ms);
                state.released_bytes = Some(if result.ok { result.released_bytes } else { 0 });
            }
        }
        entry.spans.extend(report.spans.iter().cloned());
        while entry.spans.len() > SPANS_KEPT {
            entry.spans.pop_front();
        }
        entry.last_seen_ms = now_ms;
        entry.report = Report { spans: Vec::new(), command_results: Vec::new(), ..report };
        let commands = std::mem::take(&mut entry.pending);
        if fresh_id == next_id {
            inner.next_id = next_id;
        }
        Ok(ReportAnswer { commands })
    }

    /// Queues an empty_cache for process `id`; it runs at the client's next report.
    pub fn request_empty_cache(&self, id: u64, now_ms: u64) -> Result<EmptyCacheState, BridgeError> {
        let mut inner = self.lock();
        let command_id = inner.next_id + 1;
        let process = inner.processes.values_mut().find(|p| p.id == id).ok_or(BridgeError::NoProcess(id))?;
        if !process.report.allow_remote_empty_cache {
            return Err(BridgeError::NotAllowed(process.report.pid));
        }
        if is_stale(process, now_ms) {
            return Err(BridgeError::Stale(process.report.pid));
        }
        let state = EmptyCacheState { id: command_id, requested_ms: now_ms, done_ms: None, released_bytes: None };
        process.pending.push(Command::EmptyCache { id: command_id });
        process.empty_cache = Some(state);
        inner.next_id = command_id;
        Ok(state)
    }

    /// Every attached process joined with NVML's rows for its PID, newest first.
    pub fn list(&self, devices: &[DeviceInfo], nvml: &[GpuProcess], now_ms: u64) -> Vec<AttachedProcess> {
        let inner = self.lock();
        let mut out: Vec<AttachedProcess> = inner.processes.values().map(|p| view(p, devices, nvml, now_ms)).collect();
        out.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(a.pid.cmp(&b.pid)));
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn is_stale(process: &Attached, now_ms: u64) -> bool {
    let interval_ms = (process.report.interval_s * 1000.0) as u64;
    now_ms.saturating_sub(process.last_seen_ms) > (3 * interval_ms).max(5_000)
}

fn view(p: &Attached, devices: &[DeviceInfo], nvml: &[GpuProcess], now_ms: u64) -> AttachedProcess {
    let rows: Vec<&GpuProcess> = nvml.iter().filter(|row| row.pid == p.report.pid).collect();
    let attached = p
        .report
        .devices
        .iter()
        .map(|torch| {
            let gpu = torch
                .uuid
                .as_ref()
                .and_then(|uuid| devices.iter().find(|d| &d.uuid == uuid))
                .map_or(torch.device, |d| d.index);
            let nvml_used = rows.iter().find(|row| row.device == gpu).and_then(|row| row.used_memory);
            AttachedDevice {
                torch: torch.clone(),
                gpu,
                nvml_used,
                overhead: nvml_used.map(|used| used.saturating_sub(torch.reserved)),
            }
        })
        .collect();
    AttachedProcess {
        id: p.id,
        pid: p.report.pid,
        host: p.report.host.clone(),
        process_name: p.report.process_name.clone(),
        torch_version: p.report.torch_version.clone(),
        cuda_version: p.report.cuda_version.clone(),
        allow_remote_empty_cache: p.report.allow_remote_empty_cache,
        first_seen_ms: p.first_seen_ms,
        last_seen_ms: p.last_seen_ms,
        stale: is_stale(p, now_ms),
        pid_matched: !rows.is_empty(),
        user: rows.first().and_then(|row| row.user.clone()),
        devices: attached,
        spans: summarize(&p.spans),
        recent_spans: p.spans.iter().skip(p.spans.len().saturating_sub(RECENT_SPANS)).cloned().collect(),
        empty_cache: p.empty_cache,
    }
}

/// Count, p50/p99 time, last memory delta and highest peak per span name.
fn summarize(spans: &VecDeque<Span>) -> Vec<SpanSummary> {
    let mut names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let of_name: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
            let mut times: Vec<f64> = of_name.iter().map(|s| s.elapsed_ms).collect();
            times.sort_by(f64::total_cmp);
            let pick = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
            SpanSummary {
                name: name.to_owned(),
                count: of_name.len() as u64,
                p50_ms: pick(0.5),
                p99_ms: pick(0.99),
                last_memory_delta: of_name.last().map_or(0, |s| s.memory_delta),
                max_memory_peak: of_name.iter().map(|s| s.memory_peak).max().unwrap_or(0),
            }
        })
        .collect()
}

fn validate(report: &Report) -> Result<(), BridgeError> {
    let bad = |m: String| Err(BridgeError::Invalid(m));
    if report.version != 1 {
        return bad(format!("protocol version {} is not supported; this server speaks version 1", report.version));
    }
    if report.pid == 0 {
        return bad("'pid' must be a process id, not 0".to_owned());
    }
    if report.host.is_empty() || report.host.len() > 255 {
        return bad("'host' must be 1 to 255 characters".to_owned());
    }
    if report.process_name.len() > MAX_PROCESS_NAME {
        return bad(format!("'process_name' is longer than {MAX_PROCESS_NAME} characters"));
    }
    if !(report.interval_s.is_finite() && (0.1..=3600.0).contains(&report.interval_s)) {
        return bad(format!("'interval_s' must be from 0.1 to 3600, not {}", report.interval_s));
    }
    if report.devices.len() > MAX_DEVICES {
        return bad(format!("at most {MAX_DEVICES} devices per report, not {}", report.devices.len()));
    }
    if report.spans.len() > MAX_SPANS_PER_REPORT {
        return bad(format!("at most {MAX_SPANS_PER_REPORT} spans per report, not {}", report.spans.len()));
    }
    for d in &report.devices {
        if d.allocated > d.reserved && d.reserved > 0 {
            return bad(format!("device {}: allocated ({}) exceeds reserved ({})", d.device, d.allocated, d.reserved));
        }
    }
    for s in &report.spans {
        if s.name.is_empty() || s.name.len() > MAX_NAME {
            return bad(format!("span names must be 1 to {MAX_NAME} characters"));
        }
        if !(s.elapsed_ms.is_finite() && s.elapsed_ms >= 0.0) {
            return bad(format!("span '{}': elapsed_ms must be a finite number ≥ 0", s.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use shared::bridge::{CommandResult, TorchMemory};

    use super::*;

    fn report(pid: u32, allow: bool) -> Report {
        Report {
            version: 1,
            pid,
            host: "node".into(),
            process_name: "python train.py".into(),
            torch_version: "2.11.0".into(),
            cuda_version: Some("13.0".into()),
            allow_remote_empty_cache: allow,
            interval_s: 1.0,
            devices: vec![TorchMemory {
                device: 0,
                uuid: Some("GPU-a".into()),
                allocated: 100,
                reserved: 400,
                ..Default::default()
            }],
            spans: vec![],
            command_results: vec![],
        }
    }

    fn device(index: u32, uuid: &str) -> DeviceInfo {
        DeviceInfo {
            index,
            name: "g".into(),
            uuid: uuid.into(),
            pci_bus_id: String::new(),
            compute_capability: None,
            memory_total: 1000,
            simulated: true,
            max_clocks: Default::default(),
            pcie_max: None,
            memory_bus_width: None,
            nvlink_links: 0,
        }
    }

    fn nvml_row(pid: u32, device: u32, used: u64) -> GpuProcess {
        GpuProcess {
            device,
            pid,
            kind: shared::processes::ProcessKind::Compute,
            used_memory: Some(used),
            sm_util: None,
            sm_util_seen_ms: None,
            user: Some("ana".into()),
            name: None,
            command: None,
            started_ms: None,
            container: None,
            redacted: false,
        }
    }

    #[test]
    fn reports_join_nvml_by_pid_and_uuid() {
        let registry = Registry::default();
        registry.report(report(42, false), 1_000).unwrap();
        let devices = [device(0, "GPU-x"), device(3, "GPU-a")];
        let list = registry.list(&devices, &[nvml_row(42, 3, 900)], 1_500);
        let p = &list[0];
        assert!(p.pid_matched && !p.stale);
        assert_eq!(p.user.as_deref(), Some("ana"));
        assert_eq!(p.devices[0].gpu, 3, "matched by UUID, not by the process's own index");
        assert_eq!((p.devices[0].nvml_used, p.devices[0].overhead), (Some(900), Some(500)));
        let unmatched = registry.list(&devices, &[], 1_500);
        assert!(!unmatched[0].pid_matched, "another PID namespace");
    }

    #[test]
    fn silent_processes_turn_stale_but_stay() {
        let registry = Registry::default();
        registry.report(report(7, false), 0).unwrap();
        assert!(!registry.list(&[], &[], 4_000)[0].stale);
        let later = registry.list(&[], &[], 6_000);
        assert_eq!(later.len(), 1);
        assert!(later[0].stale);
    }

    #[test]
    fn empty_cache_needs_consent_and_round_trips() {
        let registry = Registry::default();
        registry.report(report(1, false), 0).unwrap();
        registry.report(Report { host: "other".into(), ..report(2, true) }, 0).unwrap();
        let list = registry.list(&[], &[], 0);
        let (refuses, allows) =
            (list.iter().find(|p| p.pid == 1).unwrap().id, list.iter().find(|p| p.pid == 2).unwrap().id);
        assert_eq!(registry.request_empty_cache(refuses, 10), Err(BridgeError::NotAllowed(1)));
        assert_eq!(registry.request_empty_cache(999, 10), Err(BridgeError::NoProcess(999)));
        let state = registry.request_empty_cache(allows, 10).unwrap();
        let answer = registry.report(Report { host: "other".into(), ..report(2, true) }, 20).unwrap();
        assert_eq!(answer.commands, vec![Command::EmptyCache { id: state.id }]);
        let done = Report {
            host: "other".into(),
            command_results: vec![CommandResult { id: state.id, ok: true, released_bytes: 300 }],
            ..report(2, true)
        };
        assert!(registry.report(done, 30).unwrap().commands.is_empty());
        let after = registry.list(&[], &[], 30);
        let process = after.iter().find(|p| p.pid == 2).unwrap();
        assert_eq!(process.empty_cache.unwrap().released_bytes, Some(300));
    }

    #[test]
    fn spans_summarize_per_name() {
        let registry = Registry::default();
        let spans = (1..=100)
            .map(|i| Span {
                name: "step".into(),
                device: 0,
                start_ms: i,
                elapsed_ms: f64::from(i as u32),
                memory_delta: 5,
                memory_peak: i,
            })
            .collect();
        registry.report(Report { spans, ..report(3, false) }, 0).unwrap();
        let summary = &registry.list(&[], &[], 0)[0].spans[0];
        assert_eq!((summary.count, summary.p50_ms, summary.p99_ms), (100, 51.0, 99.0));
        assert_eq!(summary.max_memory_peak, 100);
    }

    #[test]
    fn bad_reports_are_refused_with_the_rule() {
        let registry = Registry::default();
        for (report, expected) in [
            (Report { version: 2, ..report(1, false) }, "version 1"),
            (Report { pid: 0, ..report(1, false) }, "'pid'"),
            (Report { interval_s: f64::NAN, ..report(1, false) }, "'interval_s'"),
            (Report { host: String::new(), ..report(1, false) }, "'host'"),
        ] {
            let err = registry.report(report, 0).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
        assert!(registry.list(&[], &[], 0).is_empty(), "nothing stored");
    }
}
