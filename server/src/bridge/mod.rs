//! The PyTorch bridge: attached training processes report their caching
//! allocator's figures and their spans; the registry joins them with NVML's
//! process rows and carries remote `empty_cache` requests back to them.

use std::collections::HashMap;
use std::sync::Mutex;

use shared::DeviceInfo;
use shared::allocator::{LISTED_SEGMENTS, MAX_SEGMENTS};
use shared::bridge::{AttachedProcess, EmptyCacheState, Report, ReportAnswer};
use shared::processes::GpuProcess;

mod allocator;
mod attached;
mod spans;
mod validate;

pub use allocator::{MAP_SPACING_MS, MapAccepted, OOMS_PER_MINUTE, RecentOom};
use attached::Attached;
use validate::validate;

/// Newest spans per process in `GET /api/bridge` (for chart annotations).
const RECENT_SPANS_LISTED: usize = 20;
/// Newest spans per process in `GET /api/bridge/{id}`.
const RECENT_SPANS_DETAILED: usize = 200;
/// Attached processes one token user may have at once (on a server without tokens, everyone is one user).
pub const MAX_PER_USER: usize = 32;
/// Attached processes the server keeps at once, whoever reported them.
pub const MAX_TOTAL: usize = 256;
/// A process with no report for this long (or ten of its intervals, if longer) is dropped...
pub const EXPIRE_AFTER_MS: u64 = 10 * 60 * 1000;
/// ...but never later than this.
pub const EXPIRE_AFTER_MAX_MS: u64 = 60 * 60 * 1000;
/// Refused reports for someone else's process are audited at most this often per process.
const REFUSAL_AUDIT_EVERY_MS: u64 = 60_000;

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
    #[error(
        "process {0} does not share its allocator map; it must attach with gpudash.attach(..., share_allocator_map=True)"
    )]
    MapNotShared(u32),
    #[error(
        "process {pid} on '{host}' is not attached: send its report (POST /api/bridge/report) before its allocator map"
    )]
    NotAttached { pid: u32, host: String },
    #[error("too many allocator reports: {0}")]
    TooFast(String),
    /// `audit`: this refusal should go to the audit log (not every retry does).
    #[error(
        "process {pid} on '{host}' was attached by '{owner}': only they may report for it (an entry with no report for 10 minutes expires)"
    )]
    NotOwner { pid: u32, host: String, owner: String, audit: bool },
    #[error(
        "'{user}' already has {MAX_PER_USER} attached processes, the most one user may have; a process that stops reporting is dropped after 10 minutes"
    )]
    TooManyForUser { user: String },
    #[error(
        "the server already keeps {MAX_TOTAL} attached processes, the most it holds; a process that stops reporting is dropped after 10 minutes"
    )]
    TooMany,
}

/// What a report changed that belongs in the audit log (periodic reports themselves do not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The first report of a process.
    Attached { process_name: String, allow_remote_empty_cache: bool },
    /// `allow_remote_empty_cache` changed.
    ConsentChanged { allow: bool },
    /// A queued empty_cache was handed to the process.
    Delivered { command: u64 },
    /// A queued empty_cache was not handed over: the report withdrew consent.
    Withheld { command: u64 },
    /// The process reported what a delivered empty_cache did.
    Done { command: u64, ok: bool, released_bytes: u64 },
}

/// An accepted report: the answer for the client, and what to audit.
#[derive(Debug)]
pub struct Accepted {
    /// The server's id of the process.
    pub id: u64,
    pub answer: ReportAnswer,
    pub notices: Vec<Notice>,
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

impl Inner {
    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn expire(&mut self, now_ms: u64) {
        self.processes.retain(|_, p| {
            let keep = !p.is_expired(now_ms);
            if !keep {
                tracing::info!(pid = p.report.pid, host = %p.report.host, "PyTorch process expired (no report)");
            }
            keep
        });
    }

    /// Refuses a new entry for `owner` past either cap.
    fn check_caps(&self, owner: &str) -> Result<(), BridgeError> {
        if self.processes.len() >= MAX_TOTAL {
            return Err(BridgeError::TooMany);
        }
        if self.processes.values().filter(|p| p.owner == owner).count() >= MAX_PER_USER {
            return Err(BridgeError::TooManyForUser { user: owner.to_owned() });
        }
        Ok(())
    }
}

impl Registry {
    /// Takes `owner`'s report and returns the commands waiting for that process.
    pub fn report(&self, owner: &str, report: Report, now_ms: u64) -> Result<Accepted, BridgeError> {
        validate(&report)?;
        let mut inner = self.lock();
        inner.expire(now_ms);
        let key = (report.host.clone(), report.pid);
        let mut notices = Vec::new();
        match inner.processes.get_mut(&key) {
            Some(entry) if entry.owner != owner => {
                let audit =
                    entry.refusal_audited_ms.is_none_or(|last| now_ms.saturating_sub(last) >= REFUSAL_AUDIT_EVERY_MS);
                if audit {
                    entry.refusal_audited_ms = Some(now_ms);
                }
                return Err(BridgeError::NotOwner {
                    pid: report.pid,
                    host: report.host,
                    owner: entry.owner.clone(),
                    audit,
                });
            }
            Some(entry) => {
                if entry.report.allow_remote_empty_cache != report.allow_remote_empty_cache {
                    notices.push(Notice::ConsentChanged { allow: report.allow_remote_empty_cache });
                }
            }
            None => {
                inner.check_caps(owner)?;
                let id = inner.take_id();
                tracing::info!(pid = report.pid, host = %report.host, owner, "PyTorch process attached: {}", report.process_name);
                notices.push(Notice::Attached {
                    process_name: report.process_name.clone(),
                    allow_remote_empty_cache: report.allow_remote_empty_cache,
                });
                let entry = Attached::new(id, owner, &report, now_ms);
                inner.processes.insert(key.clone(), entry);
            }
        }
        let Some(entry) = inner.processes.get_mut(&key) else {
            return Err(BridgeError::Invalid("the process vanished while its report was stored".to_owned()));
        };
        let commands = entry.take(report, now_ms, &mut notices);
        Ok(Accepted { id: entry.id, answer: ReportAnswer { commands }, notices })
    }

    /// Queues an empty_cache for process `id`; it runs at the client's next report.
    pub fn request_empty_cache(&self, id: u64, now_ms: u64) -> Result<EmptyCacheState, BridgeError> {
        let mut inner = self.lock();
        inner.expire(now_ms);
        let command_id = inner.next_id + 1;
        let process = inner.processes.values_mut().find(|p| p.id == id).ok_or(BridgeError::NoProcess(id))?;
        if !process.report.allow_remote_empty_cache {
            return Err(BridgeError::NotAllowed(process.report.pid));
        }
        if process.is_stale(now_ms) {
            return Err(BridgeError::Stale(process.report.pid));
        }
        let state = EmptyCacheState {
            id: command_id,
            requested_ms: now_ms,
            done_ms: None,
            released_bytes: None,
            refused: false,
        };
        process.pending = Some(command_id);
        process.empty_cache = Some(state);
        inner.next_id = command_id;
        Ok(state)
    }

    /// Every attached process joined with NVML's rows for its PID, newest first.
    pub fn list(&self, devices: &[DeviceInfo], nvml: &[GpuProcess], now_ms: u64) -> Vec<AttachedProcess> {
        let mut inner = self.lock();
        inner.expire(now_ms);
        let mut out: Vec<AttachedProcess> = inner
            .processes
            .values()
            .map(|p| p.view(devices, nvml, now_ms, RECENT_SPANS_LISTED, LISTED_SEGMENTS))
            .collect();
        out.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(a.pid.cmp(&b.pid)));
        out
    }

    /// One attached process with more of its recent spans.
    pub fn detail(
        &self,
        id: u64,
        devices: &[DeviceInfo],
        nvml: &[GpuProcess],
        now_ms: u64,
    ) -> Result<AttachedProcess, BridgeError> {
        let mut inner = self.lock();
        inner.expire(now_ms);
        let process = inner.processes.values().find(|p| p.id == id).ok_or(BridgeError::NoProcess(id))?;
        Ok(process.view(devices, nvml, now_ms, RECENT_SPANS_DETAILED, MAX_SEGMENTS))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use shared::bridge::{Command, CommandResult, Span, TorchMemory};

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
            share_allocator_map: false,
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
            name: "g".into(),
            uuid: uuid.into(),
            memory_total: 1000,
            simulated: true,
            ..shared::testing::device(index)
        }
    }

    fn nvml_row(pid: u32, device: u32, used: u64) -> GpuProcess {
        GpuProcess { used_memory: Some(used), user: Some("ana".into()), ..shared::testing::process(device, pid) }
    }

    #[test]
    fn reports_join_nvml_by_pid_and_uuid() {
        let registry = Registry::default();
        registry.report("ana", report(42, false), 1_000).unwrap();
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
        registry.report("ana", report(7, false), 0).unwrap();
        assert!(!registry.list(&[], &[], 4_000)[0].stale);
        let later = registry.list(&[], &[], 6_000);
        assert_eq!(later.len(), 1);
        assert!(later[0].stale);
    }

    #[test]
    fn empty_cache_needs_consent_and_round_trips() {
        let registry = Registry::default();
        registry.report("ana", report(1, false), 0).unwrap();
        registry.report("ana", Report { host: "other".into(), ..report(2, true) }, 0).unwrap();
        let list = registry.list(&[], &[], 0);
        let (refuses, allows) =
            (list.iter().find(|p| p.pid == 1).unwrap().id, list.iter().find(|p| p.pid == 2).unwrap().id);
        assert_eq!(registry.request_empty_cache(refuses, 10), Err(BridgeError::NotAllowed(1)));
        assert_eq!(registry.request_empty_cache(999, 10), Err(BridgeError::NoProcess(999)));
        let state = registry.request_empty_cache(allows, 10).unwrap();
        let answer = registry.report("ana", Report { host: "other".into(), ..report(2, true) }, 20).unwrap().answer;
        assert_eq!(answer.commands, vec![Command::EmptyCache { id: state.id }]);
        let done = Report {
            host: "other".into(),
            command_results: vec![CommandResult { id: state.id, ok: true, released_bytes: 300 }],
            ..report(2, true)
        };
        assert!(registry.report("ana", done, 30).unwrap().answer.commands.is_empty());
        let after = registry.list(&[], &[], 30);
        let process = after.iter().find(|p| p.pid == 2).unwrap();
        assert_eq!(process.empty_cache.unwrap().released_bytes, Some(300));
    }

    #[test]
    fn bad_reports_are_refused_with_the_rule() {
        let registry = Registry::default();
        for (report, expected) in [
            (Report { version: 2, ..report(1, false) }, "version 1"),
            (Report { pid: 0, ..report(1, false) }, "'pid'"),
            (Report { interval_s: f64::NAN, ..report(1, false) }, "'interval_s'"),
            (Report { host: String::new(), ..report(1, false) }, "'host'"),
            (Report { torch_version: "9".repeat(65), ..report(1, false) }, "'torch_version'"),
            (Report { devices: vec![TorchMemory::default(); 17], ..report(1, false) }, "at most 16 devices"),
        ] {
            let err = registry.report("ana", report, 0).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
        assert!(registry.list(&[], &[], 0).is_empty(), "nothing stored");
    }

    #[test]
    fn silent_processes_expire_after_ten_minutes_or_ten_intervals() {
        let registry = Registry::default();
        registry.report("ana", report(7, false), 0).unwrap();
        registry.report("ana", Report { interval_s: 600.0, ..report(8, false) }, 0).unwrap();
        assert_eq!(registry.list(&[], &[], EXPIRE_AFTER_MS).len(), 2);
        let pids: Vec<u32> = registry.list(&[], &[], EXPIRE_AFTER_MS + 1).iter().map(|p| p.pid).collect();
        assert_eq!(pids, [8], "ten 600 s intervals are longer than 10 minutes, but capped at an hour");
        assert!(registry.list(&[], &[], EXPIRE_AFTER_MAX_MS + 1).is_empty());
    }

    #[test]
    fn caps_per_user_and_in_total_refuse_new_processes_only() {
        let registry = Registry::default();
        for pid in 1..=MAX_PER_USER as u32 {
            registry.report("ana", report(pid, false), 0).unwrap();
        }
        let refused = registry.report("ana", report(1_000, false), 0).unwrap_err();
        assert_eq!(refused, BridgeError::TooManyForUser { user: "ana".into() });
        assert!(refused.to_string().contains("32 attached processes"), "{refused}");
        registry.report("ana", report(1, false), 1).expect("a known process keeps reporting");
        let mut user = 0;
        while registry.list(&[], &[], 1).len() < MAX_TOTAL {
            user += 1;
            for pid in 1..=MAX_PER_USER as u32 {
                registry.report(&format!("user{user}"), report(pid + 100 * user, false), 1).unwrap();
            }
        }
        assert_eq!(registry.report("newcomer", report(99_999, false), 1).unwrap_err(), BridgeError::TooMany);
        // Once the flood goes silent, it expires and makes room again.
        registry.report("newcomer", report(99_999, false), 2 + EXPIRE_AFTER_MS).expect("room after expiry");
    }

    #[test]
    fn another_users_report_for_the_same_process_is_refused_and_changes_nothing() {
        let registry = Registry::default();
        let first = registry.report("ana", report(5, false), 0).unwrap();
        assert!(matches!(first.notices[..], [Notice::Attached { .. }]));
        let spoof = Report { allow_remote_empty_cache: true, ..report(5, true) };
        let refused = registry.report("eve", spoof.clone(), 10).unwrap_err();
        assert!(matches!(&refused, BridgeError::NotOwner { owner, audit: true, .. } if owner == "ana"), "{refused:?}");
        assert!(refused.to_string().contains("attached by 'ana'"), "{refused}");
        let again = registry.report("eve", spoof, 20).unwrap_err();
        assert!(matches!(again, BridgeError::NotOwner { audit: false, .. }), "retries are not audited each time");
        let listed = &registry.list(&[], &[], 30)[0];
        assert!(!listed.allow_remote_empty_cache, "the spoofed consent was not stored");
        assert_eq!(registry.request_empty_cache(first.id, 30), Err(BridgeError::NotAllowed(5)));
    }

    #[test]
    fn consent_is_checked_again_at_delivery_and_results_need_a_delivered_command() {
        let registry = Registry::default();
        let id = registry.report("ana", report(9, true), 0).unwrap().id;
        let state = registry.request_empty_cache(id, 10).unwrap();
        let early = Report {
            command_results: vec![CommandResult { id: state.id, ok: true, released_bytes: 1 << 40 }],
            ..report(9, false)
        };
        let withdrawn = registry.report("ana", early, 20).unwrap();
        assert!(withdrawn.answer.commands.is_empty(), "consent withdrawn: not delivered");
        assert_eq!(
            withdrawn.notices,
            [Notice::ConsentChanged { allow: false }, Notice::Withheld { command: state.id }]
        );
        let after = registry.list(&[], &[], 20)[0].empty_cache.unwrap();
        assert!(after.refused && after.released_bytes.is_none(), "an undelivered command takes no result: {after:?}");

        registry.report("ana", report(9, true), 30).unwrap();
        let state = registry.request_empty_cache(id, 40).unwrap();
        let delivered = registry.report("ana", report(9, true), 50).unwrap();
        assert_eq!(delivered.notices, [Notice::Delivered { command: state.id }]);
        let done = Report {
            command_results: vec![CommandResult { id: state.id, ok: true, released_bytes: 300 }],
            ..report(9, true)
        };
        let notices = registry.report("ana", done.clone(), 60).unwrap().notices;
        assert_eq!(notices, [Notice::Done { command: state.id, ok: true, released_bytes: 300 }]);
        assert!(registry.report("ana", done, 70).unwrap().notices.is_empty(), "a result counts once");
    }

    #[test]
    fn the_list_keeps_only_a_few_recent_spans_and_the_detail_more() {
        let registry = Registry::default();
        let spans: Vec<Span> = (0..300)
            .map(|i| Span {
                name: "step".into(),
                device: 0,
                start_ms: i,
                elapsed_ms: 1.0,
                memory_delta: 0,
                memory_peak: 0,
                peak_bound: false,
            })
            .collect();
        let id = registry.report("ana", Report { spans, ..report(3, false) }, 0).unwrap().id;
        let listed = &registry.list(&[], &[], 0)[0];
        assert_eq!((listed.recent_spans.len(), listed.spans[0].count), (RECENT_SPANS_LISTED, 300));
        assert_eq!(registry.detail(id, &[], &[], 0).unwrap().recent_spans.len(), RECENT_SPANS_DETAILED);
        assert_eq!(registry.detail(id + 1, &[], &[], 0), Err(BridgeError::NoProcess(id + 1)));
    }
}
